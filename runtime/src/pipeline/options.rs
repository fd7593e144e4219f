//! What a caller asks of one run (`RunOptions`) and what it reports (`RunSummary`).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::checkpoint::coordinator::RunEnd;
use crate::cluster::Worker;
use crate::metrics::{MetricsSnapshot, PipelineMetrics};
use crate::record::CheckpointId;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Delete earlier checkpoints and committed file output first.
    pub from_scratch: bool,
    /// Resume from this complete checkpoint, whatever the progress markers say, and
    /// discard newer ones.
    pub from_checkpoint: Option<CheckpointId>,
    /// Redraw records/s and the last checkpoint on stderr once a second.
    pub show_progress: bool,
    /// Set non-zero (to the signal's number) to stop the run after one more checkpoint.
    pub stop: Arc<AtomicUsize>,
    /// The `weir` binary, to compile each module in a child process under the spec's
    /// `compile_cpu` and `compile_memory`; `None` compiles in this process, unbounded.
    pub compile_program: Option<PathBuf>,
    /// Write the counters to this file twice a second (see `metrics::status_file`).
    pub status_file: Option<PathBuf>,
    /// The run's counters; shared with whoever reports them while the run goes on (the
    /// health endpoint, started before recovery).
    pub metrics: Arc<PipelineMetrics>,
    /// Which worker of the pipeline to run (`--worker I/N`); 0/1 runs all of it.
    pub worker: Worker,
}

#[derive(Debug, Clone)]
pub struct RunSummary {
    pub metrics: MetricsSnapshot,
    /// How the run ended, and its last checkpoint: the one the next run resumes from.
    pub end: RunEnd,
    /// The checkpoint the run resumed from, if any.
    pub restored_from: Option<CheckpointId>,
}
