//! Exactly-once Kafka end to end, against the real broker of the test run
//! (`KAFKA_BOOTSTRAP`): Kafka -> WASM `split_words` -> windowed `word_count` -> two
//! Kafka topics, parallelism 2, checkpoints every 500 ms, crashed at every fault point
//! of the commit protocol and by SIGKILL from outside; a second instance fencing the
//! first; and the consumer-group offsets the transactions commit, as lag tools see them.
//! Also: the progress-topic marker of a pipeline without Kafka sources,
//! at-least-once delivery, and the smallest queue budgets (backpressure, not loss).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir::checkpoint::metadata::CheckpointMetadata;
use weir::storage::CheckpointStorage;
use weir_tests::kafka::{self, Input};
use weir_tests::{
    committed_lines, guest, multiset, multiset_diff, take_stderr, toml_path, weir, write_file,
};

const PARTITIONS: i32 = 3;
/// Event time of record 0; record i is at `BASE_TIME + i` ms.
const BASE_TIME: i64 = 1_700_000_000_000;
const WINDOW_MS: i64 = 1_000;
const VOCABULARY: [&str; 20] = [
    "river", "stream", "weir", "water", "flow", "bank", "stone", "fish", "reed", "mill", "wheel",
    "bridge", "rain", "cloud", "storm", "lake", "pond", "delta", "ford", "bend",
];
const FAULT_POINTS: [&str; 6] = [
    "checkpoint-triggered",
    "before-pre-commit",
    "after-pre-commit",
    "before-commit",
    "after-commit-request",
    "after-commit",
];
const RANDOM_KILLS: usize = 5;

/// The words of record `i`'s text: three from the vocabulary and one unique to it.
fn words(i: u64) -> Vec<String> {
    let v = |n: u64| VOCABULARY[(n % VOCABULARY.len() as u64) as usize].to_owned();
    vec![v(i * 7), v(i * 13 + 3), v(i / 5), format!("id{i}")]
}

/// `count` records with unique ids over the partitions, timestamps increasing in each.
fn input(count: u64) -> Vec<Input> {
    (0..count)
        .map(|i| Input {
            partition: (i % PARTITIONS as u64) as i32,
            key: format!("r{i}"),
            value: format!(r#"{{"id":{i},"text":"{}"}}"#, words(i).join(" ")),
            timestamp: BASE_TIME + i as i64,
        })
        .collect()
}

/// What the pipeline must output, computed without Weir: one record per (word,
/// tumbling window) with its count, in `word_count`'s documented JSON.
fn expected(count: u64) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<(String, i64), u64> = BTreeMap::new();
    for i in 0..count {
        let ts = BASE_TIME + i as i64;
        let start = ts - ts.rem_euclid(WINDOW_MS);
        for w in words(i) {
            *counts.entry((w, start)).or_insert(0) += 1;
        }
    }
    multiset(counts.into_iter().map(|((w, s), n)| {
        format!(
            r#"{{"word":"{w}","window_start":{s},"window_end":{},"count":{n}}}"#,
            s + WINDOW_MS
        )
    }))
}

struct Topics {
    input: String,
    out_a: String,
    out_b: String,
}

fn topics(name: &str) -> Topics {
    let t = Topics {
        input: kafka::unique_name(&format!("{name}-in")),
        out_a: kafka::unique_name(&format!("{name}-out-a")),
        out_b: kafka::unique_name(&format!("{name}-out-b")),
    };
    for topic in [&t.input, &t.out_a, &t.out_b] {
        kafka::create_topic(topic, PARTITIONS);
    }
    t
}

