//! `StdoutSink`: writes records to standard output, for demos. At-least-once: after a
//! recovery, records since the restored checkpoint are written again.
//!
//! Invariants: each subtask encodes a batch's records into its own buffer (format as
//! the file sink) and writes it to stdout under stdout's lock at the end of the batch
//! (or every 64 KiB within one), so output appears as soon as it is produced, lines of
//! different subtasks never interleave mid-line, and nothing waits for a checkpoint:
//! what was printed before a crash stays printed, and is printed again on replay.

use std::io::Write;

use serde::Deserialize;

use crate::connector::error::ConnectorError;
use crate::connector::record_format::{OutputFormat, encode_record};
use crate::dataflow::operator::OperatorError;
use crate::dataflow::sink::Sink;
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::record::batch::RecordBatch;
use crate::record::message::Barrier;

/// Buffered bytes that trigger a write to stdout.
const FLUSH_BYTES: usize = 64 << 10;

/// `type = "stdout"` sink.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutSinkConfig {
    #[serde(default)]
    pub format: OutputFormat,
}

#[derive(Debug)]
pub struct StdoutSink {
    id: String,
    format: OutputFormat,
    buffer: Vec<u8>,
}

impl StdoutSink {
    pub fn new(id: impl Into<String>, format: OutputFormat) -> Self {
        StdoutSink {
            id: id.into(),
            format,
            buffer: Vec::with_capacity(FLUSH_BYTES),
        }
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        out.write_all(&self.buffer)
            .and_then(|()| out.flush())
            .map_err(ConnectorError::Stdout)?;
        self.buffer.clear();
        Ok(())
    }
}

impl Sink for StdoutSink {
    fn id(&self) -> &str {
        &self.id
    }

    fn write(
        &mut self,
        _checkpoint: CheckpointId,
        batch: &RecordBatch,
    ) -> Result<(), OperatorError> {
        for record in batch.iter() {
            encode_record(self.format, record, &mut self.buffer);
            if self.buffer.len() >= FLUSH_BYTES {
                self.flush()?;
            }
        }
        self.flush()?;
        Ok(())
    }

    fn barrier(&mut self, _barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
        self.flush()?;
        Ok(None)
    }

    fn close(&mut self) -> Result<(), OperatorError> {
        Ok(self.flush()?)
    }
}
