//! The `Operator` trait: one step of a chain, driven by its task thread.
//!
//! Invariants a task guarantees to every operator:
//! - calls come from one thread, in stream order: `handle_batch` / `handle_watermark`
//!   for everything before barrier n, then `handle_barrier(n)`, then what follows n;
//! - `handle_barrier(n)` returns the operator's snapshot for checkpoint n, taken or
//!   [`Deferred`](Snapshot::Deferred) (finished off the task thread: the task forwards
//!   the barrier at once and acknowledges n only when every deferred part has finished);
//!   everything the operator emitted before returning belongs to checkpoint n,
//!   everything after to n + 1. An operator never blocks waiting for a commit: commits
//!   are the coordinator's (see `checkpoint::commit`).
//! - A deferred part may need the task thread's own calls to finish (a state's copy
//!   spread over the batches after the barrier): the task goes on calling the operator
//!   and calls `on_idle` whenever its input is quiet and `on_close` at the end, so it
//!   never waits for a deferred part on its own thread.
//! - Records an operator refuses go to `Output::dead_letters`, never dropped silently.

use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};
use crate::record::{DeadLetter, OperatorSnapshot};

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

/// Why an operator failed; the task adds pipeline, task and operator context.
pub type OperatorError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An operator's part of one checkpoint.
#[derive(Debug)]
pub enum Snapshot {
    /// Complete when `handle_barrier` returns.
    Taken(OperatorSnapshot),
    /// Still being written off the task thread (state files uploading).
    Deferred(DeferredSnapshot),
}

impl Snapshot {
    /// The snapshot, waiting for a deferred one to finish.
    pub fn wait(self) -> Result<OperatorSnapshot, OperatorError> {
        match self {
            Snapshot::Taken(snapshot) => Ok(snapshot),
            Snapshot::Deferred(deferred) => deferred.wait(),
        }
    }
}

impl From<OperatorSnapshot> for Snapshot {
    fn from(snapshot: OperatorSnapshot) -> Self {
        Snapshot::Taken(snapshot)
    }
}

/// The rest of a snapshot's work, run by the task's acknowledger thread (see
/// `dataflow::acker`): typically waiting for an upload and describing what it stored.
pub struct DeferredSnapshot(
    Box<dyn FnOnce() -> Result<OperatorSnapshot, OperatorError> + Send + 'static>,
);

impl DeferredSnapshot {
    pub fn new(
        finish: impl FnOnce() -> Result<OperatorSnapshot, OperatorError> + Send + 'static,
    ) -> Self {
        DeferredSnapshot(Box::new(finish))
    }

    /// Waits for the work to finish; the snapshot or why it failed.
    pub fn wait(self) -> Result<OperatorSnapshot, OperatorError> {
        (self.0)()
    }
}

impl std::fmt::Debug for DeferredSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeferredSnapshot")
    }
}

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
    ) -> Result<Option<Snapshot>, OperatorError> {
        Ok(None)
    }

    /// The task's input has been quiet for a while (a poll interval): finish what was
    /// put off until more input came (e.g. a snapshot's copy, which a checkpoint waits
    /// for). Called again after each quiet interval, so cheap when nothing waits.
    fn on_idle(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }

    /// The task is shutting down after its final barrier.
    fn on_close(&mut self) -> Result<(), OperatorError> {
        Ok(())
    }
}
