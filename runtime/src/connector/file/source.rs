//! `FileSource`: reads lines from a file, or from every regular file of a directory.
//!
//! Invariants:
//! - The input is the list of regular files of `path` (or `path` itself when it is a
//!   file), sorted by name; names starting with `.` are skipped (editor and sync tool
//!   droppings). File `k` of that list belongs to subtask `k % P`, which reads its files
//!   in increasing `k`, each from start to end.
//! - One line is one record (see `record_format`); the terminator (`\n` or `\r\n`) is
//!   not part of it, and a last line without a terminator is still a record.
//! - The position `{"v": 1, "file": k, "offset": o, "name": "<file name>"}` (a
//!   `FilePosition`) says: the next record is the line starting at byte `o` of file
//!   `k`. It is exact after every returned line, so reopening at it (a seek) continues
//!   with the next line. Input files must not change while the pipeline has
//!   checkpoints: a restore checks that file `k` still has that name and is at least
//!   `o` bytes long. At the end of the input the position has no `name` (nor `line`).
//! - A line longer than `max_line_bytes` (terminator excluded) fails the source with
//!   the file and line number; no more than that bound plus one read buffer is held for
//!   it. The position also carries `"line"`, the next line's number, for that message.
//! - A `path` that is neither a directory nor a regular file (a FIFO, a device, a socket)
//!   is refused at open: reading one would block or never end. Such entries of a
//!   directory are skipped, like subdirectories.
//! - Every input file is opened once when the source opens, so a missing or unreadable
//!   file fails the start with its name rather than part-way through the run.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::connector::error::ConnectorError;
use crate::connector::record_format::{
    InputFormat, LineDecoder, LineRead, check_line_fields, default_max_line_bytes,
    read_line_bounded, strip_line_end,
};
use crate::dataflow::source::{Source, SourceError, SourcePoll};
use crate::field::{InvalidField, checks};
use crate::record::SourcePosition;
use crate::record::batch::{BatchLimit, RecordBatch};
use crate::record::snapshot::{self, SnapshotState};

/// Read buffer per open input file: 256 KiB keeps syscalls rare for short lines.
const READ_BUFFER_BYTES: usize = 256 << 10;

/// `type = "file"` source.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// A file, or a directory whose regular files are read in name order. Relative
    /// paths are resolved against the spec file's directory by the spec.
    #[serde(deserialize_with = "checks::path")]
    pub path: PathBuf,
    #[serde(default)]
    pub format: InputFormat,
    /// jsonl only: top-level field giving the record key.
    #[serde(default)]
    pub key_field: Option<String>,
    /// jsonl only: top-level integer field giving the event time in ms.
    #[serde(default)]
    pub timestamp_field: Option<String>,
    /// Longest line, terminator excluded; a longer one fails the pipeline naming the
    /// file and line (default
    /// [`DEFAULT_MAX_LINE_BYTES`](crate::connector::record_format::DEFAULT_MAX_LINE_BYTES)).
    #[serde(
        default = "default_max_line_bytes",
        deserialize_with = "checks::max_line_bytes"
    )]
    pub max_line_bytes: usize,
}

impl FileSourceConfig {
    pub fn new(path: impl Into<PathBuf>, format: InputFormat) -> Self {
        FileSourceConfig {
            path: path.into(),
            format,
            key_field: None,
            timestamp_field: None,
            max_line_bytes: default_max_line_bytes(),
        }
    }

    pub fn validate(&self) -> Result<(), InvalidField> {
        check_line_fields(self.format, &self.key_field, &self.timestamp_field)
    }
}

