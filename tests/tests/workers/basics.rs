//! A pipeline as N worker processes (`weir run --worker I/N`), against the real broker
//! of the test run (`KAFKA_BOOTSTRAP`): a stateless uppercase map from a 6-partition
//! topic to a Kafka topic, run as 3 workers at once while worker 1 is SIGKILLed and
//! restarted several times; a second process of the same worker; a partition moved
//! between workers by a grown topic, refused; a `--worker` out of range, a usage error
//! (keyed pipelines, with one keyed step or two: `workers/repartition.rs`, windowed
//! ones: `workers/windows.rs`).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_tests::kafka::{self, Input};
use weir_tests::{
    guest, refusal_line, start_worker, take_stderr, toml_path, wait_until, weir, write_file,
};

const PARTITIONS: i32 = 6;
const WORKERS: u32 = 3;

/// Record `seq` of input partition `p`: key `p<p>` (so all of a partition's records
/// land in one output partition, in order), value `p<p>-r<seq>`.
fn input(per_partition: u64) -> Vec<Input> {
    let mut records = Vec::new();
    for seq in 0..per_partition {
        for p in 0..PARTITIONS {
            records.push(Input {
                partition: p,
                key: format!("p{p}"),
                value: format!("p{p}-r{seq:06}"),
                timestamp: 1_700_000_000_000 + seq as i64,
            });
        }
    }
    records
}

/// The spec of the pipeline: Kafka `input` -> uppercase -> Kafka `output`,
/// parallelism 2 per worker, checkpoints every 300 ms; `rate`: records/s each worker
/// reads (0: unthrottled); `bounded`: stop at the input's end.
#[allow(clippy::too_many_arguments)] // each test names every place it uses
fn spec(
    dir: &Path,
    file: &str,
    name: &str,
    input: &str,
    output: &str,
    state: &Path,
    bounded: bool,
    rate: u64,
) -> PathBuf {
    let text = format!(
        r#"
name = "{name}"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "300ms"
dir = {checkpoints}

[[sources]]
type = "kafka"
topic = "{input}"
start = "earliest"
bounded = {bounded}
rate = {rate}

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "kafka"
topic = "{output}"

[dead_letter]
path = {dead}
"#,
        state = toml_path(state),
        checkpoints = toml_path(&dir.join("checkpoints")),
        upper = toml_path(&guest("uppercase")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, file, &text)
}

/// Asserts that `output` holds, read_committed, each input record exactly once,
/// uppercased, and every input partition's records in their input order.
fn assert_each_record_once_in_order(output: &str, per_partition: u64) {
    let committed = kafka::read_all(output, "read_committed");
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, value) in &committed {
        let (p, seq) = value
            .split_once("-R")
            .unwrap_or_else(|| panic!("unexpected output record {value:?}"));
        assert_eq!(key.to_uppercase(), p, "key {key:?} kept with {value:?}");
        seen.entry(p.to_owned())
            .or_default()
            .push(seq.parse().expect("sequence number"));
    }
    assert_eq!(
        committed.len() as u64,
        per_partition * PARTITIONS as u64,
        "each input record exactly once (per partition: {:?})",
        seen.iter().map(|(p, s)| (p, s.len())).collect::<Vec<_>>()
    );
    for p in 0..PARTITIONS {
        let seqs = seen.get(&format!("P{p}")).cloned().unwrap_or_default();
        let expected: Vec<u64> = (0..per_partition).collect();
        assert!(
            seqs == expected,
            "partition {p}: {} records, first out of order or missing at index {:?}",
            seqs.len(),
            seqs.iter().zip(&expected).position(|(a, b)| a != b)
        );
    }
}

/// The transactional ids the broker knows for pipeline `name`, sorted.
fn transactional_ids(name: &str) -> Vec<String> {
    let listed = kafka::kafka_tool(&[
        "transactions",
        "--bootstrap-server",
        &kafka::bootstrap(),
        "list",
    ]);
    let mut ids: Vec<String> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|id| id.starts_with(&format!("weir.{name}.")))
        .map(ToOwned::to_owned)
        .collect();
    ids.sort();
    ids
}

