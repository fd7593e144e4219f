//! JavaScript guests (sdk-js/, built by componentize-js through `make js-guests`) are
//! first-class: this file proves that
//! - the JS `uppercase` and `word-count` examples commit the same records (compared as
//!   multisets) as their Rust twins on the same input: through the file sink (key,
//!   value and event time of every record, and the same records refused to the
//!   dead-letter output), and through the Kafka exactly-once pipeline (Kafka source ->
//!   guest -> transactional Kafka sink, read back read_committed), the Rust run and a
//!   direct computation agreeing too;
//! - the three JS components load under `weir validate` (a weir world, no wasi:http);
//! - the JS sandbox probe's every attempt (fetch to a port this test really listens on,
//!   the environment, XMLHttpRequest, WebSocket, putting `fetch` back) fails inside the
//!   guest and reaches nothing; reading a file (a dynamic `import()`, the engine's only
//!   file API) traps the guest instead, and no byte of the file comes out;
//! - the example specs under guest-examples/js/ run as shipped and agree with the same
//!   spec over the Rust guest;
//! - the SDK's own Node unit tests (`node --test`) pass.
//!
//! Inputs are bounded (a few thousand records); no assertion depends on timing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use weir::engine::{EngineError, GuestLimits, WasmEngine};
use weir::record::batch::RecordBatch;
use weir_tests::guest_specs::{
    KAFKA_PARTITIONS, kafka_exactly_once_run, map_step, respec_shipped, run_ok,
};
use weir_tests::kafka::{self, Input};
use weir_tests::{
    SandboxProbes, committed_lines, guest, multiset, multiset_diff, repo_root, stderr_of,
    toml_path, weir, write_file,
};

/// Event time of input record 0, ms.
const BASE_TIME: i64 = 1_700_000_000_000;

/// Texts the inputs cycle through: ASCII, and Unicode whose uppercase changes length
/// or form (ß -> SS, ﬁ -> FI, ǆ -> Ǆ, ΐ -> three code points), so the two guests'
/// case mappings are compared where they could differ. (Over every Unicode scalar value
/// one by one, SpiderMonkey's toUpperCase in the JS component and Rust 1.95's
/// to_uppercase agree: checked while writing this, too slow for every run.)
const TEXTS: [&str; 13] = [
    "the quick brown fox",
    "jumps over the lazy weir",
    "straße und fluß",
    "ǆemal ﬁne ΐ",
    "émile zola à paris",
    "istanbul İzmir ı",
    "σοφία ὀδυσσεύς",
    "emoji 🙂 stays",
    "",
    "MiXeD CaSe 123",
    "quote \\\" and backslash \\\\ in json",
    "ñandú pingüino",
    // A leading BOM is text: kept by both (the WHATWG decoder's default would strip it).
    "\u{feff}bom first",
];

/// Keys of the unwindowed count: quotes, backslashes, controls and non-ASCII, as JSON
/// string literals (the file source takes the decoded text as the key).
const ODD_KEYS: [&str; 7] = [
    r#""plain""#,
    r#""say \"hi\"""#,
    r#""back\\slash""#,
    r#""tab\tand\nnewline""#,
    r#""ctl\u0001\u001f\u007f""#,
    r#""ünïcödé""#,
    r#""🙂""#,
];

/// `n` JSON lines: `user` (one of [`ODD_KEYS`]), `ts` (increasing), `text`.
fn jsonl_input(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"user\":{},\"ts\":{},\"text\":\"{} w{}\"}}\n",
                ODD_KEYS[i % ODD_KEYS.len()],
                BASE_TIME + 37 * i as i64,
                TEXTS[i % TEXTS.len()],
                i % 50
            )
        })
        .collect()
}

