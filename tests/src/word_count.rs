//! The keyed word count run as worker processes, shared by the workers tests
//! (`workers/repartition.rs`, `workers/rescale.rs`): its input, its spec (and one with
//! a second keyed step, `histogram_spec`), the worker processes, and the exactness
//! check of its committed output.
//!
//! The pipeline: split-words map + unwindowed word-count aggregate, Kafka in and out
//! (exactly-once), `batch_size = 1` (an unwindowed aggregate emits once per update
//! call, so a batch holding a word twice would skip a count). What an uninterrupted
//! run commits is, per word, the counts 1, 2, 3, ... up to the word's number of
//! occurrences, in that order (`assert_exact`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Child;

use crate::kafka::{self, Input};
use crate::{guest, start_worker, take_stderr, toml_path, wait_until, write_file};

/// Distinct words per input line, out of `VOCABULARY`.
pub const WORDS_PER_LINE: usize = 4;
/// Distinct words of the input.
pub const VOCABULARY: usize = 40;

/// Lines `lines` of each of `partitions` partitions (line `n` of partition `p`:
/// `WORDS_PER_LINE` distinct words of the vocabulary), and how often each word occurs
/// in them.
pub fn input(partitions: i32, lines: Range<usize>) -> (Vec<Input>, BTreeMap<String, u64>) {
    let mut records = Vec::new();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for n in lines {
        for p in 0..partitions {
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

/// Adds `more` occurrence counts to `totals`.
pub fn add_totals(totals: &mut BTreeMap<String, u64>, more: &BTreeMap<String, u64>) {
    for (word, n) in more {
        *totals.entry(word.clone()).or_default() += n;
    }
}

/// The key groups of `spec`, cut into its repartition topic's partitions.
pub const REPARTITION: weir::cluster::KeyGroupRanges = weir::cluster::KeyGroupRanges::new(32, 8);

/// Writes `<name>.toml` in `dir`: the word count from `input` to `output`, parallelism
/// 2, 32 key groups in 8 ranges (across workers, 8 repartition partitions of 4 key
/// groups each: `REPARTITION`), checkpoints every 300 ms into `checkpoints` (a path or an `s3://`
/// URL); `rate`: input lines per second each worker reads (0: unlimited); `bounded`:
/// stop at the input's end (one process only: a worker with a repartition topic runs
/// until stopped).
pub fn spec(
    dir: &Path,
    name: &str,
    (input, output): (&str, &str),
    checkpoints: &str,
    rate: u64,
    bounded: bool,
) -> PathBuf {
    spec_with_steps(dir, name, (input, output), checkpoints, (rate, bounded), "")
}

/// `spec`, then a second keyed step, `histogram`: the word-count guest again, keyed by
/// the first step's `count` field, so it counts how many words reached each count.
/// Across workers each keyed step has a repartition topic of its own. What an
/// uninterrupted run commits is `assert_exact` of `histogram(totals)`.
pub fn histogram_spec(
    dir: &Path,
    name: &str,
    (input, output): (&str, &str),
    checkpoints: &str,
    rate: u64,
    bounded: bool,
) -> PathBuf {
    let histogram = format!(
        r#"
[[steps]]
type = "aggregate"
name = "histogram"
module = {count}
key_field = "count"
"#,
        count = toml_path(&guest("word_count")),
    );
    spec_with_steps(
        dir,
        name,
        (input, output),
        checkpoints,
        (rate, bounded),
        &histogram,
    )
}

/// What `histogram_spec`'s second step counts for words occurring `totals` times: per
/// count c (its JSON text), how many words reached it (every word emits its counts 1,
/// 2, ... up to its total, once each).
pub fn histogram(totals: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut reached: BTreeMap<u64, u64> = BTreeMap::new();
    for &total in totals.values() {
        for c in 1..=total {
            *reached.entry(c).or_default() += 1;
        }
    }
    reached
        .into_iter()
        .map(|(c, words)| (c.to_string(), words))
        .collect()
}

fn spec_with_steps(
    dir: &Path,
    name: &str,
    (input, output): (&str, &str),
    checkpoints: &str,
    (rate, bounded): (u64, bool),
    more_steps: &str,
) -> PathBuf {
    let text = format!(
        r#"
name = "{name}"
parallelism = 2
max_parallelism = 32
repartition_partitions = 8
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
{more_steps}
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

/// The worker processes of one layout (`count` workers of `spec`); any still running
/// when it is dropped (a failed assertion) is SIGKILLed and reaped, so no worker
/// outlives its test.
pub struct Workers {
    spec: PathBuf,
    count: u32,
    pub children: Vec<Child>,
    /// Restarts of workers that failed on their own (see `restart_failed`).
    pub failures: Vec<String>,
    /// Most such restarts before the test fails.
    max_failures: usize,
}

impl Workers {
    /// Starts workers `0..count` of `count`; at most `max_failures` restarts of
    /// workers failing on their own are tolerated.
    pub fn start(spec: &Path, count: u32, max_failures: usize) -> Workers {
        Workers::start_with_fault(spec, count, max_failures, None)
    }

    /// `start`, worker `i` with `WEIR_FAULT=fault` for `Some((i, fault))`.
    pub fn start_with_fault(
        spec: &Path,
        count: u32,
        max_failures: usize,
        fault: Option<(u32, &str)>,
    ) -> Workers {
        let fault_of = |i| fault.filter(|(f, _)| *f == i).map(|(_, point)| point);
        Workers {
            spec: spec.to_owned(),
            count,
            children: (0..count)
                .map(|i| start_worker(spec, &format!("{i}/{count}"), fault_of(i)))
                .collect(),
            failures: Vec::new(),
            max_failures,
        }
    }

    /// Starts worker `i` again (its previous process has ended), with `WEIR_FAULT`
    /// set to `fault` if given.
    pub fn restart(&mut self, i: usize, fault: Option<&str>) {
        self.children[i] = start_worker(&self.spec, &format!("{i}/{}", self.count), fault);
    }

    /// A worker that ended on its own failed (a commit that timed out on a loaded
    /// broker fails the worker into recovery): restart it, as an orchestrator would,
    /// at most `max_failures` times in all; a worker that exits 0 or panics is a bug.
    pub fn restart_failed(&mut self) {
        for i in 0..self.children.len() {
            let Some(status) = self.children[i].try_wait().expect("try_wait") else {
                continue;
            };
            let err = take_stderr(&mut self.children[i]);
            assert!(
                !status.success() && !err.contains("panicked"),
                "worker {i}/{} ended ({status}): {err}",
                self.count
            );
            self.failures
                .push(format!("worker {i}/{}: {err}", self.count));
            assert!(
                self.failures.len() <= self.max_failures,
                "workers failed on their own too often: {:#?}",
                self.failures
            );
            self.restart(i, None);
        }
    }

    /// `kills` times: waits a random pause in `pause_ms`, restarts workers that failed
    /// on their own, then SIGKILLs a random worker and starts it again (the random
    /// choices from `seed`, so a failing run can be replayed).
    pub fn sigkill_at_random(&mut self, seed: u64, kills: usize, pause_ms: Range<u64>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for _ in 0..kills {
            std::thread::sleep(std::time::Duration::from_millis(
                rng.random_range(pause_ms.clone()),
            ));
            self.restart_failed();
            let i = rng.random_range(0..self.children.len());
            self.children[i].kill().expect("SIGKILL");
            self.children[i].wait().expect("reap");
            self.restart(i, None);
        }
    }

    /// SIGTERM to every worker: each commits a final checkpoint and exits 143 (by
    /// `deadline`).
    pub fn stop_all(&mut self, deadline: std::time::Instant) {
        for (i, w) in self.children.iter_mut().enumerate() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(w.id()).expect("a pid"));
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
            let (status, err) = wait_until(w, deadline, &format!("worker {i} after SIGTERM"));
            assert_eq!(status.code(), Some(143), "worker {i}: {err}");
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
pub fn committed_counts(output: &str) -> BTreeMap<String, Vec<u64>> {
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
pub fn assert_exact(counts: &BTreeMap<String, Vec<u64>>, totals: &BTreeMap<String, u64>) {
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

/// Waits until `output` holds at least `at_least` committed counts, calling
/// `meanwhile` between looks (to restart failed workers, say); panics at `deadline`.
pub fn wait_for_counts(
    output: &str,
    at_least: usize,
    deadline: std::time::Instant,
    mut meanwhile: impl FnMut(),
) {
    loop {
        let seen = total_records(&committed_counts(output));
        if seen >= at_least {
            return;
        }
        meanwhile();
        assert!(
            std::time::Instant::now() < deadline,
            "{seen} of {at_least} counts committed in time"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// How many counts were committed in all.
pub fn total_records(counts: &BTreeMap<String, Vec<u64>>) -> usize {
    counts.values().map(Vec::len).sum()
}
