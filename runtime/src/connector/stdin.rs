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
//! - Not replayable (`is_replayable() == false`): what was read before a crash is gone.
//!   The position `{"lines": n}` only counts lines for progress reports; a restore
//!   resumes with whatever stdin delivers next.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};

use crossbeam_channel::{Receiver, TryRecvError};
use serde::Deserialize;

use crate::connector::error::ConnectorError;
use crate::connector::record_format::{
    InputFormat, LineDecoder, check_line_fields, strip_line_end,
};
use crate::connector::source::{Source, SourcePoll, SourcePosition};
use crate::dataflow::batch::RecordBatch;
use crate::spec::InvalidField;

/// Lines per chunk handed from the reader thread to `poll`.
const CHUNK_LINES: usize = 1024;
/// Chunks in flight between the reader thread and `poll`: at most 16 Ki lines buffered.
const CHANNEL_CHUNKS: usize = 16;
/// The reader thread's read buffer.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// `type = "stdin"` source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
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
}

impl StdinSourceConfig {
    pub fn validate(&self) -> Result<(), InvalidField> {
        check_line_fields(self.format, &self.key_field, &self.timestamp_field)
    }
}

type Chunk = Result<Vec<Vec<u8>>, std::io::Error>;

#[derive(Debug)]
pub struct StdinSource {
    decoder: LineDecoder,
    /// `None` for subtasks other than 0, and once the reader thread has finished.
    lines: Option<Receiver<Chunk>>,
    pending: VecDeque<Vec<u8>>,
    lines_read: u64,
}

impl StdinSource {
    /// Subtask `subtask`'s reader: subtask 0 reads the process's standard input.
    pub fn open(
        config: &StdinSourceConfig,
        subtask: usize,
        restored: Option<&SourcePosition>,
    ) -> Result<Self, ConnectorError> {
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
        std::thread::Builder::new()
            .name("weir-stdin".into())
            .spawn(move || {
                let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
                let mut chunk = Vec::new();
                loop {
                    let mut line = Vec::new();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) => {
                            if !chunk.is_empty() {
                                let _ = tx.send(Ok(chunk));
                            }
                            return;
                        }
                        Ok(_) => {
                            chunk.push(line);
                            // Hand over a full chunk, or whatever is read when the next
                            // read may block, so interactive input is not held back.
                            if (chunk.len() >= CHUNK_LINES || reader.buffer().is_empty())
                                && tx.send(Ok(std::mem::take(&mut chunk))).is_err()
                            {
                                return;
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = tx.send(Err(e));
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
            lines_read: 0,
        }
    }
}

impl Source for StdinSource {
    fn poll(&mut self, out: &mut RecordBatch, max: usize) -> Result<SourcePoll, ConnectorError> {
        let mut n = 0;
        while n < max {
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
                    return Err(ConnectorError::Stdin(e));
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.lines = None,
            }
        }
        self.lines_read += n as u64;
        Ok(if n > 0 {
            SourcePoll::Ready
        } else if self.lines.is_none() && self.pending.is_empty() {
            SourcePoll::Drained
        } else {
            SourcePoll::Idle
        })
    }

    fn position(&self) -> SourcePosition {
        serde_json::json!({ "lines": self.lines_read })
    }

    fn is_replayable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            match s.poll(&mut batch, 2).expect("poll") {
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
        assert_eq!(s.position(), serde_json::json!({"lines": 4}));
        assert!(!s.is_replayable());
    }

    #[test]
    fn other_subtasks_are_drained() {
        let mut s = StdinSource::open(&StdinSourceConfig::default(), 1, None).expect("open");
        assert_eq!(
            s.poll(&mut RecordBatch::default(), 10).expect("poll"),
            SourcePoll::Drained
        );
    }
}
