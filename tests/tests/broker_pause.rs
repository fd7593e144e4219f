//! Liveness against a broker that stalls (issue 32): the test run's broker is paused
//! (SIGSTOP, `kafka.sh pause`) while an exactly-once pipeline has records and a
//! checkpoint in flight, round after round, at random moments, for less than the
//! checkpoint timeout and for more. Each round Weir must either ride through (complete a
//! checkpoint soon after the broker answers again), or fail the run within the bound
//! docs/src/guarantees.md states: restart it in its process (`pipeline::run`, up to 3
//! times in a row), or exit with one line that names the broker and says a restart
//! resumes from the last committed checkpoint; a process that does none of these in
//! time is hung, and fails the test. A pause longer than a whole round (interval +
//! timeout) must end in such a failure: no round can commit without the broker. The pauses take turns: shorter than
//! the timeout, longer than a round, and longer than the bound itself, where a wait that
//! lasts until the broker answers again shows. After the last round, the input stops
//! growing, the pipeline catches up and is stopped, and the output, read read_committed,
//! holds every input record exactly once.
//!
//! Its own test binary, with one test: it stops the broker every other test uses, and
//! `cargo test` runs the binaries one after another. `WEIR_PAUSE_ROUNDS` sets the
//! number of rounds (default 8; the issue's acceptance run used 20); `WEIR_PAUSE_SEED`
//! replays a run's moments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use weir_tests::kafka;
use weir_tests::{guest, multiset, multiset_diff, repo_root, toml_path, weir, write_file};

const INTERVAL: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(3);
/// The watchdog's grace (`weir::watchdog::GRACE`).
const GRACE: Duration = Duration::from_secs(10);
/// What docs/src/guarantees.md promises: a worker whose broker stalls rides through or
/// fails within checkpoint interval + checkpoint timeout + the watchdog's grace, counted
/// from the stall's start (the round it stalls fails by its deadline, or the watchdog
/// ends a call that outlives it) or, for a round begun after the broker answers again
/// whose client is still stuck (librdkafka's `send_offsets_to_transaction` was seen so),
/// from the stall's end.
const STALL_BOUND: Duration = INTERVAL.saturating_add(TIMEOUT).saturating_add(GRACE);
/// Room for a loaded 2-core machine to schedule the processes involved.
const SLACK: Duration = Duration::from_secs(5);
/// How long a (re)started run may take to complete its first checkpoint.
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long the pipeline may take to catch up with the input after the last round.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(120);
const PARTITIONS: i32 = 3;
/// Input records per second (the producer's pace while the broker answers).
const INPUT_RATE: u64 = 400;

/// `kafka.sh pause|resume`.
fn broker(action: &str) {
    let status = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/kafka/kafka.sh"))
        .arg(action)
        .status()
        .expect("run kafka.sh");
    assert!(status.success(), "kafka.sh {action} failed");
}

/// Resumes the broker when dropped, so that a failing test never leaves the shared
/// broker stopped for the binaries after it.
struct ResumeOnDrop;

impl Drop for ResumeOnDrop {
    fn drop(&mut self) {
        broker("resume");
    }
}

/// Produces unique records to the input topic at about `INPUT_RATE` until stopped, in
/// batches of a quarter second. A batch the broker does not acknowledge within
/// `BATCH_ACK` (it is paused) is left to its producer, which is then replaced: a
/// librdkafka producer was seen to stay stuck after a pause, and the input must keep
/// flowing whenever the broker answers. What reached the topic is read back at the end
/// (`kafka::read_all`), so an unacknowledged batch needs no bookkeeping.
struct Input {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// How long a batch of input waits for its acknowledgements.
const BATCH_ACK: Duration = Duration::from_secs(2);

impl Input {
    fn start(topic: String) -> Input {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || produce_until(&topic, &flag));
        Input { stop, thread }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("input thread");
    }
}

fn input_producer() -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka::bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("log_level", "0")
        .create()
        .expect("input producer")
}

