//! Pipeline counters, shared by every task of one pipeline run.
//!
//! Counters only grow within one process; after a restart they count what this
//! process did (replayed records included), which is what a throughput display wants.
//! Exactly-once is a property of committed output, never of these numbers.

pub mod endpoint;
pub mod exposition;
pub mod guest_memory;
pub mod progress;
pub mod status_file;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use guest_memory::{GuestMemory, StepGuestMemory};

#[derive(Debug, Default)]
pub struct PipelineMetrics {
    /// Records read by sources.
    pub records_in: AtomicU64,
    /// Records handed to sinks (not counting the dead-letter output).
    pub records_out: AtomicU64,
    /// Records routed to the dead-letter output (rejections and late records).
    pub dead_letters: AtomicU64,
    /// Of those, records that arrived after their window's allowed lateness.
    pub late_records: AtomicU64,
    /// Input records that could no longer be read when a source reopened (a restored
    /// Kafka offset already deleted by retention): lost to the pipeline, not replayed.
    pub records_skipped: AtomicU64,
    pub checkpoints_completed: AtomicU64,
    /// Records in the sources' input not read yet, summed over subtasks (each adds its
    /// new figure before taking back its old one, so the sum never underflows).
    pub consumer_lag: AtomicU64,
    pub last_checkpoint_id: AtomicU64,
    pub last_checkpoint_duration_ms: AtomicU64,
    /// When the last checkpoint completed, Unix milliseconds (0: none yet).
    pub last_checkpoint_unix_ms: AtomicU64,
    /// When the pipeline's tasks started, after recovery, Unix milliseconds (0: not yet).
    pub started_unix_ms: AtomicU64,
    /// Each guest instance's linear memory, by step.
    pub guest_memory: GuestMemory,
    /// Guest lines (stdout, stderr, `log`) dropped over `[limits] guest_log_rate`: the
    /// counter of the run's `GuestLogBudget`.
    pub guest_log_dropped_lines: Arc<AtomicU64>,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsSnapshot {
    pub records_in: u64,
    pub records_out: u64,
    pub dead_letters: u64,
    pub late_records: u64,
    pub records_skipped: u64,
    pub checkpoints_completed: u64,
    #[serde(default)]
    pub consumer_lag: u64,
    pub last_checkpoint_id: u64,
    pub last_checkpoint_duration_ms: u64,
    #[serde(default)]
    pub last_checkpoint_unix_ms: u64,
    #[serde(default)]
    pub started_unix_ms: u64,
    /// Guest linear memory by step (see `guest_memory`).
    #[serde(default)]
    pub guest_memory: BTreeMap<String, StepGuestMemory>,
    #[serde(default)]
    pub guest_log_dropped_lines: u64,
}

/// Milliseconds since the Unix epoch, now (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl PipelineMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Replaces one subtask's share of `counter` (`old`) with `new`.
    pub fn replace_share(counter: &AtomicU64, old: u64, new: u64) {
        counter.fetch_add(new, Ordering::Relaxed);
        counter.fetch_sub(old, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            records_in: get(&self.records_in),
            records_out: get(&self.records_out),
            dead_letters: get(&self.dead_letters),
            late_records: get(&self.late_records),
            records_skipped: get(&self.records_skipped),
            checkpoints_completed: get(&self.checkpoints_completed),
            consumer_lag: get(&self.consumer_lag),
            last_checkpoint_id: get(&self.last_checkpoint_id),
            last_checkpoint_duration_ms: get(&self.last_checkpoint_duration_ms),
            last_checkpoint_unix_ms: get(&self.last_checkpoint_unix_ms),
            started_unix_ms: get(&self.started_unix_ms),
            guest_memory: self.guest_memory.by_step(),
            guest_log_dropped_lines: get(&self.guest_log_dropped_lines),
        }
    }
}
