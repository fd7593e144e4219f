//! Bad input never panics and never commits partial output: a malformed spec, a
//! missing module, a non-component module and an unreadable input file each end the run
//! with one clear line on stderr and a non-zero exit, with nothing in the output dir.

use std::path::Path;

use weir_tests::{committed_lines, guest, run_weir, stderr_of, toml_path, write_file};

fn spec_text(dir: &Path, source_path: &Path, module: &Path) -> String {
    format!(
        r#"
name = "bad-input"
state_dir = {state}

[[sources]]
type = "file"
path = {input}

[[steps]]
type = "map"
module = {module}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        input = toml_path(source_path),
        module = toml_path(module),
        out = toml_path(&dir.join("out")),
    )
}

/// Asserts a failed run: exit code 1, one `weir: error:` line naming `needle`, no output.
fn assert_refused(dir: &Path, spec: &Path, needle: &str) -> String {
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    let err = stderr_of(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected exit code 1, stderr: {err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    assert!(lines[0].starts_with("weir: error: "), "{err}");
    assert!(lines[0].contains(needle), "expected {needle:?} in: {err}");
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