/// A file -> steps -> file pipeline in `dir/<name>/`: `source` is the `[[sources]]`
/// table (top-level keys may precede it), `steps` the `[[steps]]` tables; the sink writes JSON lines (key, value and
/// event time of every record); refusals go to `dir/<name>/dead`.
fn file_pipeline(dir: &Path, name: &str, source: &str, steps: &str) -> PathBuf {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).expect("pipeline dir");
    let spec = write_file(
        &root,
        "spec.toml",
        &format!(
            r#"
name = "{name}"
state_dir = {state}

{source}

[checkpoint]
interval = "200ms"

{steps}

[[sinks]]
type = "file"
path = {out}
format = "json"

[dead_letter]
path = {dead}
"#,
            state = toml_path(&root.join("state")),
            out = toml_path(&root.join("out")),
            dead = toml_path(&root.join("dead")),
        ),
    );
    run_ok(&spec);
    root
}

/// The committed output of a pipeline run by [`file_pipeline`], sorted.
fn sorted_output(root: &Path) -> Vec<String> {
    let mut lines = committed_lines(&root.join("out"));
    lines.sort();
    lines
}

/// The dead letters of a run without their `reason` and `operator` (the two languages
/// word a refusal differently), sorted; and the reasons.
fn dead_letters(root: &Path) -> (Vec<String>, Vec<String>) {
    let mut letters = Vec::new();
    let mut reasons = Vec::new();
    for line in committed_lines(&root.join("dead")) {
        let mut v: Value = serde_json::from_str(&line).expect("a dead letter is JSON");
        let object = v.as_object_mut().expect("a dead letter is an object");
        reasons.push(
            object
                .remove("reason")
                .and_then(|r| r.as_str().map(str::to_owned))
                .unwrap_or_default(),
        );
        object.remove("operator");
        letters.push(v.to_string());
    }
    letters.sort();
    (letters, reasons)
}

/// Asserts two sorted outputs are equal, showing a few differences if not.
fn assert_same_output(what: &str, js: &[String], rust: &[String]) {
    let diff = multiset_diff(
        &multiset(js.iter().cloned()),
        &multiset(rust.iter().cloned()),
        5,
    );
    assert!(
        diff.is_empty(),
        "{what}: JS and Rust outputs differ (line, JS count, Rust count): {diff:?}"
    );
    assert_eq!(js.len(), rust.len(), "{what}");
}

#[test]
fn js_uppercase_commits_what_the_rust_uppercase_commits_through_the_file_sink() {
    // JSON lines with keys and increasing event times -> uppercase -> file sink, once
    // with each guest: the same records, keys and times; then raw lines with invalid
    // UTF-8: the same records refused, the rest the same.
    let dir = tempfile::tempdir().expect("tempdir");
    const RECORDS: usize = 3_000;
    let input = write_file(dir.path(), "input.jsonl", &jsonl_input(RECORDS));
    let source = format!(
        "[[sources]]\ntype = \"file\"\npath = {}\nformat = \"jsonl\"\nkey_field = \"user\"\ntimestamp_field = \"ts\"\n",
        toml_path(&input)
    );
    let js = file_pipeline(
        dir.path(),
        "upper-js",
        &source,
        &map_step(&guest("uppercase_js")),
    );
    let rust = file_pipeline(
        dir.path(),
        "upper-rust",
        &source,
        &map_step(&guest("uppercase")),
    );
    let (js_out, rust_out) = (sorted_output(&js), sorted_output(&rust));
    assert_eq!(js_out.len(), RECORDS, "one output record per input record");
    assert_same_output("uppercase, jsonl", &js_out, &rust_out);
    // And what that output is, independently: a sample line, field for field.
    let first: Value = serde_json::from_str(
        js_out
            .iter()
            .find(|l| l.contains("STRASSE UND FLUSS"))
            .expect("the ß line"),
    )
    .expect("json line");
    // Input line 2: user ODD_KEYS[2], the key as its decoded text, unchanged.
    assert_eq!(first["key"], "back\\slash");
    assert_eq!(first["timestamp"], BASE_TIME + 37 * 2);

    let mut raw = Vec::new();
    for (i, text) in TEXTS.iter().enumerate() {
        raw.extend_from_slice(text.as_bytes());
        if i % 4 == 1 {
            raw.extend_from_slice(b" broken \xff\xfe utf-8 \xc3");
        }
        raw.push(b'\n');
    }
    let lines = dir.path().join("input.txt");
    std::fs::write(&lines, &raw).expect("write input");
    let source = format!(
        "[[sources]]\ntype = \"file\"\npath = {}\n",
        toml_path(&lines)
    );
    let js = file_pipeline(
        dir.path(),
        "upper-raw-js",
        &source,
        &map_step(&guest("uppercase_js")),
    );
    let rust = file_pipeline(
        dir.path(),
        "upper-raw-rust",
        &source,
        &map_step(&guest("uppercase")),
    );
    let (js_out, rust_out) = (sorted_output(&js), sorted_output(&rust));
    assert_eq!(js_out.len(), TEXTS.len() - 3);
    assert_same_output("uppercase, raw lines", &js_out, &rust_out);
    let ((js_dead, js_reasons), (rust_dead, _)) = (dead_letters(&js), dead_letters(&rust));
    assert_eq!(js_dead.len(), 3, "{js_dead:?}");
    assert_eq!(js_dead, rust_dead);
    assert!(
        js_reasons.iter().all(|r| r == "value is not UTF-8"),
        "{js_reasons:?}"
    );
}