/// The input files of `path`, in the order the source assigns them (see module docs).
pub fn list_input_files(path: &Path) -> Result<Vec<PathBuf>, ConnectorError> {
    let meta = std::fs::metadata(path).map_err(|e| ConnectorError::read(path, e))?;
    if !meta.is_dir() {
        // Opening a FIFO blocks until a writer comes; a device (`/dev/zero`) never ends.
        if !meta.is_file() {
            return Err(ConnectorError::NotRegularInput {
                path: path.to_owned(),
                kind: file_kind(&meta),
            });
        }
        return Ok(vec![path.to_owned()]);
    }
    let list_err = |error| ConnectorError::ListInput {
        path: path.to_owned(),
        error,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(list_err)? {
        let entry = entry.map_err(list_err)?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let file = entry.path();
        // Follows symlinks: a link to a regular file is read, a link to a directory is not.
        let meta = std::fs::metadata(&file).map_err(|e| ConnectorError::read(&file, e))?;
        if meta.is_file() {
            files.push(file);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// What a non-regular, non-directory input is, for the refusal.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// One subtask's reader of a file source.
#[derive(Debug)]
pub struct FileSource {
    files: Vec<PathBuf>,
    decoder: LineDecoder,
    parallelism: usize,
    /// Global index of the file being read (>= files.len() when done).
    current: usize,
    /// Byte offset in `files[current]` of the next line.
    offset: u64,
    /// 1-based number of the next line in `files[current]`, for errors (counted from the
    /// restored position's `line`, when a restore gives one).
    line_number: u64,
    max_line_bytes: usize,
    reader: Option<BufReader<File>>,
    line: Vec<u8>,
}

impl FileSource {
    /// Subtask `subtask` of `parallelism`, resuming at `restored` if given.
    ///
    /// Panics if `subtask >= parallelism` (a caller bug, not an input problem).
    pub fn open(
        config: &FileSourceConfig,
        subtask: usize,
        parallelism: usize,
        restored: Option<&SourcePosition>,
    ) -> Result<Self, ConnectorError> {
        assert!(
            subtask < parallelism,
            "subtask {subtask} out of range for parallelism {parallelism}"
        );
        let files = list_input_files(&config.path)?;
        if files.is_empty() {
            tracing::warn!(path = %config.path.display(), "file source: the input directory has no files");
        }
        for file in &files {
            File::open(file).map_err(|e| ConnectorError::read(file, e))?;
        }
        let (current, offset, line_number) = match restored {
            None => (subtask, 0, 1),
            Some(value) => {
                let position: FilePosition = snapshot::decode(POSITION, value)?;
                let (current, offset) =
                    check_position(&files, subtask, parallelism, value, &position)?;
                (current, offset, position.line.unwrap_or(1))
            }
        };
        Ok(FileSource {
            files,
            decoder: LineDecoder::new(
                config.format,
                config.key_field.clone(),
                config.timestamp_field.clone(),
            ),
            parallelism,
            current,
            offset,
            line_number,
            max_line_bytes: config.max_line_bytes,
            reader: None,
            line: Vec::with_capacity(1024),
        })
    }

    fn open_current(&mut self) -> Result<(), ConnectorError> {
        if self.reader.is_none() {
            let path = &self.files[self.current];
            let mut file = File::open(path).map_err(|e| ConnectorError::read(path, e))?;
            if self.offset > 0 {
                file.seek(SeekFrom::Start(self.offset))
                    .map_err(|e| ConnectorError::read(path, e))?;
            }
            self.reader = Some(BufReader::with_capacity(READ_BUFFER_BYTES, file));
        }
        Ok(())
    }
}

/// What a checkpoint's snapshots name a file position as, in errors.
const POSITION: &str = "file source position";

/// A file source subtask's position (see the module docs); at the end of its input
/// it has neither `line` nor `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePosition {
    /// Global index of the file being read.
    pub file: u64,
    /// Byte offset in that file of the next line.
    pub offset: u64,
    /// 1-based number of the next line, for error messages (1 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The file's name, checked on restore when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl SnapshotState for FilePosition {
    const VERSION: u32 = 1;
}

fn check_position(
    files: &[PathBuf],
    subtask: usize,
    parallelism: usize,
    value: &SourcePosition,
    position: &FilePosition,
) -> Result<(usize, u64), ConnectorError> {
    let bad = |reason: String| ConnectorError::BadPosition {
        connector: "file",
        position: value.to_string(),
        reason,
    };
    let offset = position.offset;
    let k = usize::try_from(position.file).map_err(|_| bad("file index out of range".into()))?;
    if k % parallelism != subtask {
        return Err(bad(format!(
            "file {k} does not belong to subtask {subtask} of {parallelism}; \
             the parallelism of a file source cannot change across a restore"
        )));
    }
    if let Some(path) = files.get(k) {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(expected) = &position.name
            && *expected != name
        {
            return Err(bad(format!(
                "input file {k} was {expected:?} and is now {}: input files must not change while the pipeline has checkpoints",
                path.display()
            )));
        }
        let len = std::fs::metadata(path)
            .map_err(|e| ConnectorError::read(path, e))?
            .len();
        if len < offset {
            return Err(bad(format!(
                "{} is {len} bytes long, shorter than the restored offset {offset}: \
                 input files must not change while the pipeline has checkpoints",
                path.display()
            )));
        }
    }
    Ok((k, offset))
}

impl Source for FileSource {
    fn poll(
        &mut self,
        out: &mut RecordBatch,
        limit: BatchLimit,
    ) -> Result<SourcePoll, SourceError> {
        let mut n = 0;
        while !limit.is_full(out) && self.current < self.files.len() {
            self.open_current()?;
            let Some(reader) = self.reader.as_mut() else {
                break;
            };
            let read = read_line_bounded(reader, &mut self.line, self.max_line_bytes)
                .map_err(|e| ConnectorError::read(&self.files[self.current], e))?;
            let read = match read {
                LineRead::End => {
                    self.reader = None;
                    self.current += self.parallelism;
                    self.offset = 0;
                    self.line_number = 1;
                    continue;
                }
                LineRead::TooLong => {
                    self.line = Vec::new();
                    return Err(ConnectorError::LineTooLong {
                        path: self.files[self.current].clone(),
                        line: self.line_number,
                        max: self.max_line_bytes,
                    }
                    .into());
                }
                LineRead::Line(read) => read,
            };
            self.offset += read as u64;
            self.line_number += 1;
            self.decoder.push_line(strip_line_end(&self.line), out);
            n += 1;
        }
        if n == 0 && self.current >= self.files.len() {
            self.decoder.warn_missing_fields("file source");
            Ok(SourcePoll::Drained)
        } else {
            Ok(SourcePoll::Ready)
        }
    }

    fn position(&self) -> SourcePosition {
        let file = self.current as u64;
        let position = match self.files.get(self.current) {
            Some(path) => FilePosition {
                file,
                offset: self.offset,
                line: Some(self.line_number),
                name: Some(
                    path.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                ),
            },
            None => FilePosition {
                file,
                offset: 0,
                line: None,
                name: None,
            },
        };
        // A struct of strings and integers always encodes.
        snapshot::encode(POSITION, &position).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: positions written before versions (mid-file with `line` and `name`, and
    /// at the end without them) no longer restoring, `line`/`name` written when absent,
    /// or a newer weir's position misread.
    #[test]
    fn position_is_versioned() {
        snapshot::assert_versioned(
            POSITION,
            serde_json::json!({"file": 1, "offset": 3, "line": 2, "name": "b.txt"}),
            &FilePosition {
                file: 1,
                offset: 3,
                line: Some(2),
                name: Some("b.txt".into()),
            },
        );
        snapshot::assert_versioned(
            POSITION,
            serde_json::json!({"file": 5, "offset": 0}),
            &FilePosition {
                file: 5,
                offset: 0,
                line: None,
                name: None,
            },
        );
    }

    fn values(batch: &RecordBatch) -> Vec<String> {
        batch
            .iter()
            .map(|r| String::from_utf8_lossy(r.value).into_owned())
            .collect()
    }

    fn drain(source: &mut FileSource, max: usize) -> Vec<String> {
        let mut all = Vec::new();
        loop {
            let mut batch = RecordBatch::default();
            match source
                .poll(&mut batch, BatchLimit::records(max))
                .expect("poll")
            {
                SourcePoll::Drained => return all,
                _ => all.extend(values(&batch)),
            }
        }
    }

    fn input_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.txt"), "a1\na2\r\na3\n").expect("write");
        std::fs::write(dir.path().join("b.txt"), "b1\nb2").expect("write");
        std::fs::write(dir.path().join("c.txt"), "").expect("write");
        std::fs::write(dir.path().join("d.txt"), "d1\n\nd3\n").expect("write");
        std::fs::write(dir.path().join(".hidden"), "no\n").expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        dir
    }

    #[test]
    fn reads_files_round_robin() {
        let dir = input_dir();
        let config = FileSourceConfig::new(dir.path(), InputFormat::Lines);
        let mut one = FileSource::open(&config, 0, 1, None).expect("open");
        assert_eq!(
            drain(&mut one, 2),
            ["a1", "a2", "a3", "b1", "b2", "d1", "", "d3"]
        );
        let mut s0 = FileSource::open(&config, 0, 2, None).expect("open");
        let mut s1 = FileSource::open(&config, 1, 2, None).expect("open");
        assert_eq!(drain(&mut s0, 100), ["a1", "a2", "a3"]);
        assert_eq!(drain(&mut s1, 100), ["b1", "b2", "d1", "", "d3"]);
        let mut s4 = FileSource::open(&config, 4, 5, None).expect("open");
        assert_eq!(drain(&mut s4, 100), Vec::<String>::new());
    }

    #[test]
    fn restore_from_position() {
        let dir = input_dir();
        let config = FileSourceConfig::new(dir.path(), InputFormat::Lines);
        let mut s = FileSource::open(&config, 1, 2, None).expect("open");
        let mut batch = RecordBatch::default();
        s.poll(&mut batch, BatchLimit::records(1)).expect("poll");
        assert_eq!(values(&batch), ["b1"]);
        let p = s.position();
        assert_eq!(
            p,
            serde_json::json!({"v": 1, "file": 1, "offset": 3, "line": 2, "name": "b.txt"})
        );
        let mut r = FileSource::open(&config, 1, 2, Some(&p)).expect("reopen");
        assert_eq!(drain(&mut r, 100), ["b2", "d1", "", "d3"]);

        // At a file boundary, and at the end.
        let mut s = FileSource::open(&config, 1, 2, None).expect("open");
        let mut batch = RecordBatch::default();
        s.poll(&mut batch, BatchLimit::records(2)).expect("poll");
        let p = s.position();
        assert_eq!(p["offset"], 5);
        assert_eq!(
            drain(
                &mut FileSource::open(&config, 1, 2, Some(&p)).expect("reopen"),
                1
            ),
            ["d1", "", "d3"]
        );
        drain(&mut s, 100);
        let end = s.position();
        assert_eq!(
            drain(
                &mut FileSource::open(&config, 1, 2, Some(&end)).expect("reopen"),
                1
            ),
            Vec::<String>::new()
        );

        // A position that does not fit the input is refused.
        let wrong_subtask = FileSource::open(&config, 0, 2, Some(&p));
        assert!(matches!(
            wrong_subtask,
            Err(ConnectorError::BadPosition { .. })
        ));
        let too_far = serde_json::json!({"file": 1, "offset": 99, "name": "b.txt"});
        let err = FileSource::open(&config, 1, 2, Some(&too_far)).expect_err("offset past the end");
        assert!(
            err.to_string()
                .contains("shorter than the restored offset 99"),
            "{err}"
        );
    }

    #[test]
    fn jsonl_keys_and_timestamps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("in.jsonl");
        std::fs::write(&file, "{\"u\":\"ann\",\"t\":5}\nnot json\n{\"u\":7}\n").expect("write");
        let config = FileSourceConfig {
            key_field: Some("u".into()),
            timestamp_field: Some("t".into()),
            ..FileSourceConfig::new(&file, InputFormat::Jsonl)
        };
        let mut s = FileSource::open(&config, 0, 1, None).expect("open");
        let mut batch = RecordBatch::default();
        s.poll(&mut batch, BatchLimit::records(10)).expect("poll");
        let got: Vec<_> = batch
            .iter()
            .map(|r| (r.key.to_vec(), r.timestamp))
            .collect();
        assert_eq!(got, [(b"ann".to_vec(), 5), (vec![], 0), (b"7".to_vec(), 0)]);
    }

    /// Issue 7 §2: a line longer than `max_line_bytes` fails with the file and line
    /// number, having read no more than the bound plus a buffer of it.
    #[test]
    fn a_line_past_max_line_bytes_is_refused_with_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("in.txt");
        let long = "x".repeat(3000);
        std::fs::write(&file, format!("ok\n{}\r\n{long}\n", "y".repeat(2048))).expect("write");
        let config = FileSourceConfig {
            max_line_bytes: 2048,
            ..FileSourceConfig::new(&file, InputFormat::Lines)
        };
        let mut s = FileSource::open(&config, 0, 1, None).expect("open");
        let mut batch = RecordBatch::default();
        let err = s
            .poll(&mut batch, BatchLimit::records(10))
            .expect_err("line 3 is too long");
        assert_eq!(values(&batch), ["ok".to_owned(), "y".repeat(2048)]);
        assert_eq!(
            err.to_string(),
            format!(
                "input file {} line 3 is longer than max_line_bytes (2048 bytes): raise max_line_bytes or fix the input",
                file.display()
            )
        );
        // Resumed after line 2: the message still says line 3.
        let p = serde_json::json!({"file": 0, "offset": 2053, "line": 3, "name": "in.txt"});
        let mut r = FileSource::open(&config, 0, 1, Some(&p)).expect("reopen");
        let err = r
            .poll(&mut RecordBatch::default(), BatchLimit::records(10))
            .expect_err("too long");
        assert!(err.to_string().contains(" line 3 is longer"), "{err}");
    }

    /// Issue 7 §2: a FIFO or a device as the input is refused at open, in one line,
    /// instead of blocking (FIFO) or reading forever (`/dev/zero`).
    #[test]
    fn fifos_and_devices_are_refused() {
        let err = FileSource::open(
            &FileSourceConfig::new("/dev/zero", InputFormat::Lines),
            0,
            1,
            None,
        )
        .expect_err("a device");
        assert_eq!(
            err.to_string(),
            "input /dev/zero is a character device, not a regular file or directory: a file source reads regular files only (use a stdin source for a pipe)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let err = FileSource::open(
            &FileSourceConfig::new(&fifo, InputFormat::Lines),
            0,
            1,
            None,
        )
        .expect_err("a FIFO");
        assert_eq!(
            err.to_string(),
            format!(
                "input {} is a FIFO, not a regular file or directory: a file source reads regular files only (use a stdin source for a pipe)",
                fifo.display()
            )
        );
    }

    /// Issue 7 §2: a poll stops adding lines once the batch holds `batch_bytes`.
    #[test]
    fn a_batch_is_cut_at_its_byte_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("in.txt");
        let line = "v".repeat(1000);
        std::fs::write(&file, format!("{line}\n").repeat(100)).expect("write");
        let mut s = FileSource::open(
            &FileSourceConfig::new(&file, InputFormat::Lines),
            0,
            1,
            None,
        )
        .expect("open");
        let limit = BatchLimit {
            records: 1024,
            bytes: 10_000,
        };
        let mut batch = RecordBatch::default();
        s.poll(&mut batch, limit).expect("poll");
        // 9 records of 1,016 bytes are 9,144; the 10th reaches 10,160 and ends the batch.
        assert_eq!(batch.len(), 10);
        assert_eq!(batch.byte_len(), 10_160);
    }

    #[test]
    fn missing_input_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.txt");
        let err = FileSource::open(
            &FileSourceConfig::new(&missing, InputFormat::Lines),
            0,
            1,
            None,
        )
        .expect_err("missing file");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot read input file {}: No such file or directory",
                missing.display()
            )
        );
    }
}
