//! Stopping a run with SIGINT or SIGTERM: the run commits one more checkpoint, says it
//! was stopped and where it resumes, and exits 130 (SIGINT) or 143 (SIGTERM), never 0
//! as if its input were done. The resumed run then completes the output exactly: every
//! generated record once in the committed file output.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use weir_tests::{
    committed_lines, file_map_spec, guest, multiset, take_stderr, toml_path, weir, write_file,
};

const RECORDS: u64 = 200_000;
/// Paces the run over ~10 s, so the signal lands mid-stream.
const RATE: u64 = 20_000;

fn spec(dir: &Path) -> PathBuf {
    let text = format!(
        r#"
name = "signals"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "300ms"

[[sources]]
type = "generator"
count = {RECORDS}
rate = {RATE}
seed = 11

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        upper = toml_path(&guest("uppercase")),
        out = toml_path(&dir.join("out")),
    );
    write_file(dir, "pipeline.toml", &text)
}

/// Runs the spec, sends `signal` after `after`, and returns (exit code, stderr).
fn run_and_signal(spec: &Path, signal: Signal, after: Duration) -> (Option<i32>, String) {
    let mut child = weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    std::thread::sleep(after);
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the run ended before the signal"
    );
    kill(Pid::from_raw(child.id() as i32), signal).expect("send signal");
    let started = Instant::now();
    let status = child.wait().expect("wait");
    eprintln!("{signal} -> exit in {:?}", started.elapsed());
    (status.code(), take_stderr(&mut child))
}

#[test]
fn sigint_and_sigterm_stop_at_a_committed_checkpoint_and_the_rerun_completes_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec(dir.path());

    for (signal, code, name) in [
        (Signal::SIGINT, 130, "SIGINT"),
        (Signal::SIGTERM, 143, "SIGTERM"),
    ] {
        let (exit, err) = run_and_signal(&spec, signal, Duration::from_millis(2500));
        assert_eq!(exit, Some(code), "{name}: {err}");
        let line = err.trim();
        assert_eq!(line.lines().count(), 1, "one line: {err}");
        assert!(
            line.starts_with("weir: pipeline signals stopped by ")
                && line.contains(name)
                && line.contains("committed, `weir run` resumes from it"),
            "{err}"
        );
        // Some output committed, not all of it.
        let committed = committed_lines(&dir.path().join("out")).len() as u64;
        assert!(committed > 0 && committed < RECORDS, "{name}: {committed}");
    }

    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec)
        .output()
        .expect("run to the end");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = committed_lines(&dir.path().join("out"));
    assert_eq!(lines.len() as u64, RECORDS);
    let distinct = multiset(lines.iter().map(|l| {
        let v: serde_json::Value = serde_json::from_str(&l.to_lowercase()).expect("json");
        v["id"].to_string()
    }));
    assert_eq!(distinct.len() as u64, RECORDS, "every record exactly once");
}

/// Issue 33: SIGINT while a guest call is stuck (an infinite loop) ends the run at the
/// call's deadline (5 s here) with exit 130: the guest's failure is said, then that the
/// run stopped without its stop checkpoint. Before, the failure won: exit 1, as if
/// nobody had asked the run to stop.
#[test]
fn sigint_during_a_stuck_guest_call_exits_130_at_the_call_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\nb\nloop\nc\n");
    let map = file_map_spec("stuck", dir.path(), &input, &guest("infinite_loop"));
    let spec = write_file(
        dir.path(),
        "stuck.toml",
        &format!("{map}\n[limits]\ncall_timeout = \"5s\"\n"),
    );
    let (code, stderr) = run_and_signal(&spec, Signal::SIGINT, Duration::from_secs(2));
    assert_eq!(code, Some(130), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("weir: ")).collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with("weir: error: ")
            && lines[0].contains("infinite_loop.wasm: guest call exceeded its time limit of 5s"),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("weir: pipeline stuck stopped by SIGINT without its stop checkpoint"),
        "{stderr}"
    );
}
