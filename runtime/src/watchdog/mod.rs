//! The watchdog: a worker that stops making progress fails, with one line, instead of
//! hanging.
//!
//! A worker waits on its broker in a few places: a transactional call, a flush, a sink
//! subtask's wait for acknowledgements, a send into a full queue. Each of these waits
//! has a bound (the checkpoint's deadline, or a stated budget) and, when the bound
//! passes, fails the pipeline through its ordinary error path, with a line that names
//! the call and the broker. librdkafka does not always keep its own bounds, though:
//! `send_offsets_to_transaction` was seen to wait forever after a 45 s broker pause,
//! and a thread blocked inside C cannot be cancelled. So every such wait is *watched*:
//! registered here, with what it waits for and its bound, for as long as it lasts
//! ([`watch`]).
//!
//! `weir run` starts a [`Watchdog`] over its pipeline. It fires when a watched wait
//! outlives its bound by [`GRACE`], or when the running pipeline completes no
//! checkpoint for two whole rounds (`metrics::endpoint::stall_after`, the bound its
//! `/healthz` reports a stall at): then it hands one line naming what is stuck to its
//! action, which in `weir run` prints it and exits the process with [`EXIT_STALLED`].
//!
//! Why exit: a hung worker is worse than a failed one. Its supervisor (`weir serve`,
//! Kubernetes, systemd) restarts a failed one, and recovery resumes exactly from the
//! last committed checkpoint (the restart's `init_transactions` aborts the transaction
//! this one left open), so exiting loses nothing and duplicates nothing.
//!
//! Invariants:
//! - A watch is registered before its wait starts and removed when its guard drops,
//!   whatever way the wait ends.
//! - Without a `Watchdog` (in-process tests, library use), the registry only answers
//!   [`waiting`] (what a timed-out checkpoint names as blocked); nothing exits.
//! - The watchdog never fires before a watch's bound + [`GRACE`]: a wait that keeps its
//!   bound always fails first, through its own error path and line.
//! - Time the process did not run (SIGSTOP, a frozen VM: [`pauses`]) is not counted
//!   against a wait or the stall bound: no wait could return then, and the wait's own
//!   error (a transaction the broker aborted meanwhile) is the line to fail with.

mod pauses;
pub mod running_deadline;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::metrics::endpoint::{Liveness, liveness, progress_unix_ms};
use crate::metrics::{MetricsSnapshot, PipelineMetrics, unix_ms};
use crate::periodic::Periodic;

pub use pauses::PAUSE_AFTER;
use pauses::Pauses;
pub use running_deadline::RunningDeadline;

/// How long past its bound a watched wait may last before the watchdog fires: time
/// for a wait that keeps its bound to return and for its error to end the run.
pub const GRACE: Duration = Duration::from_secs(10);

/// The exit code of a worker the watchdog ended (EX_TEMPFAIL: try again later).
pub const EXIT_STALLED: u8 = 75;

/// How often the watchdog looks.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// One wait in progress.
#[derive(Debug, Clone)]
struct Waiting {
    pipeline: String,
    /// What it waits for, naming the call and the broker.
    what: String,
    since: Instant,
    bound: Instant,
}

/// The waits in progress of this process, by registration number.
#[derive(Debug, Default)]
struct Registry {
    waits: Mutex<BTreeMap<u64, Waiting>>,
    next: AtomicU64,
}

impl Registry {
    fn waits(&self) -> MutexGuard<'_, BTreeMap<u64, Waiting>> {
        self.waits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// A registered wait; dropping it ends the watch.
#[must_use = "the watch ends when this guard drops"]
#[derive(Debug)]
pub struct Watch(u64);

impl Drop for Watch {
    fn drop(&mut self) {
        registry().waits().remove(&self.0);
    }
}

/// Watches a wait of `pipeline`'s, described by `what` (the call and the broker), that
/// must be over by `bound`.
pub fn watch(pipeline: &str, what: String, bound: Instant) -> Watch {
    let registry = registry();
    let id = registry.next.fetch_add(1, Ordering::Relaxed);
    registry.waits().insert(
        id,
        Waiting {
            pipeline: pipeline.to_owned(),
            what,
            since: Instant::now(),
            bound,
        },
    );
    Watch(id)
}

/// What `pipeline` is waiting on now, oldest wait first, each with how long it has
/// lasted: "<what> (for 4.2 s)".
pub fn waiting(pipeline: &str) -> Vec<String> {
    let now = Instant::now();
    let waits = registry().waits();
    let mut mine: Vec<&Waiting> = waits.values().filter(|w| w.pipeline == pipeline).collect();
    mine.sort_by_key(|w| w.since);
    mine.iter()
        .map(|w| {
            let lasted = now.saturating_duration_since(w.since).as_secs_f64();
            format!("{} (for {lasted:.1} s)", w.what)
        })
        .collect()
}

/// The first of `waits` past its bound + [`GRACE`] at `now`, not counting the time the
/// process was paused while it lasted, if any; with that time.
fn overdue<'a>(
    waits: impl IntoIterator<Item = &'a Waiting>,
    now: Instant,
    pauses: &Pauses,
) -> Option<(&'a Waiting, Duration)> {
    waits
        .into_iter()
        .map(|w| (w, pauses.since(w.since)))
        .filter(|(w, paused)| now > w.bound + *paused + GRACE)
        .min_by_key(|(w, paused)| w.bound + *paused)
}