fn produce_until(topic: &str, stop: &AtomicBool) {
    let mut producer = input_producer();
    let batch = INPUT_RATE / 4;
    let mut next = 0_u64;
    while !stop.load(Ordering::SeqCst) {
        for i in next..next + batch {
            let (key, value) = (format!("k{i}"), format!("paused record {i}"));
            let record = BaseRecord::to(topic)
                .partition((i % PARTITIONS as u64) as i32)
                .key(&key)
                .payload(&value);
            match producer.send(record) {
                Ok(()) | Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {}
                Err((e, _)) => panic!("produce to {topic}: {e}"),
            }
        }
        next += batch;
        if producer.flush(BATCH_ACK).is_err() {
            producer = input_producer();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn spec(dir: &Path, name: &str, input: &str, output: &str) -> PathBuf {
    let text = format!(
        r#"
name = "{name}"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "{interval}ms"
timeout = "{timeout}ms"

[[sources]]
type = "kafka"
topics = ["{input}"]
start = "earliest"

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "kafka"
topic = "{output}"
"#,
        state = toml_path(&dir.join("state")),
        interval = INTERVAL.as_millis(),
        timeout = TIMEOUT.as_millis(),
        upper = toml_path(&guest("uppercase")),
    );
    write_file(dir, &format!("{name}.toml"), &text)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One `weir run` of the spec, its stderr in a file (a pipe could fill and block it).
struct Run {
    child: Child,
    stderr: PathBuf,
    status: PathBuf,
}

impl Run {
    fn start(spec: &Path, dir: &Path, attempt: usize) -> Run {
        let stderr = dir.join(format!("attempt-{attempt}.stderr"));
        let status = dir.join(format!("attempt-{attempt}.status.json"));
        let child = weir()
            .args(["run", "--quiet", "--status-file"])
            .arg(&status)
            .arg(spec)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn weir");
        Run {
            child,
            stderr,
            status,
        }
    }

    /// (checkpoints completed, Unix ms of the last one) as the status file says.
    fn checkpoints(&self) -> (u64, u64) {
        let Ok(text) = std::fs::read_to_string(&self.status) else {
            return (0, 0);
        };
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
            return (0, 0);
        };
        let field = |name: &str| json[name].as_u64().unwrap_or(0);
        (
            field("checkpoints_completed"),
            field("last_checkpoint_unix_ms"),
        )
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// How many times the run restarted itself in its process (`pipeline::run`).
    fn restarts(&self) -> usize {
        self.stderr().matches(RESTART_LINE).count()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (bounded) for a checkpoint completed after Unix ms `since` (0: the run's
    /// first): `Err` with its stderr if it exits first; panics if it takes too long.
    fn wait_checkpoint_after(&mut self, since: u64) -> Result<(), String> {
        let deadline = Instant::now() + START_LIMIT;
        while {
            let (completed, last_ms) = self.checkpoints();
            completed == 0 || last_ms <= since
        } {
            if let Some(status) = self.exited() {
                return Err(format!("exit {status}: {}", self.stderr()));
            }
            assert!(
                Instant::now() < deadline,
                "no first checkpoint within {START_LIMIT:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs attempt after attempt of the spec, from `run` on, until one completes a
/// checkpoint after Unix ms `since` (a run that restarted itself in its process must be
/// up again before the next round). A start may fail while the broker recovers from a
/// pause (KRaft fences a broker that missed its heartbeats, and its metadata lists no
/// broker until it registers again): each such failure must say so in one line naming
/// the broker, and at most `START_FAILURES` may come in a row.
fn running(mut run: Run, spec: &Path, dir: &Path, attempts: &mut usize, since: u64) -> Run {
    const START_FAILURES: usize = 5;
    let mut since = since;
    for _ in 0..START_FAILURES {
        let Err(failure) = run.wait_checkpoint_after(since) else {
            return run;
        };
        since = 0;
        let line = failure
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        assert!(
            line.starts_with("weir: error: ") && line.contains(&kafka::bootstrap()),
            "a start that fails must say why in one line naming the broker: {failure}"
        );
        std::thread::sleep(Duration::from_secs(2));
        *attempts += 1;
        run = Run::start(spec, dir, *attempts);
    }
    panic!("{START_FAILURES} starts in a row failed: {}", run.stderr());
}

/// What `pipeline::run` logs when it restarts a run that failed on a stalled broker.
const RESTART_LINE: &str = "restarting it from its last committed checkpoint";

/// How a round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    RodeThrough,
    /// The run failed in bound and restarted itself in its process.
    Restarted,
    Failed,
}

/// Watches `run` after a pause from `paused` to `resumed` (`restarts` its in-process
/// restarts before): it must complete a checkpoint after `resumed`, restart itself, or
/// exit with the stall line, by the bound (see `STALL_BOUND`); a process that does none
/// of these is hung.
fn outcome(run: &mut Run, paused: Instant, resumed: (Instant, u64), restarts: usize) -> Outcome {
    let (resumed, resumed_ms) = resumed;
    let deadline = (paused + STALL_BOUND).max(resumed + STALL_BOUND) + SLACK;
    loop {
        if run.restarts() > restarts {
            assert!(
                Instant::now() <= deadline,
                "weir restarted {:?} after the pause began, past the bound {STALL_BOUND:?}",
                paused.elapsed()
            );
            return Outcome::Restarted;
        }
        if let Some(status) = run.exited() {
            let stderr = run.stderr();
            let line = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            assert!(
                !status.success(),
                "weir ended with success mid-run: {stderr}"
            );
            assert!(
                Instant::now() <= deadline,
                "weir failed {:?} after the pause began and {:?} after it ended, past the bound {STALL_BOUND:?}: {stderr}",
                paused.elapsed(),
                resumed.elapsed()
            );
            assert!(
                line.starts_with("weir: error: ")
                    && line.contains(&kafka::bootstrap())
                    && line.contains("resumes from the last committed checkpoint"),
                "the last line must say what stalled, on which broker, and what happens next: {line:?}\n{stderr}"
            );
            return Outcome::Failed;
        }
        let (completed, last_ms) = run.checkpoints();
        if completed > 0 && last_ms > resumed_ms {
            return Outcome::RodeThrough;
        }
        if Instant::now() > deadline {
            let stderr = run.stderr();
            panic!(
                "weir neither completed a checkpoint nor failed within {STALL_BOUND:?} of the broker's pause ({:?} after it began, {:?} after it ended): hung? stderr: {stderr}",
                paused.elapsed(),
                resumed.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rounds() -> usize {
    std::env::var("WEIR_PAUSE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8)
}

fn seed() -> u64 {
    std::env::var("WEIR_PAUSE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(unix_ms)
}

/// Round `i`'s pause, by turns: shorter than half the checkpoint timeout (a round in
/// flight can still commit in time); longer than a whole round (interval + timeout),
/// and shorter than the stall bound; and longer than the bound and its slack, where a
/// wait that lasts until the broker answers again shows: `(longer than a round?,
/// pause)`.
fn pause_of_round(i: usize, rng: &mut StdRng) -> (bool, Duration) {
    let mut ms = |range: std::ops::Range<u64>| Duration::from_millis(rng.random_range(range));
    let round = (INTERVAL + TIMEOUT).as_millis() as u64;
    match i % 3 {
        0 => (false, ms(300..TIMEOUT.as_millis() as u64 / 2)),
        1 => (true, ms(round + 1_000..round + 4_000)),
        _ => {
            let past = (STALL_BOUND + SLACK).as_millis() as u64;
            (true, ms(past + 2_000..past + 8_000))
        }
    }
}

/// One round: a run (restarted if the last round failed it) is paused at a random
/// moment, for `pause`, and must ride through or fail by the bound.
fn round(run: &mut Run, rng: &mut StdRng, pause: Duration) -> Outcome {
    std::thread::sleep(Duration::from_millis(rng.random_range(0..1_000)));
    let _resume = ResumeOnDrop;
    let restarts = run.restarts();
    broker("pause");
    let paused = Instant::now();
    std::thread::sleep(pause);
    broker("resume");
    outcome(run, paused, (Instant::now(), unix_ms()), restarts)
}

#[test]
fn a_paused_broker_is_ridden_through_or_fails_the_run_in_bound_and_the_output_stays_exact() {
    let _exclusive = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let (input, output) = (
        kafka::unique_name("pause-in"),
        kafka::unique_name("pause-out"),
    );
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let spec = spec(dir.path(), &kafka::unique_name("pause"), &input, &output);
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let producer = Input::start(input.clone());
    let mut attempts = 0;
    let mut run = Run::start(&spec, dir.path(), attempts);
    let mut outcomes: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    let mut restarted_at = 0;
    for i in 0..rounds() {
        run = running(run, &spec, dir.path(), &mut attempts, restarted_at);
        let (long, pause) = pause_of_round(i, &mut rng);
        let outcome = round(&mut run, &mut rng, pause);
        eprintln!("round {i} (seed {seed}): paused {pause:?}: {outcome:?}");
        let tally = outcomes
            .entry(if long { "long" } else { "short" })
            .or_default();
        match outcome {
            Outcome::RodeThrough => tally.0 += 1,
            Outcome::Restarted => tally.1 += 1,
            Outcome::Failed => tally.2 += 1,
        }
        assert!(
            !(long && outcome == Outcome::RodeThrough),
            "round {i} (seed {seed}): a pause of {pause:?}, longer than interval + timeout, cannot be ridden through: a round committed without the broker?"
        );
        restarted_at = if outcome == Outcome::Restarted {
            unix_ms()
        } else {
            0
        };
        if outcome == Outcome::Failed {
            attempts += 1;
            run = Run::start(&spec, dir.path(), attempts);
        }
    }
    eprintln!("outcomes (rode through, restarted, failed) by pause: {outcomes:?}");
    producer.finish();
    let produced = kafka::committed_values(&input);
    let expected = multiset(produced.iter().map(|v| v.to_uppercase()));
    let deadline = Instant::now() + CATCH_UP_LIMIT;
    while kafka::committed_values(&output).len() < produced.len() {
        assert!(
            run.exited().is_none(),
            "weir exited while catching up: {}",
            run.stderr()
        );
        assert!(
            Instant::now() < deadline,
            "no catch-up within {CATCH_UP_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    run.kill();
    let actual = multiset(kafka::committed_values(&output));
    let diff = multiset_diff(&expected, &actual, 5);
    assert!(
        diff.is_empty(),
        "seed {seed}: {} records produced, {} committed; (record, expected, actual): {diff:?}",
        produced.len(),
        actual.values().sum::<usize>()
    );
}
