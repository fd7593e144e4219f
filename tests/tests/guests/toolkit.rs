//! The guest developer's toolkit (issue 35 items 1-3) from an empty directory outside the
//! repository, for each language: `weir new`, `weir build`, `weir test` on the generated
//! sample, `weir run` of the generated spec, with the commands read from the pages that
//! show them (`doc_commands`): the README's quick start (a Rust windowed aggregate, its
//! output as shown there; the book's Guests chapter holds the same block), the same
//! commands for a Python aggregate and a JavaScript map, and Getting started's first
//! guest (a Rust map) as written. A Rust project builds with the guests' shared target
//! directory (`GUEST_TARGET_DIR`, as `make guests` does) so its dependencies are not
//! compiled again; Python and JavaScript go through this checkout's build tools.

use std::path::{Path, PathBuf};
use std::process::Output;

use weir_tests::{committed_lines, refusal_line, stderr_of, weir};

use crate::doc_commands::{self, DocCommand};

fn ok(out: Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", stderr_of(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The README's quick start: a transcript, from `weir new` of a Rust windowed aggregate
/// to its committed output. The book's Guests chapter shows the same block.
fn readme_quick_start() -> Vec<DocCommand> {
    let (info, readme) = doc_commands::block_after("README.md", "## Quick start");
    let (_, book) = doc_commands::block_after(
        "docs/src/guests.md",
        "## The toolkit: `weir new`, `weir build`, `weir test`",
    );
    assert_eq!(book, readme, "docs/src/guests.md's toolkit block");
    doc_commands::commands(&info, &readme)
}

/// The README's quick start for another project: its name and module (`counts`,
/// `counts.wasm`) replaced by `name` and `module`, `weir new`'s flags by `args`, and
/// `--window` dropped from `weir test` where `args` have none. Of what the README shows
/// its own project print, only `weir build`'s line naming the module is asserted.
fn quick_start_for(name: &str, args: &[&str], module: &str) -> Vec<DocCommand> {
    let commands = readme_quick_start();
    let readme_name = commands
        .iter()
        .find(|c| c.is_weir("new"))
        .map(|c| c.words[2].clone())
        .expect("the quick start has a `weir new`");
    let readme_module = format!("{}.wasm", readme_name.replace('-', "_"));
    let rename = |word: &String| match word {
        w if *w == readme_name => name.to_owned(),
        w if *w == readme_module => module.to_owned(),
        w => w.clone(),
    };
    commands
        .into_iter()
        .map(|command| {
            let mut words: Vec<String> = command.words.iter().map(rename).collect();
            if command.is_weir("new") {
                words.truncate(3);
                words.extend(args.iter().map(|a| (*a).to_owned()));
            }
            let window = words.iter().position(|w| w == "--window");
            if let Some(at) = window.filter(|_| !args.contains(&"--window")) {
                words.drain(at..at + 2);
            }
            let shown = if command.is_weir("build") {
                vec![format!("built ./{module}: weir guest ...")]
            } else {
                Vec::new()
            };
            DocCommand { words, shown }
        })
        .collect()
}

/// Runs `commands` as a user would, from `dir`: `cd` moves, `weir ...` runs this
/// checkout's `weir` (a Rust project builds in the guests' target directory), anything
/// else runs under `sh`; each succeeds and prints what its page shows. They go from
/// `weir new` to `weir run`, and after `weir new` the project's own unit tests pass.
/// What `weir test` printed, and the pipeline's committed output, sorted.
fn run_commands(dir: &Path, commands: &[DocCommand]) -> (String, Vec<String>) {
    let (mut cwd, mut subcommands, mut tested) = (dir.to_path_buf(), Vec::new(), String::new());
    for command in commands {
        let (words, line) = (&command.words, command.words.join(" "));
        if words[0] == "cd" {
            cwd = cwd.join(&words[1]);
            continue;
        }
        let mut process = if words[0] == "weir" {
            subcommands.push(words[1].clone());
            let mut weir = weir();
            weir.args(&words[1..]);
            weir
        } else {
            let mut sh = std::process::Command::new("sh");
            sh.args(["-c", &line]);
            sh
        };
        let out = process
            .current_dir(&cwd)
            .env("CARGO_TARGET_DIR", guest_target())
            .output()
            .expect(&line);
        let stderr = stderr_of(&out);
        let stdout = ok(out, &line);
        doc_commands::assert_shown(command, &format!("{stdout}{stderr}"));
        if command.is_weir("new") {
            let args: Vec<&str> = words[3..].iter().map(String::as_str).collect();
            own_unit_test_passes(&cwd.join(&words[2]), &args);
        } else if command.is_weir("test") {
            tested = stdout;
        }
    }
    assert_eq!(subcommands, ["new", "build", "test", "run"]);
    let mut committed = committed_lines(&cwd.join("out"));
    committed.sort();
    (tested, committed)
}

/// The project's own host-side unit tests pass out of the box: `cargo test` for Rust
/// (on the host, with the guests' target directory), `python3 -m unittest` for Python,
/// `npm test` for JavaScript.
fn own_unit_test_passes(project: &Path, args: &[&str]) {
    let (mut command, passed): (_, fn(&str, &str) -> bool) = if args.contains(&"rust") {
        let mut command = std::process::Command::new("cargo");
        command
            .args(["test", "--offline"])
            .env("CARGO_TARGET_DIR", guest_target());
        (command, |out, _| {
            out.contains("test result: ok.") && !out.contains("ok. 0 passed")
        })
    } else if args.contains(&"python") {
        let mut command = std::process::Command::new("python3");
        command.args(["-m", "unittest"]);
        (command, |_, err| {
            err.contains("Ran 1 test") && err.trim_end().ends_with("OK")
        })
    } else if args.contains(&"js") {
        let mut command = std::process::Command::new("npm");
        command.args(["test", "--offline"]);
        (command, |out, _| {
            out.contains("# pass 1") && out.contains("# fail 0")
        })
    } else {
        unreachable!("a language: {args:?}")
    };
    let unit = command.current_dir(project).output().expect("unit test");
    let (out, err) = (String::from_utf8_lossy(&unit.stdout), stderr_of(&unit));
    assert!(unit.status.success() && passed(&out, &err), "{out}\n{err}");
}

#[test]
fn a_rust_windowed_aggregate_from_weir_new_to_committed_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tested, committed) = run_commands(dir.path(), &readme_quick_start());
    let window = |word: &str, start: u64, count: u64| {
        format!(
            r#"{{"word":"{word}","window_start":{start},"window_end":{},"count":{count}}}"#,
            start + 10_000
        )
    };
    assert!(
        tested.contains(&format!(
            r#"out {{"key":"river","timestamp":9999,"value":{}}}"#,
            serde_json::to_string(&window("river", 0, 2)).expect("json")
        )),
        "{tested}"
    );
    assert!(tested.ends_with("watermark end\n"), "{tested}");
    assert_eq!(
        committed,
        [
            window("river", 0, 2),
            window("river", 10_000, 1),
            window("stone", 10_000, 1),
            window("weir", 0, 1)
        ]
    );
}

