//! `StdinSource`: reads lines from standard input, in the formats of the file source.
//!
//! Invariants:
//! - Only subtask 0 reads; every other subtask is drained from the start, so each line
//!   enters the pipeline once whatever the parallelism (a shuffle spreads it after).
//! - Reading stdin blocks, so a dedicated thread reads it and hands chunks of lines to
//!   `poll` through a bounded channel: `poll` never blocks (it returns `Idle` when no
//!   line is ready), and a slow pipeline stops the reader instead of buffering stdin
//!   without bound. The thread ends at end of input, on a read error (handed to
//!   `poll`), or once the source is dropped and it next has a chunk to hand over (a
//!   read already blocked on stdin cannot be interrupted; it ends with the process).
//! - A line longer than `max_line_bytes` (terminator excluded) fails the source with its
//!   line number; the reader thread holds at most that bound plus its read buffer of it.
//!   Pipes and devices are fine here (stdin usually is one): the bound is what stops
//!   `weir run < /dev/zero`.
//! - Not replayable (`is_replayable() == false`): what was read before a crash is gone.
//!   The position `{"v": 1, "lines": n}` (a `StdinPosition`) only counts lines for
//!   progress reports; a restore checks that it decodes, then resumes with whatever
//!   stdin delivers next, counting from 0.

use std::collections::VecDeque;
use std::io::{BufReader, Read};

use crossbeam_channel::{Receiver, TryRecvError};
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

/// Lines per chunk handed from the reader thread to `poll`.
const CHUNK_LINES: usize = 1024;
/// Bytes after which a chunk is handed over even if it has fewer than `CHUNK_LINES` lines:
/// with `CHANNEL_CHUNKS` chunks in flight, stdin buffers at most about 16 x (1 MiB + one
/// line), not 16 Ki lines of up to `max_line_bytes` each.
const CHUNK_BYTES: usize = 1 << 20;
/// Chunks in flight between the reader thread and `poll`: at most 16 Ki lines buffered.
const CHANNEL_CHUNKS: usize = 16;
/// The reader thread's read buffer.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// `type = "stdin"` source.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinSourceConfig {
    #[serde(default)]
    pub format: InputFormat,
    /// jsonl only: top-level field giving the record key.
    #[serde(default)]
    pub key_field: Option<String>,
    /// jsonl only: top-level integer field giving the event time in ms.
    #[serde(default)]
    pub timestamp_field: Option<String>,
    /// Longest line, terminator excluded; a longer one fails the pipeline naming the
    /// line number.
    #[serde(
        default = "default_max_line_bytes",
        deserialize_with = "checks::max_line_bytes"
    )]
    pub max_line_bytes: usize,
}

impl Default for StdinSourceConfig {
    fn default() -> Self {
        StdinSourceConfig {
            format: InputFormat::default(),
            key_field: None,
            timestamp_field: None,
            max_line_bytes: default_max_line_bytes(),
        }
    }
}

impl StdinSourceConfig {
    pub fn validate(&self) -> Result<(), InvalidField> {
        check_line_fields(self.format, &self.key_field, &self.timestamp_field)
    }
}

type Chunk = Result<Vec<Vec<u8>>, ConnectorError>;

/// What a checkpoint's snapshots name a stdin position as, in errors.
const POSITION: &str = "stdin source position";

/// A stdin subtask's position: the lines it has read, for progress reports only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdinPosition {
    pub lines: u64,
}

impl SnapshotState for StdinPosition {
    const VERSION: u32 = 1;
}

#[derive(Debug)]
pub struct StdinSource {
    decoder: LineDecoder,
    /// `None` for subtasks other than 0, and once the reader thread has finished.
    lines: Option<Receiver<Chunk>>,
    pending: VecDeque<Vec<u8>>,
    /// The reader's error, held back one poll so the lines before it are returned first.
    failed: Option<ConnectorError>,
    lines_read: u64,
}

