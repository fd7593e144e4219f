//! Hostile guests: a guest that loops forever, one that eats memory and one that panics
//! each fail their pipeline with an error naming the module, after checkpoints have
//! committed output; the process exits cleanly (no crash), the committed output and the
//! last checkpoint stay intact, and the pipeline resumes from it. A component importing
//! wasi:filesystem and a core module are refused at load.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use weir_tests::{committed_lines, guest, run_weir, stderr_of, toml_path, weir, write_file};

/// Far above the 1 s CPU deadline: only a stuck process takes this long.
const LIVENESS_BOUND: Duration = Duration::from_secs(60);

fn spec(dir: &Path, module: &Path) -> PathBuf {
    write_file(
        dir,
        "hostile.toml",
        &format!(
            r#"
name = "hostile"
state_dir = {state}

[checkpoint]
interval = "100ms"

[limits]
memory = "32MiB"
call_timeout = "1s"

[[sources]]
type = "stdin"

[[steps]]
type = "map"
module = {module}

[[sinks]]
type = "file"
path = {out}
"#,
            state = toml_path(&dir.join("state")),
            module = toml_path(module),
            out = toml_path(&dir.join("out")),
        ),
    )
}

fn start(spec: &Path) -> Child {
    weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir")
}

/// Waits until the committed output holds `lines`.
fn wait_for_output(dir: &Path, lines: &[&str]) {
    let started = Instant::now();
    while committed_lines(&dir.join("out")) != lines {
        assert!(
            started.elapsed() < LIVENESS_BOUND,
            "output never committed: {:?}",
            committed_lines(&dir.join("out"))
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Feeds two good records, waits for their checkpoint to commit, then the trigger;
/// returns the run's stderr after it exited with code 1.
fn run_until_guest_fails(dir: &Path, module: &Path, trigger: &str) -> String {
    let spec = spec(dir, module);
    let mut child = start(&spec);
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"first\nsecond\n").expect("write");
    stdin.flush().expect("flush");
    wait_for_output(dir, &["first", "second"]);
    writeln!(stdin, "{trigger}").expect("write trigger");
    stdin.flush().expect("flush");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            started.elapsed() < LIVENESS_BOUND,
            "the pipeline did not stop its hostile guest"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let err = std::io::read_to_string(child.stderr.take().expect("stderr")).expect("stderr");
    assert_eq!(
        status.code(),
        Some(1),
        "expected a clean failure (exit 1), got {status:?}: {err}"
    );
    // The committed output is intact: nothing lost, nothing of the failed epoch.
    assert_eq!(committed_lines(&dir.join("out")), ["first", "second"]);
    // So is the last checkpoint: it is listed and readable.
    let listed = run_weir(&["checkpoints", spec.to_str().expect("utf-8 path")]);
    assert!(listed.status.success(), "{}", stderr_of(&listed));
    assert!(
        String::from_utf8_lossy(&listed.stdout).lines().count() >= 2,
        "no checkpoint listed"
    );
    err
}

#[test]
fn infinite_loop_is_stopped_at_the_cpu_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = run_until_guest_fails(dir.path(), &guest("infinite_loop"), "loop");
    assert!(err.contains("infinite_loop"), "{err}");
    assert!(err.contains("time limit of 1s"), "{err}");
}

#[test]
fn memory_hog_is_stopped_at_the_memory_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = run_until_guest_fails(dir.path(), &guest("memory_hog"), "hog");
    assert!(err.contains("memory_hog"), "{err}");
    assert!(err.contains("memory limit"), "{err}");
}

#[test]
fn panic_is_reported_with_the_guest_message_and_the_pipeline_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = run_until_guest_fails(dir.path(), &guest("panicker"), "boom");
    assert!(err.contains("panicker"), "{err}");
    assert!(
        err.contains("weir-test: guest panicked on purpose"),
        "{err}"
    );

    // Resume from the last checkpoint with a fixed guest: earlier output stays once.
    let spec = spec(dir.path(), &guest("uppercase"));
    let mut child = start(&spec);
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"third\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("resumed from checkpoint"));
    assert_eq!(
        committed_lines(&dir.path().join("out")),
        ["first", "second", "THIRD"]
    );
}

#[test]
fn filesystem_importer_is_refused_at_load() {
    let out = run_weir(&[
        "validate",
        guest("fs_importer").to_str().expect("utf-8 path"),
    ]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("wasi:filesystem"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn core_module_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").expect("write");
    let out = run_weir(&["validate", core.to_str().expect("utf-8 path")]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("core WebAssembly module"), "{err}");
}

#[test]
fn well_behaved_guests_validate() {
    for (name, world) in [("uppercase", "mapper"), ("word_count", "aggregator")] {
        let out = run_weir(&["validate", guest(name).to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "{}", stderr_of(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(world));
    }
}