#[test]
fn a_python_aggregate_from_weir_new_to_committed_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let commands = quick_start_for(
        "word-counts",
        &["--lang", "python", "--kind", "aggregate"],
        "word_counts.wasm",
    );
    let (tested, committed) = run_commands(dir.path(), &commands);
    assert!(
        tested.contains(
            r#"out {"key":"river","timestamp":0,"value":"{\"word\":\"river\",\"count\":3}"}"#
        ),
        "{tested}"
    );
    assert_eq!(
        committed,
        [
            r#"{"word":"river","count":3}"#,
            r#"{"word":"stone","count":1}"#,
            r#"{"word":"weir","count":1}"#
        ]
    );
}

#[test]
fn a_js_map_from_weir_new_to_committed_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let commands = quick_start_for("shout", &["--lang", "js", "--kind", "map"], "shout.wasm");
    let (tested, committed) = run_commands(dir.path(), &commands);
    assert_shouted(&tested, committed);
}

/// Getting started's first guest, a Rust map, with the commands as that page writes
/// them.
#[test]
fn a_rust_map_as_getting_started_writes_it_from_weir_new_to_committed_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (info, block) =
        doc_commands::block_after("docs/src/getting-started.md", "## A first guest");
    let (tested, committed) = run_commands(dir.path(), &doc_commands::commands(&info, &block));
    assert_shouted(&tested, committed);
}

