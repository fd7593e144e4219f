//! A status file: the pipeline's counters as one JSON object (`MetricsSnapshot`),
//! rewritten twice a second and once more when the run ends. A supervisor (`weir
//! serve`) reads it to report a worker's progress without talking to it.
//!
//! Invariant: the file is replaced by rename, so a reader sees a whole snapshot, never
//! a torn one.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::PipelineMetrics;
use crate::periodic::Periodic;

const WRITE_EVERY: Duration = Duration::from_millis(500);

/// The status file's writer; writes once more and stops when dropped.
#[derive(Debug)]
pub struct StatusFile {
    _thread: Option<Periodic>,
}

impl StatusFile {
    pub fn start(metrics: Arc<PipelineMetrics>, path: PathBuf) -> Self {
        let (m, p) = (metrics.clone(), path.clone());
        let tick = move || {
            write(&m, &p);
            ControlFlow::Continue(())
        };
        let last = move || write(&metrics, &path);
        StatusFile {
            _thread: Periodic::start("weir-status", WRITE_EVERY, tick, last).ok(),
        }
    }
}

fn write(metrics: &PipelineMetrics, path: &Path) {
    let tmp = path.with_extension("json.tmp");
    let Ok(text) = serde_json::to_vec(&metrics.snapshot()) else {
        return;
    };
    // Best effort: a status file is a report, never a reason to fail the pipeline.
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}
