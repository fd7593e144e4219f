//! The `Operator` trait: one step of a chain, driven by its task thread.
//!
//! Invariants a task guarantees to every operator:
//! - calls come from one thread, in stream order: `handle_batch` / `handle_watermark`
//!   for everything before barrier n, then `handle_barrier(n)`, then what follows n;
//! - `handle_barrier(n)` returns the operator's snapshot for checkpoint n; everything
//!   the operator emitted before returning belongs to checkpoint n, everything after to
//!   n + 1. An operator never blocks waiting for a commit: commits are the coordinator's
//!   (see `checkpoint::commit`).
//! - Records an operator refuses go to `Output::dead_letters`, never dropped silently.

use crate::dataflow::batch::RecordBatch;
use crate::dataflow::message::{Barrier, Watermark};

/// A record routed to the pipeline's dead-letter output instead of failing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The operator that refused it.
    pub operator: String,
    pub reason: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub timestamp: i64,
}

/// Where an operator puts what it emits.
#[derive(Debug, Default)]
pub struct Output {
    /// Batches for the next operator of the chain (or the task's output).
    pub batches: Vec<RecordBatch>,
    pub dead_letters: Vec<DeadLetter>,
    /// Records refused because they arrived after their window's allowed lateness.
    pub late_records: u64,
}

impl Output {
    pub fn emit(&mut self, batch: RecordBatch) {
        if !batch.is_empty() {
            self.batches.push(batch);
        }
    }

    pub fn reject(
        &mut self,
        operator: &str,
        reason: impl Into<String>,
        key: &[u8],
        value: &[u8],
        timestamp: i64,
    ) {
        self.dead_letters.push(DeadLetter {
            operator: operator.to_owned(),
            reason: reason.into(),
            key: key.to_vec(),
            value: value.to_vec(),
            timestamp,
        });
    }
}

/// An operator's snapshot for one checkpoint, stored in the checkpoint's metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OperatorSnapshot {
    /// Operator-defined: what it needs to restore (and, for sinks, to commit).
    pub state: serde_json::Value,
    /// Files this checkpoint added to checkpoint storage (incremental state upload).
    #[serde(default)]
    pub files_added: u64,
    #[serde(default)]
    pub bytes_added: u64,
    /// Bytes of the whole state this snapshot references (shared and private files).
    #[serde(default)]
    pub state_bytes: u64,
    /// Shared files in checkpoint storage this snapshot needs, as (storage task, shared
    /// name): retention keeps them while the checkpoint is kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_files: Vec<(String, String)>,
}

impl OperatorSnapshot {
    /// A snapshot that uploaded no files.
    pub fn new(state: serde_json::Value) -> Self {
        Self {
            state,
            files_added: 0,
            bytes_added: 0,
            state_bytes: 0,
            shared_files: Vec::new(),
        }
    }
}

/// Why an operator failed; the task adds pipeline, task and operator context.
pub type OperatorError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub trait Operator: Send {
    /// A stable id, unique in the pipeline (e.g. `step-1`, `sink-0`): snapshots are
    /// stored and restored under it.
    fn id(&self) -> &str;

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError>;

    /// The combined watermark advanced. Emit what it completes before returning: the
    /// task forwards the watermark downstream after this call.
    fn handle_watermark(
        &mut self,
        _watermark: Watermark,
        _out: &mut Output,
    ) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Snapshot for `barrier.id`; `None` for stateless operators.
    fn handle_barrier(
        &mut self,
        _barrier: Barrier,
        _out: &mut Output,
    ) -> Result<Option<OperatorSnapshot>, OperatorError> {
        Ok(None)
    }

    /// The task is shutting down after its final barrier.
    fn on_close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}