#[test]
fn three_workers_commit_each_record_exactly_once_while_one_is_killed() {
    let _one_at_a_time = kafka::exclusive();
    const PER_PARTITION: u64 = 2_500;
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("workers");
    let input_topic = kafka::unique_name("workers-in");
    let output = kafka::unique_name("workers-out");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    kafka::produce(&input_topic, &input(PER_PARTITION));
    // Each worker reads its 2 partitions at 1,500 records/s: about 3.5 s of work
    // uninterrupted, so the fault points below are reached long before its end.
    let spec = spec(
        dir.path(),
        "workers.toml",
        &name,
        &input_topic,
        &output,
        &dir.path().join("state"),
        true,
        // Slow enough that worker 1's 5,000 records outlast the checkpoints its fault
        // points count, even when a loaded machine makes each checkpoint cover more.
        400,
    );
    let deadline = Instant::now() + Duration::from_secs(240);

    let mut worker_0 = start_worker(&spec, "0/3", None);
    let mut worker_2 = start_worker(&spec, "2/3", None);
    let kills = kill_worker_1_until_it_finishes(&spec, deadline);
    eprintln!("worker 1 was SIGKILLed {kills} times");
    assert!(kills >= 3, "the fault points must have killed worker 1");

    // Restarting worker 1 (same transactional ids as itself, none of theirs) fenced
    // neither of the others: their first processes finish on their own.
    for (i, worker) in [(0, &mut worker_0), (2, &mut worker_2)] {
        let (status, err) = wait_until(worker, deadline, &format!("worker {i}"));
        assert!(status.success(), "worker {i} failed: {err}");
        assert!(!err.contains("fenced"), "worker {i}: {err}");
        assert!(
            err.contains(&format!("pipeline {name} (worker {i}/3) finished")),
            "worker {i}: {err}"
        );
    }

    assert_each_record_once_in_order(&output, PER_PARTITION);

    assert_each_worker_is_a_unit_of_its_own(dir.path(), &name, &input_topic, PER_PARTITION);
}

/// Worker 1 of `spec` dies by SIGKILL three times at points of the commit protocol
/// (the n-th time it reaches them, so they land whatever the timing), once more from
/// outside at a random moment if it is still running then, and finishes on its last
/// start; returns how many times it was killed.
fn kill_worker_1_until_it_finishes(spec: &Path, deadline: Instant) -> usize {
    let faults = [
        Some("after-pre-commit:2"),
        Some("before-commit:1"),
        Some("after-commit-request:2"),
        None,
        None,
    ];
    let mut rng = StdRng::seed_from_u64(12);
    let mut kills = 0;
    for (attempt, fault) in faults.iter().enumerate() {
        let mut worker_1 = start_worker(spec, "1/3", *fault);
        let last = attempt + 1 == faults.len();
        if fault.is_none() && !last {
            std::thread::sleep(Duration::from_millis(rng.random_range(1_000..3_000)));
            if worker_1.try_wait().expect("try_wait").is_none() {
                worker_1.kill().expect("SIGKILL");
                kills += 1;
            }
        }
        let (status, err) = wait_until(&mut worker_1, deadline, "worker 1");
        if fault.is_some() {
            assert_eq!(
                status.signal(),
                Some(9),
                "attempt {attempt} of worker 1 must die at {fault:?}: {err}"
            );
            kills += 1;
        } else if last || status.signal() != Some(9) {
            assert!(status.success(), "worker 1, attempt {attempt}: {err}");
            if !last {
                break;
            }
        }
    }
    kills
}

