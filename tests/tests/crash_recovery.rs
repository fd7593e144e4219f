//! Crash test: a keyed, windowed WASM pipeline over 1,000,000 generated records is
//! killed with SIGKILL at random moments and in the middle of a checkpoint, restarted
//! each time, and its committed file output must equal an uninterrupted run's, record
//! for record. The same kills against the at-least-once stdout sink must produce
//! duplicates: proof that the kills hit work in progress and that the test can fail.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weir_tests::{
    committed_lines, guest, multiset, multiset_diff, take_stderr, toml_path, weir, write_file,
};

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

fn start(spec: &Path, fault: Option<&str>, stdout: Stdio) -> Child {
    let mut cmd = weir();
    cmd.args(["run", "--quiet"])
        .arg(spec)
        .stdout(stdout)
        .stderr(Stdio::piped());
    if let Some(fault) = fault {
        cmd.env("WEIR_FAULT", fault);
    }
    cmd.spawn().expect("spawn weir")
}

/// Self-inflicted SIGKILLs, by attempt: while checkpoint 3 is in flight, and in the
/// middle of a state upload (off the task thread: the third SST file a run uploads,
/// before the rest of its snapshot and the checkpoint's metadata).
const FAULTS: [(usize, &str); 2] = [(1, "checkpoint-triggered:3"), (3, "state-upload:3")];

/// Runs `spec` to completion through `RANDOM_KILLS` external SIGKILLs at random moments
/// and the [`FAULTS`]. Returns the stdout of every attempt, concatenated, and how many
/// kills landed.
fn run_with_kills(spec: &Path, seed: u64) -> (String, usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stdout = String::new();
    let (mut random_kills, mut fault_kills) = (0, 0);
    for attempt in 0.. {
        assert!(
            attempt < 40,
            "pipeline did not finish after {attempt} attempts"
        );
        let fault = FAULTS
            .iter()
            .find(|(at, _)| *at == attempt)
            .map(|(_, fault)| *fault);
        let mut child = start(spec, fault, Stdio::piped());
        let out = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
        let mut killed = false;
        if fault.is_none() && random_kills < RANDOM_KILLS {
            std::thread::sleep(Duration::from_millis(rng.random_range(300..2500)));
            if child.try_wait().expect("try_wait").is_none() {
                child.kill().expect("SIGKILL");
                random_kills += 1;
                killed = true;
            }
        }
        let status = child.wait().expect("wait");
        let err = take_stderr(&mut child);
        stdout.push_str(&reader.join().expect("stdout reader"));
        if killed {
            continue;
        }
        if fault.is_some() {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(9),
                "fault injection must SIGKILL the run: {err}"
            );
            fault_kills += 1;
            continue;
        }
        assert!(status.success(), "attempt {attempt} failed: {err}");
        if random_kills == RANDOM_KILLS && fault_kills == FAULTS.len() {
            return (stdout, random_kills + fault_kills);
        }
    }
    unreachable!()
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
