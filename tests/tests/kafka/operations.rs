//! Exactly-once under ordinary operations (issue 6), against the real broker of the
//! test run (`KAFKA_BOOTSTRAP`): a partition added to one of two input topics and a
//! parallelism change between runs; a consumer group shared with another pipeline,
//! deleted group offsets and a lost progress marker; per-key order of an unwindowed
//! aggregate's updates across checkpoints; a second instance on one state dir; a
//! transaction outlived by SIGSTOP; a partition idle across a restart keeps holding
//! event time where it held it. Every run is a real `weir run` killed with SIGKILL
//! from outside, and the output is checked read_committed against what it must be.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir::storage::CheckpointStorage;
use weir_tests::kafka::{self, Input};
use weir_tests::{guest, multiset, multiset_diff, take_stderr, toml_path, weir, write_file};

const PARTITIONS: i32 = 3;
/// Kafka timestamp of record 0 of a partition; record i is at `BASE_TIME + i` ms.
const BASE_TIME: i64 = 1_700_000_000_000;
/// How long a bounded run (or a refusal) may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------
// Specs
// ---------------------------------------------------------------------------------

/// One pipeline: Kafka `topics` -> `steps` -> the Kafka topic `output` (exactly once),
/// written by `write` as a bounded or unbounded spec of the same pipeline.
#[derive(Clone)]
struct Spec {
    name: String,
    state: PathBuf,
    topics: Vec<String>,
    /// `group = ...` on the source; `None`: the default `weir.<name>`.
    group: Option<String>,
    /// Records/s the source reads (0: as fast as it can).
    rate: u64,
    parallelism: usize,
    /// The keys of the `[checkpoint]` table.
    checkpoint: String,
    /// The `[[steps]]` tables.
    steps: String,
    output: String,
    /// Extra keys of the Kafka sink.
    sink_extra: String,
}

impl Spec {
    /// `topics` -> WASM `uppercase` -> `output`, parallelism 2, checkpoints every 200 ms,
    /// state in `dir/<name>`, reading `rate` records/s.
    fn uppercase(dir: &Path, name: &str, topics: &[&str], output: &str, rate: u64) -> Spec {
        Spec {
            name: name.to_owned(),
            state: dir.join(name),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            group: None,
            rate,
            parallelism: 2,
            checkpoint: r#"interval = "200ms""#.to_owned(),
            steps: format!(
                "[[steps]]\ntype = \"map\"\nmodule = {}\n",
                toml_path(&guest("uppercase"))
            ),
            output: output.to_owned(),
            sink_extra: String::new(),
        }
    }

    /// The consumer group holding the marker.
    fn group(&self) -> String {
        self.group
            .clone()
            .unwrap_or_else(|| format!("weir.{}", self.name))
    }

    /// The pipeline's progress topic (default transactional prefix).
    fn progress_topic(&self) -> String {
        format!("weir.{}.progress", self.name)
    }

    /// The checkpoint storage (the default, under the state dir).
    fn checkpoints(&self) -> PathBuf {
        self.state.join("checkpoints")
    }

    /// Writes `<name>-<bounded|unbounded>-p<P>.toml` in `dir`.
    fn write(&self, dir: &Path, bounded: bool) -> PathBuf {
        let topics: Vec<String> = self.topics.iter().map(|t| format!("{t:?}")).collect();
        let group = self
            .group
            .as_ref()
            .map_or(String::new(), |g| format!("group = {g:?}\n"));
        let text = format!(
            r#"
name = "{name}"
parallelism = {parallelism}
state_dir = {state}

[checkpoint]
{checkpoint}

[[sources]]
type = "kafka"
topics = [{topics}]
{group}start = "earliest"
bounded = {bounded}
rate = {rate}

{steps}
[[sinks]]
type = "kafka"
topic = "{output}"
{sink_extra}
"#,
            name = self.name,
            parallelism = self.parallelism,
            state = toml_path(&self.state),
            checkpoint = self.checkpoint,
            topics = topics.join(", "),
            rate = self.rate,
            steps = self.steps,
            output = self.output,
            sink_extra = self.sink_extra,
        );
        let kind = if bounded { "bounded" } else { "unbounded" };
        write_file(
            dir,
            &format!("{}-{kind}-p{}.toml", self.name, self.parallelism),
            &text,
        )
    }
}

// ---------------------------------------------------------------------------------
// Input and expected output
// ---------------------------------------------------------------------------------

/// `count` records for partition `partition` of a topic tagged `tag`, numbered from
/// `from`: unique lowercase values, increasing timestamps.
fn records(tag: &str, partition: i32, from: u64, count: u64) -> Vec<Input> {
    (from..from + count)
        .map(|i| Input {
            partition,
            key: format!("{tag}-{partition}-{i}"),
            value: format!("{tag} record {partition}-{i}"),
            timestamp: BASE_TIME + i as i64,
        })
        .collect()
}

/// `per_partition` records in each of partitions `0..partitions`.
fn spread(tag: &str, partitions: i32, per_partition: u64) -> Vec<Input> {
    (0..partitions)
        .flat_map(|p| records(tag, p, 0, per_partition))
        .collect()
}

