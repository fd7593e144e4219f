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

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::OnceLock;
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

/// What an uninterrupted run (checkpoints in a local directory) commits: the reference
/// every test here compares with, run once per test binary.
fn reference_output() -> &'static BTreeMap<String, usize> {
    static OUTPUT: OnceLock<BTreeMap<String, usize>> = OnceLock::new();
    OUTPUT.get_or_init(|| {
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
        expected
    })
}

/// The machine is lost: its local state directory goes, the bucket stays.
fn lose_local_state(dir: &Path) {
    let state = dir.join("state");
    std::fs::remove_dir_all(&state).expect("remove the local state dir");
    assert!(!state.exists());
}

/// Runs `spec` until storage holds a checkpoint newer than `before` and output under
/// `dir` is committed, then SIGKILLs it.
fn kill_after_a_newer_commit(
    spec: &Path,
    storage: &CheckpointStorage,
    before: CheckpointId,
    dir: &Path,
) {
    let mut child = start(spec, None);
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let newer = storage
            .latest_complete()
            .expect("list")
            .is_some_and(|id| id > before);
        if newer && !committed_lines(&dir.join("out")).is_empty() {
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
}

/// `weir checkpoints SPEC` lists exactly the `complete` checkpoints, the last one final.
fn assert_weir_checkpoints_lists(spec: &Path, complete: &[CheckpointId]) {
    let out = weir()
        .arg("checkpoints")
        .arg(spec)
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
}

/// Another pipeline on the same prefix `url`: refused at start, naming both, and the
/// bucket's checkpoints (`complete`) are untouched.
fn assert_another_pipeline_is_refused_on_the_prefix(
    url: &str,
    storage: &CheckpointStorage,
    complete: &[CheckpointId],
) {
    let other = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(spec(other.path(), url)).expect("read spec");
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

#[test]
fn a_worker_with_an_empty_disk_restores_from_s3_and_commits_exactly_once() {
    let Some(bucket) = s3_bucket() else { return };

    let expected = reference_output();

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
    kill_after_a_newer_commit(&spec_crash, &storage, before, crashed.path());
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
    let diff = multiset_diff(expected, &actual, 10);
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
    assert_weir_checkpoints_lists(&spec_crash, &complete);
    assert_another_pipeline_is_refused_on_the_prefix(&url, &storage, &complete);
}

// ---------------------------------------------------------------------------------
// Damaged checkpoint files
// ---------------------------------------------------------------------------------

/// How a shared file of the checkpoint to restore is damaged from outside Weir.
#[derive(Debug, Clone, Copy)]
enum Damage {
    Deleted,
    /// Cut to half its size.
    Truncated,
    /// 100 bytes of its first data block flipped: same size, wrong bytes.
    Corrupted,
}

impl Damage {
    /// The damaged file's bytes (`None`: deleted).
    fn apply(self, bytes: &[u8]) -> Option<Vec<u8>> {
        match self {
            Damage::Deleted => None,
            Damage::Truncated => Some(bytes[..bytes.len() / 2].to_vec()),
            Damage::Corrupted => {
                assert!(bytes.len() > 800, "an SST of {} bytes", bytes.len());
                let mut damaged = bytes.to_vec();
                for b in &mut damaged[600..700] {
                    *b ^= 0xff;
                }
                Some(damaged)
            }
        }
    }

    /// What the refusal's line must say.
    fn refusal(self) -> &'static str {
        match self {
            Damage::Deleted => "checkpoint storage: missing file ",
            Damage::Truncated => "but its checkpoint recorded",
            // RocksDB checks every block it reads against its checksum.
            Damage::Corrupted => "Corruption: block checksum mismatch",
        }
    }
}

/// Checkpoint storage as the test reaches it from outside: a local directory or an S3
/// prefix, files named by their path below it.
enum Store {
    Local(PathBuf),
    S3 {
        prefix: String,
        client: object_store::aws::AmazonS3,
        runtime: tokio::runtime::Runtime,
    },
}

impl Store {
    fn s3(bucket: &str, prefix: String) -> Store {
        let client = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .expect("an S3 client from the test server's environment");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        Store::S3 {
            prefix,
            client,
            runtime,
        }
    }

    fn read(&self, path: &str) -> Vec<u8> {
        use object_store::ObjectStoreExt;
        match self {
            Store::Local(dir) => std::fs::read(dir.join(path)).expect("read"),
            Store::S3 {
                prefix,
                client,
                runtime,
            } => runtime.block_on(async {
                let key = object_store::path::Path::from(format!("{prefix}/{path}"));
                let got = client.get(&key).await.expect("get");
                got.bytes().await.expect("bytes").to_vec()
            }),
        }
    }

    /// Replaces the file with `bytes`, or deletes it (`None`).
    fn write(&self, path: &str, bytes: Option<Vec<u8>>) {
        use object_store::ObjectStoreExt;
        match (self, bytes) {
            (Store::Local(dir), Some(bytes)) => {
                std::fs::write(dir.join(path), bytes).expect("write")
            }
            (Store::Local(dir), None) => std::fs::remove_file(dir.join(path)).expect("delete"),
            (
                Store::S3 {
                    prefix,
                    client,
                    runtime,
                },
                bytes,
            ) => runtime.block_on(async {
                let key = object_store::path::Path::from(format!("{prefix}/{path}"));
                match bytes {
                    Some(bytes) => drop(client.put(&key, bytes.into()).await.expect("put")),
                    None => client.delete(&key).await.expect("delete"),
                }
            }),
        }
    }
}

/// The first shared file (`shared/<task>/<name>.sst`) checkpoint `id`'s metadata names.
fn a_shared_file_of(storage: &CheckpointStorage, id: CheckpointId) -> String {
    let metadata: serde_json::Value =
        serde_json::from_slice(&storage.read_metadata(id).expect("read metadata"))
            .expect("metadata JSON");
    let tasks = metadata["tasks"].as_object().expect("tasks");
    let (task, name) = tasks
        .values()
        .flat_map(|ops| ops.as_object().expect("operators").values())
        .filter_map(|op| op["shared_files"].as_array()?.first().cloned())
        .map(|f| {
            (
                f[0].as_str().expect("task").to_owned(),
                f[1].as_str().expect("name").to_owned(),
            )
        })
        .next()
        .expect("a keyed step's snapshot names its shared files");
    format!("shared/{task}/{name}.sst")
}

/// One damage on one store: the run is SIGKILLed after its 2nd commit, a shared file
/// of the checkpoint it must restore is damaged, and the restart must be refused with
/// one line naming the damage, discarding nothing; with the file put back, the run
/// finishes and commits exactly what an uninterrupted run does.
fn refused_then_repaired(dir: &Path, checkpoints: &str, store: &Store, damage: Damage) {
    let spec = spec(dir, checkpoints);
    // The 2nd, not a later one: on a loaded machine a slow store completes as few as
    // two periodic checkpoints before the input ends, and the final one is the 3rd.
    let mut child = start(&spec, Some("after-commit:2"));
    assert_eq!(
        wait(&mut child, "the first run").signal(),
        Some(9),
        "{}",
        take_stderr(&mut child)
    );
    let storage = CheckpointStorage::open_read_only(
        CheckpointLocation::parse(checkpoints).expect("location"),
    )
    .expect("storage");
    let restored = storage
        .latest_complete()
        .expect("list")
        .expect("a complete checkpoint");
    let file = a_shared_file_of(&storage, restored);
    let original = store.read(&file);
    store.write(&file, damage.apply(&original));
    lose_local_state(dir);

    let mut child = start(&spec, None);
    let status = wait(&mut child, "the run on the damaged checkpoint");
    let stderr = take_stderr(&mut child);
    let line = stderr.lines().last().unwrap_or("");
    assert_eq!(
        status.code(),
        Some(1),
        "{damage:?} at {checkpoints}: {stderr}"
    );
    assert!(
        line.starts_with("weir: error: ") && line.contains(damage.refusal()),
        "{damage:?} at {checkpoints}: one line naming the damage: {stderr}"
    );
    assert!(
        storage.is_complete(restored).expect("is_complete"),
        "{damage:?} at {checkpoints}: checkpoint {restored} was discarded"
    );

    store.write(&file, Some(original));
    lose_local_state(dir);
    let mut child = start(&spec, None);
    let status = wait(&mut child, "the run after the repair");
    assert!(status.success(), "{damage:?}: {}", take_stderr(&mut child));
    let actual = multiset(committed_lines(&dir.join("out")));
    let diff = multiset_diff(reference_output(), &actual, 10);
    assert!(
        diff.is_empty(),
        "{damage:?} at {checkpoints}: output differs from the uninterrupted run (line, expected, actual): {diff:?}"
    );
}

/// Issue 32: a deleted, truncated or corrupted shared file of the checkpoint a run must
/// restore is refused the same way on S3 as in a local directory (one line naming the
/// missing file, the size the checkpoint recorded, or RocksDB's checksum mismatch),
/// nothing is discarded, and once the file is back the run resumes and its output is
/// exactly an uninterrupted run's. (The truncated file was refused by RocksDB before,
/// naming only the local copy; the size check names the stored file.)
#[test]
fn a_damaged_checkpoint_file_is_refused_alike_on_s3_and_locally_and_a_repair_resumes_exactly() {
    let Some(bucket) = s3_bucket() else { return };
    for damage in [Damage::Deleted, Damage::Truncated, Damage::Corrupted] {
        let local = tempfile::tempdir().expect("tempdir");
        let checkpoints = local.path().join("checkpoints");
        let store = Store::Local(checkpoints.clone());
        let path = checkpoints.to_str().expect("utf-8 path");
        refused_then_repaired(local.path(), path, &store, damage);

        let remote = tempfile::tempdir().expect("tempdir");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        let prefix = format!("e2e/damage-{}-{nanos}", std::process::id());
        let url = format!("s3://{bucket}/{prefix}");
        refused_then_repaired(remote.path(), &url, &Store::s3(&bucket, prefix), damage);
    }
}
