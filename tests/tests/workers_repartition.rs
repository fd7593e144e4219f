//! A keyed pipeline as 3 worker processes on one machine, its shuffle by key going
//! through the Kafka repartition topic (issue 12, item 2), against the real broker
//! (`KAFKA_BOOTSTRAP`) and the local S3-compatible server (`scripts/s3/s3.sh`):
//! split-words map + unwindowed word-count aggregate, Kafka in (6 partitions) and out
//! (exactly-once), checkpoints in the bucket. Random workers are SIGKILLed 10 times
//! and restarted, one of them with its local state directory deleted (it can only
//! restore from the bucket). The committed output, read_committed, must be what an
//! uninterrupted run commits: per word, the counts 1, 2, 3, ... up to the word's exact
//! number of occurrences, in that order, nothing missing or repeated
//! (`batch_size = 1`: an unwindowed aggregate emits once per update call, so a batch
//! holding a word twice would skip a count). The same input run uninterrupted as one
//! process (in-process shuffle) commits exactly that too. Workers run until stopped:
//! once the output is complete each stops on SIGTERM with exit 143. A worker that fails
//! on its own (a transaction commit timing out on a loaded broker fails it into
//! recovery) is restarted as an orchestrator would, at most 5 times, each printed. The repartition topic Weir
//! created has a partition per key group and unlimited retention; one that exists with
//! another partition count is refused with one line before anything is written.
//!
//! Without the S3 server's environment the test fails, saying how to start it, unless
//! `WEIR_SKIP_S3=1` asks to skip it (the convention of `object_store_checkpoints.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_tests::kafka::{self, Input};
use weir_tests::{
    guest, refusal_line, s3_bucket, start_worker, take_stderr, toml_path, wait_until, weir,
    write_file,
};

const PARTITIONS: i32 = 6;
const WORKERS: u32 = 3;
/// Input lines per partition, and distinct words per line (out of `VOCABULARY`).
const LINES_PER_PARTITION: usize = 250;
const WORDS_PER_LINE: usize = 4;
const VOCABULARY: usize = 40;
const KILLS: usize = 10;
/// Most restarts of workers that failed on their own (not killed by the test).
const MAX_FAILURES: usize = 5;
/// Bound on the whole scenario.
const WAIT_LIMIT: Duration = Duration::from_secs(420);

/// Line `n` of partition `p`: `WORDS_PER_LINE` distinct words of the vocabulary.
fn input() -> (Vec<Input>, BTreeMap<String, u64>) {
    let mut records = Vec::new();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for n in 0..LINES_PER_PARTITION {
        for p in 0..PARTITIONS {
            let start = (n * 7 + p as usize * 3) % VOCABULARY;
            let words: Vec<String> = (0..WORDS_PER_LINE)
                .map(|k| format!("w{:02}", (start + k * 5) % VOCABULARY))
                .collect();
            for w in &words {
                *totals.entry(w.clone()).or_default() += 1;
            }
            records.push(Input {
                partition: p,
                key: format!("p{p}"),
                value: words.join(" "),
                timestamp: 1_700_000_000_000 + n as i64,
            });
        }
    }
    (records, totals)
}

