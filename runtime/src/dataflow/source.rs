//! The `Source` trait: one subtask's reader of one source.
//!
//! Invariants: `position()` describes exactly the records returned so far, so a source
//! reopened at that position (`restored`) returns the next record and never a record
//! already returned before it. A source whose input cannot be read again (stdin) says
//! so with `is_replayable() == false`: after a crash, what it had read is gone, so the
//! pipeline's output can only be exactly-once for replayable sources.

use crate::record::SourcePosition;
use crate::record::batch::{BatchLimit, RecordBatch};

/// Why a source failed: the connector's own typed error (a `ConnectorError`), boxed so
/// that the dataflow layer does not depend on the connectors that implement [`Source`].
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;

/// What one `poll` produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePoll {
    /// Records were appended (maybe zero); poll again.
    Ready,
    /// Nothing available now (rate limit, no new data); poll again after a short wait.
    Idle,
    /// All input is read; `poll` will not append anything again.
    Drained,
}

/// What a source subtask resumes from when the run restores a checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct RestoredSource<'a> {
    /// This subtask's own position in the checkpoint.
    pub own: Option<&'a SourcePosition>,
    /// The positions of every subtask of the same source: a source whose splits can
    /// move between subtasks (Kafka partitions) restores from all of them.
    pub all: &'a [&'a SourcePosition],
}

pub trait Source: Send {
    /// Appends records to `out` (empty on entry) until `limit.is_full(out)` or nothing
    /// more is available: at most `limit.records` records, and no record once `out`
    /// holds `limit.bytes` bytes.
    fn poll(&mut self, out: &mut RecordBatch, limit: BatchLimit)
    -> Result<SourcePoll, SourceError>;

    /// The position just after the last record returned.
    fn position(&self) -> SourcePosition;

    /// Input records that can no longer be read and were skipped when the source
    /// opened (a Kafka offset already deleted by retention); counted in metrics.
    fn skipped_at_open(&self) -> u64 {
        0
    }

    /// Records in this subtask's input not read yet, as last known (a Kafka source: the
    /// partitions' high watermarks minus its next offsets); `None` if it cannot tell.
    fn lag(&self) -> Option<u64> {
        None
    }

    /// Whether reopening at `position()` replays exactly what followed it.
    fn is_replayable(&self) -> bool {
        true
    }

    /// The event time up to which this source has read all of its input, when it tracks
    /// that itself (a Kafka source: the minimum over its partitions of the largest
    /// timestamp read from each). `None`: the task uses the largest timestamp of the
    /// records returned so far. The task's watermark is this minus the bounded
    /// out-of-orderness, and never goes back.
    fn event_time_frontier(&self) -> Option<i64> {
        None
    }
}