/// Windowed: JSON lines -> Rust split-words -> word-count over 1 s tumbling windows.
#[test]
fn js_word_count_commits_what_the_rust_word_count_commits_through_the_file_sink() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "input.jsonl", &jsonl_input(3_000));
    let source = format!(
        "[[sources]]\ntype = \"file\"\npath = {}\nformat = \"jsonl\"\ntimestamp_field = \"ts\"\nout_of_orderness = \"1s\"\n",
        toml_path(&input)
    );
    let windowed = |module: &Path| {
        format!(
            "{}\n[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"1s\" }}\n",
            map_step(&guest("split_words")),
            toml_path(module)
        )
    };
    let js = file_pipeline(
        dir.path(),
        "wc-js",
        &source,
        &windowed(&guest("word_count_js")),
    );
    let rust = file_pipeline(
        dir.path(),
        "wc-rust",
        &source,
        &windowed(&guest("word_count")),
    );
    let (js_out, rust_out) = (sorted_output(&js), sorted_output(&rust));
    assert!(js_out.len() > 100, "{} window counts", js_out.len());
    assert_same_output("word-count, windowed", &js_out, &rust_out);
    // Every word of the input counted once: the counts add up to the words split.
    let total: u64 = js_out
        .iter()
        .map(|l| {
            let line: Value = serde_json::from_str(l).expect("json line");
            let value: Value =
                serde_json::from_str(line["value"].as_str().expect("value")).expect("json value");
            value["count"].as_u64().expect("count")
        })
        .sum();
    let words: usize = (0..3_000)
        .map(|i| {
            TEXTS[i % TEXTS.len()]
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .count()
                + 1
        })
        .sum();
    assert_eq!(total, words as u64);
}

/// Unwindowed, keyed by a field whose values need JSON escaping, one record per batch
/// so that every update emits: the escaping of both guests, count by count.
#[test]
fn js_word_count_escapes_odd_keys_as_the_rust_word_count_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "keys.jsonl", &jsonl_input(140));
    let source = format!(
        "[[sources]]\ntype = \"file\"\npath = {}\nformat = \"jsonl\"\nkey_field = \"user\"\ntimestamp_field = \"ts\"\n",
        toml_path(&input)
    );
    let unwindowed = |module: &Path| {
        format!(
            "[[steps]]\ntype = \"aggregate\"\nmodule = {}\n",
            toml_path(module)
        )
    };
    let source = format!("batch_size = 1\n{source}");
    let js = file_pipeline(
        dir.path(),
        "wc-keys-js",
        &source,
        &unwindowed(&guest("word_count_js")),
    );
    let rust = file_pipeline(
        dir.path(),
        "wc-keys-rust",
        &source,
        &unwindowed(&guest("word_count")),
    );
    let (js_out, rust_out) = (sorted_output(&js), sorted_output(&rust));
    assert!(!js_out.is_empty());
    assert_same_output("word-count, unwindowed odd keys", &js_out, &rust_out);
    // The control characters escaped as the Rust guest escapes them, DEL as it is.
    let values: Vec<String> = js_out
        .iter()
        .map(|l| {
            let line: Value = serde_json::from_str(l).expect("json line");
            line["value"].as_str().expect("value").to_owned()
        })
        .collect();
    assert!(
        values
            .iter()
            .any(|v| v.starts_with("{\"word\":\"ctl\\u0001\\u001f\u{7f}\",\"count\":")),
        "{values:?}"
    );
}