/// The pipeline spec; `state` is this instance's own directory, `checkpoints` the
/// (possibly shared) checkpoint storage; `bounded`: stop at the input's end.
/// `rate`: records/s the source reads (0 = as fast as it can).
fn spec(
    dir: &Path,
    name: &str,
    t: &Topics,
    state: &Path,
    checkpoints: &Path,
    bounded: bool,
    rate: u64,
) -> PathBuf {
    let text = format!(
        r#"
name = "{name}"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "500ms"
dir = {checkpoints}

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
module = {count}
window = {{ type = "tumbling", size = "1s" }}

[[sinks]]
type = "kafka"
topic = "{out_a}"

[[sinks]]
type = "kafka"
topic = "{out_b}"

[dead_letter]
path = {dead}
"#,
        state = toml_path(state),
        checkpoints = toml_path(checkpoints),
        input = t.input,
        out_a = t.out_a,
        out_b = t.out_b,
        split = toml_path(&guest("split_words")),
        count = toml_path(&guest("word_count")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(
        dir,
        &format!(
            "{}.toml",
            state
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("pipeline")
        ),
        &text,
    )
}

fn start(spec: &Path, fault: Option<&str>) -> Child {
    let mut cmd = weir();
    cmd.args(["run", "--quiet"])
        .arg(spec)
        .env("KAFKA_BOOTSTRAP", kafka::bootstrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(fault) = fault {
        cmd.env("WEIR_FAULT", fault);
    }
    cmd.spawn().expect("spawn weir")
}

/// Asserts that each output topic holds, read_committed, exactly the expected records.
fn assert_exactly_once(t: &Topics, expected: &BTreeMap<String, usize>) {
    for topic in [&t.out_a, &t.out_b] {
        let actual = multiset(kafka::committed_values(topic));
        let diff = multiset_diff(expected, &actual, 10);
        if !diff.is_empty() {
            let all = multiset_diff(expected, &actual, usize::MAX);
            let missing: usize = all.iter().map(|(_, e, a)| e.saturating_sub(*a)).sum();
            let extra: usize = all.iter().map(|(_, e, a)| a.saturating_sub(*e)).sum();
            let uncommitted = multiset(
                kafka::read_all(topic, "read_uncommitted")
                    .into_iter()
                    .map(|(_, v)| v),
            );
            let missing_but_written = all
                .iter()
                .filter(|(l, e, a)| e > a && uncommitted.contains_key(l))
                .count();
            eprintln!(
                "{topic}: expected {} records, read_committed {}: {missing} missing ({missing_but_written} of those lines were written in aborted transactions), {extra} extra",
                expected.values().sum::<usize>(),
                actual.values().sum::<usize>()
            );
        }
        assert!(
            diff.is_empty(),
            "{topic}: read_committed output differs from the expected multiset (record, expected, actual): {diff:?}"
        );
        assert_eq!(
            actual.values().sum::<usize>(),
            expected.values().sum::<usize>()
        );
    }
}

/// Paces the crash test's 200,000 records over ~8 s, so kills land mid-stream.
///
/// Records carry event times from 2023 as their Kafka timestamps: the broker must keep
/// them regardless of age (`log.retention.ms=-1` in scripts/kafka/kafka.sh), or its
/// first retention pass deletes input and output mid-test.
const CRASH_TEST_RATE: u64 = 25_000;

/// Runs `spec` until it finishes, alternating a SIGKILL from outside at a random moment
/// and a self-kill at the next fault point, until every fault point and RANDOM_KILLS
/// external kills landed; prints how far the committed offsets of `group` over `input`
/// (of `records`) had come at each kill.
fn run_through_every_fault_point_and_random_kills(
    spec: &Path,
    group: &str,
    input: &str,
    records: u64,
) {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let (mut faults_done, mut random_kills) = (0usize, 0usize);
    let mut attempts = 0;
    // Input records covered by the last committed transaction's offsets (progress log).
    let progress = || -> i64 {
        kafka::committed_offsets(group, input)
            .values()
            .map(|(o, _)| o)
            .sum()
    };
    loop {
        attempts += 1;
        assert!(
            attempts < 60,
            "pipeline did not finish after {attempts} attempts"
        );
        let want_random = random_kills < RANDOM_KILLS
            && (random_kills <= faults_done || faults_done == FAULT_POINTS.len());
        let fault =
            (!want_random && faults_done < FAULT_POINTS.len()).then(|| FAULT_POINTS[faults_done]);
        let mut child = start(spec, fault);
        if want_random {
            let after = rng.random_range(300..2000);
            std::thread::sleep(Duration::from_millis(after));
            if child.try_wait().expect("try_wait").is_none() {
                child.kill().expect("SIGKILL");
                let _ = child.wait();
                random_kills += 1;
                eprintln!(
                    "attempt {attempts}: SIGKILL from outside after {after}ms; input committed: {}/{records}",
                    progress()
                );
                continue;
            }
        }
        let status = child.wait().expect("wait");
        let err = take_stderr(&mut child);
        if let Some(fault) = fault {
            assert_eq!(
                status.signal(),
                Some(9),
                "fault {fault} must SIGKILL the run: {err}"
            );
            eprintln!(
                "attempt {attempts}: killed itself at {fault}; input committed: {}/{records}",
                progress()
            );
            faults_done += 1;
            continue;
        }
        assert!(status.success(), "attempt {attempts} failed: {err}");
        eprintln!("attempt {attempts}: ran to the end: {}", err.trim());
        if faults_done == FAULT_POINTS.len() && random_kills == RANDOM_KILLS {
            break;
        }
    }
}

#[test]
fn exactly_once_across_fault_points_and_sigkills() {
    let _one_at_a_time = kafka::exclusive();
    across_fault_points_and_sigkills("eos-crash");
}

/// The same on the 3-node cluster, formatted with `transaction.version = 2` (the single
/// broker runs 1): Kafka 4's default protocol, where every transaction bumps the
/// producer's epoch (KIP-890), under the same kills at every fault point.
#[test]
fn on_transaction_version_2_exactly_once_across_fault_points_and_sigkills() {
    let _one_at_a_time = kafka::exclusive();
    kafka::on(&kafka::cluster_bootstrap(), || {
        across_fault_points_and_sigkills("eos2-crash")
    });
}

/// The crash test's body, on whichever broker the thread's helpers talk to.
fn across_fault_points_and_sigkills(label: &str) {
    const RECORDS: u64 = 200_000;
    let dir = tempfile::tempdir().expect("tempdir");
    // Unique: the pipeline's progress topic and group outlive a test run on a shared broker.
    let name = kafka::unique_name(label);
    let group = format!("weir.{name}");
    let t = topics(label);
    kafka::produce(&t.input, &input(RECORDS));
    let spec = spec(
        dir.path(),
        &name,
        &t,
        &dir.path().join("state"),
        &dir.path().join("checkpoints"),
        true,
        CRASH_TEST_RATE,
    );

    run_through_every_fault_point_and_random_kills(&spec, &group, &t.input, RECORDS);

    let expected = expected(RECORDS);
    assert_exactly_once(&t, &expected);
    // The crashes hit open transactions: read_uncommitted sees their aborted records.
    let uncommitted = kafka::read_all(&t.out_a, "read_uncommitted").len();
    let committed = expected.values().sum::<usize>();
    eprintln!(
        "{}: {committed} records read_committed, {uncommitted} read_uncommitted",
        t.out_a
    );
    assert!(
        uncommitted > committed,
        "read_uncommitted saw {uncommitted} records, read_committed {committed}: no crash hit an open transaction"
    );
    // No record was late: the per-partition watermarks never passed a record.
    assert!(committed_lines(&dir.path().join("dead")).is_empty());
}

#[test]
fn a_second_instance_fences_the_first() {
    let _one_at_a_time = kafka::exclusive();
    second_instance_fences_the_first("eos-zombie");
}

/// The same on `transaction.version = 2` (the cluster's), where the broker bumps the
/// epoch at every commit: the second instance's `init_transactions` still fences the
/// first.
#[test]
fn on_transaction_version_2_a_second_instance_fences_the_first() {
    let _one_at_a_time = kafka::exclusive();
    kafka::on(&kafka::cluster_bootstrap(), || {
        second_instance_fences_the_first("eos2-zombie")
    });
}

/// The fencing test's body, on whichever broker the thread's helpers talk to.
fn second_instance_fences_the_first(label: &str) {
    const RECORDS: u64 = 200_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name(label);
    let t = topics(label);
    kafka::produce(&t.input, &input(RECORDS));
    // Two machines sharing checkpoint storage, each with its own working state.
    let checkpoints = dir.path().join("checkpoints");
    // The first runs unbounded (a long-running job); the second is a bounded run of the
    // same pipeline (same name, same transactional ids), started while the first runs.
    let spec_a = spec(
        dir.path(),
        &name,
        &t,
        &dir.path().join("state-a"),
        &checkpoints,
        false,
        0,
    );
    let spec_b = spec(
        dir.path(),
        &name,
        &t,
        &dir.path().join("state-b"),
        &checkpoints,
        true,
        0,
    );

    let mut first = start(&spec_a, None);
    // Let the first instance commit at least one checkpoint.
    let group = &format!("weir.{name}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while kafka::committed_offsets(group, &t.input).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the first instance committed nothing"
        );
        assert!(
            first.try_wait().expect("try_wait").is_none(),
            "the first instance ended too early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut second = start(&spec_b, None);

    let status = first.wait().expect("wait first");
    let err = take_stderr(&mut first);
    assert!(!status.success(), "the fenced instance must fail");
    assert!(
        err.contains("was fenced") && err.contains(&format!("another instance of pipeline {name}")),
        "the fenced instance must say why: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    eprintln!("fenced instance: {}", err.trim());

    let status = second.wait().expect("wait second");
    let err = take_stderr(&mut second);
    assert!(status.success(), "the second instance failed: {err}");
    assert_exactly_once(&t, &expected(RECORDS));
}

#[test]
fn committed_group_offsets_are_the_last_committed_checkpoint_positions() {
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: u64 = 30_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("eos-lag");
    let t = topics("eos-lag");
    kafka::produce(&t.input, &input(RECORDS));
    let checkpoints = dir.path().join("checkpoints");
    let spec = spec(
        dir.path(),
        &name,
        &t,
        &dir.path().join("state"),
        &checkpoints,
        true,
        0,
    );
    let mut child = start(&spec, None);
    let status = child.wait().expect("wait");
    let err = take_stderr(&mut child);
    assert!(status.success(), "run failed: {err}");
    assert_exactly_once(&t, &expected(RECORDS));

    // The positions of the last committed (here: final) checkpoint's sources.
    let storage = CheckpointStorage::open_read_only(&checkpoints).expect("storage");
    let last = storage
        .latest_complete()
        .expect("list")
        .expect("a checkpoint");
    let metadata = CheckpointMetadata::read(&storage, last).expect("read metadata");
    let mut positions: BTreeMap<i32, i64> = BTreeMap::new();
    for snapshot in metadata.snapshots_of("source-0") {
        for p in snapshot.state["partitions"].as_array().expect("partitions") {
            positions.insert(
                p["partition"].as_i64().expect("partition") as i32,
                p["offset"].as_i64().expect("offset"),
            );
        }
    }
    assert_eq!(positions.len(), PARTITIONS as usize);

    // As a consumer sees them (OffsetFetch), with the checkpoint id as metadata ...
    let group = &format!("weir.{name}");
    let committed = kafka::committed_offsets(group, &t.input);
    let offsets: BTreeMap<i32, i64> = committed.iter().map(|(p, (o, _))| (*p, *o)).collect();
    assert_eq!(offsets, positions);
    for (_, meta) in committed.values() {
        assert_eq!(meta, &format!("weir:{name}:0:checkpoint={}", last.0));
    }
    // ... and as Kafka's own lag tool (the admin API) sees them: lag 0 after a bounded run.
    let text = kafka::kafka_tool(&[
        "groups",
        "--bootstrap-server",
        &kafka::bootstrap(),
        "--describe",
        "--group",
        group,
    ]);
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 6 && cols[1] == t.input {
            let partition: i32 = cols[2].parse().expect("partition column");
            let current: i64 = cols[3].parse().expect("CURRENT-OFFSET column");
            seen.insert(partition, current);
        }
    }
    assert_eq!(
        seen, positions,
        "kafka-consumer-groups --describe output:\n{text}"
    );
}

fn run_to_end(spec: &Path) {
    let mut child = start(spec, None);
    let status = child.wait().expect("wait");
    let err = take_stderr(&mut child);
    assert!(status.success(), "run failed: {err}");
}

#[test]
fn without_kafka_sources_the_marker_is_an_offset_and_a_record_on_the_progress_topic() {
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: u64 = 20_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("eos-gen");
    let output = kafka::unique_name("eos-gen-out");
    kafka::create_topic(&output, PARTITIONS);
    let source = format!("[[sources]]\ntype = \"generator\"\ncount = {RECORDS}\nseed = 3\n");
    let spec = kafka::uppercase_spec(
        dir.path(),
        &name,
        &dir.path().join("state"),
        r#"interval = "200ms""#,
        &source,
        &output,
        "",
    );
    run_to_end(&spec);
    let values = kafka::committed_values(&output);
    assert_eq!(values.len() as u64, RECORDS);
    assert_eq!(
        multiset(values.iter().cloned()).len() as u64,
        RECORDS,
        "every record once"
    );
    assert!(
        values.iter().all(|v| !v.chars().any(char::is_lowercase)),
        "uppercased"
    );

    // The marker: offset = checkpoint id on partition 0 of the pipeline's progress
    // topic weir.<name>.progress, in the pipeline's group, with the id in the metadata;
    // and the same marker as the newest record of that topic, read_committed.
    let storage =
        CheckpointStorage::open_read_only(dir.path().join("state/checkpoints")).expect("storage");
    let last = storage
        .latest_complete()
        .expect("list")
        .expect("a checkpoint");
    let progress_topic = format!("weir.{name}.progress");
    let marker = format!("weir:{name}:0:checkpoint={}", last.0);
    let committed = kafka::committed_offsets(&format!("weir.{name}"), &progress_topic);
    assert_eq!(committed.get(&0), Some(&(last.0 as i64, marker.clone())));
    let records = kafka::read_all(&progress_topic, "read_committed");
    assert_eq!(
        records.last(),
        Some(&(format!("weir:{name}:0"), marker)),
        "the progress topic's newest marker"
    );
    // A second run resumes from that checkpoint and writes nothing more.
    run_to_end(&spec);
    assert_eq!(kafka::committed_values(&output).len() as u64, RECORDS);
}

/// Produces `count` records to a fresh topic and runs the uppercase pipeline over it to
/// the end, 200 ms checkpoints; `source_extra` and `sink_extra` are more lines of its
/// Kafka source and sink. Returns the records and the output topic.
fn run_uppercase(
    label: &str,
    count: u64,
    source_extra: &str,
    sink_extra: &str,
) -> (Vec<Input>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let in_topic = kafka::unique_name(&format!("{label}-in"));
    let output = kafka::unique_name(&format!("{label}-out"));
    kafka::create_topic(&in_topic, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let records = input(count);
    kafka::produce(&in_topic, &records);
    let source = format!(
        "[[sources]]\ntype = \"kafka\"\ntopic = \"{in_topic}\"\nstart = \"earliest\"\nbounded = true\n{source_extra}"
    );
    let spec = kafka::uppercase_spec(
        dir.path(),
        &kafka::unique_name(label),
        &dir.path().join("state"),
        r#"interval = "200ms""#,
        &source,
        &output,
        sink_extra,
    );
    run_to_end(&spec);
    (records, output)
}

#[test]
fn at_least_once_delivery_writes_every_record() {
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: u64 = 20_000;
    let (records, output) = run_uppercase("alo", RECORDS, "", "delivery = \"at-least-once\"");
    let expected = multiset(records.iter().map(|r| r.value.to_uppercase()));
    // No transactions: read_uncommitted and read_committed see the same records.
    let actual = multiset(
        kafka::read_all(&output, "read_uncommitted")
            .into_iter()
            .map(|(_, v)| v),
    );
    assert_eq!(multiset_diff(&expected, &actual, 10), vec![]);
    assert_eq!(kafka::committed_values(&output).len() as u64, RECORDS);
}

/// Catches: a full producer queue (the smallest `buffer_bytes`, 4,096 records per
/// producer) failing the run or dropping records instead of making the sink wait, or
/// the smallest consumer budget stalling the source.
#[test]
fn the_smallest_queues_apply_backpressure_and_lose_nothing() {
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: u64 = 60_000;
    let (records, output) = run_uppercase(
        "eos-tiny",
        RECORDS,
        "buffer_bytes = \"256KiB\"\n",
        "buffer_bytes = \"2MiB\"",
    );
    let expected = multiset(records.iter().map(|r| r.value.to_uppercase()));
    let actual = multiset(kafka::committed_values(&output));
    assert_eq!(multiset_diff(&expected, &actual, 10), vec![]);
    assert_eq!(actual.values().sum::<usize>() as u64, RECORDS);
}
