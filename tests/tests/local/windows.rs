//! Event-time windows: `windowed-sum` over out-of-order JSON input (watermark bound
//! 2 s, one watermark per record) gives exactly the golden sums in `windows_data/`; records
//! past their window's allowed lateness land in the dead-letter output and in the late
//! count, and a record the guest refuses lands there too. With allowed lateness, a late
//! record updates its fired window and fires it again.

use std::path::Path;

use weir_tests::{committed_lines, guest, run_weir, stderr_of, toml_path, write_file};

fn run_windowed_sum(dir: &Path, allowed_lateness: &str) -> String {
    let input = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/local/windows_data/input.jsonl");
    let spec = write_file(
        dir,
        "windows.toml",
        &format!(
            r#"
name = "windows"
batch_size = 1
state_dir = {state}

[[sources]]
type = "file"
path = {input}
format = "jsonl"
key_field = "user"
timestamp_field = "ts"
out_of_orderness = "2s"

[[steps]]
type = "aggregate"
module = {module}
window = {{ type = "tumbling", size = "10s" }}
allowed_lateness = "{allowed_lateness}"

[[sinks]]
type = "file"
path = {out}

[dead_letter]
path = {dead}
"#,
            state = toml_path(&dir.join("state")),
            input = toml_path(&input),
            module = toml_path(&guest("windowed_sum")),
            out = toml_path(&dir.join("out")),
            dead = toml_path(&dir.join("dead")),
        ),
    );
    let out = run_weir(&["run", "--quiet", spec.to_str().expect("utf-8 path")]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    err
}

fn golden(name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/local/windows_data")
        .join(name);
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .expect("golden file")
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

fn dead_letters(dir: &Path) -> Vec<serde_json::Value> {
    committed_lines(&dir.join("dead"))
        .iter()
        .map(|l| serde_json::from_str(l).expect("dead letter is JSON"))
        .collect()
}

#[test]
fn windowed_sum_matches_golden_and_routes_late_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let summary = run_windowed_sum(dir.path(), "0ms");
    assert_eq!(
        sorted(committed_lines(&dir.path().join("out"))),
        golden("expected.txt")
    );

    let dead = dead_letters(dir.path());
    assert_eq!(dead.len(), 3, "{dead:?}");
    let late: Vec<&serde_json::Value> = dead
        .iter()
        .filter(|d| d["reason"].as_str().unwrap_or("").contains("late"))
        .collect();
    assert_eq!(late.len(), 2, "{dead:?}");
    let late_values: Vec<&str> = late
        .iter()
        .map(|d| d["value"].as_str().expect("value"))
        .collect();
    assert!(
        late_values.contains(&r#"{"user":"a","value":100,"ts":5000}"#),
        "{late_values:?}"
    );
    assert!(
        late_values.contains(&r#"{"user":"c","value":8,"ts":9000}"#),
        "{late_values:?}"
    );
    let refused: Vec<&serde_json::Value> = dead
        .iter()
        .filter(|d| d["value"].as_str().unwrap_or("").contains("oops"))
        .collect();
    assert_eq!(refused.len(), 1, "{dead:?}");
    assert_eq!(refused[0]["operator"], "step-0");
    // Issue 35 item 5: the finished line says where the dead letters are.
    assert!(
        summary.contains(&format!(
            "3 dead letters (2 late) in {}",
            dir.path().join("dead").display()
        )),
        "{summary}"
    );
}

#[test]
fn allowed_lateness_refires_the_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let summary = run_windowed_sum(dir.path(), "5s");
    assert_eq!(
        sorted(committed_lines(&dir.path().join("out"))),
        golden("expected-with-lateness.txt")
    );
    let dead = dead_letters(dir.path());
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(summary.contains("2 dead letters (1 late)"), "{summary}");
}
