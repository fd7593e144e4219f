//! Checkpoints in an S3-compatible object store (`[checkpoint] dir = "s3://..."`),
//! against the local moto server `make test` starts (`scripts/s3/s3.sh`).
//!
//! The scenario: a keyed, windowed word count over generated records, exactly-once file
//! sink, checkpoints under a fresh prefix of the test bucket. The run is SIGKILLed three
//! times (once just after a checkpoint's `_metadata` was written and before its commit,
//! once in the middle of a state upload, once from outside after a checkpoint completed
//! and output was committed), and every time its local state directory is deleted
//! before the restart, as on a new machine: each restart can only restore from the
//! bucket. The committed output must equal an uninterrupted run's (checkpoints in a
//! local directory), line for line; `weir checkpoints SPEC` must list exactly the
//! bucket's complete checkpoints. Kills are made by fault injection or after waiting
//! for an observed state, never after a guessed delay: time only bounds the waits.
//! Last, a second pipeline pointed at the same prefix is refused and changes nothing.
//!
//! Without the server's environment (`AWS_ENDPOINT_URL`, `WEIR_S3_BUCKET`) the test
//! fails, saying how to start the server, unless `WEIR_SKIP_S3=1` asks to skip it; the
//! harness always sets the environment.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use weir::record::CheckpointId;
use weir::storage::{CheckpointLocation, CheckpointStorage};
use weir_tests::{
    committed_lines, guest, multiset, multiset_diff, s3_bucket, take_stderr, toml_path, weir,
    write_file,
};

const RECORDS: u64 = 200_000;
/// Records per second: paces a run over ~4 s, so checkpoints (every 300 ms) complete
/// while it runs.
const RATE: u64 = 50_000;
/// Bound on any one wait (a run to completion, a checkpoint to appear).
const WAIT_LIMIT: Duration = Duration::from_secs(180);

