//! Python guests (componentize-py components built from `sdk-python/` by `make guests`)
//! against their Rust twins, through the real `weir` binary. What it proves:
//! - `uppercase_py` and `word_count_py` commit the same records (compared as
//!   multisets) as the Rust `uppercase` and `word_count` on the same input: file sink
//!   (keys, values and event times as JSON lines; Unicode case mapping, JSON escaping
//!   of odd keys, a rejected non-UTF-8 record), and the Kafka exactly-once pipeline
//!   read back read_committed;
//! - a Python aggregate killed with SIGKILL at random moments and mid-checkpoint, then
//!   run to completion, commits the same records as an uninterrupted run, which are the
//!   Rust guest's;
//! - `print` output and the traceback of a failed call reach weir's log, tagged with
//!   the module's name;
//! - the Python sandbox probe gets an error inside the guest, never data, for a file read,
//!   a file write, a directory listing, the environment, a name lookup, a TCP connect, a
//!   UDP datagram and `urllib`, against a file that exists, a TCP port that really
//!   listens and a UDP socket the test holds, and nothing reaches the host;
//! - each example's shipped `pipeline.toml` runs as shipped and matches the Rust twin;
//! - the SDK's unit tests pass in plain CPython.
//!
//! Every test is bounded in records (at most 30,000) and attempts; timing only paces
//! the crash test and decides where its kills land, never whether a test passes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use weir_tests::crash::{self, KillPlan};
use weir_tests::guest_specs::{
    KAFKA_PARTITIONS, kafka_exactly_once_run, map_step, respec_shipped, run_ok,
};
use weir_tests::kafka::{self, Input};
use weir_tests::{
    SandboxProbes, committed_lines, file_map_spec, guest, multiset, multiset_diff, repo_root,
    stderr_of, toml_path, weir, write_file,
};

/// Asserts that `actual` is the same multiset of lines as `expected` (the Rust guest's
/// output, or an uninterrupted run's), and that `expected` is not trivially small.
fn assert_same_output(what: &str, expected: Vec<String>, actual: Vec<String>, at_least: usize) {
    assert!(
        expected.len() >= at_least,
        "{what}: the reference run committed only {} lines",
        expected.len()
    );
    let (expected, actual) = (multiset(expected), multiset(actual));
    let diff = multiset_diff(&expected, &actual, 10);
    assert!(
        diff.is_empty(),
        "{what}: output differs (line, expected, actual): {diff:?}"
    );
    assert_eq!(
        expected.values().sum::<usize>(),
        actual.values().sum::<usize>()
    );
}

/// Runs the spec `make(dir, module)` once with the Rust guest and once with the Python
/// one, each in its own directory; returns each run's directory.
fn run_twins(
    rust: &str,
    python: &str,
    make: impl Fn(&Path, &Path) -> PathBuf,
) -> (tempfile::TempDir, tempfile::TempDir) {
    let rust_dir = tempfile::tempdir().expect("tempdir");
    run_ok(&make(rust_dir.path(), &guest(rust)));
    let python_dir = tempfile::tempdir().expect("tempdir");
    run_ok(&make(python_dir.path(), &guest(python)));
    (rust_dir, python_dir)
}

// ------------------------------------------------------------------------------------
// uppercase through the file sink
// ------------------------------------------------------------------------------------

/// Texts whose uppercase needs Unicode's special casing (ß -> SS, ǆ -> Ǆ, ﬁ -> FI, ŉ ->
/// ʼN), final sigma, dotted capital I, scripts without case, and JSON-looking lines.
const TEXTS: [&str; 10] = [
    "the quick brown fox",
    "straße und ǆemal ﬁne ŉ",
    "σοφός λόγος",
    "İstanbul ıi",
    "日本語のテキスト and émigré",
    "",
    "tab\there \"quoted\" back\\slash",
    "emoji 🦀🐍 ok",
    "MiXeD CaSe 123",
    "{\"nested\":\"json text\"}",
];

