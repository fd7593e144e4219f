//! End-to-end tests of the hosting CLI client (`weir module ...`, `weir pipeline ...`)
//! against a real `weir serve` on port 0: the tables it prints, `--json` as the API
//! answers, and every refusal as one line with the server's reason and status. The
//! Kafka tests run bounded pipelines to completion against the broker `make test`
//! starts (`KAFKA_BOOTSTRAP`; without it they fail saying so, never pass silently).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weir_tests::server::{TestServer, write_config};
use weir_tests::{guest, kafka, refusal_line, repo_root, stderr_of, weir, write_file};

/// A server of its own in `dir`, and a token of tenant `a`.
fn server_with_tenant(dir: &Path) -> (TestServer, String) {
    write_config(dir, "");
    let server = TestServer::start(dir);
    let token = server.tenant("a", json!({}));
    (server, token)
}

/// Runs `weir ARGS... --server URL --token TOKEN`, with no `WEIR_SERVER`/`WEIR_TOKEN`
/// from the environment.
fn cli(server: &TestServer, token: &str, args: &[&str]) -> Output {
    weir()
        .args(args)
        .args(["--server", &server.url, "--token", token])
        .env_remove("WEIR_SERVER")
        .env_remove("WEIR_TOKEN")
        .output()
        .expect("spawn weir")
}

/// The stdout of a command that must have succeeded, with nothing on stderr.
fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "weir failed: {:?}\nstderr: {}",
        out.status,
        stderr_of(out)
    );
    assert_eq!(stderr_of(out), "", "stderr of a successful command");
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

/// The rows of a table, each split into its whitespace-separated words, after checking
/// that every row's cells start at the header's columns.
fn table_rows(text: &str, header: &[&str]) -> Vec<Vec<String>> {
    let mut lines = text.lines();
    let head = lines.next().expect("a header line");
    // Multi-word headers ("LAST ERROR") are one column: find each column's start.
    let starts: Vec<usize> = header
        .iter()
        .map(|h| {
            head.find(h)
                .unwrap_or_else(|| panic!("no column {h} in {head:?}"))
        })
        .collect();
    assert_eq!(
        head.split_whitespace().collect::<Vec<_>>().join(" "),
        header.join(" ")
    );
    lines
        .map(|line| {
            for s in &starts[1..] {
                let at = line.get(*s..).unwrap_or("");
                assert!(
                    line.as_bytes().get(s - 1) == Some(&b' ') && !at.starts_with(' '),
                    "row {line:?} is not aligned with header {head:?}"
                );
            }
            line.split_whitespace().map(str::to_owned).collect()
        })
        .collect()
}

fn words(cells: &[&str]) -> Vec<String> {
    cells
        .iter()
        .flat_map(|c| c.split_whitespace())
        .map(str::to_owned)
        .collect()
}

/// The `key: value` lines of `weir pipeline status`, as (key, value).
fn key_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|l| {
            let (k, v) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("not key: value: {l:?}"));
            (k.to_owned(), v.trim().to_owned())
        })
        .collect()
}

fn write_spec(dir: &Path, name: &str, text: &str) -> PathBuf {
    write_file(dir, name, text)
}

/// A pipeline `name` of tenant `a`: Kafka `input` -> `module` (by id) -> Kafka `output`.
fn kafka_spec(name: &str, module: &str, input: &str, output: &str, source_extra: &str) -> String {
    format!(
        r#"
name = "{name}"

[checkpoint]
interval = "200ms"

[[sources]]
type = "kafka"
topic = "{input}"
start = "earliest"
{source_extra}

[[steps]]
type = "map"
name = "upper"
module = "{module}"

[[sinks]]
type = "kafka"
topic = "{output}"
"#
    )
}

