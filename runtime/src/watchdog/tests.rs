//! The watchdog's registry, its overdue and stall checks, and its pauses.

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
        overdue([&in_grace, &late, &early], now, &Pauses::default()).map(|(w, _)| &w.what),
        Some(&early.what),
        "the one furthest past its bound"
    );
    assert!(overdue([&in_grace], now, &Pauses::default()).is_none());
    assert!(overdue([], now, &Pauses::default()).is_none());
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

/// A watcher of `pipeline`, started at `started_ms`, driven by the test's own clock.
fn watcher(pipeline: &str, started_ms: u64, stall_after: Duration) -> Watcher {
    let metrics = Arc::new(PipelineMetrics::default());
    metrics.started_unix_ms.store(started_ms, Ordering::Relaxed);
    Watcher::new(WatchdogConfig {
        pipeline: pipeline.into(),
        metrics,
        stall_after,
        on_stall: Box::new(|_| {}),
    })
}

/// Looks on time, every `LOOK_EVERY` from `from` (`from_ms`) until `until`: the time
/// of the look that fired and its line, if one did.
fn look_until(
    w: &mut Watcher,
    from: Instant,
    from_ms: u64,
    until: Duration,
) -> Option<(Duration, String)> {
    let mut at = Duration::ZERO;
    while at <= until {
        let now = from + at;
        let line = w.look(now, now, from_ms + at.as_millis() as u64);
        if let Some(line) = line {
            return Some((at, line));
        }
        at += LOOK_EVERY;
    }
    None
}

#[test]
fn a_wait_outlived_by_a_pause_of_the_process_gets_its_bound_again() {
    // SIGSTOP for 25 s during a 2 s call: once the process runs again the call has its
    // 2 s + GRACE anew (its own error names the cause), not a line saying it hung.
    let pipeline = "watchdog-test-paused-wait";
    let (t0, ms0) = (Instant::now(), unix_ms());
    let mut w = watcher(pipeline, ms0, Duration::from_secs(3600));
    let _watch = watch(
        pipeline,
        "adding the offsets".into(),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(w.look(t0, t0, ms0), None);
    let stopped = Duration::from_secs(25);
    let resumed = t0 + stopped;
    assert_eq!(
        w.look(t0 + LOOK_EVERY, resumed, ms0 + 25_000),
        None,
        "the first look after the pause"
    );
    let (at, line) = look_until(&mut w, resumed, ms0 + 25_000, Duration::from_secs(20))
        .expect("fires once the wait outlives its bound again");
    let paused = stopped - LOOK_EVERY;
    let due = Duration::from_secs(2) + paused + GRACE - stopped;
    assert!(
        at > due && at <= due + LOOK_EVERY,
        "fired {at:?} after the pause"
    );
    assert!(
        line.contains("adding the offsets has not returned 10 s past its bound of 2.0 s (not counting the 24 s this process did not run)"),
        "{line}"
    );
}

#[test]
fn a_wait_begun_after_a_pause_owes_it_nothing() {
    // The pause ended 5 s ago; the wait begins now, with its bound now.
    let pipeline = "watchdog-test-wait-after-pause";
    let ago = Duration::from_secs(30);
    let (t0, ms0) = (Instant::now() - ago, unix_ms() - ago.as_millis() as u64);
    let mut w = watcher(pipeline, ms0, Duration::from_secs(3600));
    let resumed = t0 + Duration::from_secs(25);
    assert_eq!(w.look(t0, resumed, ms0 + 25_000), None);
    let (now, now_ms) = (Instant::now(), unix_ms());
    let _watch = watch(pipeline, "flush".into(), now);
    let (at, line) = look_until(&mut w, now, now_ms, Duration::from_secs(20)).expect("fires");
    assert!(
        at > GRACE && at <= GRACE + LOOK_EVERY,
        "fired {at:?} after the wait began: {line}"
    );
    assert!(!line.contains("not counting"), "{line}");
}

#[test]
fn a_pause_of_the_process_is_not_counted_against_the_stall_bound() {
    let pipeline = "watchdog-test-paused-stall";
    let stall_after = Duration::from_secs(30);
    let (t0, ms0) = (Instant::now(), unix_ms());
    let mut w = watcher(pipeline, ms0, stall_after);
    assert_eq!(w.look(t0, t0, ms0), None);
    let stopped = Duration::from_secs(25);
    let resumed = t0 + stopped;
    assert_eq!(w.look(t0 + LOOK_EVERY, resumed, ms0 + 25_000), None);
    let (at, line) = look_until(&mut w, resumed, ms0 + 25_000, Duration::from_secs(40))
        .expect("stalls after the bound of running time");
    let due = stall_after + (stopped - LOOK_EVERY) - stopped;
    assert!(
        at > due && at <= due + LOOK_EVERY,
        "fired {at:?} after the pause"
    );
    assert!(
        line.contains(
            "no checkpoint completed for 30 s (not counting the 24 s this process did not run)"
        ),
        "{line}"
    );
}
