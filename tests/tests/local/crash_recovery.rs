//! Crash test: a keyed, windowed WASM pipeline over 1,000,000 generated records is
//! killed with SIGKILL at random moments and in the middle of a checkpoint, restarted
//! each time, and its committed file output must equal an uninterrupted run's, record
//! for record. The same kills against the at-least-once stdout sink must produce
//! duplicates: proof that the kills hit work in progress and that the test can fail.

use std::path::{Path, PathBuf};

use weir_tests::crash::{self, KillPlan};
use weir_tests::{committed_lines, guest, multiset, multiset_diff, toml_path, weir, write_file};

const RECORDS: u64 = 1_000_000;
const RANDOM_KILLS: usize = 5;
/// Records per second: paces the run over ~10 s so the kills land mid-stream.
const RATE: u64 = 100_000;

fn spec(dir: &Path, sink: &str) -> PathBuf {
    let text = format!(
        r#"
name = "crash-test"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "500ms"

[[sources]]
type = "generator"
count = {RECORDS}
rate = {RATE}
keys = 1000
seed = 7
value_size = 40
time_step = "1ms"
event_time_skew = "400ms"
out_of_orderness = "500ms"

[[steps]]
type = "map"
module = {split}

[[steps]]
type = "aggregate"
module = {count}
window = {{ type = "tumbling", size = "10s" }}

{sink}

[dead_letter]
path = {dead}
"#,
        state = toml_path(&dir.join("state")),
        split = toml_path(&guest("split_words")),
        count = toml_path(&guest("word_count")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, "pipeline.toml", &text)
}

fn file_sink(dir: &Path) -> String {
    format!(
        "[[sinks]]\ntype = \"file\"\npath = {}\n",
        toml_path(&dir.join("out"))
    )
}

/// Self-inflicted SIGKILLs, by attempt: while checkpoint 3 is in flight, and in the
/// middle of a state upload (off the task thread: the third SST file a run uploads,
/// before the rest of its snapshot and the checkpoint's metadata).
const FAULTS: [(usize, &str); 2] = [(1, "checkpoint-triggered:3"), (3, "state-upload:3")];

/// Runs `spec` to completion through `RANDOM_KILLS` external SIGKILLs at random moments
/// and the [`FAULTS`]. Returns the stdout of every attempt, concatenated, and how many
/// kills landed.
fn run_with_kills(spec: &Path, seed: u64) -> (String, usize) {
    let run = crash::run_with_kills(
        spec,
        &KillPlan {
            random_kills: RANDOM_KILLS,
            kill_after_ms: 300..2500,
            faults: FAULTS.to_vec(),
            seed,
        },
    );
    (run.stdout, run.kills)
}

#[test]
fn file_sink_output_is_exactly_once_across_sigkills() {
    let reference = tempfile::tempdir().expect("tempdir");
    let spec_ref = spec(reference.path(), &file_sink(reference.path()));
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec_ref)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "uninterrupted run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = multiset(committed_lines(&reference.path().join("out")));
    assert!(
        expected.len() > 1000,
        "the reference run produced too little output to compare"
    );

    let crashed = tempfile::tempdir().expect("tempdir");
    let spec_crash = spec(crashed.path(), &file_sink(crashed.path()));
    let (_, kills) = run_with_kills(&spec_crash, 0x5eed);
    assert!(kills > RANDOM_KILLS);
    let actual = multiset(committed_lines(&crashed.path().join("out")));
    let diff = multiset_diff(&expected, &actual, 10);
    assert!(
        diff.is_empty(),
        "output differs from the uninterrupted run (line, expected, actual): {diff:?}"
    );
    assert_eq!(
        actual.values().sum::<usize>(),
        expected.values().sum::<usize>()
    );
    // No record was late or rejected: the generator's skew is within the watermark bound.
    assert!(committed_lines(&crashed.path().join("dead")).is_empty());
}

#[test]
fn at_least_once_stdout_sink_duplicates_under_the_same_kills() {
    let reference = tempfile::tempdir().expect("tempdir");
    let spec_ref = spec(reference.path(), "[[sinks]]\ntype = \"stdout\"\n");
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec_ref)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "uninterrupted run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = multiset(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned),
    );

    let crashed = tempfile::tempdir().expect("tempdir");
    let spec_crash = spec(crashed.path(), "[[sinks]]\ntype = \"stdout\"\n");
    let (stdout, _) = run_with_kills(&spec_crash, 0x5eed);
    let actual = multiset(stdout.lines().map(str::to_owned));
    let duplicated = expected
        .iter()
        .filter(|(line, n)| actual.get(*line).copied().unwrap_or(0) > **n)
        .count();
    assert!(
        duplicated > 0,
        "at-least-once output showed no duplicate: the kills did not hit work in progress"
    );
    // At-least-once still loses nothing.
    assert!(
        expected
            .iter()
            .all(|(line, n)| actual.get(line).copied().unwrap_or(0) >= *n)
    );
}

/// Keys of the large-state run: with one subtask, a 1 s interval and 100,000 records a
/// second, some 95,000 accumulators are dirty at each barrier, more than a barrier
/// copies at once (65,536): every checkpoint's copy is spread over the batches after
/// its barrier (`KeyedState::begin_snapshot`).
const LARGE_STATE_KEYS: u64 = 1_000_000;

/// A windowed count over `LARGE_STATE_KEYS` keys in one one-hour window (the 1,000,000
/// records span 1,000 s of event time), fired at the end of input.
fn large_state_spec(dir: &Path) -> PathBuf {
    let text = format!(
        r#"
name = "crash-large-state"
parallelism = 1
state_dir = {state}

[checkpoint]
interval = "1s"

[[sources]]
type = "generator"
count = {RECORDS}
rate = 100000
keys = {LARGE_STATE_KEYS}
seed = 11
value_size = 16
time_step = "1ms"

[[steps]]
type = "aggregate"
module = {count}
window = {{ type = "tumbling", size = "1h" }}

{sink}
"#,
        state = toml_path(&dir.join("state")),
        count = toml_path(&guest("word_count")),
        sink = file_sink(dir),
    );
    write_file(dir, "pipeline.toml", &text)
}

/// Kills during and after checkpoints whose copy is spread over the batches after their
/// barriers (and in the middle of such a checkpoint's upload): every restore must hold
/// each count exactly as of its barrier, or the final counts differ from an
/// uninterrupted run's.
#[test]
fn a_state_copied_after_its_barriers_restores_exactly_across_sigkills() {
    let reference = tempfile::tempdir().expect("tempdir");
    let out = weir()
        .args(["run", "--quiet"])
        .arg(large_state_spec(reference.path()))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "uninterrupted run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = multiset(committed_lines(&reference.path().join("out")));
    assert!(expected.len() > 500_000, "{} counts", expected.len());

    let crashed = tempfile::tempdir().expect("tempdir");
    let run = crash::run_with_kills(
        &large_state_spec(crashed.path()),
        &KillPlan {
            random_kills: 3,
            kill_after_ms: 1_000..3_000,
            faults: vec![(1, "checkpoint-triggered:2"), (3, "state-upload:2")],
            seed: 0x1a56e,
        },
    );
    assert!(run.kills > 3);
    let actual = multiset(committed_lines(&crashed.path().join("out")));
    let diff = multiset_diff(&expected, &actual, 10);
    assert!(
        diff.is_empty(),
        "output differs from the uninterrupted run (line, expected, actual): {diff:?}"
    );
}
