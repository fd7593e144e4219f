//! The supervisor driven in process with a stand-in for `weir run`: a shell script that
//! fails at once as worker 1/2 and otherwise runs until signalled.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;
use crate::cluster::Worker;
use crate::server::catalog::PipelineRow;
use crate::server::namespace::{PipelineDir, TenantNamespace};
use crate::server::wire::{Desired, Quotas};
use crate::server::worker::workers;

const FAKE_WEIR: &str = "#!/bin/sh
case \"$*\" in
  *'--worker 1/2'*) echo 'weir: error: worker one broke' >&2; exit 1 ;;
esac
exec sleep 30
";

struct Setup {
    _dir: tempfile::TempDir,
    supervisor: Supervisor,
    catalog: Arc<Catalog>,
    metrics: Arc<ServerMetrics>,
    launches: Vec<Launch>,
}

fn setup(count: u32) -> Setup {
    setup_with(count, |_| FAKE_WEIR.to_owned())
}

/// `setup` with the stand-in's script made by `script` from the pipeline directory.
fn setup_with(count: u32, script: impl FnOnce(&PipelineDir) -> String) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let program = dir.path().join("fake-weir");
    let pipeline_dir = TenantNamespace::new(dir.path(), "t").pipeline_dir("p");
    std::fs::write(&program, script(&pipeline_dir)).expect("script");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let catalog = Arc::new(Catalog::open(&dir.path().join("catalog.sqlite")).expect("catalog"));
    catalog
        .put_tenant("t", &Quotas::default(), None, false)
        .expect("tenant");
    let row = PipelineRow {
        tenant: "t".into(),
        name: "p".into(),
        spec: serde_json::json!({"name": "p"}),
        modules: Default::default(),
        desired: Desired::Running,
        state: PipelineState::Starting,
        restarts: 0,
        last_error: None,
        savepoint: None,
        created_at: crate::server::catalog::now(),
        workers: count,
    };
    assert_eq!(
        catalog.add_pipeline(&row, u32::MAX).expect("pipeline"),
        crate::server::catalog::AddOutcome::Added
    );
    std::fs::create_dir_all(pipeline_dir.root()).expect("pipeline dir");
    let launches = workers(count)
        .map(|worker| Launch {
            program: program.clone(),
            dir: pipeline_dir.clone(),
            worker,
            env: vec![],
            from_checkpoint: None,
            disk_quota: None,
            wall: None,
        })
        .collect();
    let config = WorkersConfig {
        restart_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        restart_limit: 2,
        stop_timeout: Duration::from_secs(10),
        ..WorkersConfig::default()
    };
    let metrics = Arc::new(ServerMetrics::default());
    Setup {
        supervisor: Supervisor::new(config, catalog.clone(), metrics.clone()),
        _dir: dir,
        catalog,
        metrics,
        launches,
    }
}

fn row(catalog: &Catalog) -> PipelineRow {
    catalog.pipeline("t", "p").expect("query").expect("row")
}