/// Each worker is a commit unit of its own: its own two transactional ids, its own
/// offsets in the shared group (the marker naming pipeline and worker), its own
/// checkpoints and state.
fn assert_each_worker_is_a_unit_of_its_own(
    dir: &Path,
    name: &str,
    input_topic: &str,
    per_partition: u64,
) {
    let expected_ids: Vec<String> = (0..WORKERS)
        .flat_map(|i| [0, 1].map(|slot| format!("weir.{name}.{i}-of-{WORKERS}.{slot}")))
        .collect();
    assert_eq!(transactional_ids(name), expected_ids);
    let offsets = kafka::committed_offsets(&format!("weir.{name}"), input_topic);
    assert_eq!(offsets.len(), PARTITIONS as usize, "{offsets:?}");
    let mut units: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (p, (offset, metadata)) in &offsets {
        assert_eq!(
            *offset, per_partition as i64,
            "partition {p} read to its end"
        );
        let unit = metadata
            .strip_prefix(&format!("weir:{name}:"))
            .and_then(|rest| rest.split_once(":checkpoint="))
            .map(|(unit, _)| unit.to_owned())
            .unwrap_or_else(|| panic!("partition {p}: marker {metadata:?}"));
        units.entry(unit).or_default().push(*p);
    }
    // The assignment's shares, as `weir::cluster::assignment` defines them.
    let all: Vec<(String, i32)> = (0..PARTITIONS)
        .map(|p| (input_topic.to_owned(), p))
        .collect();
    let shares = weir::cluster::assignment::assign(
        WORKERS,
        &all,
        weir::cluster::KeyGroupRanges::one_per_group(128),
    );
    for (i, share) in shares.iter().enumerate() {
        let mine: Vec<i32> = share.partitions.iter().map(|(_, p)| *p).collect();
        assert_eq!(mine.len(), 2, "balanced");
        assert_eq!(
            units.get(&format!("{i}-of-{WORKERS}")),
            Some(&mine),
            "worker {i}'s partitions"
        );
        let checkpoints = dir.join(format!("checkpoints/worker-{i}-of-3"));
        let storage = weir::storage::CheckpointStorage::open_read_only(&checkpoints)
            .expect("worker checkpoints");
        assert!(
            storage.latest_complete().expect("list").is_some(),
            "worker {i} checkpoints in {}",
            checkpoints.display()
        );
        assert!(
            dir.join(format!("state/worker-{i}-of-3/weir.lock"))
                .is_file()
        );
    }
}

