//! Issue 51: an exactly-once pipeline against a replicated cluster (`cluster.sh`: 3
//! KRaft nodes, replication 3, min ISR 2, transaction.version 2) rides through what
//! operators live with: a node killed at random moments, a rolling restart. It must
//! not exit, and its committed output must be exactly its input, uppercased. With two
//! nodes down (writes unavailable) it fails in bound, the brokers named, and a rerun
//! once they are back is exact. And on the single broker, deterministically: a commit
//! that the broker requires aborted restarts the run inside its process.
//!
//! The pipeline reads a paced Kafka topic (`rate`), so that it runs while the nodes
//! are disrupted, with a busy loop beside it; every disruption waits for an observed state (a node serving again,
//! the replicas caught up), never a guessed delay, and every wait is bounded.

use std::fs::File;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use weir_tests::kafka::{self, Input};
use weir_tests::{multiset, multiset_diff, weir};

const PARTITIONS: i32 = 4;
/// Bound on one run: the paced input takes about RECORDS / RATE seconds.
const RUN_LIMIT: Duration = Duration::from_secs(240);

/// The input, produced to the cluster before the run: `count` JSON records.
fn input(count: u64) -> Vec<Input> {
    (0..count)
        .map(|i| Input {
            partition: (i % PARTITIONS as u64) as i32,
            key: format!("k{i}"),
            value: format!(r#"{{"id":{i},"text":"record {i} of the failover run"}}"#),
            timestamp: 1_700_000_000_000 + i as i64,
        })
        .collect()
}

/// A pipeline over the cluster: `records` records produced to a fresh topic, read at
/// `rate` records/s by an uppercase map into a fresh output topic, exactly-once,
/// checkpoints every 300 ms, `checkpoint_timeout` per round.
struct ClusterRun {
    label: &'static str,
    dir: tempfile::TempDir,
    spec: std::path::PathBuf,
    records: Vec<Input>,
    output: String,
}

impl ClusterRun {
    fn new(label: &'static str, records: u64, rate: u64, checkpoint_timeout: &str) -> Self {
        let cluster = kafka::cluster_bootstrap();
        let dir = tempfile::tempdir().expect("tempdir");
        let (in_topic, output) = (kafka::unique_name(label), kafka::unique_name(label));
        let records = input(records);
        kafka::on(&cluster, || {
            kafka::create_topic(&in_topic, PARTITIONS);
            kafka::create_topic(&output, PARTITIONS);
            kafka::produce(&in_topic, &records);
        });
        let source = format!(
            "[[sources]]\ntype = \"kafka\"\nbootstrap = \"{cluster}\"\ntopic = \"{in_topic}\"\n\
             start = \"earliest\"\nbounded = true\nrate = {rate}\n"
        );
        let spec = kafka::uppercase_spec(
            dir.path(),
            &kafka::unique_name(label),
            &dir.path().join("state"),
            &format!("interval = \"300ms\"\ntimeout = \"{checkpoint_timeout}\""),
            &source,
            &output,
            &format!("bootstrap = \"{cluster}\""),
        );
        ClusterRun {
            label,
            dir,
            spec,
            records,
            output,
        }
    }

    /// Starts `weir run` on the spec, its stderr to a file of the run's directory.
    fn start(&self) -> Child {
        let stderr = File::create(self.stderr_path()).expect("stderr file");
        weir()
            .args(["run", "--quiet"])
            .arg(&self.spec)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn weir")
    }

    fn stderr_path(&self) -> std::path::PathBuf {
        self.dir.path().join("stderr.txt")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.stderr_path()).unwrap_or_default()
    }

    /// Waits (bounded) until the run decided its first transaction: it is past its
    /// start-up (its own topics created, its transactions initialised), which is not
    /// what these tests disrupt.
    fn await_first_output(&self, child: &mut Child) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while output_end(&self.output).unwrap_or(0) == 0 {
            assert!(
                running(child),
                "ended before its first output: {}",
                self.stderr()
            );
            assert!(
                Instant::now() < deadline,
                "no output within 60 s: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The committed output must be exactly the input's values, uppercased.
    fn assert_exact(&self) {
        let expected = multiset(self.records.iter().map(|r| r.value.to_uppercase()));
        let actual = kafka::on(&kafka::cluster_bootstrap(), || {
            multiset(kafka::committed_values(&self.output))
        });
        assert_eq!(
            multiset_diff(&expected, &actual, 10),
            vec![],
            "output differs from the input uppercased (value, expected, actual)"
        );
    }
}

/// The stable end of the cluster's topic `output` (see `OutputGauge`).
fn output_end(output: &str) -> Option<i64> {
    let cluster = kafka::cluster_bootstrap();
    kafka::on(&cluster, || {
        kafka::stable_end_offsets_sum(output, Duration::from_secs(2))
    })
}

/// How long the committed output stood still, at most, while a run was disrupted: a
/// thread looks at the output's stable end (which each decided transaction moves)
/// every [`GAUGE_EVERY`]. For the report the issue asks of each disruption; timing
/// is never asserted (a shared machine).
struct OutputGauge {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Duration>,
}

const GAUGE_EVERY: Duration = Duration::from_millis(250);

impl OutputGauge {
    fn start(output: &str) -> Self {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let output = output.to_owned();
        let thread = std::thread::spawn(move || {
            let (mut last_end, mut moved, mut longest) = (0, Instant::now(), Duration::ZERO);
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(GAUGE_EVERY)
            {
                match output_end(&output) {
                    Some(end) if end > last_end => {
                        longest = longest.max(moved.elapsed());
                        (last_end, moved) = (end, Instant::now());
                    }
                    _ => {}
                }
            }
            longest.max(moved.elapsed())
        });
        OutputGauge { stop, thread }
    }

    /// The longest time the output stood still, up to now.
    fn stop(self) -> Duration {
        drop(self.stop);
        self.thread.join().expect("the gauge thread")
    }
}

/// Waits (bounded by `limit`) for `child` to exit.
fn wait(child: &mut Child, limit: Duration) -> ExitStatus {
    weir_tests::wait_until(child, Instant::now() + limit, "weir").0
}

fn running(child: &mut Child) -> bool {
    child.try_wait().expect("try_wait").is_none()
}

/// Brings node `node` back and waits until every partition has its replicas again.
fn restore(node: &str) {
    kafka::cluster_tool(&["start", node]);
    kafka::cluster_tool(&["wait-isr"]);
}

/// Runs `run` while `disrupt` acts on the cluster, then asserts that weir never
/// exited early and that its output is exact.
fn ridden_through(run: &ClusterRun, disrupt: impl FnOnce(&mut Child)) {
    let busy = Busy::start(BUSY_LOOPS);
    let mut child = run.start();
    run.await_first_output(&mut child);
    let gauge = OutputGauge::start(&run.output);
    disrupt(&mut child);
    let status = wait(&mut child, RUN_LIMIT);
    drop(busy);
    let restarts = run
        .stderr()
        .matches("restarting it from its last committed checkpoint")
        .count();
    eprintln!(
        "{}: exits before the end: {}; restarts in its process: {restarts}; output stood still at most {:.1} s; {BUSY_LOOPS} busy loop(s) beside it",
        run.label,
        u8::from(!status.success()),
        gauge.stop().as_secs_f64()
    );
    assert!(
        status.success(),
        "the pipeline exited ({status}) where the cluster stayed available: {}",
        run.stderr()
    );
    run.assert_exact();
}

/// Busy loops kept beside a run that rides a failover through: issue 51 asks for that
/// on a busy machine, where a failover takes longer than the brokers' own timeouts say
/// (one loop is half of CI's two cores).
const BUSY_LOOPS: usize = 1;

/// Threads that spin until dropped.
struct Busy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn start(loops: usize) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..loops)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Kill -9 of one node at a random moment, three times, each back after 3-8 s: the
/// transaction coordinator, the group coordinator and partition leaders move while
/// checkpoints commit every 300 ms.
#[test]
fn a_node_killed_at_random_moments_is_ridden_through_exactly() {
    let _one_at_a_time = kafka::exclusive();
    let seed: u64 = std::env::var("WEIR_FAILOVER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("failover kills: seed {seed} (WEIR_FAILOVER_SEED={seed} draws the same moments)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let run = ClusterRun::new("failover-kill", 20_000, 400, "60s");
    ridden_through(&run, |child| {
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(rng.random_range(1_000..4_000)));
            if !running(child) {
                break;
            }
            let node = rng.random_range(1..=3).to_string();
            kafka::cluster_tool(&["kill", &node]);
            std::thread::sleep(Duration::from_millis(rng.random_range(3_000..8_000)));
            restore(&node);
        }
    });
}