// ---------------------------------------------------------------------------------
// Kafka: source -> guest -> transactional sink, read back read_committed.
// ---------------------------------------------------------------------------------

/// `count` records over the partitions: key `r<i>`, value one of [`TEXTS`] with a
/// unique suffix, event times increasing.
fn kafka_input(count: usize) -> Vec<Input> {
    (0..count)
        .map(|i| Input {
            partition: (i % KAFKA_PARTITIONS as usize) as i32,
            key: format!("r{i}"),
            value: format!("{} id{i}", TEXTS[i % TEXTS.len()]),
            timestamp: BASE_TIME + i as i64,
        })
        .collect()
}

#[test]
fn kafka_exactly_once_js_uppercase_equals_the_rust_run() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    const RECORDS: usize = 3_000;
    let records = kafka_input(RECORDS);
    let input = kafka::unique_name("js-upper-in");
    kafka::create_topic(&input, KAFKA_PARTITIONS);
    kafka::produce(&input, &records);

    let js = kafka_exactly_once_run(
        dir.path(),
        "js-upper",
        &input,
        &map_step(&guest("uppercase_js")),
    );
    let rust = kafka_exactly_once_run(
        dir.path(),
        "rust-upper",
        &input,
        &map_step(&guest("uppercase")),
    );
    let mut expected: Vec<String> = records
        .iter()
        .map(|r| format!("{}\t{}", r.key, r.value.to_uppercase()))
        .collect();
    expected.sort();
    assert_same_output("kafka uppercase, JS vs Rust", &js, &rust);
    assert_eq!(js, expected, "every record once, uppercased");
}

#[test]
fn kafka_exactly_once_js_word_count_equals_the_rust_run() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    const RECORDS: usize = 3_000;
    let records = kafka_input(RECORDS);
    let input = kafka::unique_name("js-wc-in");
    kafka::create_topic(&input, KAFKA_PARTITIONS);
    kafka::produce(&input, &records);
    let steps = |count: &Path| {
        format!(
            "{}\n[[steps]]\ntype = \"aggregate\"\nmodule = {}\nwindow = {{ type = \"tumbling\", size = \"1s\" }}\n",
            map_step(&guest("split_words")),
            toml_path(count)
        )
    };
    let js = kafka_exactly_once_run(dir.path(), "js-wc", &input, &steps(&guest("word_count_js")));
    let rust = kafka_exactly_once_run(dir.path(), "rust-wc", &input, &steps(&guest("word_count")));
    assert!(js.len() > 1_000, "{} window counts", js.len());
    assert_same_output("kafka word-count, JS vs Rust", &js, &rust);
    // Each record's unique word `id<i>` is counted exactly once, in its own window.
    for i in [0, 1, 1_499, RECORDS - 1] {
        let ts = BASE_TIME + i as i64;
        let start = ts - ts.rem_euclid(1_000);
        let line = format!(
            "id{i}\t{{\"word\":\"id{i}\",\"window_start\":{start},\"window_end\":{},\"count\":1}}",
            start + 1_000
        );
        assert!(js.contains(&line), "missing {line}");
    }
}

// ---------------------------------------------------------------------------------
// Loading, the sandbox, the shipped specs and the SDK's own tests.
// ---------------------------------------------------------------------------------

