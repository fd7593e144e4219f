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

/// Issue 51, item 4: a process stopped (SIGSTOP: a VM pause, a debugger) while its
/// checkpoint waits for the tasks' acknowledgements does not time the checkpoint out
/// for the stop: the round is bounded by the time the process ran. The `sleeper`
/// guest holds the first batch (and so checkpoint 1's barrier) for 2 s; 1.2 s after
/// the start the process is stopped for 8 s, more than the checkpoint timeout of 6 s.
/// After SIGCONT the run goes on and ends: exit 0, every line once, no dead letters
/// (the batch's call, whose deadline passed in the stop, is made again record by
/// record). Before, the coordinator woke past its deadline and failed the run
/// ("checkpoint 1 timed out"). Should the stop land before the guest sleeps (a slow
/// start), nothing waits across it and the run passes as well: the test cannot fail
/// for the timing, only for a round that counts the stop.
#[test]
fn a_stop_longer_than_the_checkpoint_timeout_does_not_time_the_checkpoint_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines: Vec<String> = std::iter::once("sleep 2".to_owned())
        .chain((0..99).map(|i| format!("line {i}")))
        .collect();
    let input = write_file(dir.path(), "in.txt", &(lines.join("\n") + "\n"));
    let text = format!(
        r#"
name = "stopped"
state_dir = {state}

[checkpoint]
interval = "200ms"
timeout = "6s"

[limits]
call_timeout = "4s"

[[sources]]
type = "file"
path = {input}

[[steps]]
type = "map"
module = {sleeper}
on_error = "dead-letter"

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.path().join("state")),
        input = toml_path(&input),
        sleeper = toml_path(&guest("sleeper")),
        out = toml_path(&dir.path().join("out")),
    );
    let spec = write_file(dir.path(), "stopped.toml", &text);
    let mut child = weir()
        .args(["run", "--quiet"])
        .arg(&spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    let pid = Pid::from_raw(child.id() as i32);
    std::thread::sleep(Duration::from_millis(1_200));
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP");
    std::thread::sleep(Duration::from_secs(8));
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    let (status, stderr) =
        weir_tests::wait_until(&mut child, Instant::now() + Duration::from_secs(60), "weir");
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains("100 records in, 100 out, 0 dead letters"),
        "{stderr}"
    );
    assert_eq!(
        multiset(committed_lines(&dir.path().join("out"))),
        multiset(lines.iter().cloned()),
        "{stderr}"
    );
}
