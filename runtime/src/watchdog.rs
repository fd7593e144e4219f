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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::PipelineMetrics;
use crate::metrics::endpoint::{Liveness, liveness};
use crate::metrics::unix_ms;

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

/// The first of `waits` past its bound + [`GRACE`] at `now`, if any.
fn overdue<'a>(waits: impl IntoIterator<Item = &'a Waiting>, now: Instant) -> Option<&'a Waiting> {
    waits
        .into_iter()
        .filter(|w| now > w.bound + GRACE)
        .min_by_key(|w| w.bound)
}

/// Watches one pipeline of this process (see the module doc); stops when dropped.
#[derive(Debug)]
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
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
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weir-watchdog".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if let Some(line) = stall_line(&config) {
                        (config.on_stall)(line);
                        return;
                    }
                    std::thread::sleep(LOOK_EVERY);
                }
            })
            .map_err(|e| tracing::warn!("cannot start the watchdog's thread: {e}"))
            .ok()?;
        Some(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The line the watchdog fires with, if the pipeline is stuck now.
fn stall_line(config: &WatchdogConfig) -> Option<String> {
    let pipeline = &config.pipeline;
    let next = "exiting, so that a restart resumes from the last committed checkpoint";
    {
        let waits = registry().waits();
        let mine = waits.values().filter(|w| &w.pipeline == pipeline);
        if let Some(w) = overdue(mine, Instant::now()) {
            let past = Instant::now().saturating_duration_since(w.bound).as_secs();
            let bound = w.bound.saturating_duration_since(w.since).as_secs_f64();
            return Some(format!(
                "pipeline {pipeline}: {} has not returned {past} s past its bound of {bound:.1} s; {next}",
                w.what
            ));
        }
    }
    let Liveness::Stalled { for_ms } =
        liveness(&config.metrics.snapshot(), unix_ms(), config.stall_after)
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
        "pipeline {pipeline}: no checkpoint completed for {} s (the bound is {} s: two rounds of checkpoint interval + timeout){blocked}; {next}",
        for_ms / 1000,
        config.stall_after.as_secs()
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn waiting_until(bound: Instant) -> Waiting {
        Waiting {
            pipeline: "p".into(),
            what: format!("{bound:?}"),
            since: bound - Duration::from_secs(1),
            bound,
        }
    }

    #[test]
    fn a_wait_is_overdue_only_past_its_bound_and_the_grace() {
        let now = Instant::now();
        let early = waiting_until(now - GRACE - Duration::from_secs(2));
        let late = waiting_until(now - GRACE - Duration::from_secs(1));
        let in_grace = waiting_until(now - GRACE + Duration::from_millis(100));
        assert_eq!(
            overdue([&in_grace, &late, &early], now).map(|w| &w.what),
            Some(&early.what),
            "the one furthest past its bound"
        );
        assert!(overdue([&in_grace], now).is_none());
        assert!(overdue([], now).is_none());
    }

    #[test]
    fn a_watch_is_listed_while_it_lasts_and_only_for_its_pipeline() {
        let pipeline = "watchdog-test-listed";
        let watch = watch(pipeline, "flush to broker b".into(), Instant::now());
        assert_eq!(waiting(pipeline).len(), 1);
        assert!(waiting(pipeline)[0].starts_with("flush to broker b (for "));
        assert!(waiting("another-pipeline").is_empty());
        drop(watch);
        assert!(waiting(pipeline).is_empty());
    }

    fn start(pipeline: &str, stall_after: Duration) -> (Watchdog, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let metrics = Arc::new(PipelineMetrics::default());
        metrics.started_unix_ms.store(unix_ms(), Ordering::Relaxed);
        let dog = Watchdog::start(WatchdogConfig {
            pipeline: pipeline.into(),
            metrics,
            stall_after,
            on_stall: Box::new(move |line| {
                let _ = tx.lock().unwrap_or_else(|e| e.into_inner()).send(line);
            }),
        })
        .expect("watchdog thread");
        (dog, rx)
    }

    #[test]
    fn fires_once_with_a_line_naming_the_overdue_wait() {
        let pipeline = "watchdog-test-overdue";
        let (_dog, fired) = start(pipeline, Duration::from_secs(3600));
        let stuck = Instant::now() - GRACE - Duration::from_secs(1);
        let _watch = watch(
            pipeline,
            "send_offsets_to_transaction to Kafka at b:9092".into(),
            stuck,
        );
        let line = fired.recv_timeout(Duration::from_secs(30)).expect("fired");
        assert!(
            line.starts_with(&format!(
                "pipeline {pipeline}: send_offsets_to_transaction to Kafka at b:9092 has not returned"
            )),
            "{line}"
        );
        assert!(
            line.ends_with("resumes from the last committed checkpoint"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        assert!(
            fired.recv_timeout(Duration::from_millis(600)).is_err(),
            "fires once"
        );
    }

    #[test]
    fn fires_when_no_checkpoint_completes_for_the_stall_bound() {
        let pipeline = "watchdog-test-no-checkpoint";
        let (_dog, fired) = start(pipeline, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        let line = fired.recv_timeout(Duration::from_secs(30)).expect("fired");
        assert!(
            line.starts_with(&format!("pipeline {pipeline}: no checkpoint completed for")),
            "{line}"
        );
    }

    #[test]
    fn a_wait_within_its_bound_and_a_pipeline_making_progress_do_not_fire() {
        let pipeline = "watchdog-test-quiet";
        let (dog, fired) = start(pipeline, Duration::from_secs(3600));
        let _watch = watch(pipeline, "flush".into(), Instant::now());
        assert!(fired.recv_timeout(Duration::from_millis(600)).is_err());
        drop(dog);
    }
}