/// A rolling restart: every node in turn stopped (SIGTERM, a controlled shutdown),
/// started again, and caught up before the next.
#[test]
fn a_rolling_restart_of_every_node_is_ridden_through_exactly() {
    let _one_at_a_time = kafka::exclusive();
    let run = ClusterRun::new("failover-roll", 20_000, 400, "60s");
    ridden_through(&run, |child| {
        for node in ["1", "2", "3"] {
            if !running(child) {
                break;
            }
            kafka::cluster_tool(&["stop", node]);
            restore(node);
        }
    });
}

/// Two of three nodes down: no in-sync quorum for writes, no controller quorum. The run
/// must fail in bound (its checkpoint timeout, 10 s here, then the restarts in a row in
/// the process, which the watchdog ends if no checkpoint completes for two rounds), naming
/// the brokers that did not answer and ending with a `weir: error:` line; once the
/// nodes are back, a rerun commits exactly the input.
#[test]
fn two_nodes_down_fail_the_run_in_bound_and_a_rerun_is_exact() {
    let _one_at_a_time = kafka::exclusive();
    let run = ClusterRun::new("failover-quorum", 6_000, 400, "10s");
    let mut child = run.start();
    run.await_first_output(&mut child);
    kafka::cluster_tool(&["kill", "2"]);
    kafka::cluster_tool(&["kill", "3"]);
    let down = Instant::now();
    let status = wait(&mut child, Duration::from_secs(180));
    let failed_after = down.elapsed();
    kafka::cluster_tool(&["start", "2"]);
    restore("3");
    let stderr = run.stderr();
    let last = stderr.lines().last().unwrap_or("");
    // 1: the round failed in bound; 75: the watchdog ended a call stuck past it.
    assert!(matches!(status.code(), Some(1 | 75)), "{status}: {stderr}");
    // The last line is the run's error, or the watchdog's (the restart's start-up
    // outlived two rounds); the brokers are named in the failure the run met first.
    assert!(
        last.starts_with("weir: error: ")
            && last.contains("resumes from the last committed checkpoint")
            && stderr.contains(&kafka::cluster_bootstrap()),
        "a last line saying what happens next, the brokers named: {stderr}"
    );
    eprintln!("two nodes down: the run failed after {failed_after:?}");
    let mut rerun = run.start();
    let status = wait(&mut rerun, RUN_LIMIT);
    assert!(status.success(), "the rerun failed: {}", run.stderr());
    run.assert_exact();
}