/// Waits (bounded) until `done` holds of the pipeline's workers.
fn wait_for(s: &Setup, what: &str, done: impl Fn(&[WorkerView]) -> bool) -> Vec<WorkerView> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let views = s.supervisor.workers("t", "p").expect("supervised");
        if done(&views) {
            return views;
        }
        assert!(Instant::now() < deadline, "{what}: {views:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

#[test]
fn a_failing_worker_is_restarted_alone_and_fails_the_pipeline_naming_it() {
    let s = setup(2);
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "worker 1 failed", |v| {
        v[1].state == PipelineState::Failed && v[0].pid.is_some()
    });
    // Worker 1 failed 3 times (restart limit 2) and counted its own restarts; worker 0
    // was never disturbed.
    assert_eq!(views[1].restarts, 3, "{views:?}");
    assert_eq!(views[0].restarts, 0, "{views:?}");
    assert_eq!(views[0].state, PipelineState::Running);
    let first_pid = views[0].pid.expect("pid");
    let r = row(&s.catalog);
    assert_eq!(r.state, PipelineState::Failed);
    assert_eq!(r.restarts, 3);
    assert_eq!(
        r.last_error.as_deref(),
        Some("worker 1/2: worker one broke (failed 3 times in a row; restart limit 2)")
    );
    assert!(
        s.metrics
            .encode(true)
            .contains("weir_server_worker_restarts_total{tenant=\"t\"} 3")
    );
    assert!(
        !s.metrics.encode(false).contains("tenant="),
        "no tenant id without the admin token"
    );
    assert!(s.supervisor.is_supervised("t", "p"));
    assert!(!s.supervisor.is_fully_supervised("t", "p"));
    assert!(
        Path::new(&s.launches[1].dir.log(Worker::new(1, 2).expect("w"))).is_file(),
        "worker 1 has a log of its own"
    );

    // A start brings back only the worker that failed; worker 0 keeps its process.
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start again");
    let views = wait_for(&s, "worker 1 failed again", |v| {
        v[1].state == PipelineState::Failed && v[1].restarts == 3
    });
    assert_eq!(views[0].pid, Some(first_pid), "worker 0 kept running");

    // A stop ends every worker and records the pipeline stopped.
    s.supervisor.stop("t", "p");
    assert!(!alive(first_pid), "worker 0 stopped");
    assert_eq!(row(&s.catalog).state, PipelineState::Stopped);
    assert!(!s.supervisor.is_supervised("t", "p"));
}

#[test]
fn a_worker_that_recorded_its_failure_has_ended_before_its_thread_returns() {
    // A worker's thread records `failed` and then returns. Whoever saw the state (the
    // tenant, through the API) may start the worker again at once: the pipeline is no
    // longer fully supervised, and a start starts the worker, waiting for the old
    // thread (CI once saw the pipeline still fully supervised in between).
    let s = setup(1);
    let key = Supervisor::key("t", "p");
    let shared = Arc::new(Shared::new(
        key.clone(),
        &s.launches,
        s.catalog.clone(),
        s.metrics.clone(),
    ));
    let (release, held) = std::sync::mpsc::channel::<()>();
    let returning = std::thread::spawn(move || {
        let _ = held.recv();
    });
    shared.update(0, false, |v| v.state = PipelineState::Running);
    s.supervisor.running().insert(
        key,
        Supervised {
            shared: shared.clone(),
            dir: s.launches[0].dir.clone(),
            threads: vec![returning],
        },
    );
    assert!(s.supervisor.is_fully_supervised("t", "p"), "running");
    shared.update(0, true, |v| v.state = PipelineState::Failed);
    assert!(!s.supervisor.is_fully_supervised("t", "p"), "failed");
    assert!(!s.supervisor.is_supervised("t", "p"));

    let releasing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let _ = release.send(());
    });
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "started again", |v| v[0].pid.is_some());
    assert_eq!(views[0].state, PipelineState::Running);
    releasing.join().expect("releaser");
    s.supervisor.kill("t", "p");
}

#[test]
fn every_worker_runs_before_the_pipeline_does_and_a_stop_ends_them_all() {
    // Workers of three never take the stand-in's failing branch.
    let s = setup(3);
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "all running", |v| v.iter().all(|w| w.pid.is_some()));
    assert_eq!(row(&s.catalog).state, PipelineState::Running);
    assert!(s.supervisor.is_fully_supervised("t", "p"));
    let pids: Vec<u32> = views.iter().filter_map(|v| v.pid).collect();
    assert_eq!(pids.len(), 3);
    s.supervisor.stop("t", "p");
    for pid in pids {
        assert!(!alive(pid), "worker {pid} stopped");
    }
    let r = row(&s.catalog);
    assert_eq!(r.state, PipelineState::Stopped);
    assert_eq!(r.restarts, 0);
    assert_eq!(r.savepoint, None, "no worker checkpointed");
}

