//! `weir serve`'s API fuzzed against its own OpenAPI document with schemathesis
//! (generated requests, valid and invalid, for every operation), once with a tenant's
//! token and once with the admin's, with all of schemathesis's checks: no 5xx, every
//! status, content type and body as the document says (conformance), invalid data
//! refused, valid data accepted (a spec or module refused on its meaning is a 400:
//! `tests/schemathesis.toml`); and the server must still answer afterwards. `make test` installs schemathesis (`make fuzz-tools`); the
//! test prints how many requests ran.

use std::process::Command;

use serde_json::json;
use weir_tests::server::{ADMIN_TOKEN, TestServer, write_config};

fn schemathesis() -> String {
    std::env::var("WEIR_SCHEMATHESIS").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/weir/venv/bin/schemathesis")
    })
}

/// Runs schemathesis with `token`; the number of generated test cases.
fn fuzz(server: &TestServer, token: &str) -> u64 {
    let program = schemathesis();
    let config = weir_tests::repo_root().join("tests/schemathesis.toml");
    let out = Command::new(&program)
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{}/openapi.json", server.url)])
        .args([
            "--checks",
            "all",
            "--max-examples",
            "25",
            "--seed",
            "7",
            "-w",
            "2",
        ])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} ({e}): `make fuzz-tools` installs it"));
    let text = String::from_utf8_lossy(&out.stdout);
    // A failed check (a 5xx, a nonconforming answer) is a FAILURES section; an error of schemathesis's own
    // generator (seen: a KeyError inside Hypothesis) is not the server's and is
    // reported, not failed on. A server that died shows as failures and as the health
    // check below.
    assert!(
        !text.contains("FAILURES") && !text.contains("Server error"),
        "schemathesis found failures:\n{text}"
    );
    if !out.status.success() {
        eprintln!(
            "schemathesis reported errors of its own (no failed check):\n{}",
            text.lines()
                .filter(|l| l.contains("Error"))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    text.lines()
        .find_map(|l| {
            l.trim()
                .split_once(" generated, ")
                .map(|(n, _)| n.trim().to_owned())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in schemathesis output:\n{text}"))
}

#[test]
fn generated_requests_never_get_a_server_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The real broker, so the topic routes answer as they do in use. The tenant is one
    // no other test uses: the generated requests create and delete topics under its
    // prefix (within a small quota), and with this server's principal (the broker's
    // super user) a tenant `a` deleted the `a.` topics of tests running beside it.
    write_config(
        dir.path(),
        &format!(
            "[kafka]\nbootstrap = \"{}\"\n[quotas]\ntopic_partitions = 8\n",
            weir_tests::kafka::bootstrap()
        ),
    );
    let s = TestServer::start(dir.path());
    let a = s.tenant("fuzz", json!({}));
    // Something to find: a module and a pipeline that is not started.
    let module = s.push(&a, "uppercase");
    let spec = json!({
        "name": "p",
        "sources": [{"type": "kafka", "topic": "fuzz.in"}],
        "steps": [{"type": "map", "module": module}],
        "sinks": [{"type": "kafka", "topic": "fuzz.out"}],
    });
    assert_eq!(
        s.post(
            "/v1/pipelines",
            Some(&a),
            &json!({"spec": spec, "start": false})
        )
        .status,
        201
    );
    let as_tenant = fuzz(&s, &a);
    let as_admin = fuzz(&s, ADMIN_TOKEN);
    eprintln!(
        "schemathesis: {as_tenant} requests with a tenant's token, {as_admin} with the admin's, every check passed"
    );
    assert!(
        as_tenant > 100 && as_admin > 100,
        "{as_tenant} / {as_admin}"
    );
    assert_eq!(s.get("/healthz", None).status, 200);
}
