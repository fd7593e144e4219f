//! Tenant walls (`[isolation] cgroups`, the `cpu_millicores` and `memory_bytes`
//! quotas) on a real server and broker: a noisy tenant runs a CPU hog and a memory hog
//! (`greedy`, within every per-call limit) next to a quiet tenant's map.
//!
//! What is asserted is what the kernel enforces, not a speed: the hog's CPU time over a
//! measured span stays within its quota (the group is throttled, not the host), the
//! memory hog is killed inside its own group and says why, and the quiet tenant's
//! pipeline runs to the end exact, never restarted. The quiet pipeline's time alone and
//! beside the hogs is printed (a figure, not a pass/fail: these machines are shared).
//! This needs cgroups (v2, or v1 as on the project's machines): the server is started
//! with `cgroups = "required"` and the test fails if it cannot have them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weir_tests::kafka;
use weir_tests::server::{ADMIN_TOKEN, TestServer, write_config};

/// The noisy tenant's CPU quota: half a CPU (its hog wants two).
const NOISY_MILLICORES: u64 = 500;
/// The noisy tenant's memory quota; its memory hog holds 2 x 160 MiB.
const NOISY_MEMORY: u64 = 256 << 20;
/// Records of the quiet tenant's map.
const QUIET_RECORDS: u64 = 200_000;

/// The tenants' admin metric `name` (a `weir_server_tenant_*` gauge) of `tenant`.
fn tenant_metric(s: &TestServer, name: &str, tenant: &str) -> f64 {
    let text = s.get("/metrics", Some(ADMIN_TOKEN)).body;
    let text = text.as_str().expect("metrics text");
    let prefix = format!("{name}{{tenant=\"{tenant}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in the admin metrics:\n{text}"))
}

/// A generator -> `module` -> Kafka pipeline of `tenant`; returns its output topic.
fn pipeline(
    s: &TestServer,
    token: &str,
    tenant: &str,
    name: &str,
    module: &str,
    (records, parallelism): (u64, u32),
    config: Value,
) -> String {
    let output = format!("{tenant}.{name}-out");
    kafka::create_topic(&output, 1);
    let spec = json!({
        "name": name,
        "parallelism": parallelism,
        "checkpoint": {"interval": "1s"},
        "limits": {"memory": "192MiB"},
        "sources": [{"type": "generator", "count": records, "value_size": 32}],
        "steps": [{"type": "map", "name": "main", "module": module, "config": config}],
        "sinks": [{"type": "kafka", "topic": output}],
    });
    let created = s.post("/v1/pipelines", Some(token), &json!({"spec": spec}));
    assert_eq!(created.status, 201, "{created:?}");
    output
}

/// Runs the quiet tenant's map to the end and checks its output: every generated id
/// once, upper-cased. Returns how long it took.
fn run_quiet(s: &TestServer, token: &str, module: &str, tag: &str) -> Duration {
    let name = kafka::unique_name(tag);
    let started = Instant::now();
    let output = pipeline(
        s,
        token,
        "quiet",
        &name,
        module,
        (QUIET_RECORDS, 1),
        json!({}),
    );
    let done = s.wait_status(token, &name, Duration::from_secs(300), |v| {
        v["state"] == "finished" || v["state"] == "failed"
    });
    let took = started.elapsed();
    assert_eq!(done["state"], "finished", "{done}");
    assert_eq!(done["restarts"], 0, "the quiet pipeline restarted: {done}");
    let mut ids: BTreeMap<u64, u32> = BTreeMap::new();
    for value in kafka::committed_values(&output) {
        let id = value
            .strip_prefix("{\"ID\":")
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("not an upper-cased generator record: {value}"));
        *ids.entry(id).or_default() += 1;
    }
    assert_eq!(ids.len() as u64, QUIET_RECORDS, "ids missing");
    assert!(ids.values().all(|n| *n == 1), "an id written twice");
    assert_eq!(ids.keys().last(), Some(&(QUIET_RECORDS - 1)));
    took
}