#[test]
fn a_worker_that_completes_checkpoints_between_failures_is_restarted_past_the_limit() {
    // Worker 1/2 completes one more checkpoint on every run, then fails: it makes
    // progress, so each failure starts a new row and the restart limit (2) never trips.
    let s = setup_with(2, |dir| {
        let root = dir.worker_checkpoints(Worker::new(1, 2).expect("worker"));
        let root = root.display();
        format!(
            "#!/bin/sh
case \"$*\" in
  *'--worker 1/2'*)
    n=$(ls -d {root}/chk-* 2>/dev/null | wc -l)
    chk={root}/$(printf 'chk-%010d' $((n + 1)))
    mkdir -p \"$chk\" && : > \"$chk/_metadata\"
    echo 'weir: error: broke after a checkpoint' >&2; exit 1 ;;
esac
exec sleep 30
"
        )
    });
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "worker 1 restarted past its limit", |v| {
        assert_ne!(v[1].state, PipelineState::Failed, "{v:?}");
        v[1].restarts >= 6
    });
    assert_eq!(views[0].restarts, 0, "{views:?}");
    s.supervisor.stop("t", "p");
}

#[test]
fn a_pipeline_over_its_disk_quota_has_every_worker_killed_and_fails() {
    // Worker 0/2 writes 8 KiB into its checkpoints; the quota covers the whole
    // pipeline directory (4 KiB), so both workers go.
    let mut s = setup_with(2, |dir| {
        let root = dir.worker_checkpoints(Worker::new(0, 2).expect("worker"));
        let root = root.display();
        format!(
            "#!/bin/sh
case \"$*\" in
  *'--worker 0/2'*) mkdir -p {root} && head -c 8192 /dev/zero > {root}/blob ;;
esac
exec sleep 30
"
        )
    });
    for launch in &mut s.launches {
        launch.disk_quota = Some(4096);
    }
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "both running", |v| v.iter().all(|w| w.pid.is_some()));
    let pids: Vec<u32> = views.iter().filter_map(|v| v.pid).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while row(&s.catalog).state != PipelineState::Failed {
        assert!(
            Instant::now() < deadline,
            "not failed: {:?}",
            row(&s.catalog)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = row(&s.catalog);
    assert!(
        r.last_error
            .as_deref()
            .is_some_and(|e| e.contains("over the tenant's quota of 4096")),
        "{r:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&pid| alive(pid)) {
        assert!(Instant::now() < deadline, "a worker outlived the quota");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_worker_log_past_its_bound_is_rotated_while_the_worker_runs() {
    // The worker writes 3 MiB to stderr, then 'after' once the rotated copy is there and
    // the log is back under its bound (the copy appears before the log is emptied).
    const BOUND: u64 = 1 << 20;
    let s = setup_with(1, |dir| {
        let log = dir.log(Worker::SINGLE);
        let rotated = crate::server::worker_log::rotated(&log);
        format!(
            "#!/bin/sh
head -c 3145728 /dev/zero | tr '\\0' x >&2
while [ ! -e {rotated} ] || [ $(wc -c < {log}) -gt {BOUND} ]; do sleep 0.05; done
echo after >&2
exec sleep 30
",
            rotated = rotated.display(),
            log = log.display(),
        )
    });
    let config = WorkersConfig {
        log_max_bytes: BOUND,
        ..WorkersConfig::default()
    };
    let supervisor = Supervisor::new(config, s.catalog.clone(), s.metrics.clone());
    supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let log = s.launches[0].dir.log(Worker::SINGLE);
    let rotated = crate::server::worker_log::rotated(&log);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .ends_with("after\n")
    {
        assert!(Instant::now() < deadline, "the log was not rotated");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A check that lands while the 3 MiB are still being written rotates a part of
    // them (and the rest later, if it passes the bound again).
    let copied = std::fs::metadata(&rotated).expect("rotated copy").len();
    assert!(copied > BOUND && copied <= 3 << 20, "{copied} bytes copied");
    let left = std::fs::metadata(&log).expect("log").len();
    assert!(left <= BOUND + 6, "{left} bytes left in the log");
    supervisor.kill("t", "p");
}

#[test]
fn no_worker_starts_while_its_pipeline_is_being_deleted() {
    let s = setup(1);
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "running", |v| v.iter().all(|w| w.pid.is_some()));
    let pid = views[0].pid.expect("pid");
    assert!(s.supervisor.retire("t", "p"), "the first delete");
    assert!(!s.supervisor.retire("t", "p"), "a second delete at once");
    assert!(!alive(pid), "killed");
    let refused = s.supervisor.start("t", "p", s.launches.clone());
    assert_eq!(refused, Err("the pipeline is being deleted".to_owned()));
    s.supervisor.retired("t", "p");
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("a start after the delete ended");
    s.supervisor.kill("t", "p");
}

#[test]
fn a_kill_during_a_stop_ends_the_workers_before_it_returns() {
    // The worker ignores SIGTERM, so the stop waits for it (up to `stop_timeout`).
    let s = setup_with(1, |_| "#!/bin/sh\ntrap '' TERM\nexec sleep 30\n".to_owned());
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let views = wait_for(&s, "running", |v| v.iter().all(|w| w.pid.is_some()));
    let pid = views[0].pid.expect("pid");
    std::thread::scope(|scope| {
        let stopping = scope.spawn(|| s.supervisor.stop("t", "p"));
        std::thread::sleep(Duration::from_millis(300));
        assert!(alive(pid), "the stop waits for the worker");
        s.supervisor.kill("t", "p");
        assert!(!alive(pid), "the kill returned with the worker still alive");
        let _ = stopping.join();
    });
}

#[test]
fn a_kill_ends_the_workers_of_a_stop_and_of_a_start_made_during_it() {
    // A start during a stop begins new workers while the old ones still stop; a kill
    // (a delete) must end both generations. Before, the stopping ones were missed.
    let s = setup_with(1, |_| "#!/bin/sh\ntrap '' TERM\nexec sleep 30\n".to_owned());
    s.supervisor
        .start("t", "p", s.launches.clone())
        .expect("start");
    let old = wait_for(&s, "running", |v| v.iter().all(|w| w.pid.is_some()))[0]
        .pid
        .expect("pid");
    std::thread::scope(|scope| {
        let stopping = scope.spawn(|| s.supervisor.stop("t", "p"));
        std::thread::sleep(Duration::from_millis(300));
        s.supervisor
            .start("t", "p", s.launches.clone())
            .expect("a start during the stop");
        let new = wait_for(&s, "restarted", |v| {
            v.iter().all(|w| w.pid.is_some_and(|p| p != old))
        })[0]
            .pid
            .expect("pid");
        s.supervisor.kill("t", "p");
        assert!(!alive(new), "the new worker outlived the kill");
        assert!(!alive(old), "the stopping worker outlived the kill");
        let _ = stopping.join();
    });
}

/// A request signals no process by the pid a worker's view holds: that worker may have
/// been reaped by its thread a moment before, and its pid be another process's by now.
/// Here the view holds a stranger's pid, as it would in that moment: a stop and a kill
/// leave the stranger alone (the workers' own threads signal their children).
#[test]
fn a_request_never_signals_a_pid_that_may_be_reused() {
    let s = setup(1);
    let mut stranger = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let mut view = WorkerView::new(s.launches[0].worker);
    view.pid = Some(stranger.id());
    let shared = Shared {
        key: ("t".into(), "p".into()),
        request: AtomicU8::new(Request::None as u8),
        views: Mutex::new(vec![view]),
        over_quota: Mutex::new(None),
        measured_at: Mutex::new(Instant::now()),
        catalog: s.catalog.clone(),
        metrics: s.metrics.clone(),
    };
    shared.ask(Request::Stop);
    shared.ask(Request::Kill);
    std::thread::sleep(Duration::from_millis(200));
    let untouched = matches!(stranger.try_wait(), Ok(None));
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(untouched, "the stranger was signalled");
}
