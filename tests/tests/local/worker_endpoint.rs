//! `weir run --http ADDR`: the worker's own endpoint for an orchestrator. It answers
//! before recovery ends, turns ready once the tasks run, reports the live counters to a
//! Prometheus scrape, says "stopping" once a stop is requested, and is gone with the
//! process. (The stall rule of /healthz is unit-tested in `metrics::endpoint`.)

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use weir_tests::{guest, toml_path, weir, write_file};

fn spec(dir: &Path) -> PathBuf {
    let text = format!(
        r#"
name = "endpoint"
parallelism = 1
state_dir = {state}

[checkpoint]
interval = "200ms"

[[sources]]
type = "generator"
count = 1000000
rate = 20000
seed = 3

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "file"
path = {out}
"#,
        state = toml_path(&dir.join("state")),
        upper = toml_path(&guest("uppercase")),
        out = toml_path(&dir.join("out")),
    );
    write_file(dir, "pipeline.toml", &text)
}

/// (status, body) of `GET url`.
fn get(agent: &ureq::Agent, url: &str) -> (u16, String) {
    let mut response = agent.get(url).call().expect("the endpoint answers");
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// The value of the sample `name{pipeline="endpoint"}` in a scrape.
fn sample(scrape: &str, name: &str) -> u64 {
    let prefix = format!("{name}{{pipeline=\"endpoint\"}} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{scrape}"))
}

#[test]
fn the_endpoint_reports_readiness_liveness_and_counters_of_a_real_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec(dir.path());
    let mut child = weir()
        .args(["run", "--quiet", "--http", "127.0.0.1:0"])
        .arg(&spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).expect("read") > 0,
            "no endpoint line"
        );
        if let Some(url) = line.trim().strip_prefix("weir: health endpoint on ") {
            break url.to_owned();
        }
    };
    // Keep draining stderr so the run never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();

    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&agent, &format!("{url}/readyz")).0 != 200 {
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let scrape = loop {
        let (status, scrape) = get(&agent, &format!("{url}/metrics"));
        assert_eq!(status, 200);
        if sample(&scrape, "weir_checkpoints_completed_total") >= 2 {
            break scrape;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint completed:\n{scrape}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(sample(&scrape, "weir_records_in_total") > 0, "{scrape}");
    assert!(sample(&scrape, "weir_last_checkpoint_id") >= 2, "{scrape}");
    assert!(
        sample(&scrape, "weir_last_checkpoint_unix_ms") > 0,
        "{scrape}"
    );
    assert_eq!(get(&agent, &format!("{url}/healthz")), (200, "ok\n".into()));

    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    // Until the stop checkpoint commits, the endpoint says the worker is going.
    let (status, body) = get(&agent, &format!("{url}/readyz"));
    if status != 200 {
        assert_eq!((status, body.as_str()), (503, "stopping\n"));
    }
    let status = child.wait().expect("wait");
    let rest = drain.join().expect("stderr");
    assert_eq!(status.code(), Some(143), "{rest}");
    assert!(
        agent.get(&format!("{url}/healthz")).call().is_err(),
        "the endpoint is gone with the process"
    );
}

#[test]
fn a_taken_port_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = spec(dir.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = weir()
        .args(["run", "--quiet", "--http", &addr])
        .arg(&spec)
        .output()
        .expect("run weir");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot serve the health endpoint on {addr}: ")),
        "{err}"
    );
    assert!(!dir.path().join("state").exists(), "nothing ran: {err}");
}