/// The in-process restart itself, on the single broker, deterministic: the 3rd commit
/// fails as a failover's `NOT_COORDINATOR` made it fail (the broker requires the
/// transaction to be aborted; `WEIR_FAULT=abort-transaction:3`). The run must restart
/// from its last committed checkpoint inside the process, exit 0, say so once, and
/// commit exactly its input. Without the restart it exited 1 there.
#[test]
fn an_aborted_transaction_restarts_the_run_in_its_process_exactly() {
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: u64 = 6_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let (in_topic, output) = (
        kafka::unique_name("abort-in"),
        kafka::unique_name("abort-out"),
    );
    kafka::create_topic(&in_topic, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let records = input(RECORDS);
    kafka::produce(&in_topic, &records);
    let source = format!(
        "[[sources]]\ntype = \"kafka\"\ntopic = \"{in_topic}\"\nstart = \"earliest\"\n\
         bounded = true\nrate = 3000\n"
    );
    let spec = kafka::uppercase_spec(
        dir.path(),
        &kafka::unique_name("abort"),
        &dir.path().join("state"),
        r#"interval = "200ms""#,
        &source,
        &output,
        "",
    );
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec)
        .env("WEIR_FAULT", "abort-transaction:3")
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert_eq!(
        stderr
            .matches("restarting it from its last committed checkpoint")
            .count(),
        1,
        "{stderr}"
    );
    let expected = multiset(records.iter().map(|r| r.value.to_uppercase()));
    let actual = multiset(kafka::committed_values(&output));
    assert_eq!(multiset_diff(&expected, &actual, 10), vec![]);
}
