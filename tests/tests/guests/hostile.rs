//! Hostile guests: a guest that loops forever, one that sleeps in a host call far past
//! its deadline, one that eats memory and one that panics each fail their pipeline with
//! an error naming the module, after checkpoints have committed output; the process
//! exits cleanly (no crash), the committed output and the last checkpoint stay intact,
//! and the pipeline resumes from it. A guest probing the WASI sandbox (files,
//! environment, TCP to a port really listening, UDP, DNS), in `weir run` and through
//! the engine alone, is denied each inside the guest and gets no data; a component
//! importing a foreign interface or wasi:http and a core module are refused at load.
//! A map's panic names the record by its index and key. A panic message cannot forge
//! an error line; `weir validate` refuses devices, FIFOs and oversized files without
//! reading them, and prints one line for a component wasmtime would warn about.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weir::engine::{GuestLimits, WasmEngine};
use weir::record::batch::RecordBatch;
use weir_tests::{
    FOREIGN_IMPORT_REFUSAL, FOREIGN_IMPORTER_WAT, SandboxProbes, committed_lines, file_map_spec,
    guest, refusal_line, run_weir, start_on_stdin, stderr_of, toml_path, weir, write_file,
};

/// Far above the 1 s CPU deadline: only a stuck process takes this long.
const LIVENESS_BOUND: Duration = Duration::from_secs(60);

/// The one error line of a run whose `sleeper` guest slept past its deadline: the
/// usual deadline error, naming the module, as for a guest that loops.
const SLEEPER_DEADLINE_LINE: &str = "weir: error: pipeline hostile, task src0-0, operator step-0: \
    on input record 2 of this subtask: \
    sleeper.wasm: guest call exceeded its time limit of 1s and was stopped";

/// How the run ended after its trigger.
struct GuestFailure {
    /// The run's stderr.
    stderr: String,
    /// From writing the trigger to the process's exit.
    after_trigger: Duration,
}

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
/// returns the run's stderr and how long it took to stop after the trigger, once it
/// exited with code 1 within `stop_within` of the trigger (else it is killed and the
/// test fails).
fn run_until_guest_fails(
    dir: &Path,
    module: &Path,
    trigger: &str,
    stop_within: Duration,
) -> GuestFailure {
    let spec = spec(dir, module);
    let mut child = start_on_stdin(&spec);
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
        if started.elapsed() >= stop_within {
            // Do not leave a stuck run behind.
            let _ = child.kill();
            let _ = child.wait();
            panic!("the pipeline did not stop its hostile guest within {stop_within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let after_trigger = started.elapsed();
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
    GuestFailure {
        stderr: err,
        after_trigger,
    }
}

/// The error lines (`weir: error: ...`) of a run's stderr.
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("weir: error:"))
        .collect()
}

/// Resumes the pipeline in `dir` from its last checkpoint with the well-behaved
/// `uppercase` guest and one more record: the earlier output stays, once.
fn resume_with_a_fixed_guest(dir: &Path) {
    let spec = spec(dir, &guest("uppercase"));
    let mut child = start_on_stdin(&spec);
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
        committed_lines(&dir.join("out")),
        ["first", "second", "THIRD"]
    );
}

#[test]
fn infinite_loop_is_stopped_at_the_cpu_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err =
        run_until_guest_fails(dir.path(), &guest("infinite_loop"), "loop", LIVENESS_BOUND).stderr;
    assert!(err.contains("infinite_loop"), "{err}");
    assert!(err.contains("time limit of 1s"), "{err}");
}

#[test]
fn memory_hog_is_stopped_at_the_memory_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = run_until_guest_fails(dir.path(), &guest("memory_hog"), "hog", LIVENESS_BOUND).stderr;
    assert!(err.contains("memory_hog"), "{err}");
    assert!(err.contains("memory limit"), "{err}");
}

#[test]
fn panic_is_reported_with_the_guest_message_and_the_pipeline_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = run_until_guest_fails(dir.path(), &guest("panicker"), "boom", LIVENESS_BOUND).stderr;
    assert!(err.contains("panicker"), "{err}");
    assert!(
        err.contains("weir-test: guest panicked on purpose"),
        "{err}"
    );

    // Resume from the last checkpoint with a fixed guest: earlier output stays once.
    resume_with_a_fixed_guest(dir.path());
}

#[test]
fn sleep_in_a_host_call_is_stopped_at_the_deadline_and_the_pipeline_resumes() {
    // A guest sleeping 300 s (std::thread::sleep: blocked inside the host, where no
    // epoch check runs) under a 1 s deadline is stopped at the deadline with the same
    // error as a loop, long before its sleep ends (the bound is loose on purpose).
    let dir = tempfile::tempdir().expect("tempdir");
    let failure = run_until_guest_fails(
        dir.path(),
        &guest("sleeper"),
        "sleep 300",
        Duration::from_secs(20),
    );
    assert!(
        failure.after_trigger < Duration::from_secs(20),
        "{:?}",
        failure.after_trigger
    );
    assert_eq!(
        error_lines(&failure.stderr),
        [SLEEPER_DEADLINE_LINE],
        "{}",
        failure.stderr
    );
    resume_with_a_fixed_guest(dir.path());
}