/// What a `weir new` map (`shout`) gives for its sample, in Rust and JavaScript alike:
/// each record's JSON uppercased.
fn assert_shouted(tested: &str, committed: Vec<String>) {
    assert_eq!(
        tested.lines().collect::<Vec<_>>(),
        [
            r#"out {"key":"river","timestamp":1000,"value":"{\"WORD\":\"RIVER\",\"TS\":1000}"}"#,
            r#"out {"key":"weir","timestamp":2000,"value":"{\"WORD\":\"WEIR\",\"TS\":2000}"}"#,
            r#"out {"key":"river","timestamp":3000,"value":"{\"WORD\":\"RIVER\",\"TS\":3000}"}"#,
            r#"out {"key":"stone","timestamp":12000,"value":"{\"WORD\":\"STONE\",\"TS\":12000}"}"#,
            r#"out {"key":"river","timestamp":13000,"value":"{\"WORD\":\"RIVER\",\"TS\":13000}"}"#,
        ]
    );
    assert_eq!(
        committed,
        [
            r#"{"WORD":"RIVER","TS":1000}"#,
            r#"{"WORD":"RIVER","TS":13000}"#,
            r#"{"WORD":"RIVER","TS":3000}"#,
            r#"{"WORD":"STONE","TS":12000}"#,
            r#"{"WORD":"WEIR","TS":2000}"#,
        ]
    );
}

/// The kinds the quick starts above do not make: each project's own unit tests pass as
/// generated (the JavaScript aggregate's with and without a window).
#[test]
fn every_other_project_passes_its_own_unit_tests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let projects: [(&str, &[&str]); 3] = [
        ("python-map", &["--lang", "python", "--kind", "map"]),
        ("js-counts", &["--lang", "js", "--kind", "aggregate"]),
        (
            "js-windows",
            &["--lang", "js", "--kind", "aggregate", "--window", "10s"],
        ),
    ];
    for (name, args) in projects {
        ok(
            weir()
                .current_dir(dir.path())
                .args(["new", name])
                .args(args)
                .output()
                .expect("weir new"),
            "new",
        );
        own_unit_test_passes(&dir.path().join(name), args);
    }
}

#[test]
fn mistakes_get_one_line_saying_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("taken")).expect("mkdir");
    let out = weir()
        .current_dir(dir.path())
        .args(["new", "taken", "--lang", "js", "--kind", "map"])
        .output()
        .expect("weir new");
    assert_eq!(refusal_line(&out), "weir: error: taken exists already");
    let out = weir()
        .current_dir(dir.path())
        .args([
            "new", "m", "--lang", "rust", "--kind", "map", "--window", "1s",
        ])
        .output()
        .expect("weir new");
    assert_eq!(
        refusal_line(&out),
        "weir: error: --window is for --kind aggregate"
    );
    let out = weir()
        .current_dir(dir.path().join("taken"))
        .arg("build")
        .output()
        .expect("weir build");
    assert_eq!(
        refusal_line(&out),
        "weir: error: .: no Cargo.toml and no .py or .js file: not a guest project (`weir new` makes one)"
    );
    std::fs::write(
        dir.path().join("taken/guest.js"),
        "export const nothing = 1;\n",
    )
    .expect("write");
    let out = weir()
        .current_dir(dir.path().join("taken"))
        .arg("build")
        .output()
        .expect("weir build");
    assert!(
        refusal_line(&out).starts_with("weir: error: ./guest.js: no guest registration found"),
        "{}",
        stderr_of(&out)
    );
}

/// The guests' shared target directory (`GUEST_TARGET_DIR`, as `make guests` uses).
fn guest_target() -> PathBuf {
    std::env::var_os("GUEST_TARGET_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/weir/guest-target"),
        PathBuf::from,
    )
}