#[test]
fn module_push_ls_rm_round_trip() {
    // Push two guests (one twice), list them as a table, delete them by id prefix and id.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let upper = guest("uppercase");
    let upper_path = upper.to_str().expect("utf-8 path");
    let pushed = ok_stdout(&cli(&server, &token, &["module", "push", upper_path]));
    let api = server.get("/v1/modules", Some(&token));
    assert_eq!(api.status, 200);
    let upper_id = api.body[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(upper_id.len(), 64);
    assert!(
        pushed.starts_with(&format!("pushed uppercase: {upper_id} (mapper, ")),
        "{pushed}"
    );
    let again = ok_stdout(&cli(&server, &token, &["module", "push", upper_path]));
    assert!(
        again.starts_with(&format!("already uploaded uppercase: {upper_id} ")),
        "{again}"
    );
    let wc = guest("word_count");
    let out = cli(
        &server,
        &token,
        &["module", "push", wc.to_str().expect("path"), "--name", "wc"],
    );
    assert!(ok_stdout(&out).starts_with("pushed wc: "));

    let modules = server.get("/v1/modules", Some(&token)).body;
    let ls = ok_stdout(&cli(&server, &token, &["module", "ls"]));
    let rows = table_rows(&ls, &["ID", "NAME", "WORLD", "SIZE", "UPLOADED"]);
    let expected: Vec<Vec<String>> = modules
        .as_array()
        .expect("list")
        .iter()
        .map(|m| {
            let id = m["id"].as_str().expect("id");
            let name = m["name"].as_str().expect("name");
            let world = if name == "wc" { "aggregator" } else { "mapper" };
            assert_eq!(m["world"], world);
            let size = weir::cli::table::size(m["size"].as_u64().expect("size"));
            words(&[
                &id[..12],
                name,
                world,
                &size,
                m["uploaded_at"].as_str().expect("at"),
            ])
        })
        .collect();
    assert_eq!(rows, expected, "module ls:\n{ls}");
    assert_eq!(rows.len(), 2);

    // By the 12-character prefix ls shows, then by the full id.
    let out = ok_stdout(&cli(&server, &token, &["module", "rm", &upper_id[..12]]));
    assert_eq!(out, format!("deleted module {upper_id}\n"));
    let ls = ok_stdout(&cli(&server, &token, &["module", "ls"]));
    let rows = table_rows(&ls, &["ID", "NAME", "WORLD", "SIZE", "UPLOADED"]);
    assert_eq!(rows.len(), 1, "{ls}");
    assert_eq!(rows[0][1..3], ["wc".to_owned(), "aggregator".to_owned()]);
    let wc_id = server.get("/v1/modules", Some(&token)).body[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    ok_stdout(&cli(&server, &token, &["module", "rm", &wc_id]));
    let ls = ok_stdout(&cli(&server, &token, &["module", "ls"]));
    assert_eq!(ls, "ID  NAME  WORLD  SIZE  UPLOADED\n");

    // Deleting it again: the server's 404, in one line.
    let line = refusal_line(&cli(&server, &token, &["module", "rm", &wc_id]));
    assert_eq!(
        line,
        format!("weir: error: no module \"{wc_id}\" (HTTP 404)")
    );
}

#[test]
fn pushing_a_core_module_is_one_line_with_the_reason_and_400() {
    // A core module, not a component: the server's reason and HTTP 400, in one line.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let bytes = wat::parse_file(repo_root().join("tests/guests/core-module.wat")).expect("wat");
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, &bytes).expect("write core.wasm");
    let line = refusal_line(&cli(
        &server,
        &token,
        &["module", "push", core.to_str().expect("path")],
    ));
    let api = server.post_bytes("/v1/modules?name=core", Some(&token), &bytes);
    assert_eq!(api.status, 400, "{api:?}");
    assert!(!api.error().is_empty());
    assert_eq!(line, format!("weir: error: {} (HTTP 400)", api.error()));
    assert!(line.contains("component"), "{line}");
    // Nothing was kept.
    assert_eq!(server.get("/v1/modules", Some(&token)).body, json!([]));
}

#[test]
fn a_wrong_token_gets_the_401_line() {
    // A token the server does not know: 401 in one line, and the token is never echoed.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _token) = server_with_tenant(dir.path());
    let wrong = "not-a-real-token-4242";
    for args in [
        &["module", "ls"][..],
        &["pipeline", "ls"],
        &["pipeline", "status", "p"],
    ] {
        let out = cli(&server, wrong, args);
        let line = refusal_line(&out);
        assert_eq!(
            line,
            "weir: error: missing or unknown token: send `Authorization: Bearer <token>` (HTTP 401)",
            "{args:?}"
        );
        assert_eq!(out.stdout, b"");
        assert!(!line.contains(wrong));
    }
}

#[test]
fn missing_settings_and_an_unreachable_server_are_one_line() {
    // No server, no token, a server that does not answer: one line each, no token shown;
    // WEIR_SERVER and WEIR_TOKEN stand in for the flags.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let run = |args: &[&str], env: &[(&str, &str)]| {
        weir()
            .args(args)
            .env_remove("WEIR_SERVER")
            .env_remove("WEIR_TOKEN")
            .envs(env.iter().copied())
            .output()
            .expect("spawn weir")
    };
    let line = refusal_line(&run(&["module", "ls", "--token", &token], &[]));
    assert_eq!(
        line,
        "weir: error: no server given: pass --server URL or set WEIR_SERVER"
    );
    let line = refusal_line(&run(&["pipeline", "ls"], &[("WEIR_SERVER", &server.url)]));
    assert_eq!(
        line,
        "weir: error: no token given: pass --token TOKEN or set WEIR_TOKEN"
    );
    let env = [
        ("WEIR_SERVER", server.url.as_str()),
        ("WEIR_TOKEN", token.as_str()),
    ];
    let out = ok_stdout(&run(&["module", "ls"], &env));
    assert_eq!(out, "ID  NAME  WORLD  SIZE  UPLOADED\n");

    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = run(&["module", "ls", "--server", &url, "--token", &token], &[]);
    let line = refusal_line(&out);
    assert!(
        line.starts_with(&format!(
            "weir: error: cannot reach the server at {url}/v1/modules: "
        )),
        "{line}"
    );
    assert!(!line.contains(&token), "{line}");
    let line = refusal_line(&run(
        &["module", "ls", "--server", "localhost:1", "--token", "t"],
        &[],
    ));
    assert_eq!(
        line,
        "weir: error: server URL \"localhost:1\": use http://HOST:PORT (or https://)"
    );
}