/// Input files for `uppercase`: JSON lines keyed by `user` with event time `ts`, over
/// two files (one per subtask), plus one line that is not UTF-8 (rejected by both).
fn uppercase_input(dir: &Path, records: usize) -> PathBuf {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).expect("input dir");
    for file in 0..2 {
        let mut text = Vec::new();
        for i in (file..records).step_by(2) {
            let line = serde_json::json!({
                "user": format!("u{}", i % 17),
                "ts": 1_700_000_000_000_i64 + i as i64 * 3,
                "text": TEXTS[i % TEXTS.len()],
            });
            writeln!(text, "{line}").expect("write");
        }
        if file == 1 {
            text.extend_from_slice(b"\xff\xfe not utf-8\n");
            text.extend_from_slice(b"plain line, not JSON: stra\xc3\x9fe\n");
        }
        std::fs::write(input.join(format!("part-{file}.jsonl")), text).expect("write input");
    }
    input
}

fn uppercase_file_spec(dir: &Path, input: &Path, module: &Path) -> PathBuf {
    let text = format!(
        r#"
name = "uppercase-twin"
parallelism = 2
state_dir = {state}

[[sources]]
type = "file"
path = {input}
format = "jsonl"
key_field = "user"
timestamp_field = "ts"

[[steps]]
type = "map"
module = {module}

[[sinks]]
type = "file"
path = {out}
format = "json"

[dead_letter]
path = {dead}
"#,
        state = toml_path(&dir.join("state")),
        input = toml_path(input),
        module = toml_path(module),
        out = toml_path(&dir.join("out")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, "pipeline.toml", &text)
}

#[test]
fn uppercase_py_commits_what_the_rust_guest_commits() {
    // 4,000 JSON lines (and two odd ones) -> uppercase -> file sink, Rust vs Python.
    const RECORDS: usize = 4_000;
    let inputs = tempfile::tempdir().expect("tempdir");
    let input = uppercase_input(inputs.path(), RECORDS);
    let (rust, python) = run_twins("uppercase", "uppercase_py", |dir, module| {
        uppercase_file_spec(dir, &input, module)
    });
    let rust_out = committed_lines(&rust.path().join("out"));
    assert!(
        rust_out
            .iter()
            .any(|l| l.contains("STRASSE UND ǄEMAL FINE ʼN")),
        "the input exercises special casing"
    );
    assert_same_output(
        "uppercase",
        rust_out,
        committed_lines(&python.path().join("out")),
        RECORDS + 1,
    );
    // The one non-UTF-8 record is refused by both: the same dead letter, reason included.
    let rust_dead = committed_lines(&rust.path().join("dead"));
    assert_eq!(rust_dead.len(), 1, "{rust_dead:?}");
    assert!(rust_dead[0].contains("value is not UTF-8"), "{rust_dead:?}");
    assert_eq!(committed_lines(&python.path().join("dead")), rust_dead);
}

// ------------------------------------------------------------------------------------
// word count through the file sink
// ------------------------------------------------------------------------------------

/// Generator -> Rust `split_words` -> `module` (a word count) over 10 s tumbling windows
/// -> file sink (JSON lines), parallelism 2: the crash test's pipeline, `records` long,
/// paced at `rate` records/s when given.
fn word_count_spec(dir: &Path, module: &Path, records: u64, rate: Option<u64>) -> PathBuf {
    let rate = rate.map_or_else(String::new, |r| format!("rate = {r}"));
    let text = format!(
        r#"
name = "word-count-twin"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "500ms"

[[sources]]
type = "generator"
count = {records}
{rate}
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
module = {module}
window = {{ type = "tumbling", size = "10s" }}

[[sinks]]
type = "file"
path = {out}
format = "json"

[dead_letter]
path = {dead}
"#,
        state = toml_path(&dir.join("state")),
        split = toml_path(&guest("split_words")),
        module = toml_path(module),
        out = toml_path(&dir.join("out")),
        dead = toml_path(&dir.join("dead")),
    );
    write_file(dir, "pipeline.toml", &text)
}

/// Keys that need JSON escaping (quote, backslash, control characters), non-ASCII keys
/// and plain ones, each a JSON line `{"k": <key>, "ts": <ms>}`.
fn odd_keys_input(dir: &Path, records: usize) -> PathBuf {
    const KEYS: [&str; 8] = [
        "say \"hi\"",
        "back\\slash",
        "tab\tnew\nline",
        "ctl\u{1}\u{1f}\u{7f}",
        "ünïcödé",
        "日本",
        "plain",
        "emoji 🐍",
    ];
    let mut text = String::new();
    for i in 0..records {
        let line = serde_json::json!({"k": KEYS[(i * 7 + i / 3) % KEYS.len()], "ts": i as i64 * 5});
        text.push_str(&format!("{line}\n"));
    }
    write_file(dir, "odd-keys.jsonl", &text)
}

fn odd_keys_spec(dir: &Path, input: &Path, module: &Path) -> PathBuf {
    let text = format!(
        r#"
name = "odd-keys-twin"
state_dir = {state}

[[sources]]
type = "file"
path = {input}
format = "jsonl"
key_field = "k"
timestamp_field = "ts"

[[steps]]
type = "aggregate"
module = {module}
window = {{ type = "tumbling", size = "1s" }}

[[sinks]]
type = "file"
path = {out}
format = "json"
"#,
        state = toml_path(&dir.join("state")),
        input = toml_path(input),
        module = toml_path(module),
        out = toml_path(&dir.join("out")),
    );
    write_file(dir, "pipeline.toml", &text)
}

#[test]
fn word_count_py_commits_what_the_rust_guest_commits() {
    // 20,000 generated records (~100,000 words) through split_words and the word count;
    // then 3,000 records keyed by odd strings straight into the word count.
    const RECORDS: u64 = 20_000;
    let (rust, python) = run_twins("word_count", "word_count_py", |dir, module| {
        word_count_spec(dir, module, RECORDS, None)
    });
    // The generator's text has 50 distinct words: 50 counts per 10 s window.
    assert_same_output(
        "word count",
        committed_lines(&rust.path().join("out")),
        committed_lines(&python.path().join("out")),
        100,
    );
    assert!(committed_lines(&python.path().join("dead")).is_empty());

    let inputs = tempfile::tempdir().expect("tempdir");
    let input = odd_keys_input(inputs.path(), 3_000);
    let (rust, python) = run_twins("word_count", "word_count_py", |dir, module| {
        odd_keys_spec(dir, &input, module)
    });
    let rust_out = committed_lines(&rust.path().join("out"));
    assert!(
        rust_out
            .iter()
            .any(|l| l.contains(r#"\"word\":\"say \\\"hi\\\"\""#)),
        "keys are escaped inside the JSON value: {:?}",
        &rust_out[..3.min(rust_out.len())]
    );
    assert_same_output(
        "word count of odd keys",
        rust_out,
        committed_lines(&python.path().join("out")),
        8 * 15,
    );
}

// ------------------------------------------------------------------------------------
// Kafka exactly-once
// ------------------------------------------------------------------------------------

fn word_count_steps(count: &Path) -> String {
    format!(
        "{}\n[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"1s\" }}\n",
        map_step(&guest("split_words")),
        toml_path(count)
    )
}

#[test]
fn kafka_exactly_once_output_matches_the_rust_guests() {
    // 3,000 records over 3 partitions -> uppercase, and -> split_words + word count,
    // each with the Rust and the Python guest: the same records read_committed.
    let _one_at_a_time = kafka::exclusive();
    const RECORDS: usize = 3_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let input = kafka::unique_name("py-twins-in");
    kafka::create_topic(&input, KAFKA_PARTITIONS);
    let records: Vec<Input> = (0..RECORDS)
        .map(|i| Input {
            partition: (i % KAFKA_PARTITIONS as usize) as i32,
            key: format!("r{}", i % 101),
            value: format!("{} #{i}", TEXTS[i % TEXTS.len()]),
            timestamp: 1_700_000_000_000 + i as i64 * 2,
        })
        .collect();
    kafka::produce(&input, &records);

    let rust = kafka_exactly_once_run(
        dir.path(),
        "upper-rs",
        &input,
        &map_step(&guest("uppercase")),
    );
    let python = kafka_exactly_once_run(
        dir.path(),
        "upper-py",
        &input,
        &map_step(&guest("uppercase_py")),
    );
    assert!(rust.iter().any(|l| l.contains("STRASSE")));
    assert_same_output("Kafka uppercase", rust, python, RECORDS);

    let rust = kafka_exactly_once_run(
        dir.path(),
        "count-rs",
        &input,
        &word_count_steps(&guest("word_count")),
    );
    let python = kafka_exactly_once_run(
        dir.path(),
        "count-py",
        &input,
        &word_count_steps(&guest("word_count_py")),
    );
    assert_same_output("Kafka word count", rust, python, 100);
}

// ------------------------------------------------------------------------------------
// A Python aggregate through SIGKILLs
// ------------------------------------------------------------------------------------

#[test]
fn python_aggregate_is_exactly_once_across_sigkills() {
    // 30,000 records (~150,000 words) into the Python word count, paced over ~10 s,
    // killed 3 times at random and twice at fault points (mid-checkpoint and mid state
    // upload), then run to completion.
    const RECORDS: u64 = 30_000;
    const RATE: u64 = 3_000;
    let reference = tempfile::tempdir().expect("tempdir");
    run_ok(&word_count_spec(
        reference.path(),
        &guest("word_count_py"),
        RECORDS,
        None,
    ));
    let expected = committed_lines(&reference.path().join("out"));
    let rust = tempfile::tempdir().expect("tempdir");
    run_ok(&word_count_spec(
        rust.path(),
        &guest("word_count"),
        RECORDS,
        None,
    ));
    assert_same_output(
        "uninterrupted Python run vs Rust",
        committed_lines(&rust.path().join("out")),
        expected.clone(),
        150,
    );

    let crashed = tempfile::tempdir().expect("tempdir");
    let spec = word_count_spec(crashed.path(), &guest("word_count_py"), RECORDS, Some(RATE));
    let started = Instant::now();
    let run = crash::run_with_kills(
        &spec,
        &KillPlan {
            random_kills: 3,
            kill_after_ms: 500..3000,
            faults: vec![(1, "checkpoint-triggered:3"), (3, "state-upload:3")],
            seed: 0x9e_5eed,
        },
    );
    eprintln!("{} kills, {:.1?}", run.kills, started.elapsed());
    assert_eq!(run.kills, 5);
    assert_same_output(
        "Python run through SIGKILLs vs uninterrupted",
        expected,
        committed_lines(&crashed.path().join("out")),
        150,
    );
    assert!(committed_lines(&crashed.path().join("dead")).is_empty());
}

// ------------------------------------------------------------------------------------
// The sandbox
// ------------------------------------------------------------------------------------

#[test]
fn the_python_sandbox_probe_gets_no_file_environment_or_network() {
    // Each probe runs inside the Python guest in `weir run`, against a file that exists,
    // a path the test watches and a TCP port that really listens.
    let dir = tempfile::tempdir().expect("tempdir");
    let probes = SandboxProbes::new(dir.path().join("written-by-the-python-guest"));
    let (tcp, udp) = (probes.tcp_addr(), probes.udp_addr());
    let cases: Vec<(String, &str)> = vec![
        ("open /etc/passwd".into(), NOT_FOUND),
        ("open hostname".into(), NOT_FOUND),
        (format!("write {}", probes.written().display()), NOT_FOUND),
        ("listdir /".into(), NOT_FOUND),
        ("listdir .".into(), NOT_FOUND),
        ("environ".into(), "empty"),
        ("getenv HOME".into(), "empty"),
        // create_connection and urllib resolve the host first, numeric or not: refused.
        (format!("connect {tcp}"), LOOKUP_REFUSED),
        (format!("connect localhost:{}", tcp.port()), LOOKUP_REFUSED),
        (
            format!("urlopen http://{tcp}/"),
            "denied: URLError (gaierror EAI_FAIL)",
        ),
        // A numeric address goes straight to the TCP connect and the UDP send: refused.
        (format!("socket {tcp}"), "denied: PermissionError EACCES"),
        (format!("sendto {udp}"), "denied: PermissionError EACCES"),
        ("not a probe".into(), ""),
        // What a guest does get: its step's configuration and the pipeline's log.
        ("config greeting".into(), "hello from the spec"),
        ("config unset".into(), "None"),
        ("log the probe was here".into(), "logged"),
    ];
    let input: String = cases.iter().map(|(p, _)| format!("{p}\n")).collect();
    let input = write_file(dir.path(), "probes.txt", &input);
    let module = guest("probe_py");
    let module_line = format!("module = {}\n", toml_path(&module));
    let text = file_map_spec("probe-py", dir.path(), &input, &module).replace(
        &module_line,
        &format!("{module_line}config = {{ greeting = \"hello from the spec\" }}\n"),
    );
    assert!(text.contains("greeting"), "{text}");
    let spec = write_file(dir.path(), "probe.toml", &text);
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec)
        .output()
        .expect("spawn weir");
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("probe_py") && l.contains("the probe was here")),
        "the guest's log line is missing from weir's log: {err}"
    );
    assert!(
        !err.contains("stderr: WARN the probe was here"),
        "the log went to stderr, not through weir's log import: {err}"
    );
    let mut got = committed_lines(&dir.path().join("out"));
    got.sort();
    let mut want: Vec<String> = cases
        .iter()
        .map(|(probe, outcome)| {
            if outcome.is_empty() {
                probe.clone() // not a probe: passed through unchanged
            } else {
                format!("{probe}: {outcome}")
            }
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    probes.assert_nothing_reached();
}

#[test]
fn python_print_output_and_a_failed_calls_traceback_reach_weirs_log() {
    // The probe prints a line to stdout and one to stderr, then raises a BaseException
    // the SDK does not refuse: the call fails, the run fails, and all three (the
    // traceback line by line) are in weir's log, tagged with the module's name. stdout
    // is logged at INFO, so the run asks for it with WEIR_LOG=info.
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(
        dir.path(),
        "input.txt",
        "print printed by the probe\neprint written to stderr by the probe\ntrap the probe gave up\n",
    );
    let module = guest("probe_py");
    let spec = write_file(
        dir.path(),
        "print.toml",
        &file_map_spec("probe-py-print", dir.path(), &input, &module),
    );
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec)
        .env("WEIR_LOG", "info")
        .output()
        .expect("spawn weir");
    let err = stderr_of(&out);
    assert!(
        !out.status.success(),
        "the trap did not fail the run: {err}"
    );
    let logged = |what: &str| err.lines().any(|l| l.contains(what));
    for line in [
        "probe_py.wasm stdout: printed by the probe",
        "probe_py.wasm stderr: written to stderr by the probe",
        "probe_py.wasm stderr: Traceback (most recent call last):",
        "probe_py.wasm stderr: probe.ProbeTrap: the probe gave up",
    ] {
        assert!(logged(line), "{line:?} is not in weir's log: {err}");
    }
    // The SDK reports the uncaught exception on stderr before componentize-py panics
    // (which says only "Python function threw an unexpected exception"): weir's one
    // error line names the module, the record that fails alone (the batch is retried
    // record by record), the exception's class, its message and the export.
    let last = err.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "weir: error: pipeline probe-py-print, task src0-0, operator step-0: on input record 2 \
         of this subtask: probe_py.wasm: guest raised an uncaught exception: \
         ProbeTrap: the probe gave up (in map)",
        "the run's error line"
    );
}