/// Issue 35 item 2: a Rust crate written by hand, with neither a release profile nor a
/// `.cargo/config.toml`, builds with `weir build` with the settings the examples use,
/// said on stderr; the module works.
#[test]
fn a_hand_written_rust_crate_gets_the_examples_release_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("shout");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    let sdk = weir_tests::repo_root().join("sdk");
    std::fs::write(
        project.join("Cargo.toml"),
        format!(
            "[package]\nname = \"shout\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\nweir-guest = {{ path = {:?} }}\n\n\
             [workspace]\n",
            sdk.to_str().expect("utf-8")
        ),
    )
    .expect("Cargo.toml");
    std::fs::write(
        project.join("src/lib.rs"),
        "use weir_guest::{Record, Result};\n\n#[weir_guest::map]\n\
         fn shout(mut record: Record) -> Result<Record> {\n    \
         record.value = record.value_str()?.to_uppercase().into_bytes();\n    Ok(record)\n}\n",
    )
    .expect("lib.rs");
    let out = weir()
        .current_dir(&project)
        .arg("build")
        .env("CARGO_TARGET_DIR", guest_target())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .expect("weir build");
    let stderr = stderr_of(&out);
    let built = ok(out, "build");
    assert!(
        built.starts_with("built ./shout.wasm: weir guest shout, world mapper"),
        "{built}"
    );
    assert!(
        stderr.contains(
            "weir build: with LTO, one codegen unit, +simd128 (the crate leaves them unset)"
        ),
        "{stderr}"
    );
    std::fs::write(project.join("in.jsonl"), "{\"word\":\"weir\"}\n").expect("input");
    let tested = ok(
        weir()
            .current_dir(&project)
            .args(["test", "shout.wasm", "--input", "in.jsonl"])
            .output()
            .expect("weir test"),
        "test",
    );
    assert!(tested.contains(r#"{\"WORD\":\"WEIR\"}"#), "{tested}");
}

/// Issue 35 item 1: the Rust SDK is a crate a project can depend on from a registry:
/// what `cargo publish` asks of both crates is there (description, license, readme
/// file, documentation, keywords, categories, rust-version), and every dependency on a
/// path also names a version (the path is dropped on publishing). Read with `cargo
/// metadata --no-deps --offline`, so the test needs no registry.
#[test]
fn the_rust_sdk_crates_carry_what_a_registry_needs() {
    let out = std::process::Command::new("cargo")
        .current_dir(weir_tests::repo_root())
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .output()
        .expect("cargo metadata");
    let metadata: serde_json::Value =
        serde_json::from_slice(&ok(out, "cargo metadata").into_bytes()).expect("json");
    for name in ["weir-guest", "weir-guest-macros"] {
        let package = metadata["packages"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .unwrap_or_else(|| panic!("{name} in the workspace"));
        for field in ["description", "license", "documentation", "rust_version"] {
            assert!(
                package[field].as_str().is_some_and(|v| !v.is_empty()),
                "{name}: {field}"
            );
        }
        let readme = package["readme"].as_str().expect("readme");
        let manifest = Path::new(package["manifest_path"].as_str().expect("manifest"));
        assert!(
            manifest.with_file_name(readme).is_file(),
            "{name}: {readme}"
        );
        for list in ["keywords", "categories"] {
            let n = package[list].as_array().map_or(0, Vec::len);
            assert!((1..=5).contains(&n), "{name}: {n} {list}");
        }
        for dep in package["dependencies"].as_array().expect("dependencies") {
            if dep["path"].is_string() {
                assert_ne!(
                    dep["req"], "*",
                    "{name}: {} has a path and no version",
                    dep["name"]
                );
            }
        }
    }
}

/// Issue 35 item 1, for Python and JavaScript: each SDK is a package a project can
/// install from a path anywhere (or an index, once published): `sdk-python` builds a
/// source distribution holding `weir_guest` (setuptools, no network, in a copy so the
/// checkout stays clean) and `sdk-js` packs with its sources, build tools and test
/// stub, and installs from its path into a project whose host-side test then runs.
#[test]
fn the_python_and_js_sdks_pack_as_packages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listing = python_sdist_listing(dir.path());
    for file in [
        "PKG-INFO",
        "weir_guest/__init__.py",
        "weir_guest/aggregator.py",
    ] {
        assert!(
            listing.contains(&format!("weir-guest-0.1.0/{file}\n")),
            "{file}: {listing}"
        );
    }
    let packed = ok(
        std::process::Command::new("npm")
            .args(["pack", "--dry-run", "--json"])
            .current_dir(weir_tests::repo_root().join("sdk-js"))
            .output()
            .expect("npm"),
        "npm pack",
    );
    let packed: serde_json::Value = serde_json::from_str(&packed).expect("json");
    let files: Vec<&str> = packed[0]["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(packed[0]["name"], "weir-guest");
    for file in [
        "src/index.js",
        "tools/build.mjs",
        "README.md",
        "test/register-host-stub.mjs",
        "test/host-hooks.mjs",
        "test/host-stub.mjs",
    ] {
        assert!(files.contains(&file), "{file}: {files:?}");
    }
    assert!(!files.iter().any(|f| f.ends_with(".test.mjs")), "{files:?}");
    js_host_side_test_of_an_installed_sdk(dir.path());
}

/// A project that installs `sdk-js` from its path runs a host-side unit test of its
/// map function under Node with `weir-guest/testing` (the host's imports stubbed).
fn js_host_side_test_of_an_installed_sdk(dir: &Path) {
    let project = dir.join("js-project");
    std::fs::create_dir(&project).expect("mkdir");
    std::fs::write(
        project.join("package.json"),
        r#"{"name":"p","type":"module"}"#,
    )
    .expect("package.json");
    let sdk = weir_tests::repo_root().join("sdk-js");
    ok(
        std::process::Command::new("npm")
            .args(["install", "--offline", "--no-audit", "--no-fund"])
            .arg(&sdk)
            .current_dir(&project)
            .output()
            .expect("npm install"),
        "npm install",
    );
    std::fs::write(
        project.join("shout.test.mjs"),
        "import test from 'node:test';\nimport assert from 'node:assert';\n\
         import * as weir from 'weir-guest';\n\
         const shout = (record) => record.with({ value: record.valueText.toUpperCase() });\n\
         test('shout', () => {\n  \
         assert.strictEqual(shout(new weir.Record('k', 'hello', 3)).valueText, 'HELLO');\n});\n",
    )
    .expect("test file");
    let tested = ok(
        std::process::Command::new("node")
            .args(["--test", "--import", "weir-guest/testing", "shout.test.mjs"])
            .current_dir(&project)
            .output()
            .expect("node"),
        "node --test",
    );
    assert!(
        tested.contains("# pass 1") && tested.contains("# fail 0"),
        "{tested}"
    );
}

/// Builds `sdk-python`'s source distribution in a copy under `dir` (setuptools, no
/// network, the checkout left clean); the archive's file listing.
fn python_sdist_listing(dir: &Path) -> String {
    let copy = dir.join("sdk-python");
    let sdk = weir_tests::repo_root().join("sdk-python");
    for file in ["pyproject.toml", "README.md"] {
        std::fs::create_dir_all(&copy).expect("mkdir");
        std::fs::copy(sdk.join(file), copy.join(file)).expect("copy");
    }
    std::fs::create_dir(copy.join("weir_guest")).expect("mkdir");
    for entry in std::fs::read_dir(sdk.join("weir_guest")).expect("weir_guest") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "py") {
            std::fs::copy(
                &path,
                copy.join("weir_guest")
                    .join(path.file_name().expect("name")),
            )
            .expect("copy");
        }
    }
    let built = ok(
        std::process::Command::new("python3")
            .current_dir(&copy)
            .args([
                "-c",
                "from setuptools import build_meta; print(build_meta.build_sdist('dist'))",
            ])
            .output()
            .expect("python3"),
        "sdist",
    );
    assert!(
        built.trim_end().ends_with("weir-guest-0.1.0.tar.gz"),
        "{built}"
    );
    ok(
        std::process::Command::new("tar")
            .args(["tzf", "dist/weir-guest-0.1.0.tar.gz"])
            .current_dir(&copy)
            .output()
            .expect("tar"),
        "tar",
    )
}