/// The pipeline, its checkpoints at `checkpoint_dir` (a path or an `s3://` URL).
fn spec(dir: &Path, checkpoint_dir: &str) -> PathBuf {
    let text = format!(
        r#"
name = "s3-word-count"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "300ms"
dir = "{checkpoint_dir}"

[[sources]]
type = "generator"
count = {RECORDS}
rate = {RATE}
keys = 1000
seed = 11
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
window = {{ type = "tumbling", size = "5s" }}

[[sinks]]
type = "file"
path = {out}

[dead_letter]
path = {dead}
"#,
        state = toml_path(&dir.join("state")),
        split = toml_path(&guest("split_words")),
        count = toml_path(&guest("word_count")),
        out = toml_path(&dir.join("out")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, "pipeline.toml", &text)
}

fn start(spec: &Path, fault: Option<&str>) -> Child {
    let mut cmd = weir();
    cmd.args(["run", "--quiet"])
        .arg(spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(fault) = fault {
        cmd.env("WEIR_FAULT", fault);
    }
    cmd.spawn().expect("spawn weir")
}

/// Waits for `child` to exit, within `WAIT_LIMIT` (then kills it and fails).
fn wait(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: still running after {WAIT_LIMIT:?}: {}",
                take_stderr(child)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The machine is lost: its local state directory goes, the bucket stays.
fn lose_local_state(dir: &Path) {
    let state = dir.join("state");
    std::fs::remove_dir_all(&state).expect("remove the local state dir");
    assert!(!state.exists());
}

#[test]
fn a_worker_with_an_empty_disk_restores_from_s3_and_commits_exactly_once() {
    let Some(bucket) = s3_bucket() else { return };

    // The reference: uninterrupted, checkpoints in a local directory.
    let reference = tempfile::tempdir().expect("tempdir");
    let local_checkpoints = reference.path().join("checkpoints");
    let spec_ref = spec(
        reference.path(),
        local_checkpoints.to_str().expect("utf-8 path"),
    );
    let mut child = start(&spec_ref, None);
    let status = wait(&mut child, "the reference run");
    assert!(
        status.success(),
        "the reference run failed: {}",
        take_stderr(&mut child)
    );
    let expected = multiset(committed_lines(&reference.path().join("out")));
    assert!(
        expected.len() > 1000,
        "the reference run produced too little output to compare"
    );

    let crashed = tempfile::tempdir().expect("tempdir");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    let url = format!(
        "s3://{bucket}/e2e/word-count-{}-{nanos}",
        std::process::id()
    );
    let spec_crash = spec(crashed.path(), &url);
    let location = CheckpointLocation::parse(&url).expect("url");

    // 1. Killed after checkpoint 2's metadata reached the bucket, before its commit.
    // 2. Killed in the middle of a state upload to the bucket.
    for fault in ["before-commit:2", "state-upload:3"] {
        let mut child = start(&spec_crash, Some(fault));
        let status = wait(&mut child, fault);
        let err = take_stderr(&mut child);
        assert_eq!(
            status.signal(),
            Some(9),
            "{fault}: the run must SIGKILL itself there: {err}"
        );
        lose_local_state(crashed.path());
    }
    let storage = CheckpointStorage::open_read_only(&location).expect("open the bucket's storage");
    let before = storage.latest_complete().expect("list").expect(
        "the first run completed checkpoint 2 before it was killed: the bucket must hold it",
    );

    // 3. Killed from outside once a newer checkpoint completed and output was committed.
    let mut child = start(&spec_crash, None);
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let newer = storage
            .latest_complete()
            .expect("list")
            .is_some_and(|id| id > before);
        if newer && !committed_lines(&crashed.path().join("out")).is_empty() {
            break;
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!(
                "the third run ended ({status}) before a new checkpoint was seen: {}",
                take_stderr(&mut child)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no new checkpoint in the bucket within {WAIT_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    lose_local_state(crashed.path());

    // 4. To the end, from the bucket again.
    let mut child = start(&spec_crash, None);
    let status = wait(&mut child, "the last run");
    assert!(
        status.success(),
        "the last run failed: {}",
        take_stderr(&mut child)
    );

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
    assert!(committed_lines(&crashed.path().join("dead")).is_empty());
    // Nothing of the checkpoints was kept locally.
    assert!(!crashed.path().join("state/checkpoints").exists());

    // `weir checkpoints SPEC` lists exactly the bucket's complete checkpoints.
    let complete = storage.complete_checkpoints().expect("list");
    assert!(
        complete.len() >= 2 && complete.last().is_some_and(|&id| id > before),
        "the bucket holds the last run's checkpoints: {complete:?}"
    );
    let out = weir()
        .arg("checkpoints")
        .arg(&spec_crash)
        .output()
        .expect("weir checkpoints");
    assert!(
        out.status.success(),
        "weir checkpoints failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<CheckpointId> = stdout
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next()?.parse().ok())
        .map(CheckpointId)
        .collect();
    assert_eq!(listed, complete, "weir checkpoints printed:\n{stdout}");
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.ends_with("(final)")),
        "the last checkpoint is the final one:\n{stdout}"
    );
    // Another pipeline on the same prefix: refused at start, naming both, and the
    // bucket's checkpoints are untouched.
    let other = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(spec(other.path(), &url)).expect("read spec");
    let other_spec = write_file(
        other.path(),
        "other.toml",
        &text.replace("name = \"s3-word-count\"", "name = \"another-pipeline\""),
    );
    let mut child = start(&other_spec, None);
    let status = wait(&mut child, "another pipeline on the prefix");
    let err = take_stderr(&mut child);
    assert!(!status.success(), "another pipeline was let in: {err}");
    assert!(
        err.contains("\"s3-word-count\"") && err.contains("\"another-pipeline\""),
        "the refusal names both pipelines: {err}"
    );
    assert_eq!(storage.complete_checkpoints().expect("list"), complete);
}