#[test]
fn a_python_guest_built_for_the_wrong_world_is_refused_by_its_build() {
    // `uppercase.py` decorates a map function: built as an aggregator it is refused at
    // build time, with one line saying which world it needs, and writes nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let out_path = dir.path().join("wrong.wasm");
    let guest_py = repo_root().join("guest-examples/python/uppercase/uppercase.py");
    let out = std::process::Command::new("python3")
        .arg(repo_root().join("sdk-python/tools/build.py"))
        .args(["--world", "aggregator", "-o"])
        .arg(&out_path)
        .arg(&guest_py)
        .env("WEIR_GUEST_BUILD_CACHE", dir.path().join("cache"))
        .output()
        .expect("run build.py");
    assert!(
        !out.status.success(),
        "the build succeeded: {}",
        stderr_of(&out)
    );
    assert_eq!(
        stderr_of(&out).trim_end(),
        format!(
            "build.py: {}: the guest uses @weir_guest.map, a mapper guest: build it with \
             --world mapper (or decorate its function with @weir_guest.aggregate for --world aggregator)",
            guest_py.display()
        )
    );
    assert!(
        !out_path.exists(),
        "a refused build left {}",
        out_path.display()
    );
}

// ------------------------------------------------------------------------------------
// The shipped examples and the SDK's own tests
// ------------------------------------------------------------------------------------

