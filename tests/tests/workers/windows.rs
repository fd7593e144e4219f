//! A windowed keyed pipeline as 3 worker processes on one machine (issue 12): event
//! time crosses the Kafka repartition topic as every writer's watermark markers, so a
//! window fires only once every worker upstream of the exchange has passed its end,
//! against the real broker (`KAFKA_BOOTSTRAP`).
//!
//! `windowed-sum` over tumbling 1 s windows, Kafka in (6 partitions, each in event-time
//! order, 6 s of event time) and out (exactly-once). Worker 2 is killed as it starts
//! and started again only after the other two have read their input: its records of
//! the early windows reach the repartition partitions after theirs of every window, so
//! a window fired on what a partition holds (its largest timestamp) would miss them.
//! Then random workers are SIGKILLed and restarted while the input is read. The
//! committed output, read_committed, must hold every (key, window) of the input once,
//! with its exact sum: what the same input gives as one process (in-process shuffle,
//! bounded), and what the input says. A last record per partition, far later, moves
//! every writer's watermark past the data's windows (a worker never sees the end of
//! its input). Then the 3 workers stop with savepoints and 2 rescale from them over a
//! second part of the input, one minute of event time later: again every window once,
//! exact (the old layout's markers, still unread in the topic, must not count); then
//! 3 again over a third part, through SIGKILLs of random workers during the rescale:
//! every window once, exact.
//!
//! A second windowed step behind the sum (per window, the total over every key) runs
//! as 3 workers too: its input crosses a second topic, whose writers are the first
//! stage's subtasks of every worker, and every window's total is committed once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_tests::kafka::{self, Input};
use weir_tests::word_count::Workers;
use weir_tests::{guest, run_spec_ok, toml_path, write_file};

const PARTITIONS: i32 = 6;
const WORKERS: u32 = 3;
const RECORDS_PER_PARTITION: i64 = 120;
/// Event time between two records of a partition: 120 records span 6 windows of 1 s.
const STEP_MS: i64 = 50;
const START_MS: i64 = 1_700_000_000_000;
const KEYS: i64 = 10;
/// The key of the last record of each partition, whose window never closes.
const CLOSER: &str = "closer";
const KILLS: usize = 4;
const MAX_FAILURES: usize = 5;
const WAIT_LIMIT: Duration = Duration::from_secs(300);

/// Per (key, window start): the sums committed to `output`, in output order.
type Sums = BTreeMap<(String, i64), Vec<i64>>;

/// Event time between the first records of two parts of the input; each part ends
/// with a closer at its own start + `PART_MS - 1_000`, past its data.
const PART_MS: i64 = 60_000;

/// Part `part` of the input, and per (key, window start) its sums added to `sums`.
fn input(part: i64, sums: &mut BTreeMap<(String, i64), i64>) -> Vec<Input> {
    let start = START_MS + part * PART_MS;
    let record = |p: i32, n: i64| {
        let key = format!("k{}", (n * 7 + i64::from(p)) % KEYS);
        (key, n % 13 + i64::from(p) + part, start + n * STEP_MS)
    };
    let closer_at = start + PART_MS - 1_000;
    windowed_input(
        (PARTITIONS, RECORDS_PER_PARTITION),
        record,
        |t| t,
        closer_at,
        sums,
    )
}

/// `per_partition` records in each of `partitions` partitions, record n of partition p
/// being `record(p, n)` = (key, value, Kafka timestamp), then the closer at `closer_at`
/// in each; per (key, 1 s window of `event_time(timestamp)`) the values added to `sums`.
fn windowed_input(
    (partitions, per_partition): (i32, i64),
    record: impl Fn(i32, i64) -> (String, i64, i64),
    event_time: impl Fn(i64) -> i64,
    closer_at: i64,
    sums: &mut BTreeMap<(String, i64), i64>,
) -> Vec<Input> {
    let mut records = Vec::new();
    for p in 0..partitions {
        for n in 0..per_partition {
            let (key, value, timestamp) = record(p, n);
            let t = event_time(timestamp);
            *sums
                .entry((key.clone(), t - t.rem_euclid(1_000)))
                .or_default() += value;
            records.push(Input {
                partition: p,
                key,
                value: format!(r#"{{"value":{value}}}"#),
                timestamp,
            });
        }
        records.push(Input {
            partition: p,
            key: CLOSER.to_owned(),
            value: r#"{"value":0}"#.to_owned(),
            timestamp: closer_at,
        });
    }
    records
}

/// What the windowed pipeline does besides its windowed sum.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The windowed sum alone.
    Sum,
    /// Event times moved back 3 s by a `time-shift` map before the sum, under 10 s of
    /// out-of-orderness.
    ShiftedSum,
    /// A second windowed step after the sum, `total`: the same guest keyed by each
    /// result's `window_start`, summing its `sum` in tumbling 1 s windows (a result
    /// carries its window's last millisecond as its event time), so it commits per
    /// window the total over every key.
    SumThenTotal,
}

