//! Bad input never panics and never commits partial output: a malformed spec, a
//! missing module, a non-component module, an unreadable input file, a value past what
//! the runtime represents (event time, window fan-out, guest limits) and a file sink
//! path that is a file each end the run with one clear line on stderr and a non-zero
//! exit, with nothing in the output dir. Event times at the ends of `i64` in the input
//! are windowed, not a panic. A rerun with another module says so, naming both
//! modules' hashes, and so does a guest failure on state another module wrote; a
//! `key_field` or `timestamp_field` the records lack is counted in a warning.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use weir_tests::{
    committed_lines, file_map_spec, guest, refusal_line, run_weir, start_on_stdin, stderr_of,
    toml_path, wait_until, write_file,
};

fn spec_text(dir: &Path, source_path: &Path, module: &Path) -> String {
    file_map_spec("bad-input", dir, source_path, module)
}

/// Asserts a failed run: exit code 1, one `weir: error:` line naming `needle`, no output.
fn assert_refused(dir: &Path, spec: &Path, needle: &str) -> String {
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    let err = stderr_of(&out);
    let line = refusal_line(&out);
    assert!(line.starts_with("weir: error: "), "{err}");
    assert!(line.contains(needle), "expected {needle:?} in: {err}");
    assert!(
        committed_lines(&dir.join("out")).is_empty(),
        "a failed run committed output"
    );
    err
}

#[test]
fn unknown_key_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\n");
    let text = spec_text(dir.path(), &input, &guest("uppercase")).replace(
        "name = \"bad-input\"",
        "name = \"bad-input\"\nparalelism = 2",
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    let err = assert_refused(dir.path(), &spec, "paralelism");
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn bad_value_is_refused_with_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\n");
    let text = spec_text(dir.path(), &input, &guest("uppercase")).replace(
        "name = \"bad-input\"",
        "name = \"bad-input\"\nparallelism = 0",
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    let err = assert_refused(dir.path(), &spec, "parallelism");
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn missing_module_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\n");
    let missing = dir.path().join("nope.wasm");
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &spec_text(dir.path(), &input, &missing),
    );
    assert_refused(dir.path(), &spec, "nope.wasm");
}

#[test]
fn core_module_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\n");
    // The smallest valid core WebAssembly module: magic and version.
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").expect("write");
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &spec_text(dir.path(), &input, &core),
    );
    assert_refused(dir.path(), &spec, "not a component");
}

#[test]
fn unreadable_input_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &spec_text(
            dir.path(),
            &dir.path().join("missing-input.txt"),
            &guest("uppercase"),
        ),
    );
    assert_refused(dir.path(), &spec, "missing-input.txt");
}

#[test]
fn a_good_run_of_the_same_spec_commits_its_output() {
    // The control for the tests above: the same spec with valid inputs works.
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "hello\nweir\n");
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &spec_text(dir.path(), &input, &guest("uppercase")),
    );
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(committed_lines(&dir.path().join("out")), ["HELLO", "WEIR"]);
}

/// Asserts a refused run whose one stderr line is exactly `weir: error: <line>`.
fn assert_refused_with(dir: &Path, spec: &Path, line: &str) {
    let err = assert_refused(dir, spec, line);
    assert_eq!(err.trim_end(), format!("weir: error: {line}"));
}

/// A generator -> windowed aggregate -> file sink spec, with `source_extra` appended to
/// the generator and `window` as the aggregate's window.
fn windowed_spec(dir: &Path, source_extra: &str, window: &str) -> String {
    format!(
        r#"
name = "bad-input"
state_dir = {state}

[[sources]]
type = "generator"
count = 100
{source_extra}

[[steps]]
type = "aggregate"
module = {module}
window = {window}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        module = toml_path(&guest("windowed_sum")),
        out = toml_path(&dir.join("out")),
    )
}

const TUMBLING: &str = r#"{ type = "tumbling", size = "10s" }"#;

