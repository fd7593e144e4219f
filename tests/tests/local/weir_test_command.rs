//! `weir test MODULE --input FILE` (issue 35 item 3): a guest over sample records with no
//! spec and no state dir. Exact stdout for a map (output and a dead letter with its
//! reason), for a windowed aggregate (windows as the watermark fires them, event time
//! from a field) and for the same aggregate unwindowed; `--config` as the step's config;
//! a guest failure exits 1 with one line naming the module.

use weir_tests::{guest, refusal_line, stderr_of, weir, write_file};

fn test_command(module: &str, input: &std::path::Path, extra: &[&str]) -> std::process::Output {
    weir()
        .arg("test")
        .arg(guest(module))
        .arg("--input")
        .arg(input)
        .args(extra)
        .output()
        .expect("spawn weir test")
}

fn stdout_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_map_prints_its_output_and_its_dead_letters_with_reasons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, b"hello\nw\xc3\xb6rld\n\xff\n").expect("write input");
    let out = test_command("uppercase", &input, &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stdout_lines(&out),
        [
            r#"out {"key":null,"timestamp":0,"value":"HELLO"}"#,
            r#"out {"key":null,"timestamp":1,"value":"WÖRLD"}"#,
            r#"dead {"key":null,"reason":"value is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0","timestamp":2,"value":"�"}"#,
        ]
    );
    assert_eq!(
        stderr_of(&out).trim(),
        "weir: test of uppercase.wasm (mapper): 3 records in, 2 out, 1 dead letters"
    );
}

#[test]
fn a_windowed_aggregate_prints_each_window_as_the_watermark_fires_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(
        dir.path(),
        "in.jsonl",
        "{\"word\":\"a\",\"ts\":1000}\n{\"word\":\"b\",\"ts\":2000}\n\
         {\"word\":\"a\",\"ts\":12000}\n{\"word\":\"a\",\"ts\":13000}\n",
    );
    let fields = ["--key-field", "word", "--timestamp-field", "ts"];
    let windowed = [&fields[..], &["--window", "10s", "--batch-size", "2"]].concat();
    let out = test_command("word_count", &input, &windowed);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let window = |word: &str, start: u64, count: u64| {
        format!(
            r#"out {{"key":"{word}","timestamp":{},"value":"{{\"word\":\"{word}\",\"window_start\":{start},\"window_end\":{},\"count\":{count}}}"}}"#,
            start + 9_999,
            start + 10_000
        )
    };
    assert_eq!(
        stdout_lines(&out),
        [
            "watermark 2000".to_owned(),
            window("a", 0, 1),
            window("b", 0, 1),
            "watermark 13000".to_owned(),
            window("a", 10_000, 2),
            "watermark end".to_owned(),
        ]
    );
    let out = test_command("word_count", &input, &fields);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stdout_lines(&out),
        [
            r#"out {"key":"a","timestamp":0,"value":"{\"word\":\"a\",\"count\":3}"}"#,
            r#"out {"key":"b","timestamp":0,"value":"{\"word\":\"b\",\"count\":1}"}"#,
        ]
    );
}

#[test]
fn a_guest_failure_exits_1_with_one_line_naming_the_module() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(dir.path(), "in.txt", "a\nboom\n");
    let out = test_command("panicker", &input, &[]);
    let line = refusal_line(&out);
    assert!(line.starts_with("weir: error: panicker.wasm: "), "{line}");
    assert!(
        line.ends_with("weir-test: guest panicked on purpose"),
        "{line}"
    );
    let out = test_command("uppercase", &input, &["--window", "10s"]);
    assert_eq!(
        refusal_line(&out),
        "weir: error: --window is for an aggregator guest; uppercase.wasm is a mapper"
    );
}

/// `--config K=V` (repeatable) is the step's config, as `[steps.config]` is in a spec:
/// `filter_json` keeps the records whose field `field` (default `kind`) is `equals`.
#[test]
fn config_sets_what_the_guest_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_file(
        dir.path(),
        "in.jsonl",
        "{\"type\":\"click\",\"n\":1}\n{\"type\":\"view\",\"n\":2}\n{\"kind\":\"click\",\"n\":3}\n",
    );
    let out = test_command(
        "filter_json",
        &input,
        &["--config", "equals=click", "--config", "field=type"],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stdout_lines(&out),
        [r#"out {"key":null,"timestamp":0,"value":"{\"type\":\"click\",\"n\":1}"}"#]
    );
    let out = test_command("filter_json", &input, &["--config", "equals=click"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        stdout_lines(&out),
        [r#"out {"key":null,"timestamp":2,"value":"{\"kind\":\"click\",\"n\":3}"}"#]
    );
    let out = test_command("filter_json", &input, &[]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let dead = stdout_lines(&out);
    assert_eq!(
        dead.len(),
        3,
        "without config every record is refused: {dead:?}"
    );
    assert_eq!(
        dead[0],
        r#"dead {"key":null,"reason":"filter-json: config `equals` is not set; set it (and optionally `field`, default \"kind\") in the step's [config]","timestamp":0,"value":"{\"type\":\"click\",\"n\":1}"}"#
    );
}