/// `<name>.toml` in `dir`: the windowed sum (`shape`) from `input` to `output`,
/// parallelism 2, 32 key groups, 300 ms checkpoints; `rate`: records per second each
/// worker reads.
fn spec(
    dir: &Path,
    name: &str,
    (input, output): (&str, &str),
    (rate, bounded): (u64, bool),
    shape: Shape,
) -> PathBuf {
    let total = if shape == Shape::SumThenTotal {
        format!(
            r#"
[[steps]]
type = "aggregate"
name = "total"
module = {sum}
key_field = "window_start"
window = {{ type = "tumbling", size = "1s" }}
config = {{ field = "sum" }}
"#,
            sum = toml_path(&guest("windowed_sum"))
        )
    } else {
        String::new()
    };
    let (ooo, shift) = if shape == Shape::ShiftedSum {
        (
            "out_of_orderness = \"10s\"\n".to_owned(),
            format!(
                "[[steps]]\ntype = \"map\"\nmodule = {}\n\n",
                toml_path(&guest("time_shift"))
            ),
        )
    } else {
        (String::new(), String::new())
    };
    let text = format!(
        r#"
name = "{name}"
parallelism = 2
max_parallelism = 32
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
{ooo}
{shift}[[steps]]
type = "aggregate"
name = "sum"
module = {sum}
window = {{ type = "tumbling", size = "1s" }}
{total}
[[sinks]]
type = "kafka"
topic = "{output}"

[dead_letter]
path = {dead}
"#,
        state = toml_path(&dir.join("state")),
        checkpoints = toml_path(&dir.join("checkpoints")),
        sum = toml_path(&guest("windowed_sum")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, &format!("{name}.toml"), &text)
}

/// Runs `shape` over `input_topic` as one process (in-process shuffle, bounded,
/// uninterrupted) into a new output topic, whose name it returns.
fn one_process_run(test: &str, input_topic: &str, shape: Shape) -> String {
    let (_dir, spec, output) = new_spec(&format!("{test}-single"), input_topic, shape, (0, true));
    run_spec_ok(&spec, "the one-process run");
    output
}

/// The spec of `shape` over `input_topic` for workers, each reading 80 records/s,
/// unbounded, into a new output topic: its directory (kept while it lives), the spec
/// and the output topic.
fn workers_spec(
    test: &str,
    input_topic: &str,
    shape: Shape,
) -> (tempfile::TempDir, PathBuf, String) {
    new_spec(&format!("{test}-workers"), input_topic, shape, (80, false))
}

/// A spec named after `name` of `shape` over `input_topic` into a new output topic,
/// with `spec`'s (rate, bounded): its directory, the spec and the output topic.
fn new_spec(
    name: &str,
    input_topic: &str,
    shape: Shape,
    pace: (u64, bool),
) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = kafka::unique_name(&format!("{name}-out"));
    kafka::create_topic(&output, PARTITIONS);
    let spec = spec(
        dir.path(),
        &kafka::unique_name(name),
        (input_topic, &output),
        pace,
        shape,
    );
    (dir, spec, output)
}