#[test]
fn json_output_is_the_apis_json() {
    // --json prints what the API answers, pretty, for modules and pipelines alike.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let upper = guest("uppercase");
    let out = ok_stdout(&cli(
        &server,
        &token,
        &["module", "push", upper.to_str().expect("p"), "--json"],
    ));
    let pushed: Value = serde_json::from_str(&out).expect("push --json parses");
    let id = pushed["id"].as_str().expect("id").to_owned();
    assert_eq!(
        pushed,
        server.get(&format!("/v1/modules/{id}"), Some(&token)).body
    );
    assert!(out.contains("\n  \"id\": "), "pretty: {out}");

    let out = ok_stdout(&cli(&server, &token, &["module", "ls", "--json"]));
    let listed: Value = serde_json::from_str(&out).expect("ls --json parses");
    assert_eq!(listed, server.get("/v1/modules", Some(&token)).body);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));

    // A JSON spec file is sent as is.
    let spec = json!({
        "name": "p-json",
        "sources": [{"type": "kafka", "topic": "a.in"}],
        "steps": [{"type": "map", "module": id}],
        "sinks": [{"type": "kafka", "topic": "a.out"}],
    });
    let path = write_spec(dir.path(), "p.json", &spec.to_string());
    let args = [
        "pipeline",
        "create",
        path.to_str().expect("p"),
        "--no-start",
        "--json",
    ];
    let created: Value =
        serde_json::from_str(&ok_stdout(&cli(&server, &token, &args))).expect("parses");
    let api = server.get("/v1/pipelines/p-json", Some(&token)).body;
    assert_eq!(created, api);
    assert_eq!(created["state"], "stopped");
    let out = ok_stdout(&cli(
        &server,
        &token,
        &["pipeline", "status", "p-json", "--json"],
    ));
    assert_eq!(serde_json::from_str::<Value>(&out).expect("parses"), api);
    let out = ok_stdout(&cli(&server, &token, &["pipeline", "ls", "--json"]));
    let listed: Value = serde_json::from_str(&out).expect("parses");
    assert_eq!(listed, server.get("/v1/pipelines", Some(&token)).body);
    assert_eq!(listed[0]["name"], "p-json");
}