#[test]
fn the_sandbox_probe_gets_no_file_environment_or_network() {
    // A guest importing all of WASI 0.2 loads, and each probe it runs in `weir run`
    // (file source -> map -> file sink) is denied inside the guest: no file data (the
    // file exists on this host), no environment, no argument, no connection to a TCP
    // port this test really listens on, no datagram to a UDP socket it holds, no DNS,
    // nothing on stdin.
    let dir = tempfile::tempdir().expect("tempdir");
    let probes = SandboxProbes::new(dir.path().join("written-by-the-guest"));
    let input: String = probes.probes().iter().map(|p| format!("{p}\n")).collect();
    let input = write_file(dir.path(), "probes.txt", &input);
    let spec = write_file(
        dir.path(),
        "probe.toml",
        &file_map_spec("probe", dir.path(), &input, &guest("sandbox_probe")),
    );
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", stderr_of(&out));

    let mut got = committed_lines(&dir.path().join("out"));
    got.sort();
    let mut want = probes.answers();
    want.sort();
    assert_eq!(got, want);
    probes.assert_nothing_reached();
}

#[test]
fn the_sandbox_probe_in_process_imports_wasi_and_gets_nothing() {
    // The same probes through the engine alone, one batch: the component really
    // imports filesystem, sockets and environment, and every probe fails in the guest.
    let probes = SandboxProbes::new(
        std::env::temp_dir().join(format!("weir-sandbox-probe-{}", std::process::id())),
    );
    let engine = WasmEngine::new(None).expect("engine");
    let module = engine
        .load(&guest("sandbox_probe"))
        .expect("load sandbox_probe");
    for wanted in [
        "wasi:filesystem/preopens@0.2",
        "wasi:sockets/tcp@0.2",
        "wasi:cli/environment@0.2",
    ] {
        assert!(
            module.imports().iter().any(|i| i.starts_with(wanted)),
            "{wanted}: {:?}",
            module.imports()
        );
    }
    let mut mapper = module
        .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
        .expect("inst");
    let mut input = RecordBatch::default();
    for (i, probe) in probes.probes().iter().enumerate() {
        input.push(format!("k{i}").as_bytes(), probe.as_bytes(), i as i64);
    }
    let out = mapper.map(input).expect("map");
    let got: Vec<String> = out
        .records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value).into_owned())
        .collect();
    assert_eq!(got, probes.answers());
    assert!(out.rejections.is_empty());
    probes.assert_nothing_reached();
}

#[test]
fn a_foreign_import_is_refused_at_load_naming_every_offender() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("evil.wasm");
    std::fs::write(&path, wat::parse_str(FOREIGN_IMPORTER_WAT).expect("wat")).expect("write");
    let out = run_weir(&["validate", path.to_str().expect("utf-8 path")]);
    assert_eq!(
        refusal_line(&out),
        format!("weir: error: evil.wasm: {FOREIGN_IMPORT_REFUSAL}")
    );
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

#[test]
fn a_panic_message_cannot_forge_an_error_line() {
    // The panicker's message holds "\nweir: error: forged by the guest": it is printed
    // escaped, inside the one error line that names the module (today: a second,
    // forged `weir: error:` line).
    let dir = tempfile::tempdir().expect("tempdir");
    let failure = run_until_guest_fails(dir.path(), &guest("panicker"), "forge", LIVENESS_BOUND);
    assert_eq!(
        error_lines(&failure.stderr),
        [FORGED_PANIC_LINE],
        "{}",
        failure.stderr
    );
    // The panic is reported once, on that line: not also as guest stderr lines.
    assert_eq!(
        failure.stderr.lines().collect::<Vec<_>>(),
        [FORGED_PANIC_LINE]
    );
}

/// The one error line of the forging panic: the guest's line break escaped.
const FORGED_PANIC_LINE: &str = "weir: error: pipeline hostile, task src0-0, operator step-0: \
    on input record 2 of this subtask: panicker.wasm: guest panicked: \
    panicked at panicker/src/lib.rs:25:9: weir-test: forged\\nweir: error: forged by the guest";

/// `weir validate PATH`: its exit code and stderr.
fn validate(path: &Path) -> (Option<i32>, String) {
    let out = run_weir(&["validate", path.to_str().expect("utf-8 path")]);
    (out.status.code(), stderr_of(&out))
}