/// The word-count spec: `checkpoints` a path or an `s3://` URL; `rate`: input lines
/// per second each worker reads; `bounded`: stop at the input's end (one process only:
/// a worker with a repartition topic runs until stopped).
fn spec(
    dir: &Path,
    name: &str,
    (input, output): (&str, &str),
    checkpoints: &str,
    rate: u64,
    bounded: bool,
) -> PathBuf {
    let text = format!(
        r#"
name = "{name}"
parallelism = 2
max_parallelism = 32
batch_size = 1
state_dir = {state}

[checkpoint]
interval = "300ms"
dir = "{checkpoints}"

[[sources]]
type = "kafka"
topic = "{input}"
start = "earliest"
bounded = {bounded}
rate = {rate}

[[steps]]
type = "map"
module = {split}

[[steps]]
type = "aggregate"
name = "count"
module = {count}

[[sinks]]
type = "kafka"
topic = "{output}"

[dead_letter]
path = {dead}
"#,
        state = toml_path(&dir.join("state")),
        split = toml_path(&guest("split_words")),
        count = toml_path(&guest("word_count")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, &format!("{name}.toml"), &text)
}

/// The worker processes of a run; any still running when it is dropped (a failed
/// assertion) is SIGKILLed and reaped, so no worker outlives its test.
struct Workers {
    spec: PathBuf,
    children: Vec<Child>,
    /// Restarts of workers that failed on their own (see `restart_failed`).
    failures: Vec<String>,
}

impl Workers {
    fn start(spec: &Path) -> Workers {
        Workers {
            spec: spec.to_owned(),
            children: (0..WORKERS)
                .map(|i| start_worker(spec, &format!("{i}/{WORKERS}"), None))
                .collect(),
            failures: Vec::new(),
        }
    }

    fn restart(&mut self, i: usize) {
        self.children[i] = start_worker(&self.spec, &format!("{i}/{WORKERS}"), None);
    }

    /// A worker that ended on its own failed (a commit that timed out on a loaded
    /// broker fails the worker into recovery): restart it, as an orchestrator would,
    /// at most `MAX_FAILURES` times in all; a worker that exits 0 is a bug.
    fn restart_failed(&mut self) {
        for i in 0..self.children.len() {
            let Some(status) = self.children[i].try_wait().expect("try_wait") else {
                continue;
            };
            let err = take_stderr(&mut self.children[i]);
            assert!(
                !status.success() && !err.contains("panicked"),
                "worker {i} ended ({status}): {err}"
            );
            self.failures.push(format!("worker {i}: {err}"));
            assert!(
                self.failures.len() <= MAX_FAILURES,
                "workers failed on their own too often: {:#?}",
                self.failures
            );
            self.restart(i);
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Per word, the counts committed to `output` (read_committed), in output order.
fn committed_counts(output: &str) -> BTreeMap<String, Vec<u64>> {
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, value) in kafka::read_all(output, "read_committed") {
        let json: serde_json::Value =
            serde_json::from_str(&value).unwrap_or_else(|e| panic!("output record {value:?}: {e}"));
        assert_eq!(json["word"].as_str(), Some(key.as_str()), "{value}");
        let count = json["count"].as_u64().unwrap_or_else(|| panic!("{value}"));
        counts.entry(key).or_default().push(count);
    }
    counts
}

/// What an uninterrupted run commits: per word, 1..=its occurrences (see the module
/// docs). Asserts it word by word, naming the first difference.
fn assert_exact(counts: &BTreeMap<String, Vec<u64>>, totals: &BTreeMap<String, u64>) {
    assert_eq!(
        counts.keys().collect::<Vec<_>>(),
        totals.keys().collect::<Vec<_>>(),
        "the words"
    );
    for (word, total) in totals {
        let seen = &counts[word];
        let expected: Vec<u64> = (1..=*total).collect();
        assert!(
            *seen == expected,
            "word {word}: {} counts for {total} occurrences, first difference at index {:?} \
             ({:?})",
            seen.len(),
            seen.iter().zip(&expected).position(|(a, b)| a != b),
            seen.iter().take(12).collect::<Vec<_>>()
        );
    }
}

fn total_records(counts: &BTreeMap<String, Vec<u64>>) -> usize {
    counts.values().map(Vec::len).sum()
}

#[test]
fn three_workers_count_words_exactly_once_through_the_repartition_topic_while_killed() {
    let Some(bucket) = s3_bucket() else {
        return;
    };
    let _one_at_a_time = kafka::exclusive();
    let (records, totals) = input();
    let expected_records: u64 = totals.values().sum();
    let input_topic = kafka::unique_name("repartition-in");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::produce(&input_topic, &records);
    let deadline = Instant::now() + WAIT_LIMIT;

    // The reference: one process, in-process shuffle, bounded, uninterrupted.
    let reference = tempfile::tempdir().expect("tempdir");
    let single_out = kafka::unique_name("repartition-single-out");
    kafka::create_topic(&single_out, PARTITIONS);
    let single = spec(
        reference.path(),
        &kafka::unique_name("wc-single"),
        (&input_topic, &single_out),
        &toml_path(&reference.path().join("checkpoints")).replace('"', ""),
        0,
        true,
    );
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&single)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "the one-process run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_exact(&committed_counts(&single_out), &totals);

    // The workers, checkpointing into the bucket.
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("wc-workers");
    let output = kafka::unique_name("repartition-out");
    kafka::create_topic(&output, PARTITIONS);
    let checkpoints = format!("s3://{bucket}/{}", kafka::unique_name("repartition"));
    // Each worker reads its 2 input partitions at 40 lines/s: ~12 s of input
    // uninterrupted, so the kills land while it is being read.
    let spec = spec(
        dir.path(),
        &name,
        (&input_topic, &output),
        &checkpoints,
        40,
        false,
    );
    let mut workers = Workers::start(&spec);
    let mut rng = StdRng::seed_from_u64(12);
    let mut kills = 0;
    let mut restored_from_bucket = None;
    while kills < KILLS {
        assert!(Instant::now() < deadline, "{kills} kills in time");
        std::thread::sleep(Duration::from_millis(rng.random_range(700..2_500)));
        workers.restart_failed();
        let i = rng.random_range(0..WORKERS) as usize;
        workers.children[i].kill().expect("SIGKILL");
        workers.children[i].wait().expect("reap");
        kills += 1;
        if kills == KILLS / 2 {
            // As on a new machine: the restart can only restore from the bucket.
            let local = dir.path().join(format!("state/worker-{i}-of-{WORKERS}"));
            std::fs::remove_dir_all(&local).expect("delete the local state");
            restored_from_bucket = Some(i);
        }
        workers.restart(i);
    }
    eprintln!(
        "{kills} SIGKILLs; worker {restored_from_bucket:?} restarted with an empty local state dir"
    );

    // Every worker runs until stopped: wait (bounded) until the committed output holds
    // as many records as the input has words, then stop them all with SIGTERM.
    loop {
        let seen = total_records(&committed_counts(&output)) as u64;
        if seen >= expected_records {
            break;
        }
        workers.restart_failed();
        assert!(
            Instant::now() < deadline,
            "the workers committed {seen} of {expected_records} counts in time"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for (i, w) in workers.children.iter_mut().enumerate() {
        kill(Pid::from_raw(w.id() as i32), Signal::SIGTERM).expect("SIGTERM");
        let (status, err) = wait_until(w, deadline, &format!("worker {i} after SIGTERM"));
        assert_eq!(status.code(), Some(143), "worker {i}: {err}");
    }
    eprintln!(
        "{} restarts of workers that failed on their own: {:?}",
        workers.failures.len(),
        workers.failures
    );
    assert_exact(&committed_counts(&output), &totals);

    // The shuffle went through the topic: one partition per key group, created with
    // unlimited retention, and each worker committed the offsets of its own key
    // groups' partitions, with its marker.
    let topic = format!("weir.{name}-count-repartition");
    let described = kafka::kafka_tool(&[
        "topics",
        "--describe",
        "--topic",
        &topic,
        "--bootstrap-server",
        &kafka::bootstrap(),
    ]);
    for says in [
        "PartitionCount: 32",
        "retention.ms=-1",
        "retention.bytes=-1",
    ] {
        assert!(described.contains(says), "{says}: {described}");
    }
    let offsets = kafka::committed_offsets(&format!("weir.{name}"), &topic);
    assert_eq!(
        offsets.len(),
        32,
        "every key group's partition: {offsets:?}"
    );
    for i in 0..WORKERS {
        let worker = weir::cluster::Worker::new(i, WORKERS).expect("worker");
        for p in weir::connector::kafka::repartition::partitions_of(worker, 32) {
            let (_, marker) = &offsets[&p];
            assert!(
                marker.starts_with(&format!("weir:{name}:{i}:checkpoint=")),
                "partition {p} is worker {i}'s: {marker}"
            );
        }
    }
}

#[test]
fn a_repartition_topic_with_another_partition_count_is_refused_with_one_line() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("wc-wrong-topic");
    let input_topic = kafka::unique_name("repartition-wrong-in");
    let output = kafka::unique_name("repartition-wrong-out");
    kafka::create_topic(&input_topic, 2);
    kafka::create_topic(&output, 2);
    let topic = format!("weir.{name}-count-repartition");
    kafka::create_topic(&topic, 3);
    let checkpoints = toml_path(&dir.path().join("checkpoints")).replace('"', "");
    let spec = spec(
        dir.path(),
        &name,
        (&input_topic, &output),
        &checkpoints,
        0,
        false,
    );
    let out = weir()
        .args(["run", "--quiet", "--worker", "0/2"])
        .arg(&spec)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let line = refusal_line(&out);
    assert!(
        line.contains(&format!(
            "repartition topic {topic} has 3 partitions, but this pipeline has 32 key groups (max_parallelism) and needs one partition per key group"
        )),
        "{line}"
    );
    assert_eq!(kafka::end_offsets_sum(&output), 0, "nothing written");
}