#[test]
fn an_event_time_skew_past_what_event_time_holds_is_refused() {
    // Issue 7 §3: this skew made the generator's thread panic ("attempt to add with
    // overflow") and the run end on a checkpoint timeout.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = windowed_spec(
        dir.path(),
        r#"event_time_skew = "18446744073709551615ms""#,
        TUMBLING,
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    assert_refused_with(
        dir.path(),
        &spec,
        &format!(
            "{} line 8: event_time_skew: duration \"18446744073709551615ms\" is too large: at most \"876000h\" (100 years)",
            spec.display()
        ),
    );
}

#[test]
fn a_start_time_outside_event_time_is_refused() {
    // Issue 7 §3: with a tumbling window, this start made the aggregate's thread panic
    // ("attempt to subtract with overflow").
    let dir = tempfile::tempdir().expect("tempdir");
    let text = windowed_spec(dir.path(), "start_time = -9223372036854775808", TUMBLING);
    let spec = write_file(dir.path(), "spec.toml", &text);
    assert_refused_with(
        dir.path(),
        &spec,
        &format!(
            "{} line 8: start_time -9223372036854775808 is outside the event-time range \
             -8640000000000000..=8640000000000000 (ms since the Unix epoch)",
            spec.display()
        ),
    );
}

#[test]
fn a_hopping_window_fan_out_past_the_bound_is_refused() {
    // Issue 7 §2: 3.6 million windows per record took 3.7 GB and produced nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    let text = windowed_spec(
        dir.path(),
        "",
        r#"{ type = "hopping", size = "1h", slide = "1ms" }"#,
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    assert_refused_with(
        dir.path(),
        &spec,
        &format!(
            "{} line 13: hopping window size 1h and slide 1ms put every record in 3600000 \
             windows; at most 1000 are allowed: make slide at least 3600ms",
            spec.display()
        ),
    );
}

#[test]
fn guest_limits_past_their_maxima_are_refused() {
    // Issue 7 §5: a huge call_timeout disabled the deadline; memory had no upper bound.
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\n");
    let base = spec_text(dir.path(), &input, &guest("uppercase"));
    for (limit, message) in [
        (
            r#"call_timeout = "2m""#,
            "call_timeout must be at most 60s: a guest call holds up its task's checkpoints for as long as it runs",
        ),
        (
            r#"memory = "8GiB""#,
            "memory must be at most 4GiB: a wasm32 guest cannot address more",
        ),
    ] {
        let spec = write_file(
            dir.path(),
            "spec.toml",
            &format!("{base}\n[limits]\n{limit}\n"),
        );
        assert_refused_with(
            dir.path(),
            &spec,
            &format!("{} line 18: {message}", spec.display()),
        );
    }
}

#[test]
fn a_file_sink_path_that_is_a_file_is_refused() {
    // Issue 7 §5: this was reported as "cannot list input directory".
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\n");
    let out = write_file(dir.path(), "out", "not a directory\n");
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &spec_text(dir.path(), &input, &guest("uppercase")),
    );
    assert_refused_with(
        dir.path(),
        &spec,
        &format!(
            "{} line 15: path {} is not a directory: a file sink writes its files into a directory",
            spec.display(),
            out.display()
        ),
    );
    assert_eq!(
        std::fs::read_to_string(&out).expect("read"),
        "not a directory\n",
        "the file is left alone"
    );
}

