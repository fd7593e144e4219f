//! `weir serve` running a hosted pipeline as N worker processes (issue 12, item 1, the
//! hosting half), against the real broker, with a tenant that has a Kafka principal of
//! its own (PREFIXED ACLs from `kafka.sh tenant`, on the SASL listener): the keyed word
//! count of `weir_tests::word_count` (split-words map + unwindowed count, 6 input
//! partitions, 32 key groups, exactly-once Kafka out, `batch_size = 1`) created through
//! the API as one process, stopped with a savepoint and upgraded to 2 workers (a
//! rescale from one process); one worker process SIGKILLed three times (its pid from
//! the status), each time restarted alone by the supervisor while the other keeps its
//! pid; then a savepoint, an upgrade back to 1 refused (409), and an upgrade to 3
//! workers (a rescale), more input, and every
//! word's committed counts (read_committed) are exactly 1, 2, ..., n in order. The
//! repartition topic lies under the tenant's prefix and the 3 workers own it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use weir_tests::kafka;
use weir_tests::server::{Answer, TestServer, write_config};
use weir_tests::word_count::{self, add_totals, assert_exact, committed_counts, total_records};

const TENANT: &str = "hw";
const PASSWORD: &str = "hw-secret-7";
const PARTITIONS: i32 = 6;
const KEY_GROUPS: u16 = 32;
/// Worker SIGKILLs, each followed by the supervisor's restart.
const KILLS: usize = 3;
/// Bound on the whole scenario (it takes well under this on a loaded 2-core machine).
const RUN_LIMIT: Duration = Duration::from_secs(240);

fn config() -> String {
    format!(
        "[workers]\nrestart_backoff = \"100ms\"\nmax_backoff = \"200ms\"\nrestart_limit = 10\nstop_timeout = \"60s\"\n\n\
         [kafka]\nbootstrap = \"{}\"\nprotocol = \"sasl_plaintext\"\nmechanism = \"SCRAM-SHA-256\"\n\n\
         [[tenants]]\nid = \"{TENANT}\"\nquotas = {{ workers = 3, parallelism = 2 }}\n\
         kafka = {{ username = \"{TENANT}\", password_env = \"PW_HW\" }}\n",
        kafka::sasl_bootstrap()
    )
}

fn produce(topic: &str, lines: std::ops::Range<usize>) -> BTreeMap<String, u64> {
    let (records, totals) = word_count::input(PARTITIONS, lines);
    kafka::produce(topic, &records);
    totals
}

/// Worker `i`'s pid in a status, once it runs.
fn pid_of(status: &Value, i: usize) -> Option<i32> {
    let w = &status["worker_status"][i];
    (w["state"] == "running")
        .then(|| w["pid"].as_i64())
        .flatten()
        .map(|p| p as i32)
}

fn all_running(status: &Value, n: usize) -> bool {
    status["state"] == "running" && (0..n).all(|i| pid_of(status, i).is_some())
}

/// Waits (bounded) until `output` holds at least `at_least` committed counts.
fn wait_for_output(output: &str, at_least: usize, deadline: Instant) {
    word_count::wait_for_counts(output, at_least, deadline, || {});
}

/// The word count `name` from `input` to `output` with the tenant's modules,
/// parallelism 2, a record per batch, slow input.
fn keyed_spec(name: &str, (input, output): (&str, &str), split: &str, count: &str) -> Value {
    json!({
        "name": name,
        "parallelism": 2,
        "max_parallelism": KEY_GROUPS,
        "batch_size": 1,
        "checkpoint": {"interval": "300ms"},
        "sources": [{"type": "kafka", "topic": input, "start": "earliest", "rate": 40}],
        "steps": [
            {"type": "map", "module": split},
            {"type": "aggregate", "name": "count", "module": count},
        ],
        "sinks": [{"type": "kafka", "topic": output}],
    })
}

/// SIGKILLs worker 1 (or 0, alternately) `KILLS` times: the supervisor restarts it
/// alone; the other keeps its process. Returns the last status seen.
fn kill_each_worker_in_turn(
    s: &TestServer,
    token: &str,
    name: &str,
    output: &str,
    mut status: Value,
    deadline: Instant,
) -> Value {
    for k in 0..KILLS {
        wait_for_output(output, 150 * (k + 1), deadline);
        let (victim, other) = if k % 2 == 0 { (1, 0) } else { (0, 1) };
        let pid = pid_of(&status, victim).expect("victim runs");
        let other_pid = pid_of(&status, other).expect("other runs");
        let restarts = status["worker_status"][victim]["restarts"]
            .as_u64()
            .unwrap_or(0);
        kill(Pid::from_raw(pid), Signal::SIGKILL).expect("SIGKILL");
        status = s.wait_status(token, name, RUN_LIMIT, |v| {
            pid_of(v, victim).is_some_and(|p| p != pid)
                && v["worker_status"][victim]["restarts"].as_u64() > Some(restarts)
        });
        if pid_of(&status, other) != Some(other_pid) {
            // It may only have failed on its own (a commit timing out on a loaded
            // broker), never because of the kill: its restarts say so.
            eprintln!("worker {other} also restarted: {status}");
        }
        eprintln!("kill {k}: worker {victim} restarted");
    }
    status
}