/// What an uppercase pipeline must commit for `inputs`: each value uppercased, once.
fn uppercased(inputs: &[&[Input]]) -> BTreeMap<String, usize> {
    multiset(
        inputs
            .iter()
            .flat_map(|rs| rs.iter().map(|r| r.value.to_uppercase())),
    )
}

/// Compares `topic`'s read_committed values with `expected`: `Ok` if equal, else a line
/// with the totals, missing and extra counts and a sample of the differences.
fn check_exactly_once(topic: &str, expected: &BTreeMap<String, usize>) -> Result<(), String> {
    let actual = multiset(kafka::committed_values(topic));
    let all = multiset_diff(expected, &actual, usize::MAX);
    if all.is_empty() {
        return Ok(());
    }
    let missing: usize = all.iter().map(|(_, e, a)| e.saturating_sub(*a)).sum();
    let extra: usize = all.iter().map(|(_, e, a)| a.saturating_sub(*e)).sum();
    let duplicated = all.iter().filter(|(_, e, a)| *e > 0 && a > e).count();
    Err(format!(
        "{topic}: expected {} records, read_committed {}: {missing} missing, {extra} extra \
         ({duplicated} expected records committed more than once); (record, expected, actual): {:?}",
        expected.values().sum::<usize>(),
        actual.values().sum::<usize>(),
        &all[..all.len().min(5)]
    ))
}

