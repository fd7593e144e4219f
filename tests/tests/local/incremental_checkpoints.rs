//! Incremental checkpoints: once a keyed aggregate's state stops changing, every later
//! checkpoint copies no SST file (SSTs are immutable and shared between checkpoints by
//! name), while the checkpoints that captured the changes did upload some.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir_tests::{committed_lines, guest, start_on_stdin, toml_path, write_file};

/// (checkpoint id, files added, bytes added) of every checkpoint in storage.
fn checkpoints(dir: &Path) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("checkpoint dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix("chk-") else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path().join("_metadata")) else {
            continue;
        };
        let m: serde_json::Value = serde_json::from_str(&text).expect("metadata is JSON");
        out.push((
            id.parse().expect("id"),
            m["files_added"].as_u64().expect("files_added"),
            m["bytes_added"].as_u64().expect("bytes_added"),
        ));
    }
    out.sort();
    out
}

/// A stdin -> split-words -> word-count -> file pipeline under `dir`, checkpointing
/// every 100 ms and keeping every checkpoint.
fn write_spec(dir: &Path) -> PathBuf {
    write_file(
        dir,
        "incremental.toml",
        &format!(
            r#"
name = "incremental"
state_dir = {state}

[checkpoint]
interval = "100ms"
retain = 1000

[[sources]]
type = "stdin"

[[steps]]
type = "map"
module = {split}

[[steps]]
type = "aggregate"
module = {count}

[[sinks]]
type = "file"
path = {out}
"#,
            state = toml_path(&dir.join("state")),
            split = toml_path(&guest("split_words")),
            count = toml_path(&guest("word_count")),
            out = toml_path(&dir.join("out")),
        ),
    )
}

#[test]
fn unchanged_state_is_checkpointed_without_copying_sst_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write_spec(dir.path());
    let mut child = start_on_stdin(&spec);
    let mut stdin = child.stdin.take().expect("stdin");
    for i in 0..2000 {
        writeln!(stdin, "word{} common words here", i % 500).expect("write");
    }
    stdin.flush().expect("flush");

    // Wait until the last word's final count is committed: the state stopped changing.
    let started = Instant::now();
    let done = r#"{"word":"common","count":2000}"#;
    while !committed_lines(&dir.path().join("out"))
        .iter()
        .any(|l| l == done)
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "output never committed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let checkpoint_dir = dir.path().join("state/checkpoints");
    let settled = checkpoints(&checkpoint_dir)
        .last()
        .expect("a checkpoint committed the output")
        .0;
    std::thread::sleep(Duration::from_millis(1500));
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let all = checkpoints(&checkpoint_dir);
    let (before, after): (Vec<_>, Vec<_>) = all.iter().partition(|(id, _, _)| *id <= settled);
    assert!(
        before
            .iter()
            .any(|(_, files, bytes)| *files > 0 && *bytes > 0),
        "state was never uploaded: {all:?}"
    );
    assert!(
        after.len() >= 3,
        "expected several idle checkpoints after {settled}: {all:?}"
    );
    for (id, files, bytes) in after {
        assert_eq!(
            (files, bytes),
            (0, 0),
            "checkpoint {id} of unchanged state copied SST files: {all:?}"
        );
    }
}