/// What `weir pipeline status` shows of a pipeline created stopped that never ran.
fn never_run_status(name: &str, step: &str, id: &str, created_at: &str) -> Vec<(String, String)> {
    let module = format!("module {step}");
    [
        ("name", name),
        ("state", "stopped"),
        ("desired", "stopped"),
        (module.as_str(), id),
        ("last complete checkpoint", "-"),
        ("last committed checkpoint", "-"),
        ("savepoint", "-"),
        ("records in", "0"),
        ("records out", "0"),
        ("dead letters", "0"),
        ("consumer lag", "-"),
        ("restarts", "0"),
        ("last error", "-"),
        ("created", created_at),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

#[test]
fn pipeline_create_from_toml_then_ls_status_rm() {
    // A TOML spec naming a module by the short id `weir module ls` shows (the CLI
    // sends the full id), created stopped: listed, its status shown, then deleted.
    // Nothing runs, so no broker is needed.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let id = server.push(&token, "uppercase");
    let spec = write_spec(
        dir.path(),
        "upper.toml",
        &kafka_spec("upper", &id[..12], "a.in", "a.out", ""),
    );
    let args = [
        "pipeline",
        "create",
        spec.to_str().expect("p"),
        "--no-start",
    ];
    let out = ok_stdout(&cli(&server, &token, &args));
    assert_eq!(out, "created pipeline upper: stopped\n");
    let api = server.get("/v1/pipelines/upper", Some(&token));
    assert_eq!(api.status, 200, "{api:?}");
    assert_eq!(api.body["modules"], json!({"upper": id}));
    assert_eq!(api.body["desired"], "stopped");

    let ls = ok_stdout(&cli(&server, &token, &["pipeline", "ls"]));
    let header = [
        "NAME",
        "STATE",
        "COMMITTED",
        "IN",
        "OUT",
        "RESTARTS",
        "LAST ERROR",
    ];
    let rows = table_rows(&ls, &header);
    assert_eq!(
        rows,
        vec![words(&["upper", "stopped", "-", "0", "0", "0", "-"])],
        "{ls}"
    );

    let status = ok_stdout(&cli(&server, &token, &["pipeline", "status", "upper"]));
    let created_at = api.body["created_at"].as_str().expect("created_at");
    let expected = never_run_status("upper", "upper", &id, created_at);
    assert_eq!(key_values(&status), expected, "{status}");
    // Values start in one column.
    let column = status
        .lines()
        .map(|l| l.len() - l.split_once(':').expect(":").1.trim_start().len());
    assert_eq!(
        column.collect::<std::collections::BTreeSet<_>>().len(),
        1,
        "{status}"
    );

    // The same name again: the server's 409.
    let line = refusal_line(&cli(&server, &token, &args));
    assert_eq!(line, "weir: error: pipeline \"upper\" exists (HTTP 409)");

    let out = ok_stdout(&cli(&server, &token, &["pipeline", "rm", "upper"]));
    assert_eq!(out, "deleted pipeline upper\n");
    let line = refusal_line(&cli(&server, &token, &["pipeline", "status", "upper"]));
    assert_eq!(line, "weir: error: no pipeline \"upper\" (HTTP 404)");
    let ls = ok_stdout(&cli(&server, &token, &["pipeline", "ls"]));
    assert!(table_rows(&ls, &header).is_empty(), "{ls}");
}

#[test]
fn a_refused_spec_is_one_line_naming_the_field() {
    // The server's refusals name the field; a TOML error is refused before sending.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let id = server.push(&token, "uppercase");
    let create = |file: &str, text: &str| {
        let spec = write_spec(dir.path(), file, text);
        refusal_line(&cli(
            &server,
            &token,
            &[
                "pipeline",
                "create",
                spec.to_str().expect("p"),
                "--no-start",
            ],
        ))
    };
    let line = create(
        "group.toml",
        &kafka_spec("g", &id, "a.in", "a.out", "group = \"a.mine\""),
    );
    assert_eq!(
        line,
        "weir: error: spec field sources[0].group: the server chooses it; remove it (HTTP 400)"
    );
    let line = create("outside.toml", &kafka_spec("o", &id, "a.in", "b.out", ""));
    assert_eq!(
        line,
        "weir: error: spec field sinks[0].topic: topic \"b.out\" is outside your prefix \"a.\" (HTTP 400)"
    );
    let bad = dir.path().join("bad.toml");
    let line = create("bad.toml", "name = \"b\"\nparallelism = = 1\n");
    assert!(
        line.starts_with(&format!("weir: error: {} line 2: ", bad.display())),
        "{line}"
    );
    let line = create("spec.yaml", "name: x\n");
    assert!(
        line.ends_with("spec.yaml: a pipeline spec is a .toml or .json file"),
        "{line}"
    );
    assert_eq!(server.get("/v1/pipelines", Some(&token)).body, json!([]));
}

#[test]
fn a_kafka_pipeline_created_by_the_cli_runs_to_finished() {
    // With a broker: push uppercase, create a bounded Kafka pipeline from TOML, watch
    // `pipeline status` until finished, and read the exact committed output.
    // Fails, saying how to start one, without a broker: never a silent pass.
    let _ = kafka::bootstrap();
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let upper = guest("uppercase");
    let out = ok_stdout(&cli(
        &server,
        &token,
        &["module", "push", upper.to_str().expect("p"), "--json"],
    ));
    let id = serde_json::from_str::<Value>(&out).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (input, output) = (kafka::unique_name("a.in"), kafka::unique_name("a.out"));
    kafka::create_topic(&input, 2);
    kafka::create_topic(&output, 2);
    let records: Vec<kafka::Input> = (0..40)
        .map(|i| kafka::Input {
            partition: i % 2,
            key: format!("k{i}"),
            value: format!("record-{i}"),
            timestamp: 1_000 + i64::from(i),
        })
        .collect();
    kafka::produce(&input, &records);
    let name = kafka::unique_name("upper");
    let text = kafka_spec(&name, &id, &input, &output, "bounded = true");
    let spec = write_spec(dir.path(), "upper.toml", &text);
    let out = ok_stdout(&cli(
        &server,
        &token,
        &["pipeline", "create", spec.to_str().expect("p")],
    ));
    assert!(
        out.starts_with(&format!("created pipeline {name}: ")),
        "{out}"
    );

    let status = status_once_finished(&server, &token, &name);
    let value = |key: &str| {
        status
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(value("last error"), Some("-"));
    assert_ne!(value("last committed checkpoint"), Some("-"));

    let mut got = kafka::committed_values(&output);
    got.sort();
    let mut want: Vec<String> = records.iter().map(|r| r.value.to_uppercase()).collect();
    want.sort();
    assert_eq!(got, want);

    let ls = ok_stdout(&cli(&server, &token, &["pipeline", "ls"]));
    let rows = table_rows(
        &ls,
        &[
            "NAME",
            "STATE",
            "COMMITTED",
            "IN",
            "OUT",
            "RESTARTS",
            "LAST ERROR",
        ],
    );
    assert_eq!(rows.len(), 1, "{ls}");
    assert_eq!(rows[0][..2], [name.clone(), "finished".to_owned()], "{ls}");
    ok_stdout(&cli(&server, &token, &["pipeline", "rm", &name]));
}

#[test]
fn a_push_over_the_quota_is_the_413_line() {
    // An upload bigger than what is left of the quota: the server's 413, in one line,
    // answered before the body is sent (Expect: 100-continue), and nothing kept.
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), "");
    let server = TestServer::start(dir.path());
    let token = server.tenant("a", json!({"module_bytes": 100_000}));
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, vec![0u8; 8 << 20]).expect("write big.wasm");
    let line = refusal_line(&cli(
        &server,
        &token,
        &["module", "push", big.to_str().expect("p")],
    ));
    assert!(line.starts_with("weir: error: "), "{line}");
    assert!(line.ends_with(" (HTTP 413)"), "{line}");
    assert!(line.contains("quota"), "{line}");
    assert_eq!(server.get("/v1/modules", Some(&token)).body, json!([]));
    // A file that is not there: one line naming it, nothing sent.
    let missing = dir.path().join("missing.wasm");
    let line = refusal_line(&cli(
        &server,
        &token,
        &["module", "push", missing.to_str().expect("p")],
    ));
    assert_eq!(
        line,
        format!(
            "weir: error: {}: No such file or directory",
            missing.display()
        )
    );
}