/// Waits (bounded) until `worker` of pipeline `name` has committed (its marker is in
/// the group's offsets of `input_topic`), failing if it ends first.
fn wait_for_a_commit(
    worker: &mut std::process::Child,
    name: &str,
    input_topic: &str,
    deadline: Instant,
) {
    let group = format!("weir.{name}");
    while kafka::committed_offsets(&group, input_topic).is_empty() {
        assert!(Instant::now() < deadline, "the worker committed nothing");
        assert!(
            worker.try_wait().expect("try_wait").is_none(),
            "the worker ended early: {}",
            take_stderr(worker)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// On the same machine (same spec, same state dir) as the running `first`, worker 1/2
/// of `spec` is refused by the state dir lock, before it fences anything.
fn assert_refused_on_the_same_machine(spec: &Path, first: &mut std::process::Child) {
    let same_machine = weir()
        .args(["run", "--quiet", "--worker", "1/2"])
        .arg(spec)
        .output()
        .expect("run");
    assert!(!same_machine.status.success());
    let line = refusal_line(&same_machine);
    assert!(
        line.contains(&format!(
            "is in use by another weir process (pid {})",
            first.id()
        )) && line.contains("worker-1-of-2"),
        "{line}"
    );
    assert!(
        first.try_wait().expect("try_wait").is_none(),
        "the first still runs"
    );
}

#[test]
fn a_second_process_of_the_same_worker_is_refused_or_fences_the_first() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("workers-twice");
    let input_topic = kafka::unique_name("workers-twice-in");
    let output = kafka::unique_name("workers-twice-out");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    kafka::produce(&input_topic, &input(500));
    // Unbounded: the first process runs until something stops it.
    let spec_a = spec(
        dir.path(),
        "a.toml",
        &name,
        &input_topic,
        &output,
        &dir.path().join("state-a"),
        false,
        0,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut first = start_worker(&spec_a, "1/2", None);
    wait_for_a_commit(&mut first, &name, &input_topic, deadline);

    assert_refused_on_the_same_machine(&spec_a, &mut first);

    // Worker 0/2 (another commit unit) does not disturb it either: it runs to the end
    // of its partitions, and the first keeps running.
    let spec_bounded = spec(
        dir.path(),
        "bounded.toml",
        &name,
        &input_topic,
        &output,
        &dir.path().join("state-b"),
        true,
        0,
    );
    let mut other = start_worker(&spec_bounded, "0/2", None);
    let (status, err) = wait_until(&mut other, deadline, "worker 0/2");
    assert!(status.success(), "worker 0/2: {err}");
    assert!(
        first.try_wait().expect("try_wait").is_none(),
        "1/2 not fenced by 0/2"
    );

    // On another machine (its own state dir, the shared checkpoint dir): the same
    // transactional ids, so it fences the first, which stops with one line saying so.
    let mut second = start_worker(&spec_bounded, "1/2", None);
    let (status, err) = wait_until(&mut first, deadline, "the fenced first process");
    assert!(!status.success(), "the fenced process must fail");
    assert!(
        err.contains("was fenced") && err.contains(&format!("another instance of pipeline {name}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("weir.{name}.1-of-2.")),
        "names its transactional id: {err}"
    );
    let (status, err) = wait_until(&mut second, deadline, "the second process");
    assert!(status.success(), "the fencing process: {err}");
    assert_each_record_once_in_order(&output, 500);
}

#[test]
fn a_worker_flag_out_of_range_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = format!(
        r#"
name = "wc"
state_dir = {state}

[[sources]]
type = "kafka"
topic = "in"
bootstrap = "127.0.0.1:1"

[[steps]]
type = "map"
module = {split}

[[steps]]
type = "aggregate"
name = "count-words"
module = {count}

[[steps]]
type = "aggregate"
name = "again"
module = {count}

[[sinks]]
type = "kafka"
topic = "out"
bootstrap = "127.0.0.1:1"
"#,
        state = toml_path(&dir.path().join("state")),
        split = toml_path(&guest("split_words")),
        count = toml_path(&guest("word_count")),
    );
    let spec = write_file(dir.path(), "wc.toml", &text);
    // The flag's own refusals.
    for (value, says) in [
        (
            "3/3",
            "worker 3 does not exist among 3 workers (I counts from 0, so I < N)",
        ),
        ("0/0", "N must be at least 1"),
    ] {
        let out = weir()
            .args(["run", "--worker", value])
            .arg(&spec)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "a usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines().next().is_some_and(|l| l.contains(says)),
            "{value}: {err}"
        );
    }
}

#[test]
fn a_partition_moved_to_another_worker_by_a_new_partition_is_refused() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let name = kafka::unique_name("workers-grow");
    let input_topic = kafka::unique_name("workers-grow-in");
    let output = kafka::unique_name("workers-grow-out");
    kafka::create_topic(&input_topic, 4);
    kafka::create_topic(&output, 4);
    let records: Vec<Input> = input(300).into_iter().filter(|r| r.partition < 4).collect();
    kafka::produce(&input_topic, &records);
    let spec = spec(
        dir.path(),
        "grow.toml",
        &name,
        &input_topic,
        &output,
        &dir.path().join("state"),
        true,
        0,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    for worker in ["0/2", "1/2"] {
        let (status, err) = wait_until(&mut start_worker(&spec, worker, None), deadline, worker);
        assert!(status.success(), "worker {worker}: {err}");
    }
    // 4 partitions: worker 0 owns 0-1, worker 1 owns 2-3; with 5, worker 0 owns 0-2.
    let shares = |count: i32| {
        let all: Vec<(String, i32)> = (0..count).map(|p| (input_topic.clone(), p)).collect();
        weir::cluster::assignment::assign(2, &all, weir::cluster::KeyGroupRanges::one_per_group(1))
    };
    assert_eq!(shares(4)[1].partitions[0].1, 2);
    assert_eq!(shares(5)[0].partitions[2].1, 2);
    kafka::kafka_tool(&[
        "topics",
        "--alter",
        "--topic",
        &input_topic,
        "--partitions",
        "5",
        "--bootstrap-server",
        &kafka::bootstrap(),
    ]);
    let out = weir()
        .args(["run", "--quiet", "--worker", "0/2"])
        .arg(&spec)
        .output()
        .expect("run");
    let line = refusal_line(&out);
    assert!(
        line.contains(&format!(
            "partition {input_topic}-2 is worker 0/2's now, but worker 1/2 of the pipeline committed its offset"
        )),
        "{line}"
    );
    // Nothing was read twice.
    assert_eq!(kafka::committed_values(&output).len(), records.len());
}
