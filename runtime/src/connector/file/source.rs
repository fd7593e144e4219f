//! `FileSource`: reads lines from a file, or from every regular file of a directory.
//!
//! Invariants:
//! - The input is the list of regular files of `path` (or `path` itself when it is a
//!   file), sorted by name; names starting with `.` are skipped (editor and sync tool
//!   droppings). File `k` of that list belongs to subtask `k % P`, which reads its files
//!   in increasing `k`, each from start to end.
//! - One line is one record (see `record_format`); the terminator (`\n` or `\r\n`) is
//!   not part of it, and a last line without a terminator is still a record.
//! - The position `{"file": k, "offset": o, "name": "<file name>"}` says: the next
//!   record is the line starting at byte `o` of file `k`. It is exact after every
//!   returned line, so reopening at it (a seek) continues with the next line. Input
//!   files must not change while the pipeline has checkpoints: a restore checks that
//!   file `k` still has that name and is at least `o` bytes long.
//! - Every input file is opened once when the source opens, so a missing or unreadable
//!   file fails the start with its name rather than part-way through the run.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::connector::error::ConnectorError;
use crate::connector::record_format::{
    InputFormat, LineDecoder, check_line_fields, strip_line_end,
};
use crate::connector::source::{Source, SourcePoll, SourcePosition};
use crate::dataflow::batch::RecordBatch;
use crate::spec::{InvalidField, checks};

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
}

impl FileSourceConfig {
    pub fn new(path: impl Into<PathBuf>, format: InputFormat) -> Self {
        FileSourceConfig {
            path: path.into(),
            format,
            key_field: None,
            timestamp_field: None,
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
        let (current, offset) = match restored {
            None => (subtask, 0),
            Some(position) => check_position(&files, subtask, parallelism, position)?,
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

fn check_position(
    files: &[PathBuf],
    subtask: usize,
    parallelism: usize,
    position: &SourcePosition,
) -> Result<(usize, u64), ConnectorError> {
    let bad = |reason: String| ConnectorError::BadPosition {
        connector: "file",
        position: position.to_string(),
        reason,
    };
    let file = position.get("file").and_then(serde_json::Value::as_u64);
    let offset = position.get("offset").and_then(serde_json::Value::as_u64);
    let (Some(file), Some(offset)) = (file, offset) else {
        return Err(bad(
            "expected {\"file\": <index>, \"offset\": <bytes>}".into()
        ));
    };
    let k = usize::try_from(file).map_err(|_| bad("file index out of range".into()))?;
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
        if let Some(expected) = position.get("name").and_then(serde_json::Value::as_str)
            && expected != name
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
    fn poll(&mut self, out: &mut RecordBatch, max: usize) -> Result<SourcePoll, ConnectorError> {
        let mut n = 0;
        while n < max && self.current < self.files.len() {
            self.open_current()?;
            let Some(reader) = self.reader.as_mut() else {
                break;
            };
            self.line.clear();
            let read = reader
                .read_until(b'\n', &mut self.line)
                .map_err(|e| ConnectorError::read(&self.files[self.current], e))?;
            if read == 0 {
                self.reader = None;
                self.current += self.parallelism;
                self.offset = 0;
                continue;
            }
            self.offset += read as u64;
            self.decoder.push_line(strip_line_end(&self.line), out);
            n += 1;
        }
        if n == 0 && self.current >= self.files.len() {
            Ok(SourcePoll::Drained)
        } else {
            Ok(SourcePoll::Ready)
        }
    }

    fn position(&self) -> SourcePosition {
        match self.files.get(self.current) {
            Some(path) => serde_json::json!({
                "file": self.current,
                "offset": self.offset,
                "name": path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            }),
            None => serde_json::json!({ "file": self.current, "offset": 0 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            match source.poll(&mut batch, max).expect("poll") {
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
        s.poll(&mut batch, 1).expect("poll");
        assert_eq!(values(&batch), ["b1"]);
        let p = s.position();
        assert_eq!(
            p,
            serde_json::json!({"file": 1, "offset": 3, "name": "b.txt"})
        );
        let mut r = FileSource::open(&config, 1, 2, Some(&p)).expect("reopen");
        assert_eq!(drain(&mut r, 100), ["b2", "d1", "", "d3"]);

        // At a file boundary, and at the end.
        let mut s = FileSource::open(&config, 1, 2, None).expect("open");
        let mut batch = RecordBatch::default();
        s.poll(&mut batch, 2).expect("poll");
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
        s.poll(&mut batch, 10).expect("poll");
        let got: Vec<_> = batch
            .iter()
            .map(|r| (r.key.to_vec(), r.timestamp))
            .collect();
        assert_eq!(got, [(b"ann".to_vec(), 5), (vec![], 0), (b"7".to_vec(), 0)]);
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