impl StdinSource {
    /// Subtask `subtask`'s reader: subtask 0 reads the process's standard input.
    pub fn open(
        config: &StdinSourceConfig,
        subtask: usize,
        restored: Option<&SourcePosition>,
    ) -> Result<Self, ConnectorError> {
        if let Some(value) = restored {
            // Only the version check matters: stdin cannot go back to that line.
            let _: StdinPosition = snapshot::decode(POSITION, value)?;
        }
        if restored.is_some() && subtask == 0 {
            tracing::warn!(
                "stdin source: restored from a checkpoint, but stdin cannot be replayed; reading on"
            );
        }
        if subtask != 0 {
            return Ok(StdinSource::idle(config));
        }
        Self::from_reader(config, std::io::stdin())
    }

    /// A source reading `reader` the way subtask 0 reads stdin (for tests and embedding).
    pub fn from_reader<R: Read + Send + 'static>(
        config: &StdinSourceConfig,
        reader: R,
    ) -> Result<Self, ConnectorError> {
        let (tx, rx) = crossbeam_channel::bounded::<Chunk>(CHANNEL_CHUNKS);
        let max = config.max_line_bytes;
        std::thread::Builder::new()
            .name("weir-stdin".into())
            .spawn(move || {
                let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
                let mut chunk = Vec::new();
                let mut line_number = 0u64;
                let mut chunk_bytes = 0usize;
                loop {
                    let mut line = Vec::new();
                    match read_line_bounded(&mut reader, &mut line, max) {
                        Ok(LineRead::End) => {
                            if !chunk.is_empty() {
                                let _ = tx.send(Ok(chunk));
                            }
                            return;
                        }
                        Ok(LineRead::TooLong) => {
                            // The lines before it first, so they are not lost.
                            if !chunk.is_empty() {
                                let _ = tx.send(Ok(std::mem::take(&mut chunk)));
                            }
                            let _ = tx.send(Err(ConnectorError::StdinLineTooLong {
                                line: line_number + 1,
                                max,
                            }));
                            return;
                        }
                        Ok(LineRead::Line(_)) => {
                            line_number += 1;
                            chunk_bytes += line.len();
                            chunk.push(line);
                            // Hand over a full chunk, or whatever is read when the next
                            // read may block, so interactive input is not held back.
                            if chunk.len() >= CHUNK_LINES
                                || chunk_bytes >= CHUNK_BYTES
                                || reader.buffer().is_empty()
                            {
                                chunk_bytes = 0;
                                if tx.send(Ok(std::mem::take(&mut chunk))).is_err() {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(Err(ConnectorError::Stdin(e)));
                            return;
                        }
                    }
                }
            })
            .map_err(ConnectorError::Stdin)?;
        Ok(StdinSource {
            lines: Some(rx),
            ..StdinSource::idle(config)
        })
    }

    fn idle(config: &StdinSourceConfig) -> Self {
        StdinSource {
            decoder: LineDecoder::new(
                config.format,
                config.key_field.clone(),
                config.timestamp_field.clone(),
            ),
            lines: None,
            pending: VecDeque::new(),
            failed: None,
            lines_read: 0,
        }
    }
}

impl Source for StdinSource {
    fn poll(
        &mut self,
        out: &mut RecordBatch,
        limit: BatchLimit,
    ) -> Result<SourcePoll, SourceError> {
        if let Some(e) = self.failed.take() {
            return Err(e.into());
        }
        let mut n = 0;
        while !limit.is_full(out) {
            if let Some(line) = self.pending.pop_front() {
                self.decoder.push_line(strip_line_end(&line), out);
                n += 1;
                continue;
            }
            let Some(rx) = &self.lines else { break };
            match rx.try_recv() {
                Ok(Ok(chunk)) => self.pending.extend(chunk),
                Ok(Err(e)) => {
                    self.lines = None;
                    if n == 0 {
                        return Err(e.into());
                    }
                    self.failed = Some(e);
                    break;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.lines = None,
            }
        }
        self.lines_read += n as u64;
        Ok(if n > 0 {
            SourcePoll::Ready
        } else if self.lines.is_none() && self.pending.is_empty() {
            self.decoder.warn_missing_fields("stdin source");
            SourcePoll::Drained
        } else {
            SourcePoll::Idle
        })
    }

    fn position(&self) -> SourcePosition {
        let position = StdinPosition {
            lines: self.lines_read,
        };
        // A struct of one integer always encodes.
        snapshot::encode(POSITION, &position).unwrap_or(serde_json::Value::Null)
    }

    fn is_replayable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a position written before versions (`{"lines": n}`) failing a restore,
    /// or a newer weir's position accepted (subtask 1 does not read stdin, so the test
    /// can open it).
    #[test]
    fn position_is_versioned() {
        snapshot::assert_versioned(
            POSITION,
            serde_json::json!({"lines": 4}),
            &StdinPosition { lines: 4 },
        );
        let config = StdinSourceConfig::default();
        let old = serde_json::json!({"lines": 4});
        StdinSource::open(&config, 1, Some(&old)).expect("old position");
        let newer = serde_json::json!({"v": 2, "lines": 4});
        let err = StdinSource::open(&config, 1, Some(&newer)).expect_err("newer");
        assert_eq!(
            err.to_string(),
            "checkpoint written by a newer weir: stdin source position version 2, this weir reads up to 1"
        );
    }
    use std::time::Duration;

    #[test]
    fn reads_lines_until_end_of_input() {
        let input = "a\r\nb\n\nlast".as_bytes().to_vec();
        let mut s =
            StdinSource::from_reader(&StdinSourceConfig::default(), std::io::Cursor::new(input))
                .expect("open");
        let mut values = Vec::new();
        loop {
            let mut batch = RecordBatch::default();
            match s.poll(&mut batch, BatchLimit::records(2)).expect("poll") {
                SourcePoll::Drained => break,
                SourcePoll::Idle => std::thread::sleep(Duration::from_millis(1)),
                SourcePoll::Ready => values.extend(
                    batch
                        .iter()
                        .map(|r| String::from_utf8_lossy(r.value).into_owned()),
                ),
            }
        }
        assert_eq!(values, ["a", "b", "", "last"]);
        assert_eq!(s.position(), serde_json::json!({"v": 1, "lines": 4}));
        assert!(!s.is_replayable());
    }

    /// Issue 7 §2: stdin's lines are bounded too (`weir run < /dev/zero`): the lines
    /// before the long one arrive, then one error naming its number.
    #[test]
    fn a_line_past_max_line_bytes_fails_with_its_number() {
        let config = StdinSourceConfig {
            max_line_bytes: 1024,
            ..StdinSourceConfig::default()
        };
        let endless = std::io::Read::chain(&b"a\nb\n"[..], std::io::repeat(0));
        let mut s = StdinSource::from_reader(&config, endless).expect("open");
        let mut values = Vec::new();
        let err = loop {
            let mut batch = RecordBatch::default();
            match s.poll(&mut batch, BatchLimit::records(10)) {
                Ok(SourcePoll::Idle) => std::thread::sleep(Duration::from_millis(1)),
                Ok(SourcePoll::Drained) => panic!("an endless line cannot drain"),
                Ok(SourcePoll::Ready) => values.extend(
                    batch
                        .iter()
                        .map(|r| String::from_utf8_lossy(r.value).into_owned()),
                ),
                Err(e) => break e,
            }
        };
        assert_eq!(values, ["a", "b"]);
        assert_eq!(
            err.to_string(),
            "stdin line 3 is longer than max_line_bytes (1024 bytes): raise max_line_bytes or fix the input"
        );
    }

    #[test]
    fn other_subtasks_are_drained() {
        let mut s = StdinSource::open(&StdinSourceConfig::default(), 1, None).expect("open");
        assert_eq!(
            s.poll(&mut RecordBatch::default(), BatchLimit::records(10))
                .expect("poll"),
            SourcePoll::Drained
        );
    }
}