#[test]
fn event_times_at_the_ends_of_i64_are_windowed_not_a_panic() {
    // Issue 7 §3: input (not the spec) may carry any i64 event time. The windows at
    // i64's ends are cut short (at i64::MIN, and at i64::MAX - 1: state keys reserve the
    // end i64::MAX for unwindowed state) instead of overflowing.
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(
        dir.path(),
        "in.jsonl",
        &[
            r#"{"user":"a","value":1,"ts":-9223372036854775808}"#,
            r#"{"user":"a","value":2,"ts":0}"#,
            r#"{"user":"a","value":3,"ts":9223372036854775807}"#,
            "",
        ]
        .join("\n"),
    );
    let text = format!(
        r#"
name = "extreme-times"
state_dir = {state}

[[sources]]
type = "file"
path = {input}
format = "jsonl"
key_field = "user"
timestamp_field = "ts"

[[steps]]
type = "aggregate"
module = {module}
window = {TUMBLING}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.path().join("state")),
        input = toml_path(&input),
        module = toml_path(&guest("windowed_sum")),
        out = toml_path(&dir.path().join("out")),
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        committed_lines(&dir.path().join("out")),
        [
            r#"{"key":"a","window_start":-9223372036854775808,"window_end":-9223372036854770000,"sum":1}"#,
            r#"{"key":"a","window_start":0,"window_end":10000,"sum":2}"#,
            r#"{"key":"a","window_start":9223372036854770000,"window_end":9223372036854775806,"sum":3}"#,
        ]
    );
}

/// The first 12 hex digits of guest `name`'s SHA-256, as `weir validate` prints it.
fn short_sha(name: &str) -> String {
    let out = run_weir(&["validate", guest(name).to_str().expect("utf-8")]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = stdout
        .find("sha256 ")
        .expect("a sha256 in weir validate's output")
        + 7;
    stdout[at..at + 12].to_owned()
}

/// Issue 35 item 4: a pipeline rerun after its step's module was rebuilt resumed from
/// the old checkpoint, printed "0 records in" and left the old output, without a word.
/// Now one line names the step, the new module, both hashes (first 12 hex digits) and
/// what to do; the run is not refused (a new module on old state is an upgrade).
#[test]
fn a_rerun_with_another_module_says_so_and_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\nb\n");
    let module = dir.path().join("step.wasm");
    std::fs::copy(guest("uppercase"), &module).expect("copy uppercase");
    let spec = write_file(
        dir.path(),
        "spec.toml",
        &spec_text(dir.path(), &input, &module),
    );
    let path = spec.to_str().expect("utf-8 path");
    let first = run_weir(&["run", "--quiet", path]);
    assert!(first.status.success(), "{}", stderr_of(&first));
    assert!(
        !stderr_of(&first).contains("not the module"),
        "{}",
        stderr_of(&first)
    );

    std::fs::copy(guest("split_words"), &module).expect("copy split_words");
    let second = run_weir(&["run", "--quiet", path]);
    let err = stderr_of(&second);
    assert!(second.status.success(), "{err}");
    let notices: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not the module"))
        .collect();
    assert_eq!(notices.len(), 1, "{err}");
    assert!(
        notices[0].contains(&format!(
            "step-0 runs step.wasm ({}), not the module checkpoint 1 was taken with ({}): that checkpoint ended the run, so nothing is left to read; rerun with --from-scratch to process the input again with the new module",
            short_sha("split_words"),
            short_sha("uppercase")
        )),
        "{err}"
    );
}

/// A file source of JSON lines `lines` with `setting` (e.g. `key_field = "usr"`) through
/// `uppercase`, run to its end, which succeeds: its stderr.
fn run_jsonl_source(lines: &str, setting: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.jsonl", lines);
    // The source's table comes first: only it gets the setting.
    let text = spec_text(dir.path(), &input, &guest("uppercase")).replacen(
        "type = \"file\"\npath",
        &format!("type = \"file\"\nformat = \"jsonl\"\n{setting}\npath"),
        1,
    );
    let spec = write_file(dir.path(), "spec.toml", &text);
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    err
}

/// Issue 35 item 5: a `key_field` that the records do not have (misspelt) gave every
/// record the empty key without a word (5,001 records became 2 outputs). Now the source
/// says how many records lacked it, once drained.
#[test]
fn a_key_field_missing_from_the_records_is_counted_in_a_warning() {
    let err = run_jsonl_source(
        "{\"user\":\"a\"}\n{\"user\":\"b\"}\n{\"usr\":\"c\"}\n",
        "key_field = \"usr\"",
    );
    assert!(
        err.contains("file source: 2 of 3 records had no top-level field `usr` (their key is empty): is `key_field` spelt as in the data?"),
        "{err}"
    );
}