/// Watches one pipeline of this process (see the module doc); stops when dropped,
/// at once (`Periodic`).
#[derive(Debug)]
pub struct Watchdog {
    _thread: Periodic,
}

/// What a watchdog watches, and what it does when it fires.
pub struct WatchdogConfig {
    pub pipeline: String,
    pub metrics: Arc<PipelineMetrics>,
    /// No checkpoint completed for this long while running is a stall.
    pub stall_after: Duration,
    /// Called once, with the line, when the watchdog fires (`weir run`: print, exit).
    pub on_stall: Box<dyn Fn(String) + Send>,
}

impl Watchdog {
    /// Starts the watchdog's thread; `None` if the thread cannot be started (the run
    /// goes on unwatched, which it survives: every wait still has its own bound).
    pub fn start(config: WatchdogConfig) -> Option<Watchdog> {
        let mut watcher = Watcher::new(config);
        let mut planned = Instant::now();
        let look = move || {
            if let Some(line) = watcher.look(planned, Instant::now(), unix_ms()) {
                (watcher.config.on_stall)(line);
                return ControlFlow::Break(());
            }
            planned = Instant::now() + LOOK_EVERY;
            ControlFlow::Continue(())
        };
        let thread = Periodic::start("weir-watchdog", LOOK_EVERY, look, || {})
            .map_err(|e| tracing::warn!("cannot start the watchdog's thread: {e}"))
            .ok()?;
        Some(Watchdog { _thread: thread })
    }
}

/// What the watchdog's thread looks at, and the pauses it has seen.
struct Watcher {
    config: WatchdogConfig,
    pauses: Pauses,
}

/// What a stuck pipeline's line ends with.
const NEXT: &str = "exiting, so that a restart resumes from the last committed checkpoint";

impl Watcher {
    fn new(config: WatchdogConfig) -> Self {
        Watcher {
            config,
            pauses: Pauses::default(),
        }
    }

    /// One look, planned for `planned` and made at `now` (`now_ms` in Unix
    /// milliseconds): the line to fire with, if the pipeline is stuck.
    fn look(&mut self, planned: Instant, now: Instant, now_ms: u64) -> Option<String> {
        self.pauses.look(planned, now);
        let snapshot = self.config.metrics.snapshot();
        // The pipeline's last progress on the pauses' clock (`now` before it started).
        let since_progress = now_ms.saturating_sub(progress_unix_ms(&snapshot));
        let progress = now
            .checked_sub(Duration::from_millis(since_progress))
            .unwrap_or(now);
        let (line, oldest) = self.overdue_line(now);
        let line = line.or_else(|| self.stalled_line(&snapshot, now_ms, progress));
        self.pauses
            .forget_before(oldest.map_or(progress, |o| o.min(progress)));
        line
    }

    /// The line naming the pipeline's wait furthest past its bound + [`GRACE`], if
    /// one is; and when its oldest wait began.
    fn overdue_line(&self, now: Instant) -> (Option<String>, Option<Instant>) {
        let pipeline = &self.config.pipeline;
        let waits = registry().waits();
        let mine: Vec<&Waiting> = waits.values().filter(|w| &w.pipeline == pipeline).collect();
        let oldest = mine.iter().map(|w| w.since).min();
        let line = overdue(mine, now, &self.pauses).map(|(w, paused)| {
            let past = now.saturating_duration_since(w.bound + paused).as_secs();
            let bound = w.bound.saturating_duration_since(w.since).as_secs_f64();
            format!(
                "pipeline {pipeline}: {} has not returned {past} s past its bound of {bound:.1} s{}; {NEXT}",
                w.what,
                not_counting(paused)
            )
        });
        (line, oldest)
    }

    /// The line saying the running pipeline completed no checkpoint for the stall
    /// bound (not counting pauses since its last progress, at `progress`), if it did
    /// not.
    fn stalled_line(
        &self,
        snapshot: &MetricsSnapshot,
        now_ms: u64,
        progress: Instant,
    ) -> Option<String> {
        let pipeline = &self.config.pipeline;
        let paused = self.pauses.since(progress);
        let running_ms = now_ms.saturating_sub(paused.as_millis() as u64);
        let Liveness::Stalled { for_ms } = liveness(snapshot, running_ms, self.config.stall_after)
        else {
            return None;
        };
        let waits = waiting(pipeline);
        let blocked = if waits.is_empty() {
            String::new()
        } else {
            format!(" (waiting on: {})", waits.join("; "))
        };
        Some(format!(
            "pipeline {pipeline}: no checkpoint completed for {} s{} (the bound is {} s: two rounds of checkpoint interval + timeout){blocked}; {NEXT}",
            for_ms / 1000,
            not_counting(paused),
            self.config.stall_after.as_secs()
        ))
    }
}

/// " (not counting the 25 s this process did not run)", or nothing.
fn not_counting(paused: Duration) -> String {
    if paused.is_zero() {
        String::new()
    } else {
        format!(
            " (not counting the {} s this process did not run)",
            paused.as_secs()
        )
    }
}
