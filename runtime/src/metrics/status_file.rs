//! A status file: the pipeline's counters as one JSON object (`MetricsSnapshot`),
//! rewritten twice a second and once more when the run ends. A supervisor (`weir
//! serve`) reads it to report a worker's progress without talking to it.
//!
//! Invariant: the file is replaced by rename, so a reader sees a whole snapshot, never
//! a torn one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::metrics::PipelineMetrics;

const WRITE_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct StatusFile {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StatusFile {
    pub fn start(metrics: Arc<PipelineMetrics>, path: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-status".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    write(&metrics, &path);
                    std::thread::sleep(WRITE_EVERY);
                }
                write(&metrics, &path);
            })
            .ok();
        StatusFile { stop, thread }
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

impl Drop for StatusFile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