/// Runs a shipped stdin -> stdout spec with `input` on stdin; returns stdout. Its state
/// directory (under build/) is removed first: stdin cannot be replayed, so every run
/// starts from scratch.
fn run_stdin_spec(spec: &Path, state: &Path, input: &str) -> String {
    let _ = std::fs::remove_dir_all(state);
    let mut child = weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    let mut stdin = child.stdin.take().expect("stdin");
    let text = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    writer.join().expect("writer").expect("write stdin");
    assert!(
        out.status.success(),
        "{}: {}",
        spec.display(),
        stderr_of(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_shipped_python_examples_run_as_shipped() {
    // guest-examples/python/*/pipeline.toml as committed (they name build/guests/ and
    // write under build/), each against its Rust twin.
    let root = repo_root();
    let build = root.join("build");
    let input: String = (0..500)
        .map(|i| format!("{} {i}\n", TEXTS[i % TEXTS.len()]))
        .collect();
    let python = run_stdin_spec(
        &root.join("guest-examples/python/uppercase/pipeline.toml"),
        &build.join("uppercase-py-stdin-state"),
        &input,
    );
    let rust = run_stdin_spec(
        &root.join("guest-examples/pipelines/uppercase-stdin.toml"),
        &build.join("uppercase-stdin-state"),
        &input,
    );
    let lines = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(lines(&python).len(), 500);
    assert_same_output("shipped uppercase", lines(&rust), lines(&python), 500);

    // word-count: as shipped, from scratch; then the same spec text with the Rust guest
    // and its own directories.
    let shipped = root.join("guest-examples/python/word-count/pipeline.toml");
    let dirs = [
        "word-count-py-state",
        "word-count-py-output",
        "word-count-py-dead-letter",
    ];
    for d in dirs {
        let _ = std::fs::remove_dir_all(build.join(d));
    }
    run_ok(&shipped);
    let python = committed_lines(&build.join("word-count-py-output"));
    let twin = tempfile::tempdir().expect("tempdir");
    run_ok(&respec_shipped(
        &shipped,
        twin.path(),
        "word_count_py.wasm",
        &guest("word_count"),
        &dirs,
    ));
    assert_same_output(
        "shipped word count",
        committed_lines(&twin.path().join("word-count-py-output")),
        python,
        500,
    );
}

#[test]
fn the_sdk_unit_tests_pass_in_plain_cpython() {
    // sdk-python/tests with unittest (no componentize-py): framing, Record, map,
    // aggregate, host stand-ins and the example guests' functions.
    let root = repo_root();
    let out = std::process::Command::new("python3")
        .args(["-B", "-m", "unittest", "discover", "-s"])
        .arg(root.join("sdk-python/tests"))
        .args(["-t"])
        .arg(root.join("sdk-python/tests"))
        .output()
        .expect("run python3 (is it installed?)");
    let err = stderr_of(&out);
    assert!(out.status.success(), "SDK unit tests failed:\n{err}");
    let ran: usize = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no test summary:\n{err}"));
    assert!(ran >= 30, "only {ran} SDK tests ran:\n{err}");
}

/// What a path gets: WASI without a preopened directory resolves no path at all, so
/// reading, writing and listing all fail as "not found" (`/etc/passwd` exists here).
const NOT_FOUND: &str = "denied: FileNotFoundError ENOENT";
/// What a name lookup gets: refused by the host for every name.
const LOOKUP_REFUSED: &str = "denied: gaierror EAI_FAIL";