/// The data windows committed to `output` (the closer's left out).
fn committed_sums(output: &str) -> Sums {
    let mut sums = Sums::new();
    for (key, value) in kafka::read_all(output, "read_committed") {
        let json: serde_json::Value =
            serde_json::from_str(&value).unwrap_or_else(|e| panic!("output record {value:?}: {e}"));
        assert_eq!(json["key"].as_str(), Some(key.as_str()), "{value}");
        if key == CLOSER {
            continue;
        }
        let start = json["window_start"]
            .as_i64()
            .unwrap_or_else(|| panic!("{value}"));
        assert_eq!(json["window_end"].as_i64(), Some(start + 1_000), "{value}");
        let sum = json["sum"].as_i64().unwrap_or_else(|| panic!("{value}"));
        sums.entry((key, start)).or_default().push(sum);
    }
    sums
}

/// Every window once, with its sum; names the first difference.
fn assert_exact(committed: &Sums, expected: &BTreeMap<(String, i64), i64>, what: &str) {
    let once: BTreeMap<(String, i64), i64> = committed
        .iter()
        .map(|(window, sums)| {
            assert_eq!(sums.len(), 1, "{what}: window {window:?} fired {sums:?}");
            (window.clone(), sums[0])
        })
        .collect();
    if let Some((window, sum)) = expected.iter().find(|(w, s)| once.get(*w) != Some(*s)) {
        panic!(
            "{what}: window {window:?} should sum to {sum}, committed {:?} ({} of {} windows)",
            once.get(window),
            once.len(),
            expected.len()
        );
    }
    assert_eq!(
        once.len(),
        expected.len(),
        "{what}: windows not in the input"
    );
}

#[test]
fn three_workers_then_two_then_three_fire_each_window_once_with_its_exact_sum() {
    let _one_at_a_time = kafka::exclusive();
    let mut expected = BTreeMap::new();
    let records = input(0, &mut expected);
    let input_topic = kafka::unique_name("windows-in");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::produce(&input_topic, &records);
    let deadline = Instant::now() + WAIT_LIMIT;

    // The reference: one process, in-process shuffle, bounded, uninterrupted.
    let single_out = one_process_run("ws", &input_topic, Shape::Sum);
    assert_exact(&committed_sums(&single_out), &expected, "one process");

    // Each worker reads its 2 partitions (242 records) at 80 records/s: ~3 s.
    let (_dir, spec, output) = workers_spec("ws", &input_topic, Shape::Sum);
    let mut workers = Workers::start(&spec, WORKERS, MAX_FAILURES);
    let late = WORKERS as usize - 1;
    workers.children[late].kill().expect("SIGKILL");
    workers.children[late].wait().expect("reap");
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        committed_sums(&output).is_empty(),
        "a window fired while worker {late} had not written anything"
    );
    workers.restart(late, None);
    workers.sigkill_at_random(21, KILLS, 500..1_500);

    // Workers run until stopped: wait (bounded) for every data window, then SIGTERM.
    wait_for_windows(&output, expected.len(), deadline, &mut workers);
    workers.stop_all(deadline);
    eprintln!(
        "{KILLS} SIGKILLs; {} restarts of workers that failed on their own: {:?}",
        workers.failures.len(),
        workers.failures
    );
    assert_exact(&committed_sums(&output), &expected, "3 workers");

    // Rescale to 2 from the savepoints, over a second part of the input. The 3 workers'
    // last markers (stated at their final barriers, after the readers' last offsets)
    // are still unread in the partitions, under writer numbers the 2 workers reuse:
    // counted as theirs, they would say these writers are past the second part's
    // windows before they wrote any of it.
    kafka::produce(&input_topic, &input(1, &mut expected));
    let mut workers = Workers::start(&spec, 2, MAX_FAILURES);
    wait_for_windows(&output, expected.len(), deadline, &mut workers);
    workers.stop_all(deadline);
    assert_exact(&committed_sums(&output), &expected, "3 workers, then 2");

    // And back to 3 (issue 32: the rescales 3 -> 2 -> 3 of the black-box run), over a
    // third part, through SIGKILLs of random workers while they take the 2 over and
    // read: again every window once, exact.
    kafka::produce(&input_topic, &input(2, &mut expected));
    let mut workers = Workers::start(&spec, WORKERS, MAX_FAILURES);
    workers.sigkill_at_random(32, KILLS, 300..1_500);
    wait_for_windows(&output, expected.len(), deadline, &mut workers);
    workers.stop_all(deadline);
    assert_exact(
        &committed_sums(&output),
        &expected,
        "3 workers, then 2, then 3",
    );
}