/// The repartition topic of pipeline `name` is the tenant's, and the 3 workers own its
/// partitions (their markers on its committed offsets).
fn assert_the_3_workers_own_the_repartition_topic(name: &str) {
    let repartition = format!("{TENANT}.{name}-count-repartition");
    let offsets = kafka::committed_offsets(&format!("{TENANT}.{name}"), &repartition);
    assert_eq!(offsets.len(), KEY_GROUPS as usize, "{offsets:?}");
    for i in 0..3 {
        let worker = weir::cluster::Worker::new(i, 3).expect("worker");
        let ranges = weir::cluster::KeyGroupRanges::one_per_group(KEY_GROUPS);
        for p in weir::connector::kafka::repartition::partitions_of(worker, ranges) {
            let (_, marker) = &offsets[&p];
            assert!(
                marker.starts_with(&format!("weir:{name}:{i}-of-3:checkpoint=")),
                "partition {p} is worker {i}/3's: {marker}"
            );
        }
    }
}

/// `POST /v1/pipelines/{name}/upgrade` to `workers` workers.
fn upgrade(s: &TestServer, token: &str, name: &str, workers: u32) -> Answer {
    s.post(
        &format!("/v1/pipelines/{name}/upgrade"),
        Some(token),
        &json!({ "workers": workers }),
    )
}

/// Over the quota is refused, naming it. Created as one process (no `workers`), the
/// pipeline runs for a while; a savepoint stops it, and an upgrade to 2 workers
/// rescales from it (1 -> N). Returns the status once both workers run.
fn one_process_then_two_workers(
    s: &TestServer,
    token: &str,
    (name, spec): (&str, &Value),
    output: &str,
    deadline: Instant,
) -> Value {
    let over = s.post(
        "/v1/pipelines",
        Some(token),
        &json!({"spec": spec, "workers": 4}),
    );
    assert_eq!(over.status, 400, "{over:?}");
    assert!(over.error().contains("(quota workers)"), "{over:?}");
    let created = s.post("/v1/pipelines", Some(token), &json!({"spec": spec}));
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.body["workers"], 1);
    s.wait_status(token, name, RUN_LIMIT, |v| v["state"] == "running");
    wait_for_output(output, 60, deadline);
    let saved = s.post_empty(&format!("/v1/pipelines/{name}/savepoint"), Some(token));
    assert_eq!(saved.status, 200, "{saved:?}");
    eprintln!(
        "1 process committed {} counts",
        total_records(&committed_counts(output))
    );
    let upgraded = upgrade(s, token, name, 2);
    assert_eq!(upgraded.status, 200, "{upgraded:?}");
    assert_eq!(upgraded.body["workers"], 2);
    s.wait_status(token, name, RUN_LIMIT, |v| all_running(v, 2))
}

#[test]
fn one_process_rescales_to_two_workers_that_survive_sigkills_and_rescale_to_three_with_exact_counts()
 {
    let _one = kafka::exclusive();
    let deadline = Instant::now() + RUN_LIMIT;
    kafka::tenant(TENANT, PASSWORD, &format!("{TENANT}."));
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), &config());
    let s = TestServer::start_with_env(dir.path(), &[("PW_HW", PASSWORD)]);
    let token = s.token(TENANT);
    let split = s.push(&token, "split_words");
    let count = s.push(&token, "word_count");

    let name = kafka::unique_name("wc");
    let (input, output) = (
        format!("{TENANT}.{name}-in"),
        format!("{TENANT}.{name}-out"),
    );
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let spec = keyed_spec(&name, (&input, &output), &split, &count);
    let mut totals = produce(&input, 0..120);

    let status = one_process_then_two_workers(&s, &token, (&name, &spec), &output, deadline);
    let status = kill_each_worker_in_turn(&s, &token, &name, &output, status, deadline);
    let restarts = status["restarts"].as_u64().unwrap_or(0);
    assert!(restarts >= KILLS as u64, "{status}");
    assert!(
        dir.path()
            .join(format!(
                "data/tenants/{TENANT}/pipelines/{name}/worker-1-of-2.log"
            ))
            .is_file(),
        "each worker logs to its own file"
    );

    // A savepoint stops both, each after a final checkpoint.
    wait_for_output(&output, 900, deadline);
    let saved = s.post_empty(&format!("/v1/pipelines/{name}/savepoint"), Some(&token));
    assert_eq!(saved.status, 200, "{saved:?}");
    assert_eq!(saved.body["state"], "stopped", "{saved:?}");
    assert!(saved.body["savepoint"].as_u64().is_some(), "{saved:?}");
    let after_two = total_records(&committed_counts(&output));
    eprintln!("2 workers committed {after_two} counts");

    // Rescale to 1 is refused; to 3 workers takes the 2 over.
    let to_one = upgrade(&s, &token, &name, 1);
    assert_eq!(to_one.status, 409, "{to_one:?}");
    assert!(
        to_one
            .error()
            .contains("rescaling from several workers back to one is not supported"),
        "{to_one:?}"
    );
    add_totals(&mut totals, &produce(&input, 120..180));
    let expected: u64 = totals.values().sum();
    let upgraded = upgrade(&s, &token, &name, 3);
    assert_eq!(upgraded.status, 200, "{upgraded:?}");
    assert_eq!(upgraded.body["workers"], 3);
    wait_for_output(&output, expected as usize, deadline);
    let done = s.wait_status(&token, &name, RUN_LIMIT, |v| {
        all_running(v, 3)
            && (0..3).all(|i| v["worker_status"][i]["last_committed_checkpoint"].is_u64())
    });
    let stopped = s.post_empty(&format!("/v1/pipelines/{name}/stop"), Some(&token));
    assert_eq!(stopped.status, 200, "{stopped:?}");
    eprintln!("final status: {done}");
    assert_exact(&committed_counts(&output), &totals);

    assert_the_3_workers_own_the_repartition_topic(&name);
    let _ = s.terminate();
}
