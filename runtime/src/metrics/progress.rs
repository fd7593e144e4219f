//! Progress on a terminal: records in/out per second and the last checkpoint, redrawn
//! once a second on stderr. Stops and clears its line when dropped.

use std::io::Write;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::{MetricsSnapshot, PipelineMetrics};
use crate::periodic::Periodic;

const REDRAW_EVERY: Duration = Duration::from_secs(1);

/// The progress line's thread; clears the line and stops when dropped.
#[derive(Debug)]
pub struct Progress {
    _thread: Option<Periodic>,
}

impl Progress {
    pub fn start(metrics: Arc<PipelineMetrics>) -> Self {
        let mut last = metrics.snapshot();
        let mut at = Instant::now();
        let redraw = move || {
            // The first tick comes at start, with no interval to take a rate over.
            if at.elapsed() < REDRAW_EVERY / 2 {
                return ControlFlow::Continue(());
            }
            let now = metrics.snapshot();
            draw(&now, &last, at.elapsed().as_secs_f64());
            last = now;
            at = Instant::now();
            ControlFlow::Continue(())
        };
        let clear = || eprint!("\r\x1b[2K");
        Self {
            _thread: Periodic::start("weir-progress", REDRAW_EVERY, redraw, clear).ok(),
        }
    }
}

/// One redraw: the rates since `last`, `secs` ago, and the counters of `now`.
fn draw(now: &MetricsSnapshot, last: &MetricsSnapshot, secs: f64) {
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
}
