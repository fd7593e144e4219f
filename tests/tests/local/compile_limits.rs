//! Compiling a module is bounded: `weir run` and `weir validate` compile each module in
//! a child process under `[limits] compile_cpu` / `--compile-cpu` (CPU time) and
//! `compile_memory` / `--compile-memory` (data memory), so a compile bomb is refused
//! with one line naming the module and the limit, and the host is never held by it.
//!
//! The bomb: 25,000 diamonds (`block .. br_if .. end`) over 500 locals, 424 KB. Compiled
//! without limits it takes about 20 s of CPU and 600 MiB; the limits here stop it at 1 s
//! and 256 MiB, so the margins are 20x and 2x whatever the machine's load. Real guests
//! compile well inside those smallest limits.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use weir_tests::{
    committed_lines, file_map_spec, guest, refusal_line, stderr_of, weir, write_file,
};

/// Writes the compile bomb as `bomb.wasm` in `dir`.
fn bomb(dir: &Path) -> PathBuf {
    let mut body = String::new();
    let mut x: u64 = 12_345;
    for _ in 0..25_000 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let (a, b, c) = ((x >> 20) % 500, (x >> 30) % 500, (x >> 40) % 500);
        body.push_str(&format!(
            "block local.get {a} br_if 0 local.get {b} local.get {c} i32.add local.set {a} end\n"
        ));
    }
    let text = format!(
        "(component (core module (func (export \"f\") (result i32) (local {locals}) {body} local.get 0)))",
        locals = "i32 ".repeat(500)
    );
    let path = dir.join("bomb.wasm");
    std::fs::write(&path, wat::parse_str(&text).expect("bomb WAT")).expect("write bomb");
    path
}

/// `weir validate` with a compiled-code cache of its own (nothing compiled before).
fn validate(dir: &Path, module: &Path, limits: &[&str]) -> Output {
    weir()
        .env("WEIR_CACHE_DIR", dir.join("cache"))
        .arg("validate")
        .arg(module)
        .args(limits)
        .output()
        .expect("spawn weir validate")
}

#[test]
fn a_compile_bomb_is_stopped_at_the_cpu_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = validate(dir.path(), &bomb(dir.path()), &["--compile-cpu", "1s"]);
    assert_eq!(
        refusal_line(&out),
        "weir: error: bomb.wasm: took more than 1s of CPU time to compile and was stopped (compile_cpu)"
    );
}

#[test]
fn a_compile_bomb_is_stopped_at_the_memory_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = validate(
        dir.path(),
        &bomb(dir.path()),
        &["--compile-memory", "256MiB"],
    );
    assert_eq!(
        refusal_line(&out),
        "weir: error: bomb.wasm: needed more than 256 MiB of memory to compile and was stopped (compile_memory)"
    );
}

#[test]
fn real_guests_compile_within_the_smallest_limits() {
    for name in ["uppercase", "word_count", "windowed_sum"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = validate(
            dir.path(),
            &guest(name),
            &["--compile-cpu", "1s", "--compile-memory", "256MiB"],
        );
        assert!(out.status.success(), "{name}: {}", stderr_of(&out));
        let line = String::from_utf8_lossy(&out.stdout);
        assert!(line.contains(": weir guest, world "), "{name}: {line}");
    }
}

#[test]
fn limits_out_of_range_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = validate(dir.path(), &guest("uppercase"), &["--compile-cpu", "0s"]);
    let err = stderr_of(&out);
    assert!(
        err.contains("compile_cpu must be whole seconds from 1s to 3600s"),
        "{err}"
    );
    assert!(!out.status.success());
}

#[test]
fn run_refuses_a_compile_bomb_before_reading_its_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\nb\n");
    let text = file_map_spec("bomb", dir.path(), &input, &bomb(dir.path()))
        + "\n[limits]\ncompile_cpu = \"1s\"\n";
    let spec = write_file(dir.path(), "spec.toml", &text);
    let out = weir()
        .env("WEIR_CACHE_DIR", dir.path().join("cache"))
        .args(["run", "--quiet"])
        .arg(&spec)
        .output()
        .expect("spawn weir run");
    let line = refusal_line(&out);
    assert!(line.starts_with("weir: error: pipeline bomb"), "{line}");
    assert!(
        line.ends_with(
            "bomb.wasm: took more than 1s of CPU time to compile and was stopped (compile_cpu)"
        ),
        "{line}"
    );
    assert!(committed_lines(&dir.path().join("out")).is_empty());
}

/// Issues 50 and 52: a `weir` killed with -9 while it compiles leaves no compile running
/// (before, its `weir compile-module` child lived on under pid 1 for minutes, and every
/// rerun added one). The 19 MB Python guest takes seconds to compile: it is caught in
/// progress, `weir validate` is killed, and its child is gone within 2 s.
#[test]
fn a_killed_weir_leaves_no_compile_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let module = guest("uppercase_py");
    let cache = dir.path().join("cache");
    let mut validating = weir()
        .env("WEIR_CACHE_DIR", &cache)
        .arg("validate")
        .arg(&module)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn weir validate");
    let needle = cache.to_string_lossy().into_owned();
    let compile = |cmdline: &str| cmdline.contains("compile-module") && cmdline.contains(&needle);
    weir_tests::wait_for_a_lasting_process(compile, Duration::from_secs(60));
    validating.kill().expect("SIGKILL");
    validating.wait().expect("reap");
    // Gone at once (the kernel's parent-death signal), well before the compile itself
    // could end (about 9 s on this project's 2-core machines).
    weir_tests::assert_processes_gone_within(compile, Duration::from_secs(2), "the compile");
}
