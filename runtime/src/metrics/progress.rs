//! Progress on a terminal: records in/out per second and the last checkpoint, redrawn
//! once a second on stderr. Stops and clears its line when dropped.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::PipelineMetrics;

const REDRAW_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    pub fn start(metrics: Arc<PipelineMetrics>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-progress".into())
            .spawn(move || {
                let mut last = metrics.snapshot();
                let mut at = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    if at.elapsed() < REDRAW_EVERY {
                        continue;
                    }
                    let now = metrics.snapshot();
                    let secs = at.elapsed().as_secs_f64();
                    let rate = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / secs;
                    eprint!(
                        "\r\x1b[2K{:>10.0} rec/s in  {:>10.0} rec/s out  {} in  {} out  {} dead  checkpoint {} ({} ms)",
                        rate(now.records_in, last.records_in),
                        rate(now.records_out, last.records_out),
                        now.records_in,
                        now.records_out,
                        now.dead_letters,
                        now.last_checkpoint_id,
                        now.last_checkpoint_duration_ms,
                    );
                    let _ = std::io::stderr().flush();
                    last = now;
                    at = Instant::now();
                }
                eprint!("\r\x1b[2K");
            })
            .ok();
        Self { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
