//! Specs and runs shared by the guest-language tests (`guests/python.rs`,
//! `guests/javascript.rs`): each runs a pipeline once with its own guest and once with the Rust
//! twin, through the real `weir` binary, and compares the outputs.
//!
//! Invariants:
//! - A run that fails panics with weir's stderr, so a test's message says why.
//! - [`kafka_exactly_once_run`] gives every run a unique pipeline name (so transactional
//!   ids never collide between runs or tests) and a fresh output topic, and reads it
//!   back `read_committed`: only what the run committed.
//! - [`respec_shipped`] changes a shipped spec's module and its build/ directories only;
//!   everything else in the pipeline stays as shipped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use crate::{guests_dir, kafka, stderr_of, toml_path, weir, write_file};

/// Partitions of every output topic [`kafka_exactly_once_run`] creates.
pub const KAFKA_PARTITIONS: i32 = 3;

/// A `[[steps]]` table mapping with `module`.
pub fn map_step(module: &Path) -> String {
    format!(
        "[[steps]]\ntype = \"map\"\nmodule = {}\n",
        toml_path(module)
    )
}

/// Runs `weir run --quiet <spec>` (with the test's environment, `KAFKA_BOOTSTRAP`
/// included) to success, or panics with weir's stderr; returns its stdout, and reports
/// the run's wall time on the test's stderr.
pub fn run_ok(spec: &Path) -> String {
    let started = Instant::now();
    let out = weir()
        .args(["run", "--quiet"])
        .arg(spec)
        .stdin(Stdio::null())
        .output()
        .expect("spawn weir");
    assert!(
        out.status.success(),
        "{} failed: {}",
        spec.display(),
        stderr_of(&out)
    );
    eprintln!("{}: {:.1?}", spec.display(), started.elapsed());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs Kafka topic `input` -> `steps` -> a new topic with the transactional sink
/// (parallelism 2, bounded at the input's end, checkpoints every 200 ms, refusals to
/// `dir/<name>/dead`), under a unique pipeline name; returns the output read back
/// `read_committed` as `key\tvalue` lines, sorted.
pub fn kafka_exactly_once_run(dir: &Path, label: &str, input: &str, steps: &str) -> Vec<String> {
    let name = kafka::unique_name(label);
    let output = kafka::unique_name(&format!("{label}-out"));
    kafka::create_topic(&output, KAFKA_PARTITIONS);
    let root = dir.join(&name);
    std::fs::create_dir_all(&root).expect("run dir");
    let spec = write_file(
        &root,
        "spec.toml",
        &format!(
            r#"
name = "{name}"
parallelism = 2
state_dir = {state}

[checkpoint]
interval = "200ms"

[[sources]]
type = "kafka"
topic = "{input}"
start = "earliest"
bounded = true

{steps}

[[sinks]]
type = "kafka"
topic = "{output}"
delivery = "exactly-once"

[dead_letter]
path = {dead}
"#,
            state = toml_path(&root.join("state")),
            dead = toml_path(&root.join("dead")),
        ),
    );
    run_ok(&spec);
    let mut lines: Vec<String> = kafka::read_all(&output, "read_committed")
        .into_iter()
        .map(|(k, v)| format!("{k}\t{v}"))
        .collect();
    lines.sort();
    lines
}

/// A shipped example spec (`guest-examples/<lang>/<example>/pipeline.toml`, which names
/// `"../../../build/..."`) rewritten into `dir/respec.toml`: module `from` (a file name
/// under build/guests/) becomes `to`, each of `dirs` (names under build/) becomes
/// `dir/<name>`, and the other modules it names are taken from [`guests_dir`]
/// (where the test found `to`). Panics if the spec does not name `from`.
pub fn respec_shipped(spec: &Path, dir: &Path, from: &str, to: &Path, dirs: &[&str]) -> PathBuf {
    let mut text = std::fs::read_to_string(spec).expect("read spec");
    let from = format!("\"../../../build/guests/{from}\"");
    assert!(text.contains(&from), "{} names {from}", spec.display());
    text = text.replace(&from, &toml_path(to));
    for d in dirs {
        text = text.replace(&format!("\"../../../build/{d}\""), &toml_path(&dir.join(d)));
    }
    text = text.replace(
        "\"../../../build/guests/",
        &format!("\"{}/", guests_dir().display()),
    );
    assert!(
        !text.contains("\"../../../build/"),
        "{}: a build/ path left unmapped:\n{text}",
        spec.display()
    );
    write_file(dir, "respec.toml", &text)
}