fn assert_exactly_once(topic: &str, expected: &BTreeMap<String, usize>) {
    if let Err(e) = check_exactly_once(topic, expected) {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------
// Running weir
// ---------------------------------------------------------------------------------

fn start(spec: &Path) -> Child {
    weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .env("KAFKA_BOOTSTRAP", kafka::bootstrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir")
}

/// Waits up to `limit` for `child` to exit; `None` if it is still running.
fn wait_for_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGKILL, then reap.
fn sigkill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `spec` to its end (at most `RUN_LIMIT`): its exit status and stderr.
fn run(spec: &Path) -> (ExitStatus, String) {
    let mut child = start(spec);
    let Some(status) = wait_for_exit(&mut child, RUN_LIMIT) else {
        sigkill(&mut child);
        panic!(
            "{} did not finish within {RUN_LIMIT:?}: {}",
            spec.display(),
            take_stderr(&mut child)
        );
    };
    (status, take_stderr(&mut child))
}

/// Runs `spec` to its end and asserts it succeeded.
fn run_ok(spec: &Path) {
    let (status, err) = run(spec);
    assert!(
        status.success(),
        "{} failed ({status}): {err}",
        spec.display()
    );
}

/// Asserts a run was refused: exit code 1 and exactly one line on stderr; returns it.
fn refusal(status: ExitStatus, err: &str) -> String {
    assert_eq!(
        status.code(),
        Some(1),
        "the run must be refused with exit code 1 ({status}), stderr: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line, got: {err}");
    err.trim().to_owned()
}

/// The input records `group` has committed for `topics` (sum of the committed
/// offsets: the input is not transactional, so offsets are record counts), and the
/// metadata strings they carry.
fn committed_progress(group: &str, topics: &[String]) -> (i64, Vec<String>) {
    let mut sum = 0;
    let mut metadata = Vec::new();
    for topic in topics {
        for (offset, meta) in kafka::committed_offsets(group, topic).into_values() {
            sum += offset;
            metadata.push(meta);
        }
    }
    (sum, metadata)
}

/// Waits until `spec`'s group has committed at least `records` input records (at least
/// one checkpoint), `child` still running; panics after 60 s or if it exits.
fn wait_for_commit(child: &mut Child, spec: &Spec, records: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (sum, _) = committed_progress(&spec.group(), &spec.topics);
        if sum >= records.max(1) {
            return sum;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "{} ended ({status}) before committing {records} records: {}",
                spec.name,
                take_stderr(child)
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} committed only {sum} of {records} records within 60 s",
            spec.name
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `spec` unbounded, SIGKILLs it once it committed `records` input records, and
/// gives the broker a moment to finish what it was doing (a commit already requested).
fn run_and_kill_after(dir: &Path, spec: &Spec, records: i64) -> i64 {
    let mut child = start(&spec.write(dir, false));
    let committed = wait_for_commit(&mut child, spec, records);
    sigkill(&mut child);
    std::thread::sleep(Duration::from_millis(500));
    eprintln!(
        "{}: SIGKILLed after {committed} input records committed",
        spec.name
    );
    committed
}

/// Records ever written to `topic` (read_uncommitted: committed, aborted and open
/// transactions alike). Unlike a read_committed count, it does not depend on whether a
/// killed run's open transaction still holds back the last stable offset.
fn written(topic: &str) -> usize {
    kafka::read_all(topic, "read_uncommitted").len()
}

/// Deletes consumer group `group` (Weir assigns partitions and never joins it, so it
/// has no members), retrying until its offsets are gone.
fn delete_group(group: &str, topics: &[String]) {
    let bootstrap = kafka::bootstrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, text) = kafka::try_kafka_tool(&[
            "groups",
            "--bootstrap-server",
            &bootstrap,
            "--delete",
            "--group",
            group,
        ]);
        let (left, _) = committed_progress(group, topics);
        if left == 0 {
            eprintln!("group {group} deleted: {}", text.trim());
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cannot delete group {group} (ok={ok}, {left} offsets left): {text}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

// ---------------------------------------------------------------------------------
// 1. Partitions and parallelism
// ---------------------------------------------------------------------------------

#[test]
fn partition_added_to_one_topic_duplicates_nothing() {
    // Two 3-partition input topics, parallelism 2, SIGKILL mid-run, a 4th partition
    // added to the first topic and more input written, then a bounded restart: every
    // input record is committed once (no partition of the other topic is re-read
    // because the assignment of partitions to subtasks shifted).
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let in1 = kafka::unique_name("ops-grow-in1");
    let in2 = kafka::unique_name("ops-grow-in2");
    let output = kafka::unique_name("ops-grow-out");
    for topic in [&in1, &in2, &output] {
        kafka::create_topic(topic, PARTITIONS);
    }
    let first1 = spread("one", PARTITIONS, 4_000);
    let first2 = spread("two", PARTITIONS, 4_000);
    kafka::produce(&in1, &first1);
    kafka::produce(&in2, &first2);
    let spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-grow"),
        &[&in1, &in2],
        &output,
        6_000,
    );
    run_and_kill_after(dir.path(), &spec, 6_000);

    let b = kafka::bootstrap();
    kafka::kafka_tool(&[
        "topics",
        "--alter",
        "--topic",
        &in1,
        "--partitions",
        "4",
        "--bootstrap-server",
        &b,
    ]);
    let mut later = records("one", 3, 0, 2_000);
    for p in 0..PARTITIONS {
        later.extend(records("one", p, 4_000, 200));
    }
    let later2: Vec<Input> = (0..PARTITIONS)
        .flat_map(|p| records("two", p, 4_000, 200))
        .collect();
    kafka::produce(&in1, &later);
    kafka::produce(&in2, &later2);

    run_ok(&spec.write(dir.path(), true));
    assert_exactly_once(&output, &uppercased(&[&first1, &first2, &later, &later2]));
}

#[test]
fn a_parallelism_change_is_refused_with_one_line() {
    // Parallelism 2, SIGKILL mid-run, restart with parallelism 3: refused with exit
    // code 1 and one line naming parallelism, nothing written; back at parallelism 2
    // the bounded run commits every input record once.
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-rescale-in");
    let output = kafka::unique_name("ops-rescale-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let inputs = spread("rescale", PARTITIONS, 5_000);
    kafka::produce(&input, &inputs);
    let mut spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-rescale"),
        &[&input],
        &output,
        5_000,
    );
    run_and_kill_after(dir.path(), &spec, 4_000);
    let written_before = written(&output);

    spec.parallelism = 3;
    let (status, err) = run(&spec.write(dir.path(), true));
    let line = refusal(status, &err);
    assert!(line.contains("parallelism"), "{line}");
    eprintln!("parallelism 3 refused: {line}");
    assert_eq!(
        written(&output),
        written_before,
        "the refused run wrote output"
    );

    spec.parallelism = 2;
    run_ok(&spec.write(dir.path(), true));
    assert_exactly_once(&output, &uppercased(&[&inputs]));
}

// ---------------------------------------------------------------------------------
// 2. The progress marker
// ---------------------------------------------------------------------------------

/// Pipeline A in group g is SIGKILLed mid-run; pipeline B, another name with the same
/// `group = g` and the same input, must be refused at start with one line naming A (it
/// would overwrite A's marker); A's bounded restart then commits every input record
/// once.
#[test]
fn a_group_shared_with_another_pipeline_is_refused() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-shared-in");
    let out_a = kafka::unique_name("ops-shared-out-a");
    let out_b = kafka::unique_name("ops-shared-out-b");
    for topic in [&input, &out_a, &out_b] {
        kafka::create_topic(topic, PARTITIONS);
    }
    let inputs = spread("shared", PARTITIONS, 10_000);
    kafka::produce(&input, &inputs);
    let group = kafka::unique_name("g");
    let in_group = |tag: &str, output: &str| {
        let mut spec = Spec::uppercase(
            dir.path(),
            &kafka::unique_name(tag),
            &[&input],
            output,
            6_000,
        );
        spec.group = Some(group.clone());
        spec
    };
    let (a, b) = (
        in_group("ops-shared-a", &out_a),
        in_group("ops-shared-b", &out_b),
    );

    run_and_kill_after(dir.path(), &a, 8_000);

    // B: refused at start; if it runs, it is stopped once its own marker is in g (or
    // after 30 s: A's killed transaction may still hold offsets of g).
    let mut child = start(&b.write(dir.path(), false));
    let b_marker = format!("weir:{}:", b.name);
    let b_committed = || {
        let (_, metadata) = committed_progress(&group, &b.topics);
        metadata.iter().any(|m| m.starts_with(&b_marker))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let b_status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if b_committed() || Instant::now() >= deadline {
            sigkill(&mut child);
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let b_err = take_stderr(&mut child);
    let b_committed = b_committed();
    eprintln!(
        "B: {b_status:?}, committed its own marker to {group}: {b_committed}, stderr: {}",
        b_err.trim()
    );

    // A's restart is checked before B's verdict is asserted, to report both.
    let (a_status, a_err) = run(&a.write(dir.path(), true));
    let a_output = check_exactly_once(&out_a, &uppercased(&[&inputs]));
    eprintln!("A's restart: {a_status}, {}, {a_output:?}", a_err.trim());

    let b_status = b_status.unwrap_or_else(|| {
        panic!(
            "B was not refused: it ran (committed its own marker to A's group: {b_committed}) \
             until stopped; then A's restart: {a_status} {} {a_output:?}",
            a_err.trim()
        )
    });
    assert!(!b_committed, "B committed its marker to A's group");
    let line = refusal(b_status, &b_err);
    assert!(
        line.contains(&format!("holds the progress of pipeline {}", a.name)),
        "{line}"
    );
    assert!(a_status.success(), "A's restart failed: {a_err}");
    a_output.unwrap_or_else(|e| panic!("A's restart: {e}"));
}

#[test]
fn expired_group_offsets_resume_from_the_progress_topic() {
    // A is SIGKILLed mid-run and its consumer group's offsets are deleted (as
    // `offsets.retention.minutes` or `kafka-consumer-groups --delete` would); the
    // bounded restart finds its marker on the pipeline's progress topic and commits
    // every input record once.
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-expired-in");
    let output = kafka::unique_name("ops-expired-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let inputs = spread("expired", PARTITIONS, 10_000);
    kafka::produce(&input, &inputs);
    let spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-expired"),
        &[&input],
        &output,
        6_000,
    );
    run_and_kill_after(dir.path(), &spec, 8_000);
    delete_group(&spec.group(), &spec.topics);

    run_ok(&spec.write(dir.path(), true));
    assert_exactly_once(&output, &uppercased(&[&inputs]));
}

#[test]
fn a_lost_marker_with_checkpoints_refuses_to_start() {
    // A is SIGKILLed mid-run, then both carriers of its marker are lost: the group's
    // offsets and the progress topic. With complete checkpoints in storage and no
    // marker, the restart is refused with one line offering --from-checkpoint and
    // --from-scratch; it deletes no checkpoint and writes nothing.
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-lost-in");
    let output = kafka::unique_name("ops-lost-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let inputs = spread("lost", PARTITIONS, 10_000);
    kafka::produce(&input, &inputs);
    let spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-lost"),
        &[&input],
        &output,
        6_000,
    );
    run_and_kill_after(dir.path(), &spec, 8_000);
    delete_group(&spec.group(), &spec.topics);
    kafka::kafka_tool(&[
        "topics",
        "--delete",
        "--if-exists",
        "--topic",
        &spec.progress_topic(),
        "--bootstrap-server",
        &kafka::bootstrap(),
    ]);
    let complete = || {
        CheckpointStorage::open_read_only(spec.checkpoints())
            .expect("storage")
            .complete_checkpoints()
            .expect("list checkpoints")
    };
    let before = complete();
    assert!(!before.is_empty(), "A completed no checkpoint");
    let written_before = written(&output);

    let (status, err) = run(&spec.write(dir.path(), true));
    let after = complete();
    let written_after = written(&output);
    eprintln!(
        "restart: {status}, stderr: {}; complete checkpoints {before:?} -> {after:?}; \
         output records written {written_before} -> {written_after}, read_committed {} \
         (input {})",
        err.trim(),
        kafka::committed_values(&output).len(),
        inputs.len()
    );
    let line = refusal(status, &err);
    assert!(
        line.contains("--from-checkpoint") && line.contains("--from-scratch"),
        "{line}"
    );
    assert_eq!(after, before, "the refused run changed the checkpoints");
    assert_eq!(
        written_after, written_before,
        "the refused run wrote output"
    );
}

// ---------------------------------------------------------------------------------
// 3. Per-key order
// ---------------------------------------------------------------------------------

/// `records` records of `per_record` words drawn from `keys` words (seeded), over the
/// partitions in turn, and how often each word occurs.
fn random_words(records: u64, per_record: usize, keys: u64) -> (Vec<Input>, BTreeMap<String, u64>) {
    let mut rng = StdRng::seed_from_u64(0x0de7);
    let mut occurrences: BTreeMap<String, u64> = BTreeMap::new();
    let inputs: Vec<Input> = (0..records)
        .map(|i| {
            let words: Vec<String> = (0..per_record)
                .map(|_| format!("w{:03}", rng.random_range(0..keys)))
                .collect();
            for w in &words {
                *occurrences.entry(w.clone()).or_insert(0) += 1;
            }
            Input {
                partition: (i % PARTITIONS as u64) as i32,
                key: format!("r{i}"),
                value: words.join(" "),
                timestamp: BASE_TIME + i as i64,
            }
        })
        .collect();
    (inputs, occurrences)
}

/// Each key's word counts in `output`, read_committed, in read order (`read_all` keeps
/// each partition's order, and a key's updates all go to one partition).
fn counts_by_key(output: &str) -> BTreeMap<String, Vec<u64>> {
    let mut updates: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, value) in kafka::read_all(output, "read_committed") {
        let json: serde_json::Value = serde_json::from_str(&value).expect("word_count JSON");
        assert_eq!(json["word"].as_str(), Some(key.as_str()), "{value}");
        let count = json["count"].as_u64().expect("count");
        updates.entry(key).or_default().push(count);
    }
    updates
}

#[test]
fn per_key_updates_stay_in_order_across_checkpoints() {
    // Words -> split_words -> unwindowed word_count (an update per key per batch) ->
    // Kafka, parallelism 2, checkpoints every 10 ms, ~9 s of input: read_committed,
    // every key's counts are strictly increasing in partition order (no update of
    // checkpoint n appended after one of n + 1) and its last count is its number of
    // occurrences.
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: u64 = 60_000;
    const WORDS_PER_RECORD: usize = 4;
    const KEYS: u64 = 60;
    const ORDER_RATE: u64 = 10_000;
    // Many output partitions: each is its own chance for the two producers' batches to
    // land out of order (on today's main, with 10 ms checkpoints: 24 partitions showed
    // it in 6 runs of 6, 12 in 13 of 15, 3 in 7 of 11).
    const OUTPUT_PARTITIONS: i32 = 24;
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-order-in");
    let output = kafka::unique_name("ops-order-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, OUTPUT_PARTITIONS);
    let (inputs, occurrences) = random_words(RECORDS, WORDS_PER_RECORD, KEYS);
    kafka::produce(&input, &inputs);
    let mut spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-order"),
        &[&input],
        &output,
        ORDER_RATE,
    );
    // Checkpoints back to back: the race shows more often than at 50 ms.
    spec.checkpoint = r#"interval = "10ms""#.to_owned();
    spec.steps = format!(
        "[[steps]]\ntype = \"map\"\nmodule = {}\n\n[[steps]]\ntype = \"aggregate\"\nmodule = {}\n",
        toml_path(&guest("split_words")),
        toml_path(&guest("word_count")),
    );
    let started = Instant::now();
    run_ok(&spec.write(dir.path(), true));
    let storage = CheckpointStorage::open_read_only(spec.checkpoints()).expect("storage");
    let last = storage
        .latest_complete()
        .expect("list")
        .expect("a checkpoint");
    eprintln!("ran in {:?}, last checkpoint {last:?}", started.elapsed());

    let updates = counts_by_key(&output);
    let total: usize = updates.values().map(Vec::len).sum();
    let out_of_order: Vec<(&String, Vec<u64>)> = updates
        .iter()
        .filter_map(|(key, counts)| {
            let bad = counts.windows(2).position(|w| w[1] <= w[0])?;
            let from = bad.saturating_sub(3);
            Some((key, counts[from..(bad + 3).min(counts.len())].to_vec()))
        })
        .collect();
    eprintln!(
        "{total} updates of {} keys; {} keys not strictly increasing",
        updates.len(),
        out_of_order.len()
    );
    assert!(
        out_of_order.is_empty(),
        "{} of {} keys have committed updates out of order or repeated, e.g. (key, counts around it): {:?}",
        out_of_order.len(),
        updates.len(),
        &out_of_order[..out_of_order.len().min(5)]
    );
    let last_counts: BTreeMap<String, u64> = updates
        .iter()
        .map(|(k, counts)| (k.clone(), *counts.last().expect("an update")))
        .collect();
    assert_eq!(last_counts, occurrences, "each key's last count");
}

// ---------------------------------------------------------------------------------
// 4. One instance per state dir
// ---------------------------------------------------------------------------------

#[test]
fn a_second_instance_on_the_same_state_dir_is_refused() {
    // A runs with its state dir; once it committed, B is started on the same spec: B
    // is refused within seconds with one line naming A's pid and A keeps running; A is
    // then SIGKILLed and a bounded restart commits every input record once.
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-twice-in");
    let output = kafka::unique_name("ops-twice-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let inputs = spread("twice", PARTITIONS, 10_000);
    kafka::produce(&input, &inputs);
    let spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-twice"),
        &[&input],
        &output,
        4_000,
    );
    let unbounded = spec.write(dir.path(), false);
    let mut a = start(&unbounded);
    wait_for_commit(&mut a, &spec, 2_000);

    let mut b = start(&unbounded);
    let b_status = wait_for_exit(&mut b, Duration::from_secs(15));
    if b_status.is_none() {
        sigkill(&mut b);
    }
    let b_err = take_stderr(&mut b);
    std::thread::sleep(Duration::from_secs(1));
    let a_status = a.try_wait().expect("try_wait");
    let a_err = if a_status.is_some() {
        take_stderr(&mut a)
    } else {
        String::new()
    };
    eprintln!(
        "B: {b_status:?} {}; A after B: {a_status:?} {}",
        b_err.trim(),
        a_err.trim()
    );
    let b_status = b_status.unwrap_or_else(|| {
        panic!(
            "B was still running after 15 s (A: {a_status:?} {}): {}",
            a_err.trim(),
            b_err.trim()
        )
    });
    let line = refusal(b_status, &b_err);
    assert!(
        line.contains(&format!(
            "is in use by another weir process (pid {})",
            a.id()
        )),
        "{line}"
    );
    assert!(
        a_status.is_none(),
        "A must keep running, it ended ({a_status:?}): {a_err}"
    );

    sigkill(&mut a);
    run_ok(&spec.write(dir.path(), true));
    assert_exactly_once(&output, &uppercased(&[&inputs]));
}

// ---------------------------------------------------------------------------------
// 5. A transaction outlived by SIGSTOP
// ---------------------------------------------------------------------------------

#[test]
fn a_transaction_outlived_by_sigstop_says_so() {
    // A runs with a 10 s transaction timeout, slowly (200 records/s, so that it is
    // rarely stopped with records in flight); after a commit it is SIGSTOPped for 25 s
    // (the broker aborts its open transaction on timeout) and continued: it stops with
    // a line naming transaction_timeout, not one blaming another instance; a bounded
    // restart commits every input record once.
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-stop-in");
    let output = kafka::unique_name("ops-stop-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let inputs = spread("stop", PARTITIONS, 400);
    kafka::produce(&input, &inputs);
    let mut spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-stop"),
        &[&input],
        &output,
        200,
    );
    spec.checkpoint = "interval = \"200ms\"\ntimeout = \"2s\"".to_owned();
    spec.sink_extra = "transaction_timeout = \"10s\"\nrestart_budget = \"1s\"".to_owned();
    let mut child = start(&spec.write(dir.path(), false));
    wait_for_commit(&mut child, &spec, 200);
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    std::thread::sleep(Duration::from_secs(25));
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    let status = wait_for_exit(&mut child, Duration::from_secs(60));
    if status.is_none() {
        sigkill(&mut child);
    }
    let err = take_stderr(&mut child);
    eprintln!("after SIGCONT: {status:?}, stderr: {}", err.trim());
    let status = status.unwrap_or_else(|| panic!("still running 60 s after SIGCONT: {err}"));
    assert!(
        !status.success() && status.signal().is_none(),
        "must fail with an error ({status}): {err}"
    );
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("weir: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert!(
        errors[0].contains("transaction_timeout") && !errors[0].contains("another instance"),
        "{}",
        errors[0]
    );

    run_ok(&spec.write(dir.path(), true));
    assert_exactly_once(&output, &uppercased(&[&inputs]));
}

// ---------------------------------------------------------------------------------
// 6. Input deleted by retention while the pipeline was down
// ---------------------------------------------------------------------------------

#[test]
fn input_deleted_by_retention_is_skipped_with_a_warning_and_counted() {
    // A is killed after a commit; every input partition is then truncated to its end
    // (DeleteRecords, as retention would), so the restored offsets point below the
    // earliest ones. The bounded restart continues at the earliest offsets, warns
    // naming the partitions and the records never read, and its last line counts them:
    // exactly the input records past the last committed checkpoint's positions.
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-retention-in");
    let output = kafka::unique_name("ops-retention-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    const PER_PARTITION: u64 = 2_000;
    kafka::produce(&input, &spread("ret", PARTITIONS, PER_PARTITION));
    let spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-retention"),
        &[&input],
        &output,
        1_000,
    );
    run_and_kill_after(dir.path(), &spec, 300);
    let (committed, _) = committed_progress(&spec.group(), &spec.topics);

    let offsets = dir.path().join("delete-records.json");
    let partitions: Vec<String> = (0..PARTITIONS)
        .map(|p| format!(r#"{{"topic":"{input}","partition":{p},"offset":{PER_PARTITION}}}"#))
        .collect();
    std::fs::write(
        &offsets,
        format!(r#"{{"version":1,"partitions":[{}]}}"#, partitions.join(",")),
    )
    .expect("write offsets json");
    kafka::kafka_tool(&[
        "run",
        "org.apache.kafka.tools.DeleteRecordsCommand",
        "--bootstrap-server",
        &kafka::bootstrap(),
        "--offset-json-file",
        &offsets.display().to_string(),
    ]);

    let (status, err) = run(&spec.write(dir.path(), true));
    eprintln!("restart: {}", err.trim());
    assert!(status.success(), "{err}");
    let skipped = PER_PARTITION as i64 * i64::from(PARTITIONS) - committed;
    assert!(skipped > 0, "the kill came after all input was committed");
    assert!(
        err.contains("already deleted by the topic's retention"),
        "a warning per truncated partition: {err}"
    );
    let last = err.trim().lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!(
            ", {skipped} input records skipped (deleted by retention before they were read)"
        )),
        "{last}"
    );
    // Nothing was read after the restore: the output is what the killed run committed.
    assert_eq!(kafka::committed_values(&output).len() as i64, committed);
}

// ---------------------------------------------------------------------------------
// 7. Starting over
// ---------------------------------------------------------------------------------

#[test]
fn a_start_over_killed_before_its_first_commit_restarts_cleanly() {
    // A runs to the end (its marker names its last checkpoint). `--from-scratch` starts
    // it over and dies after its first checkpoint completed, before that checkpoint's
    // transaction committed. The plain restart must not read the old incarnation's
    // marker as newer than anything in storage: it starts from nothing again, and the
    // output holds every record exactly twice (once per incarnation, as --from-scratch
    // promises).
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-over-in");
    let output = kafka::unique_name("ops-over-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let inputs = spread("over", PARTITIONS, 1_000);
    kafka::produce(&input, &inputs);
    let spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-over"),
        &[&input],
        &output,
        0,
    );
    let bounded = spec.write(dir.path(), true);
    run_ok(&bounded);

    let status = weir()
        .args(["run", "--quiet", "--from-scratch"])
        .arg(&bounded)
        .env("KAFKA_BOOTSTRAP", kafka::bootstrap())
        .env("WEIR_FAULT", "before-commit")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run weir");
    assert_eq!(
        status.signal(),
        Some(9),
        "the fault point must SIGKILL the run"
    );

    run_ok(&bounded);
    let once = uppercased(&[&inputs]);
    let twice = once.iter().map(|(v, n)| (v.clone(), n * 2)).collect();
    assert_exactly_once(&output, &twice);
}

// ---------------------------------------------------------------------------------
// 8. Event time across a restart
// ---------------------------------------------------------------------------------

/// The (window start, sum) pairs `output` holds read_committed, of the windowed sum's
/// one key, in output order.
fn committed_windows(output: &str) -> Vec<(i64, i64)> {
    kafka::committed_values(output)
        .iter()
        .map(|value| {
            let json: serde_json::Value = serde_json::from_str(value)
                .unwrap_or_else(|e| panic!("output record {value:?}: {e}"));
            let field = |name: &str| {
                json[name]
                    .as_i64()
                    .unwrap_or_else(|| panic!("{name} in {value}"))
            };
            (field("window_start") - BASE_TIME, field("sum"))
        })
        .collect()
}

#[test]
fn a_partition_idle_across_a_restart_keeps_holding_event_time_where_it_was() {
    // A windowed sum (tumbling 1 s) over two partitions, one key, value 1 per record,
    // every 250 ms of event time. Partition 1 holds 0-2750 ms and then stays idle;
    // partition 0 holds 0-1750 ms: the watermark is 1749, window [0, 1000) fires. The
    // pipeline is SIGKILLed once it committed every input offset, partition 0 gets
    // 2000-4750 ms, and the pipeline restarts: an uninterrupted run's watermark would
    // now be 2749 (partition 1's largest timestamp), so [1000, 2000) fires, and
    // [2000, 3000) does not. Without partition 1's largest timestamp in its
    // checkpointed position, the restarted partition 1 holds the watermark at the start
    // until it gets a record, and [1000, 2000) never fires.
    let _one_at_a_time = kafka::exclusive();
    const STEP_MS: i64 = 250;
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-idle-in");
    let output = kafka::unique_name("ops-idle-out");
    kafka::create_topic(&input, 2);
    kafka::create_topic(&output, 1);
    let at = |partition: i32, steps: std::ops::Range<i64>| -> Vec<Input> {
        steps
            .map(|i| Input {
                partition,
                key: "k".to_owned(),
                value: r#"{"value":1}"#.to_owned(),
                timestamp: BASE_TIME + i * STEP_MS,
            })
            .collect()
    };
    let mut first = at(1, 0..12);
    first.extend(at(0, 0..8));
    kafka::produce(&input, &first);
    let mut spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-idle"),
        &[&input],
        &output,
        0,
    );
    spec.steps = format!(
        "[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"1s\" }}\n",
        toml_path(&guest("windowed_sum")),
    );
    let unbounded = spec.write(dir.path(), false);

    let fired = |child: &mut Child, windows: &[(i64, i64)], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let committed = committed_windows(&output);
            if committed.len() >= windows.len() {
                assert_eq!(committed, windows, "{what}: the committed windows");
                return;
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!("{what}: weir ended ({status}): {}", take_stderr(child));
            }
            assert!(
                Instant::now() < deadline,
                "{what}: within 30 s of committing its input, committed only {committed:?}, expected {windows:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut child = start(&unbounded);
    wait_for_commit(&mut child, &spec, first.len() as i64);
    fired(&mut child, &[(0, 8)], "before the restart");
    sigkill(&mut child);

    let second = at(0, 8..20);
    kafka::produce(&input, &second);
    let mut child = start(&unbounded);
    wait_for_commit(&mut child, &spec, (first.len() + second.len()) as i64);
    fired(&mut child, &[(0, 8), (1_000, 8)], "after the restart");
    // A few more checkpoints: [2000, 3000) must not fire (partition 1 is at 2750).
    std::thread::sleep(Duration::from_secs(1));
    sigkill(&mut child);
    assert_eq!(
        committed_windows(&output),
        [(0, 8), (1_000, 8)],
        "every window the watermark passed, once, and no other"
    );
}

/// `weir reset-kafka` (the book's way to reuse a pipeline's name from nothing): a
/// pipeline runs to its end and commits everything; the reset deletes its consumer
/// group and progress topic (saying so, one line each) and leaves its input and output;
/// `weir run --from-scratch` under the same name then commits every input record
/// exactly once more, into a new output topic.
#[test]
fn a_reset_pipeline_counts_its_input_again_from_nothing() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-reset-in");
    let (first, second) = (
        kafka::unique_name("ops-reset-out"),
        kafka::unique_name("ops-reset-again"),
    );
    for topic in [&input, &first, &second] {
        kafka::create_topic(topic, PARTITIONS);
    }
    let inputs = spread("reset", PARTITIONS, 2_000);
    kafka::produce(&input, &inputs);
    let mut spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-reset"),
        &[&input],
        &first,
        0,
    );
    run_ok(&spec.write(dir.path(), true));
    assert_exactly_once(&first, &uppercased(&[&inputs]));

    let path = spec.write(dir.path(), true);
    let out = weir()
        .arg("reset-kafka")
        .arg(&path)
        .output()
        .expect("reset");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        format!("deleted topic {}", spec.progress_topic()),
        format!("deleted consumer group {}", spec.group()),
    ] {
        assert!(stdout.lines().any(|l| l == line), "{line} in {stdout}");
    }
    assert_eq!(
        kafka::committed_offsets(&spec.group(), &input),
        BTreeMap::new()
    );
    assert!(kafka::topics_with_prefix(&spec.progress_topic()).is_empty());

    spec.output = second.clone();
    let path = spec.write(dir.path(), true);
    let again = weir()
        .args(["run", "--quiet", "--from-scratch"])
        .arg(&path)
        .output()
        .expect("run");
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_exactly_once(&second, &uppercased(&[&inputs]));
    assert_exactly_once(&first, &uppercased(&[&inputs]));
}

// ---------------------------------------------------------------------------------
// 9. A paused host: SIGSTOP past the checkpoint timeout, ten times
// ---------------------------------------------------------------------------------

#[test]
fn stopped_ten_times_past_the_checkpoint_timeout_the_run_goes_on_exactly() {
    // Issue 51, item 4: a `weir run` SIGSTOPped (a VM pause, a debugger) for twice its
    // checkpoint timeout, at random moments, ten times: every deadline Weir keeps on its
    // own work counts time the process ran, so none blames the broker for the stop. The
    // run must not exit before its end, and its committed output is exactly the input.
    // How many times it restarted in its process is printed (never asserted: a stop can
    // land where librdkafka's own timers run out).
    let _one_at_a_time = kafka::exclusive();
    let seed: u64 = rand::random();
    eprintln!("paused host: seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("ops-pause-in");
    let output = kafka::unique_name("ops-pause-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    // 60 s of input at 100 records/s: the ten rounds take about 50 s, and a paced
    // source catches up on the time it was stopped.
    let inputs = spread("pause", PARTITIONS, 2_000);
    kafka::produce(&input, &inputs);
    let mut spec = Spec::uppercase(
        dir.path(),
        &kafka::unique_name("ops-pause"),
        &[&input],
        &output,
        100,
    );
    spec.checkpoint = "interval = \"300ms\"\ntimeout = \"2s\"".to_owned();
    spec.sink_extra = "transaction_timeout = \"60s\"\nrestart_budget = \"1s\"".to_owned();
    let mut child = start(&spec.write(dir.path(), true));
    wait_for_commit(&mut child, &spec, 1);
    let pid = Pid::from_raw(child.id() as i32);
    let mut rounds = 0;
    while rounds < 10 && child.try_wait().expect("try_wait").is_none() {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1_500)));
        kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
        std::thread::sleep(Duration::from_secs(4));
        kill(pid, Signal::SIGCONT).expect("SIGCONT");
        rounds += 1;
    }
    let status = wait_for_exit(&mut child, RUN_LIMIT);
    if status.is_none() {
        sigkill(&mut child);
    }
    let err = take_stderr(&mut child);
    let restarts = err
        .matches("restarting it from its last committed checkpoint")
        .count();
    eprintln!("paused host: {rounds} stops of 4 s; restarts in its process: {restarts}");
    let status =
        status.unwrap_or_else(|| panic!("still running {RUN_LIMIT:?} after the stops: {err}"));
    assert!(
        status.success(),
        "the run exited ({status}) after a stop: {err}"
    );
    assert!(
        rounds >= 5,
        "the run ended after {rounds} stops: lengthen its input"
    );
    assert_exactly_once(&output, &uppercased(&[&inputs]));
}