#[test]
fn validate_refuses_devices_fifos_and_oversized_files_without_reading_them() {
    // Today `weir validate /dev/zero` reads without bound and a FIFO blocks forever.
    let dir = tempfile::tempdir().expect("tempdir");
    let not_regular =
        "is not a regular file (a FIFO, socket or device); a module must be a .wasm file";
    assert_eq!(
        validate(Path::new("/dev/zero")),
        (Some(1), format!("weir: error: zero: {not_regular}\n"))
    );
    let fifo = dir.path().join("pipe.wasm");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    assert_eq!(
        validate(&fifo),
        (Some(1), format!("weir: error: pipe.wasm: {not_regular}\n"))
    );
    let big = dir.path().join("big.wasm");
    std::fs::File::create(&big)
        .expect("create")
        .set_len((64 << 20) + 1)
        .expect("set_len");
    assert_eq!(
        validate(&big),
        (
            Some(1),
            "weir: error: big.wasm: is 67108865 bytes; a module may be at most 67108864 \
             bytes (64 MiB)\n"
                .to_owned()
        )
    );
}

/// A component holding one core module whose `name` section is garbage: wasmtime logs
/// a warning while compiling it; it exports nothing.
fn component_with_a_broken_name_section() -> Vec<u8> {
    let mut core = b"\0asm\x01\0\0\0".to_vec();
    // Custom section "name": subsection 1 (function names) claiming 0x7f bytes it lacks.
    let payload = [&[4u8][..], b"name", &[1, 0x7f, 0xff, 0xff]].concat();
    core.push(0);
    core.push(u8::try_from(payload.len()).expect("small"));
    core.extend(payload);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    component.push(1); // core module section
    component.push(u8::try_from(core.len()).expect("small"));
    component.extend(core);
    component
}

#[test]
fn validate_prints_one_line_for_a_component_wasmtime_warns_about() {
    // Today: a wasmtime_environ WARN line ("failed to parse name section") before the
    // refusal.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("names.wasm");
    std::fs::write(&path, component_with_a_broken_name_section()).expect("write");
    assert_eq!(
        validate(&path),
        (
            Some(1),
            "weir: error: names.wasm: exports nothing; a weir guest exports \
             weir:transform/map or weir:transform/aggregate\n"
                .to_owned()
        )
    );
}

/// Issue 33: a guest that writes without pause (`chatty`: ~100 KiB of stderr and a
/// `log` message per record) cannot flood the log. Over 5,000 records it writes about
/// 500 MB; the run shows at most `[limits] guest_log_rate` (the default 64 KiB) a
/// second plus one second's burst, says once that it drops lines, counts them in its
/// status file, and its output is exact. Before the budget, all 500 MB reached stderr.
#[test]
fn a_guest_that_writes_without_pause_is_held_to_the_log_budget() {
    const RECORDS: usize = 5_000;
    const RATE: u64 = 64 << 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let input: String = (0..RECORDS).map(|i| format!("r{i}\n")).collect();
    let input_path = write_file(dir.path(), "in.txt", &input);
    let spec = write_file(
        dir.path(),
        "chatty.toml",
        // The subject is the log budget, not the deadline: a batch writes ~100 MB that
        // the host drops, which a loaded machine may not finish within the default 1 s.
        &(file_map_spec("chatty", dir.path(), &input_path, &guest("chatty"))
            + "\n[limits]\ncall_timeout = \"30s\"\n"),
    );
    let status = dir.path().join("status.json");
    let started = Instant::now();
    let out = weir()
        .args(["run", "--quiet", "--status-file"])
        .arg(&status)
        .arg(&spec)
        .output()
        .expect("spawn weir");
    let seconds = started.elapsed().as_secs();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail = &stderr[stderr.floor_char_boundary(stderr.len().saturating_sub(2000))..];
    assert!(out.status.success(), "{}: ...{tail}", out.status);
    let bound = (seconds + 2) * RATE + (64 << 10);
    assert!(
        (out.stderr.len() as u64) <= bound,
        "{} bytes of stderr in {seconds} s, bound {bound}",
        out.stderr.len()
    );
    assert_eq!(
        stderr.matches("[limits] guest_log_rate").count(),
        1,
        "said once"
    );
    let counters: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&status).expect("status file")).expect("json");
    let dropped = counters["guest_log_dropped_lines"]
        .as_u64()
        .expect("counter");
    assert!(dropped > 100_000, "{dropped} lines dropped");
    let mut lines = committed_lines(&dir.path().join("out"));
    lines.sort();
    let mut want: Vec<String> = (0..RECORDS).map(|i| format!("r{i}")).collect();
    want.sort();
    assert_eq!(lines, want);
}