/// Issue 35 item 5: as for `key_field`, a `timestamp_field` the records do not have as a
/// top-level integer (misspelt, or a string) is counted in one warning once drained.
#[test]
fn a_timestamp_field_missing_from_the_records_is_counted_in_a_warning() {
    let err = run_jsonl_source(
        "{\"ts\":1}\n{\"tss\":2}\n{\"tss\":\"3\"}\n",
        "timestamp_field = \"tss\"",
    );
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("records had no"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].ends_with("file source: 2 of 3 records had no top-level integer field `tss` (their event time is 0): is `timestamp_field` spelt as in the data?"),
        "{err}"
    );
}

/// A stdin -> unwindowed aggregate (`module`) -> file sink spec in `dir`, checkpointed
/// every 100 ms.
fn stdin_aggregate_spec(dir: &Path, module: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
name = "resumed"
state_dir = {state}

[checkpoint]
interval = "100ms"

[[sources]]
type = "stdin"

[[steps]]
type = "aggregate"
module = {module}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        module = toml_path(&guest(module)),
        out = toml_path(&dir.join("out")),
    );
    write_file(dir, "spec.toml", &text)
}

/// `weir run` of `spec` with `input` on its stdin, which stays open until the child is
/// waited for or killed.
fn start_with_input(spec: &Path, input: &[u8]) -> std::process::Child {
    let mut child = start_on_stdin(spec);
    let stdin = child.stdin.as_mut().expect("stdin");
    stdin.write_all(input).expect("write stdin");
    stdin.flush().expect("flush stdin");
    child
}

/// Issue 35 item 4: a rebuilt aggregate whose accumulator type changed failed with "does
/// not decode as ... written by another version of the guest?" without saying what to
/// do. A run killed after a checkpoint of `word_count` (a `u64` count per key) is
/// resumed, not finished, with `acc_grower` (a `String`): its guest panic says which
/// modules wrote and read the state, and what to do.
#[test]
fn an_accumulator_another_module_wrote_names_both_modules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = start_with_input(&stdin_aggregate_spec(dir.path(), "word_count"), b"a\nb\n");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !committed_lines(&dir.path().join("out")).contains(&r#"{"word":"","count":2}"#.to_owned())
    {
        assert!(
            Instant::now() < deadline,
            "no checkpoint committed the counts"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    first.kill().expect("kill the first run");
    first.wait().expect("wait for the first run");

    let spec = stdin_aggregate_spec(dir.path(), "acc_grower");
    let mut second = start_with_input(&spec, b"c\n");
    drop(second.stdin.take());
    let (status, err) = wait_until(
        &mut second,
        Instant::now() + Duration::from_secs(60),
        "the resumed run",
    );
    assert_eq!(status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("weir: error:"))
        .collect();
    let [line] = errors[..] else {
        panic!("one error line: {err}")
    };
    let (start, end) = (
        "weir: error: pipeline resumed, task stage1-0, operator step-0: on input record 0 of \
         this subtask: acc_grower.wasm: guest panicked: panicked at ",
        format!(
            ": weir-guest: the accumulator of a group of this batch does not decode as \
             alloc::string::String: Hit the end of buffer, expected more data (was this state \
             written by another version of the guest?) (this step's state was written by \
             module {} and is read now by {}: if the accumulator's type changed, rerun with \
             --from-scratch)",
            short_sha("word_count"),
            short_sha("acc_grower")
        ),
    );
    let place = line.strip_prefix(start).and_then(|l| l.strip_suffix(&end));
    assert!(
        place.is_some_and(|p| p.contains("sdk/src/aggregator.rs:")),
        "{line}"
    );
}