/// Starts the noisy tenant's hogs, each unbounded on 2 subtasks: a CPU hog (tens of
/// microseconds a record, so that every call ends well within its deadline even
/// throttled) and a memory hog of 2 x 160 MiB. Waits until the kernel has killed the
/// memory hog's worker and the pipeline says why. Returns both pipelines' names.
fn start_hogs(s: &TestServer, noisy: &str, greedy: &str) -> [String; 2] {
    let forever = (1_000_000_000, 2);
    let hogs = [
        (kafka::unique_name("cpu-hog"), json!({"spin": "20000"})),
        (kafka::unique_name("memory-hog"), json!({"hold_mib": "160"})),
    ];
    for (name, config) in &hogs {
        pipeline(s, noisy, "noisy", name, greedy, forever, config.clone());
    }
    let killed = s.wait_status(noisy, &hogs[1].0, Duration::from_secs(120), |v| {
        v["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("memory quota"))
    });
    assert!(
        killed["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(&NOISY_MEMORY.to_string())),
        "the memory hog's error names the quota: {killed}"
    );
    assert!(tenant_metric(s, "weir_server_tenant_oom_kills", "noisy") >= 1.0);
    hogs.map(|(name, _)| name)
}

/// Deletes the noisy tenant's pipelines, module and the tenant: its gauges go with it.
fn delete_noisy(s: &TestServer, noisy: &str, greedy: &str, hogs: [String; 2]) {
    for name in hogs {
        let deleted = s.delete(&format!("/v1/pipelines/{name}"), Some(noisy));
        assert_eq!(deleted.status, 204, "{deleted:?}");
    }
    let deleted = s.delete(&format!("/v1/modules/{greedy}"), Some(noisy));
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let deleted = s.delete("/v1/admin/tenants/noisy", Some(ADMIN_TOKEN));
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let text = s.get("/metrics", Some(ADMIN_TOKEN)).body;
    let text = text.as_str().expect("text");
    assert!(
        !text.contains("tenant_cpu_seconds{tenant=\"noisy\"}"),
        "{text}"
    );
}

#[test]
fn a_greedy_tenant_is_held_to_its_cpu_and_memory_quotas_next_to_a_quiet_one() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), "[isolation]\ncgroups = \"required\"\n");
    let s = TestServer::start(dir.path());
    let noisy = s.tenant(
        "noisy",
        json!({"cpu_millicores": NOISY_MILLICORES, "memory_bytes": NOISY_MEMORY, "guest_memory": 200 << 20}),
    );
    let quiet = s.tenant("quiet", json!({}));
    let (greedy, uppercase) = (s.push(&noisy, "greedy"), s.push(&quiet, "uppercase"));
    // Once to compile the module, once to time it alone.
    run_quiet(&s, &quiet, &uppercase, "warm");
    let alone = run_quiet(&s, &quiet, &uppercase, "alone");
    let hogs = start_hogs(&s, &noisy, &greedy);

    // The CPU hog wants 2 CPUs; over a measured span it gets its quota at most.
    let cpu = |s: &TestServer| tenant_metric(s, "weir_server_tenant_cpu_seconds", "noisy");
    let (cpu0, t0) = (cpu(&s), Instant::now());
    let beside = run_quiet(&s, &quiet, &uppercase, "beside");
    let (used, span) = (cpu(&s) - cpu0, t0.elapsed().as_secs_f64());
    let quota = NOISY_MILLICORES as f64 / 1000.0 * span;
    eprintln!(
        "tenant walls: quiet map of {QUIET_RECORDS} records took {:.2} s alone, {:.2} s beside the hogs ({:.2}x); \
         the noisy tenant used {used:.2} CPU-s in {span:.1} s (quota {quota:.2})",
        alone.as_secs_f64(),
        beside.as_secs_f64(),
        beside.as_secs_f64() / alone.as_secs_f64(),
    );
    assert!(used > 0.0, "the CPU hog never ran");
    assert!(
        used <= quota * 1.1 + 0.2,
        "the noisy tenant used {used:.2} CPU-s in {span:.1} s, over its quota of {quota:.2}"
    );
    assert!(tenant_metric(&s, "weir_server_tenant_cpu_throttled_periods", "noisy") > 0.0);
    delete_noisy(&s, &noisy, &greedy, hogs);
    // A clean stop removes the server's groups (a killed server's are reused).
    assert!(s.terminate().success());
}