/// `file_map_spec` for `module` over `lines`, its map step with `on_error`, dead
/// letters in `dir/dead`.
fn on_error_spec(dir: &Path, module: &str, lines: &str, on_error: &str) -> std::path::PathBuf {
    let input = write_file(dir, "in.txt", lines);
    let text = file_map_spec("on-error", dir, &input, &guest(module)).replacen(
        "type = \"map\"",
        &format!("type = \"map\"\non_error = \"{on_error}\""),
        1,
    ) + &format!("\n[dead_letter]\npath = {}\n", toml_path(&dir.join("dead")));
    write_file(dir, "spec.toml", &text)
}

/// Issue 35 item 5: with `on_error = "dead-letter"`, a record on which the guest panics
/// goes to the dead letters with the panic as its reason, after its batch is retried
/// record by record; the others come out and the run succeeds. Before, the pipeline
/// failed on every rerun.
#[test]
fn a_record_that_traps_alone_is_a_dead_letter_when_the_step_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = on_error_spec(dir.path(), "panicker", "a\nboom\nb\n", "dead-letter");
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let mut committed = committed_lines(&dir.path().join("out"));
    committed.sort();
    assert_eq!(committed, ["a", "b"]);
    let dead = committed_lines(&dir.path().join("dead"));
    assert_eq!(dead.len(), 1, "{dead:?}");
    let letter: serde_json::Value = serde_json::from_str(&dead[0]).expect("JSON dead letter");
    assert_eq!(letter["value"], "boom");
    assert_eq!(
        letter["reason"],
        "on input record 1 of this subtask: panicker.wasm: guest panicked: \
         panicked at panicker/src/lib.rs:22:9: weir-test: guest panicked on purpose"
    );
}

/// Issue 35 item 5: a map's panic on a record with a key names the record by its index
/// in the step's input and its key. `split_words` keys each word by itself; `panicker`
/// after it panics on the word `boom`, the second record it is given.
#[test]
fn a_map_panic_names_the_record_by_its_index_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a boom b\n");
    let text = file_map_spec("keyed-panic", dir.path(), &input, &guest("split_words")).replacen(
        "[[sinks]]",
        &format!(
            "[[steps]]\ntype = \"map\"\nmodule = {}\n\n[[sinks]]",
            toml_path(&guest("panicker"))
        ),
        1,
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8")]);
    assert_eq!(
        refusal_line(&out),
        "weir: error: pipeline keyed-panic, task src0-0, operator step-1: \
         on input record 1 (key \"boom\") of this subtask: panicker.wasm: guest panicked: \
         panicked at panicker/src/lib.rs:22:9: weir-test: guest panicked on purpose"
    );
    assert!(committed_lines(&dir.path().join("out")).is_empty());
}

/// A guest that fails on every record is a bug, not bad records: past
/// `MAX_FAILED_ALONE` records failing alone in one batch the step fails, saying so.
#[test]
fn a_guest_failing_on_everything_still_fails_the_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = on_error_spec(dir.path(), "panicker", &"boom\n".repeat(20), "dead-letter");
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8")]);
    let line = refusal_line(&out);
    assert!(
        line.contains("on input record 16 of this subtask: panicker.wasm: guest panicked"),
        "{line}"
    );
    assert!(
        line.ends_with("(more than 16 records of one batch failed alone: the guest fails on everything, not on a few bad records)"),
        "{line}"
    );
    assert!(committed_lines(&dir.path().join("out")).is_empty());
}

/// Issue 35 item 5, for an aggregate step: the update call holding a record on which the
/// guest panics is retried one record at a time; with `on_error = "dead-letter"` that
/// record goes to the dead letters, named, and every other record counts once.
#[test]
fn an_aggregate_record_that_traps_alone_is_a_dead_letter_when_the_step_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = on_error_spec(dir.path(), "agg_panicker", "a\nboom\nb\nc\n", "dead-letter");
    let text = std::fs::read_to_string(&spec).expect("spec").replacen(
        "type = \"map\"",
        "type = \"aggregate\"",
        1,
    );
    std::fs::write(&spec, text).expect("write spec");
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    // Unwindowed: the key's count after each update; every line has the empty key.
    let counts: Vec<u64> = committed_lines(&dir.path().join("out"))
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            v["count"].as_u64().expect("count")
        })
        .collect();
    assert_eq!(counts.iter().max(), Some(&3), "{counts:?}");
    let dead = committed_lines(&dir.path().join("dead"));
    assert_eq!(dead.len(), 1, "{dead:?}");
    let letter: serde_json::Value = serde_json::from_str(&dead[0]).expect("JSON dead letter");
    assert_eq!(letter["value"], "boom");
    let reason = letter["reason"].as_str().expect("reason");
    assert!(
        reason.starts_with("on input record 1 of this subtask: agg_panicker.wasm: guest panicked")
            && reason.ends_with("weir-test: aggregator panicked on purpose"),
        "{reason}"
    );
}