/// Waits (bounded) until `output` holds `windows` data windows, restarting workers
/// that failed on their own meanwhile.
fn wait_for_windows(output: &str, windows: usize, deadline: Instant, workers: &mut Workers) {
    loop {
        let seen = committed_sums(output).len();
        if seen >= windows {
            return;
        }
        workers.restart_failed();
        assert!(
            Instant::now() < deadline,
            "the workers committed {seen} of {windows} windows in time"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn event_times_at_and_below_zero_cross_the_repartition_topic_exactly() {
    // Kafka timestamps of 1 ms to 5.9 s after the epoch, moved back 3 s by a map in
    // front of the windowed sum: event times from -2999 to 2901 ms, windows from -3000.
    // As 2 workers, every record crosses the repartition topic, whose Kafka timestamps
    // cannot be negative (and 0 means "now" to the producer): every (key, window) must
    // still be committed once with the sum the input gives. A last record per
    // partition, far later, moves every writer's watermark past the data's windows.
    let _one_at_a_time = kafka::exclusive();
    const SHIFT_PARTITIONS: i32 = 4;
    let mut expected = BTreeMap::new();
    let record = |p: i32, n: i64| {
        let key = format!("k{}", (n + i64::from(p)) % 5);
        (key, n % 7 + i64::from(p), 1 + n * 100)
    };
    let records = windowed_input(
        (SHIFT_PARTITIONS, 60),
        record,
        |t| t - 3_000,
        30_000,
        &mut expected,
    );
    assert!(expected.keys().any(|(_, start)| *start < 0));
    let input_topic = kafka::unique_name("shift-in");
    let output = kafka::unique_name("shift-out");
    kafka::create_topic(&input_topic, SHIFT_PARTITIONS);
    kafka::create_topic(&output, SHIFT_PARTITIONS);
    kafka::produce(&input_topic, &records);
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec(
        dir.path(),
        &kafka::unique_name("ws-shift"),
        (&input_topic, &output),
        (0, false),
        Shape::ShiftedSum,
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut workers = Workers::start(&spec, 2, MAX_FAILURES);
    wait_for_windows(&output, expected.len(), deadline, &mut workers);
    workers.stop_all(deadline);
    assert_exact(&committed_sums(&output), &expected, "2 workers");
}

/// Catches: a second keyed step's topic without watermark markers (its windows would
/// never fire), markers counted from the wrong writers (the first stage's subtasks
/// of every worker: a window fired before a lagging worker's results reached it, so
/// fired again or short), or results crossing it outside the transactions.
#[test]
fn a_windowed_step_behind_another_fires_each_window_once_across_workers() {
    let _one_at_a_time = kafka::exclusive();
    let mut sums = BTreeMap::new();
    let records = input(0, &mut sums);
    // Per window, the total over every key: what `total` commits, keyed by the
    // window's start.
    let mut expected: BTreeMap<(String, i64), i64> = BTreeMap::new();
    for ((_, start), sum) in &sums {
        *expected.entry((start.to_string(), *start)).or_default() += sum;
    }
    // The closers' window: a bounded run fires it at the end of its input (a total of
    // 0), workers never do.
    let totals = |output: &str| {
        let mut committed = committed_sums(output);
        committed.retain(|(_, start), _| *start < START_MS + PART_MS - 1_000);
        committed
    };
    let input_topic = kafka::unique_name("totals-in");
    kafka::create_topic(&input_topic, PARTITIONS);
    kafka::produce(&input_topic, &records);
    let deadline = Instant::now() + WAIT_LIMIT;

    let single_out = one_process_run("wt", &input_topic, Shape::SumThenTotal);
    assert_exact(&totals(&single_out), &expected, "one process");

    let (_dir, spec, output) = workers_spec("wt", &input_topic, Shape::SumThenTotal);
    let mut workers = Workers::start(&spec, WORKERS, MAX_FAILURES);
    workers.sigkill_at_random(33, 2, 500..1_500);
    wait_for_windows(&output, expected.len(), deadline, &mut workers);
    workers.stop_all(deadline);
    assert_exact(&totals(&output), &expected, "3 workers");
}