#[test]
fn js_components_load_under_weir_validate_and_import_no_network() {
    // The compiled-code cache `weir run` uses (compiling a 12 MB interpreter component
    // takes seconds; docs/src/guests/costs.md's first/second load figures come from a
    // fresh one).
    let cache = weir::pipeline::compile_cache_dir();
    for (name, world) in [
        ("uppercase_js", "mapper (weir:transform/map)"),
        ("word_count_js", "aggregator (weir:transform/aggregate)"),
        ("probe_js", "mapper (weir:transform/map)"),
    ] {
        let path = guest(name);
        let out = weir()
            .arg("validate")
            .arg(&path)
            .output()
            .expect("weir validate");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {}", stderr_of(&out));
        assert!(
            stdout.contains(&format!("weir guest, world {world}, sha256 ")),
            "{name}: {stdout}"
        );
    }
    // What a componentize-js guest imports: the engine's stdio, clocks, random and
    // filesystem (linked deny-by-default), never wasi:http nor sockets.
    let engine = WasmEngine::new(cache.as_deref()).expect("engine");
    let module = engine.load(&guest("probe_js")).expect("load probe_js");
    let imports = module.imports();
    assert!(
        imports
            .iter()
            .any(|i| i.starts_with("wasi:filesystem/preopens@0.2")),
        "{imports:?}"
    );
    assert!(
        !imports
            .iter()
            .any(|i| i.starts_with("wasi:http") || i.starts_with("wasi:sockets")),
        "{imports:?}"
    );
}

#[test]
fn the_js_sandbox_probe_is_denied_everything_inside_the_guest_and_reaches_nothing() {
    // A file of probes -> probe_js -> file sink. `fetch` aims at a TCP port this test
    // really listens on. Every attempt fails with an error the guest catches and
    // reports (no trap), and nothing reaches the host. (Reading a file is the next
    // test: there the engine traps instead.)
    let dir = tempfile::tempdir().expect("tempdir");
    let probes = SandboxProbes::new(dir.path().join("written-by-the-guest"));
    let tcp = probes.tcp_addr();
    let cases: Vec<(String, &str)> = vec![
        (
            format!("fetch http://{tcp}/"),
            "denied: TypeError (no network)",
        ),
        (
            format!("fetch-request http://{tcp}/"),
            "denied: TypeError (no network)",
        ),
        ("restore-fetch".to_owned(), "denied: TypeError"),
        ("env".to_owned(), "denied: ReferenceError"),
        (format!("xhr http://{tcp}/"), "denied: ReferenceError"),
        (format!("websocket ws://{tcp}/"), "denied: ReferenceError"),
        // What a guest is given: its step's config, and the log.
        ("config greeting".to_owned(), "value hello, sandbox"),
        ("config missing".to_owned(), "absent"),
        ("log a line from the probe".to_owned(), "logged"),
        // Input data is this realm's Uint8Array (componentize-js's columns are not: the
        // SDK copies them once per call; before, `instanceof Uint8Array` was false).
        ("types".to_owned(), "key Uint8Array, value Uint8Array"),
    ];
    let input: String = cases.iter().map(|(p, _)| format!("{p}\n")).collect();
    let input = write_file(dir.path(), "probes.txt", &input);
    let source = format!(
        "[[sources]]\ntype = \"file\"\npath = {}\n",
        toml_path(&input)
    );
    let step = format!(
        "{}config = {{ greeting = \"hello, sandbox\" }}\n",
        map_step(&guest("probe_js"))
    );
    let root = file_pipeline(dir.path(), "probe-js", &source, &step);
    let got: BTreeMap<String, String> = committed_lines(&root.join("out"))
        .iter()
        .map(|l| {
            let line: Value = serde_json::from_str(l).expect("json line");
            let value = line["value"].as_str().expect("value").to_owned();
            let (probe, outcome) = value.split_once(": ").expect("<probe>: <outcome>");
            (probe.to_owned(), outcome.to_owned())
        })
        .collect();
    let want: BTreeMap<String, String> = cases
        .iter()
        .map(|(p, o)| (p.clone(), (*o).to_owned()))
        .collect();
    assert_eq!(got, want);
    assert!(dead_letters(&root).0.is_empty());
    probes.assert_nothing_reached();
}

