//! Issue 50, item 1: one lifecycle per pipeline, against the real broker. Before, a
//! delete raced by starts (4 threads POSTing `start` in a loop, the DELETE 0.3 s in)
//! answered 500 (`Directory not empty`) while the pipeline kept running, or 204 while a
//! worker started after it went on committing under the deleted name (and the next
//! create of the name adopted that worker); the directory stayed on disk; starts
//! answered 500 `cannot write a file of the server`. Now every change of a pipeline
//! holds its lifecycle lock, and a delete is recorded before it acts: after its 204
//! nothing of the pipeline runs or lies on disk, and every start answers 200 (before
//! the delete), 409 (during) or 404 (after), never 5xx.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weir_tests::kafka::{self, Input};
use weir_tests::server::{Answer, TestServer, write_config};

const WORKERS: &str = "[workers]\nrestart_backoff = \"100ms\"\nmax_backoff = \"200ms\"\nrestart_limit = 2\nstop_timeout = \"60s\"\n";
/// Delete-while-starting rounds, each re-creating the same name.
const ROUNDS: usize = 5;
/// Threads POSTing `start` while the delete runs.
const STARTERS: usize = 4;
/// When the delete comes, after the starts began.
const DELETE_AFTER: Duration = Duration::from_millis(300);
/// How long the starts go on after the delete answered.
const STARTS_AFTER: Duration = Duration::from_millis(500);

/// The worker processes of pipeline `name` (their command line names its spec).
fn workers_of(name: &str) -> Vec<u32> {
    let spec = format!("pipelines/{name}/spec.toml");
    weir_tests::pids_where(|cmdline| cmdline.contains(&spec))
}