#[test]
fn pipeline_actions_without_a_checkpoint_are_refused_in_one_line() {
    // A pipeline that never ran: no savepoint to take or upgrade from; stop is a no-op.
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let id = server.push(&token, "uppercase");
    let spec = write_spec(
        dir.path(),
        "p.toml",
        &kafka_spec("p", &id, "a.in", "a.out", ""),
    );
    ok_stdout(&cli(
        &server,
        &token,
        &[
            "pipeline",
            "create",
            spec.to_str().expect("p"),
            "--no-start",
        ],
    ));
    let line = refusal_line(&cli(&server, &token, &["pipeline", "savepoint", "p"]));
    assert_eq!(
        line,
        "weir: error: pipeline \"p\" has no checkpoint yet to keep as a savepoint (HTTP 409)"
    );
    let upgrade = [
        "pipeline",
        "upgrade",
        "p",
        "--module",
        &format!("upper={}", &id[..12]),
    ];
    let line = refusal_line(&cli(&server, &token, &upgrade));
    assert_eq!(
        line,
        "weir: error: the pipeline has no savepoint: take one first (HTTP 409)"
    );
    let line = refusal_line(&cli(
        &server,
        &token,
        &["pipeline", "upgrade", "p", "--module", "upper=ffff"],
    ));
    assert_eq!(
        line,
        "weir: error: you have no module whose id starts with ffff"
    );
    let out = ok_stdout(&cli(&server, &token, &["pipeline", "stop", "p"]));
    assert_eq!(out, "stopped pipeline p: stopped\n");
    let line = refusal_line(&cli(&server, &token, &["pipeline", "start", "nope"]));
    assert_eq!(line, "weir: error: no pipeline \"nope\" (HTTP 404)");
}