#[test]
fn a_js_dynamic_import_of_a_file_traps_the_guest_and_reads_nothing() {
    // The engine's only way to read a file is a dynamic `import()`. It does not fail
    // inside the guest: StarlingMonkey's module loader asks WASI for the file, finds no
    // preopened directory, and the call traps. So: each attempt, on a fresh instance,
    // is an error of the call, and no byte of /etc/passwd (which exists here) appears
    // in it.
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let first_line = passwd.lines().next().expect("a first line").to_owned();
    let engine = WasmEngine::new(weir::pipeline::compile_cache_dir().as_deref()).expect("engine");
    let module = engine.load(&guest("probe_js")).expect("load probe_js");
    for path in ["/etc/passwd", "file:///etc/passwd", "./passwd.js"] {
        let mut mapper = module
            .instantiate_mapper(&GuestLimits::default(), BTreeMap::new())
            .expect("instantiate");
        let mut input = RecordBatch::default();
        input.push(b"", format!("import {path}").as_bytes(), 0);
        let error = match mapper.map(input) {
            Ok(out) => panic!(
                "import {path} did not trap: {:?}",
                out.records
                    .iter()
                    .map(|r| String::from_utf8_lossy(r.value).into_owned())
                    .collect::<Vec<_>>()
            ),
            Err(e) => {
                assert!(
                    matches!(e, EngineError::Trap { .. }),
                    "import {path}: not a trap of the guest: {e:?}"
                );
                format!("{e:#}")
            }
        };
        // weir's wording for a trap (what `weir run` prints after the pipeline's context):
        // the module, then wasmtime's trap (StarlingMonkey executes `unreachable` when
        // WASI refuses the file)
        assert!(
            error.starts_with(
                "probe_js.wasm: guest trapped: wasm trap: wasm `unreachable` instruction executed"
            ),
            "import {path}: {error}"
        );
        assert!(!error.contains(&first_line), "{error}");
        assert!(!error.contains("root:"), "{error}");
    }
}

/// Removes the output a shipped spec writes under build/, so each run starts clean.
fn clean_shipped(names: &[&str]) {
    for name in names {
        let _ = std::fs::remove_dir_all(repo_root().join("build").join(name));
    }
}

#[test]
fn the_js_example_specs_run_as_shipped_and_agree_with_the_rust_guests() {
    for (example, module, rust, dirs) in [
        (
            "uppercase",
            "uppercase_js.wasm",
            "uppercase",
            [
                "uppercase-js-state",
                "uppercase-js-output",
                "uppercase-js-dead-letter",
            ],
        ),
        (
            "word-count",
            "word_count_js.wasm",
            "word_count",
            [
                "word-count-js-state",
                "word-count-js-output",
                "word-count-js-dead-letter",
            ],
        ),
    ] {
        let spec = repo_root().join(format!("guest-examples/js/{example}/pipeline.toml"));
        clean_shipped(&dirs);
        run_ok(&spec);
        let mut shipped = committed_lines(&repo_root().join("build").join(dirs[1]));
        shipped.sort();
        assert!(shipped.len() > 100, "{example}: {} lines", shipped.len());

        let dir = tempfile::tempdir().expect("tempdir");
        run_ok(&respec_shipped(
            &spec,
            dir.path(),
            module,
            &guest(rust),
            &dirs,
        ));
        let mut twin = committed_lines(&dir.path().join(dirs[1]));
        twin.sort();
        assert_same_output(&format!("{example} as shipped"), &shipped, &twin);
        clean_shipped(&dirs);
    }
}

#[test]
fn the_sdk_node_unit_tests_pass() {
    let sdk = repo_root().join("sdk-js");
    let mut files: Vec<PathBuf> = std::fs::read_dir(sdk.join("test"))
        .expect("sdk-js/test")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let out = Command::new("node")
        .current_dir(&sdk)
        .args(["--test", "--import", "./test/register-host-stub.mjs"])
        .args(&files)
        .output()
        .expect("node (>= 20) on PATH: make js-tools checks for it");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr_of(&out));
    let count = |label: &str| -> usize {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {label} ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `# {label}` line in: {stdout}"))
    };
    assert_eq!(count("fail"), 0, "{stdout}");
    assert!(count("pass") >= 27, "{stdout}");
}