/// Waits (bounded) for a worker of `name` to run, so that a later "none runs" means
/// something.
fn wait_for_a_worker(name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while workers_of(name).is_empty() {
        assert!(Instant::now() < deadline, "no worker of {name} ever ran");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `STARTERS` threads POST `start` until `STARTS_AFTER` past the delete, which comes
/// `DELETE_AFTER` after they began; the delete's answer and every start's.
fn delete_raced_by_starts(s: &TestServer, token: &str, name: &str) -> (Answer, Vec<Answer>) {
    let done = AtomicBool::new(false);
    let start_path = format!("/v1/pipelines/{name}/start");
    std::thread::scope(|scope| {
        let starters: Vec<_> = (0..STARTERS)
            .map(|_| {
                scope.spawn(|| {
                    let mut answers = Vec::new();
                    while !done.load(Ordering::SeqCst) {
                        answers.push(s.post_empty(&start_path, Some(token)));
                    }
                    answers
                })
            })
            .collect();
        std::thread::sleep(DELETE_AFTER);
        let deleted = s.delete(&format!("/v1/pipelines/{name}"), Some(token));
        std::thread::sleep(STARTS_AFTER);
        done.store(true, Ordering::SeqCst);
        let starts = starters
            .into_iter()
            .flat_map(|t| t.join().expect("a starter thread"))
            .collect();
        (deleted, starts)
    })
}

fn assert_nothing_left(s: &TestServer, token: &str, name: &str, dir: &Path, round: usize) {
    let status = s.get(&format!("/v1/pipelines/{name}"), Some(token));
    assert_eq!(status.status, 404, "round {round}: {status:?}");
    assert_eq!(
        workers_of(name),
        Vec::<u32>::new(),
        "round {round}: a worker runs for the deleted pipeline"
    );
    assert!(!dir.exists(), "round {round}: {} is left", dir.display());
}

/// A server in `dir` on the broker's plaintext listener, a token of its tenant `a`, and
/// the spec of pipeline `name`: `a.{name}-in` (2 partitions, 200 records) through
/// `uppercase` into `a.{name}-out`, unbounded, 200 ms checkpoints.
fn server_and_spec(dir: &Path, name: &str) -> (TestServer, String, Value) {
    write_config(
        dir,
        &format!("{WORKERS}[kafka]\nbootstrap = \"{}\"\n", kafka::bootstrap()),
    );
    let s = TestServer::start(dir);
    let a = s.tenant("a", json!({}));
    let upper = s.push(&a, "uppercase");
    let (input, output) = (format!("a.{name}-in"), format!("a.{name}-out"));
    kafka::create_topic(&input, 2);
    kafka::create_topic(&output, 1);
    let records: Vec<Input> = (0..200)
        .map(|i| Input {
            partition: i % 2,
            key: format!("k{i}"),
            value: format!("v{i}"),
            timestamp: 1_700_000_000_000 + i64::from(i),
        })
        .collect();
    kafka::produce(&input, &records);
    let spec = json!({
        "name": name,
        "checkpoint": {"interval": "200ms"},
        "sources": [{"type": "kafka", "topic": input, "start": "earliest"}],
        "steps": [{"type": "map", "name": "main", "module": upper}],
        "sinks": [{"type": "kafka", "topic": output}],
    });
    (s, a, spec)
}

#[test]
fn a_delete_raced_by_starts_leaves_nothing_running_and_nothing_on_disk() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("race");
    let (s, a, spec) = server_and_spec(dir.path(), &name);
    let input = format!("a.{name}-in");
    let pipeline_dir = dir.path().join("data/tenants/a/pipelines").join(&name);
    for round in 0..ROUNDS {
        let created = s.post("/v1/pipelines", Some(&a), &json!({"spec": spec}));
        assert_eq!(created.status, 201, "round {round}: {created:?}");
        assert!(
            pipeline_dir.exists(),
            "round {round}: no pipeline directory"
        );
        wait_for_a_worker(&name);
        let (deleted, starts) = delete_raced_by_starts(&s, &a, &name);
        assert_eq!(deleted.status, 204, "round {round}: {deleted:?}");
        let wrong: Vec<&Answer> = starts
            .iter()
            .filter(|s| !matches!(s.status, 200 | 404 | 409))
            .collect();
        assert!(wrong.is_empty(), "round {round}: starts answered {wrong:?}");
        assert!(
            starts.iter().any(|s| s.status == 404),
            "round {round}: no start came after the delete"
        );
        assert_nothing_left(&s, &a, &name, &pipeline_dir, round);
    }
    // No worker of a deleted incarnation came back to commit under the pipeline's group.
    assert_eq!(
        kafka::committed_offsets(&format!("a.{name}"), &input),
        BTreeMap::new()
    );
}

/// A server killed with -9 in the middle of a delete: the delete was recorded first
/// (`desired: deleted`), so the next start finishes it; before, the pipeline was left
/// `running` and desired `stopped` with nothing running, and a start revived it.
#[test]
fn a_delete_cut_short_by_a_server_kill_is_finished_at_the_next_start() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("cut");
    let (s, a, spec) = server_and_spec(dir.path(), &name);
    let created = s.post("/v1/pipelines", Some(&a), &json!({"spec": spec}));
    assert_eq!(created.status, 201, "{created:?}");
    wait_for_a_worker(&name);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let delete = || s.delete(&format!("/v1/pipelines/{name}"), Some(&a));
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(delete));
        });
        // The delete's Kafka reset (fencing the commit unit, deleting its topics and
        // group) takes seconds: it is caught under way.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status = s.get(&format!("/v1/pipelines/{name}"), Some(&a));
            assert_eq!(
                status.status, 200,
                "the delete ended before it was seen: {status:?}"
            );
            if status.body["desired"] == "deleted" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the delete never began: {status:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let started = s.post_empty(&format!("/v1/pipelines/{name}/start"), Some(&a));
        assert_eq!(started.status, 409, "a start while deleting: {started:?}");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(s.pid() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("SIGKILL");
    });
    drop(s);
    let s = TestServer::start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(120);
    while s.get(&format!("/v1/pipelines/{name}"), Some(&a)).status != 404 {
        assert!(Instant::now() < deadline, "the delete was never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pipeline_dir = dir.path().join("data/tenants/a/pipelines").join(&name);
    assert_nothing_left(&s, &a, &name, &pipeline_dir, 0);
}