/// Polls the committed output of `topic` until it has `n` records (or panics).
fn wait_committed(topic: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = kafka::committed_values(topic);
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: {} of {n} records committed",
            got.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn inputs(from: i32, n: i32) -> Vec<kafka::Input> {
    (from..from + n)
        .map(|i| kafka::Input {
            partition: 0,
            key: format!("k{i}"),
            value: format!("Alpha Beta{i}"),
            timestamp: 1_000 + i64::from(i),
        })
        .collect()
}

#[test]
fn a_kafka_pipeline_is_savepointed_and_upgraded_by_the_cli() {
    // With a broker: run uppercase, take a savepoint, upgrade the step to split_words
    // by id prefix, feed more input, stop; the output is exactly each phase's.
    // Fails, saying how to start one, without a broker: never a silent pass.
    let _ = kafka::bootstrap();
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, token) = server_with_tenant(dir.path());
    let upper = server.push(&token, "uppercase");
    let split = server.push(&token, "split_words");
    let (input, output) = (kafka::unique_name("a.in"), kafka::unique_name("a.out"));
    kafka::create_topic(&input, 1);
    kafka::create_topic(&output, 1);
    kafka::produce(&input, &inputs(0, 10));
    let name = kafka::unique_name("upgrade");
    let spec = write_spec(
        dir.path(),
        "u.toml",
        &kafka_spec(&name, &upper, &input, &output, ""),
    );
    ok_stdout(&cli(
        &server,
        &token,
        &["pipeline", "create", spec.to_str().expect("p")],
    ));
    wait_committed(&output, 10);

    let out = ok_stdout(&cli(&server, &token, &["pipeline", "savepoint", &name]));
    assert!(
        out.starts_with(&format!("took a savepoint of pipeline {name}: stopped, ")),
        "{out}"
    );
    assert!(out.contains(", savepoint "), "{out}");
    let module = format!("upper={}", &split[..12]);
    let out = ok_stdout(&cli(
        &server,
        &token,
        &["pipeline", "upgrade", &name, "--module", &module],
    ));
    assert!(
        out.starts_with(&format!("upgraded pipeline {name}: ")),
        "{out}"
    );
    let status = ok_stdout(&cli(&server, &token, &["pipeline", "status", &name]));
    assert!(
        key_values(&status).contains(&("module upper".to_owned(), split.clone())),
        "{status}"
    );

    kafka::produce(&input, &inputs(10, 5));
    let mut got = wait_committed(&output, 20);
    let out = ok_stdout(&cli(&server, &token, &["pipeline", "stop", &name]));
    assert!(
        out.starts_with(&format!("stopped pipeline {name}: stopped")),
        "{out}"
    );
    let mut want: Vec<String> = (0..10).map(|i| format!("ALPHA BETA{i}")).collect();
    want.extend((10..15).flat_map(|i| ["alpha".to_owned(), format!("beta{i}")]));
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// `weir pipeline status NAME`, polled until the pipeline is finished (bounded; a failed
/// pipeline fails the test with its status): its last status as key-value pairs.
fn status_once_finished(server: &TestServer, token: &str, name: &str) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let text = ok_stdout(&cli(server, token, &["pipeline", "status", name]));
        let kv = key_values(&text);
        let state = kv
            .iter()
            .find(|(k, _)| k == "state")
            .map(|(_, v)| v.clone());
        match state.as_deref() {
            Some("finished") => return kv,
            Some("failed") => panic!("the pipeline failed:\n{text}"),
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "never finished; last status:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}
