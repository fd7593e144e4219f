//! `weir serve` end to end against the real broker: two tenants, one well-behaved and
//! one hostile, a SIGKILL of the server mid-run, and an upgrade that keeps state. Every
//! count is exact, read back with read_committed.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use weir_tests::kafka::{self, Input};
use weir_tests::multiset;
use weir_tests::server::{TestServer, write_config};

const WORKERS: &str = "[workers]\nrestart_backoff = \"100ms\"\nmax_backoff = \"200ms\"\nrestart_limit = 2\nstop_timeout = \"60s\"\n";
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn inputs(tag: &str, partitions: i32, per_partition: u64) -> Vec<Input> {
    (0..partitions)
        .flat_map(|p| {
            (0..per_partition).map(move |i| Input {
                partition: p,
                key: format!("k{}", i % 7),
                value: format!("{tag}-p{p}-r{i}"),
                timestamp: 1_700_000_000_000 + i as i64,
            })
        })
        .collect()
}

/// A `{t}.{tag}-in` -> `module` -> `{t}.{tag}-out` spec; topics created.
fn map_pipeline(
    t: &str,
    name: &str,
    module: &str,
    partitions: i32,
    rate: u64,
) -> (Value, String, String) {
    let (input, output) = (format!("{t}.{name}-in"), format!("{t}.{name}-out"));
    kafka::create_topic(&input, partitions);
    kafka::create_topic(&output, 1);
    let spec = json!({
        "name": name,
        "parallelism": 2,
        "checkpoint": {"interval": "200ms"},
        "sources": [{"type": "kafka", "topic": input, "start": "earliest", "bounded": true, "rate": rate}],
        "steps": [{"type": "map", "name": "main", "module": module}],
        "sinks": [{"type": "kafka", "topic": output}],
    });
    (spec, input, output)
}

fn state(v: &Value) -> &str {
    v["state"].as_str().unwrap_or("")
}

/// Whether a process whose command line mentions `needle` is alive.
fn process_alive(needle: &str) -> bool {
    !weir_tests::pids_where(|cmdline| cmdline.contains(needle)).is_empty()
}

/// The server's config for tenants `a` and `b` with Kafka principals of their own, on
/// the broker's SASL listener (where the ACLs that `kafka.sh tenant` grants apply).
fn sasl_config() -> String {
    format!(
        "{WORKERS}\n[kafka]\nbootstrap = \"{}\"\nprotocol = \"sasl_plaintext\"\nmechanism = \"SCRAM-SHA-256\"\n\n\
         [[tenants]]\nid = \"a\"\nkafka = {{ username = \"a\", password_env = \"PW_A\" }}\n\n\
         [[tenants]]\nid = \"b\"\nkafka = {{ username = \"b\", password_env = \"PW_B\" }}\n",
        kafka::sasl_bootstrap()
    )
}

const PASSWORDS: [(&str, &str); 2] = [("PW_A", "a-secret-1"), ("PW_B", "b-secret-2")];

/// A server in `dir` on the SASL listener (`sasl_config`), and a token of tenant `a`.
fn sasl_server(dir: &std::path::Path) -> (TestServer, String) {
    kafka::tenant("a", PASSWORDS[0].1, "a.");
    write_config(dir, &sasl_config());
    let s = TestServer::start_with_env(dir, &PASSWORDS);
    let a = s.token("a");
    (s, a)
}

/// Waits (bounded) until pipeline `name` of the tenant of `token` committed checkpoint
/// 2 and reported consumer lag (known from librdkafka's first statistics, after 1 s,
/// which may come after checkpoint 2 at 200 ms checkpoints), or its input ran out;
/// paced at 600 records/s, its 3000 records wait in Kafka for a while, so lag shows.
fn wait_for_a_commit_and_lag(s: &TestServer, token: &str, name: &str) {
    let lag_seen = std::cell::Cell::new(0);
    s.wait_status(token, name, RUN_LIMIT, |v| {
        lag_seen.set(lag_seen.get().max(v["consumer_lag"].as_u64().unwrap_or(0)));
        let committed = v["last_committed_checkpoint"]
            .as_u64()
            .is_some_and(|c| c >= 2);
        let ended = matches!(state(v), "finished" | "failed" | "stopped");
        committed && (lag_seen.get() > 0 || ended)
    });
    assert!(
        lag_seen.get() > 0,
        "no consumer lag reported while the input waited"
    );
}

/// Every transactional id of pipeline `name` the broker knows starts with `tenant`'s
/// prefix, and there are two (the commit unit's).
fn assert_transactional_ids_under_the_prefix(tenant: &str, name: &str) {
    let listed = kafka::kafka_tool(&[
        "transactions",
        "--bootstrap-server",
        &kafka::bootstrap(),
        "list",
    ]);
    let ids: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|id| id.contains(name))
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(
        ids.iter()
            .all(|id| id.starts_with(&format!("{tenant}.{name}."))),
        "{ids:?}"
    );
}

#[test]
fn two_tenants_a_hostile_guest_and_a_server_sigkill() {
    let _one = kafka::exclusive();
    kafka::tenant("a", PASSWORDS[0].1, "a.");
    kafka::tenant("b", PASSWORDS[1].1, "b.");
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), &sasl_config());
    let s = TestServer::start_with_env(dir.path(), &PASSWORDS);
    let a = s.token("a");
    let b = s.token("b");
    let upper = s.push(&a, "uppercase");
    let looper = s.push(&b, "infinite_loop");

    let name_a = kafka::unique_name("up");
    let (spec_a, input_a, output_a) = map_pipeline("a", &name_a, &upper, 3, 600);
    let records = inputs(&name_a, 3, 1000);
    kafka::produce(&input_a, &records);
    let name_b = kafka::unique_name("loop");
    let (spec_b, input_b, output_b) = map_pipeline("b", &name_b, &looper, 1, 0);
    kafka::produce(
        &input_b,
        &[Input {
            partition: 0,
            key: "k".into(),
            value: "loop".into(),
            timestamp: 0,
        }],
    );

    for (token, spec) in [(&a, &spec_a), (&b, &spec_b)] {
        let created = s.post("/v1/pipelines", Some(token), &json!({"spec": spec}));
        assert_eq!(created.status, 201, "{created:?}");
    }
    // A commits some output; then the server is killed, and its workers with it.
    wait_for_a_commit_and_lag(&s, &a, &name_a);
    s.kill();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !process_alive(&format!("pipelines/{name_a}/spec.toml")),
        "A's worker outlived the server"
    );

    let s = TestServer::start_with_env(dir.path(), &PASSWORDS);
    let done = s.wait_status(&a, &name_a, RUN_LIMIT, |v| state(v) == "finished");
    assert_eq!(done["desired"], "running");
    assert_eq!(done["consumer_lag"], 0, "{done}");
    let expected = multiset(records.iter().map(|r| r.value.to_uppercase()));
    let committed = multiset(kafka::committed_values(&output_a));
    assert_eq!(committed, expected, "A's output is not exactly once");

    // B: failed after its restart limit, with the deadline named; nothing committed.
    let failed = s.wait_status(&b, &name_b, RUN_LIMIT, |v| state(v) == "failed");
    let error = failed["last_error"].as_str().unwrap_or("");
    assert!(error.contains("exceeded its time limit of 1s"), "{failed}");
    assert!(
        error.ends_with("(failed 3 times in a row; restart limit 2)"),
        "{failed}"
    );
    assert!(kafka::committed_values(&output_b).is_empty());

    assert_transactional_ids_under_the_prefix("a", &name_a);
    let _ = (input_b, s.terminate());
}

/// The last count of every word in `topic` (its record values are word-count JSON).
fn last_counts(topic: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (_, value) in kafka::read_all(topic, "read_committed") {
        let v: Value = serde_json::from_str(&value).expect("count JSON");
        counts.insert(
            v["word"].as_str().expect("word").to_owned(),
            v["count"].as_u64().expect("count"),
        );
    }
    counts
}

fn words(tag: &str, list: &[(&str, usize)]) -> Vec<Input> {
    list.iter()
        .flat_map(|(w, n)| std::iter::repeat_n(w.to_string(), *n))
        .enumerate()
        .map(|(i, w)| Input {
            partition: 0,
            key: w.clone(),
            value: format!("{tag}-{i}"),
            timestamp: 1_700_000_000_000 + i as i64,
        })
        .collect()
}

fn wait_counts(topic: &str, want: &BTreeMap<String, u64>) {
    let deadline = std::time::Instant::now() + RUN_LIMIT;
    loop {
        let got = last_counts(topic);
        if &got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "counts {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_upgrade_from_a_savepoint_keeps_the_counts() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), WORKERS);
    let s = TestServer::start(dir.path());
    let a = s.tenant("a", json!({}));
    let v1 = s.push(&a, "word_count");
    let v2 = s.push(&a, "count_twice");
    let name = kafka::unique_name("wc");
    let (input, output) = (format!("a.{name}-in"), format!("a.{name}-out"));
    kafka::create_topic(&input, 1);
    kafka::create_topic(&output, 1);
    let spec = json!({
        "name": name,
        "checkpoint": {"interval": "200ms"},
        "sources": [{"type": "kafka", "topic": input, "start": "earliest"}],
        "steps": [{"type": "aggregate", "name": "count", "module": v1}],
        "sinks": [{"type": "kafka", "topic": output}],
    });
    assert_eq!(
        s.post("/v1/pipelines", Some(&a), &json!({"spec": spec}))
            .status,
        201
    );
    kafka::produce(&input, &words("one", &[("x", 3), ("y", 2)]));
    wait_counts(&output, &BTreeMap::from([("x".into(), 3), ("y".into(), 2)]));

    let saved = s.post_empty(&format!("/v1/pipelines/{name}/savepoint"), Some(&a));
    assert_eq!(saved.status, 200, "{saved:?}");
    assert_eq!(saved.body["state"], "stopped");
    let savepoint = saved.body["savepoint"].as_u64().expect("a savepoint");
    // Upgrading the wrong step, or to a module of another world, is refused.
    let upper = s.push(&a, "uppercase");
    let wrong = s.post(
        &format!("/v1/pipelines/{name}/upgrade"),
        Some(&a),
        &json!({"modules": {"count": upper}}),
    );
    assert_eq!(wrong.status, 400);
    assert_eq!(
        wrong.error(),
        format!("step \"count\": module {upper} is a mapper, the step's module a aggregator")
    );

    kafka::produce(&input, &words("two", &[("x", 1), ("z", 2)]));
    let upgraded = s.post(
        &format!("/v1/pipelines/{name}/upgrade"),
        Some(&a),
        &json!({"modules": {"count": v2}}),
    );
    assert_eq!(upgraded.status, 200, "{upgraded:?}");
    assert_eq!(upgraded.body["modules"]["count"], v2.as_str());
    // x: 3 counted by v1, then 1 counted twice by v2; z only by v2; y untouched.
    wait_counts(
        &output,
        &BTreeMap::from([("x".into(), 5), ("y".into(), 2), ("z".into(), 4)]),
    );
    let status = s.get(&format!("/v1/pipelines/{name}"), Some(&a)).body;
    assert!(
        status["last_complete_checkpoint"]
            .as_u64()
            .is_some_and(|c| c > savepoint),
        "{status}"
    );
    let stopped = s.post_empty(&format!("/v1/pipelines/{name}/stop"), Some(&a));
    assert_eq!(stopped.body["state"], "stopped");
}

#[test]
fn a_pipeline_over_its_disk_quota_is_stopped_as_failed() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    write_config(dir.path(), WORKERS);
    let s = TestServer::start(dir.path());
    let c = s.tenant("c", json!({"checkpoint_bytes": 100_000}));
    let count = s.push(&c, "word_count");
    let name = kafka::unique_name("big");
    let output = format!("c.{name}-out");
    kafka::create_topic(&output, 1);
    let spec = json!({
        "name": name,
        "checkpoint": {"interval": "100ms"},
        "sources": [{"type": "generator", "count": 100_000_000u64, "keys": 10_000_000, "rate": 20_000}],
        "steps": [{"type": "aggregate", "module": count}],
        "sinks": [{"type": "kafka", "topic": output}],
    });
    assert_eq!(
        s.post("/v1/pipelines", Some(&c), &json!({"spec": spec}))
            .status,
        201
    );
    let failed = s.wait_status(&c, &name, RUN_LIMIT, |v| state(v) == "failed");
    let error = failed["last_error"].as_str().unwrap_or("");
    assert!(
        error.starts_with("the pipeline's state and checkpoints take "),
        "{failed}"
    );
    assert!(
        error.ends_with(" bytes, over the tenant's quota of 100000: stopped"),
        "{failed}"
    );
    assert_eq!(failed["restarts"], 0);
}

#[test]
fn a_pipeline_stopped_while_it_waits_to_restart_is_stopped() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let slow = WORKERS
        .replace("restart_backoff = \"100ms\"", "restart_backoff = \"30s\"")
        .replace("max_backoff = \"200ms\"", "max_backoff = \"60s\"");
    write_config(dir.path(), &slow);
    let s = TestServer::start(dir.path());
    let a = s.tenant("a", json!({}));
    let upper = s.push(&a, "uppercase");
    let name = kafka::unique_name("nosink");
    let input = format!("a.{name}-in");
    kafka::create_topic(&input, 1);
    // Its output topic does not exist: every start fails, and the worker waits 30 s.
    let spec = json!({
        "name": name,
        "sources": [{"type": "kafka", "topic": input}],
        "steps": [{"type": "map", "module": upper}],
        "sinks": [{"type": "kafka", "topic": format!("a.{name}-missing")}],
    });
    assert_eq!(
        s.post("/v1/pipelines", Some(&a), &json!({"spec": spec}))
            .status,
        201
    );
    let waiting = s.wait_status(&a, &name, RUN_LIMIT, |v| state(v) == "restarting");
    assert!(
        waiting["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("missing")),
        "{waiting}"
    );
    let stopped = s.post_empty(&format!("/v1/pipelines/{name}/stop"), Some(&a));
    assert_eq!(
        (
            stopped.body["state"].as_str(),
            stopped.body["desired"].as_str()
        ),
        (Some("stopped"), Some("stopped")),
        "{stopped:?}"
    );
}

#[test]
fn a_pipeline_whose_kafka_password_is_missing_at_restart_is_failed_with_the_reason() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, a) = sasl_server(dir.path());
    let upper = s.push(&a, "uppercase");
    let name = kafka::unique_name("nopw");
    let (spec, _, _) = map_pipeline("a", &name, &upper, 1, 0);
    assert_eq!(
        s.post(
            "/v1/pipelines",
            Some(&a),
            &json!({"spec": spec, "start": false})
        )
        .status,
        201
    );
    s.kill();
    // Started again without the tenant's password in its environment.
    let s = TestServer::start(dir.path());
    let started = s.post_empty(&format!("/v1/pipelines/{name}/start"), Some(&a));
    assert_eq!(started.status, 500, "{started:?}");
    assert_eq!(
        started.error(),
        "tenant a: environment variable PW_A (its Kafka password) is not set"
    );
    let status = s.get(&format!("/v1/pipelines/{name}"), Some(&a)).body;
    assert_eq!(
        (state(&status), status["last_error"].as_str()),
        ("failed", Some(started.error())),
        "{status}"
    );
}

/// Issue 33: a deleted pipeline's name starts from nothing. A keyed pipeline of two
/// workers (a repartition topic, a progress topic per worker) under a tenant with its
/// own principal commits checkpoints; the delete removes its group, progress and
/// repartition topics with the tenant's ACLs (not its output); a pipeline created under
/// the same name then counts the same input again from the start, exactly, instead of
/// failing on the old one's markers.
#[test]
fn a_deleted_pipelines_name_starts_from_nothing() {
    let _one = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let (s, a) = sasl_server(dir.path());
    let counter = s.push(&a, "word_count");
    let name = kafka::unique_name("re");
    let input = format!("a.{name}-in");
    kafka::create_topic(&input, 2);
    let spec = |output: &str| {
        json!({
            "name": name,
            "checkpoint": {"interval": "200ms"},
            "sources": [{"type": "kafka", "topic": input, "start": "earliest"}],
            "steps": [{"type": "aggregate", "name": "count", "module": counter}],
            "sinks": [{"type": "kafka", "topic": output}],
        })
    };
    let (first, second) = (format!("a.{name}-out1"), format!("a.{name}-out2"));
    kafka::create_topic(&first, 1);
    kafka::create_topic(&second, 1);
    kafka::produce(&input, &words("one", &[("x", 3), ("y", 2)]));
    let created = s.post(
        "/v1/pipelines",
        Some(&a),
        &json!({"spec": spec(&first), "workers": 2}),
    );
    assert_eq!(created.status, 201, "{created:?}");
    let counted = BTreeMap::from([("x".into(), 3), ("y".into(), 2)]);
    wait_counts(&first, &counted);
    s.wait_status(&a, &name, RUN_LIMIT, |v| {
        v["last_committed_checkpoint"].as_u64().is_some()
    });
    let internal = [
        format!("a.{name}-count-repartition"),
        format!("a.{name}.0-of-2.progress"),
        format!("a.{name}.1-of-2.progress"),
    ];
    let prefix = format!("a.{name}");
    let mut listed = kafka::topics_with_prefix(&prefix);
    for topic in &internal {
        assert!(listed.contains(topic), "{topic} in {listed:?}");
    }
    assert!(!kafka::committed_offsets(&prefix, &input).is_empty());

    let deleted = s.delete(&format!("/v1/pipelines/{name}"), Some(&a));
    assert_eq!(deleted.status, 204, "{deleted:?}");
    listed = kafka::topics_with_prefix(&prefix);
    let mut kept = vec![input.clone(), first.clone(), second.clone()];
    kept.sort();
    assert_eq!(listed, kept, "only the tenant's own topics stay");
    assert_eq!(kafka::committed_offsets(&prefix, &input), BTreeMap::new());

    let again = s.post(
        "/v1/pipelines",
        Some(&a),
        &json!({"spec": spec(&second), "workers": 2}),
    );
    assert_eq!(again.status, 201, "{again:?}");
    wait_counts(&second, &counted);
    kafka::produce(&input, &words("two", &[("x", 1)]));
    wait_counts(&second, &BTreeMap::from([("x".into(), 4), ("y".into(), 2)]));
    let status = s.get(&format!("/v1/pipelines/{name}"), Some(&a)).body;
    assert_eq!(status["restarts"], 0, "{status}");
    assert_eq!(status["last_error"], Value::Null, "{status}");
    assert_eq!(
        last_counts(&first),
        counted,
        "the first output is untouched"
    );
    let stopped = s.post_empty(&format!("/v1/pipelines/{name}/stop"), Some(&a));
    assert_eq!(stopped.body["state"], "stopped", "{stopped:?}");
}

/// Issue 33: a tenant manages its own topics (with its own principal, under its prefix,
/// within its `topic_partitions` quota) instead of asking the operator: create, list
/// (pipelines' internal topics left out), over-quota and foreign names refused, an
/// existing name 409, delete, a missing one 404.
#[test]
fn a_tenant_creates_lists_and_deletes_its_own_topics() {
    let _one = kafka::exclusive();
    // A tenant of its own: no other test's topics lie under its prefix.
    kafka::tenant("tp", "tp-secret-3", "tp.");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{WORKERS}\n[kafka]\nbootstrap = \"{}\"\nprotocol = \"sasl_plaintext\"\nmechanism = \"SCRAM-SHA-256\"\n\n\
         [quotas]\ntopic_partitions = 5\n\n\
         [[tenants]]\nid = \"tp\"\nkafka = {{ username = \"tp\", password_env = \"PW_TP\" }}\n",
        kafka::sasl_bootstrap()
    );
    write_config(dir.path(), &config);
    let s = TestServer::start_with_env(dir.path(), &[("PW_TP", "tp-secret-3")]);
    let t = s.token("tp");
    let name = kafka::unique_name("tp");
    let (first, second) = (format!("tp.{name}-1"), format!("tp.{name}-2"));
    // What an earlier, interrupted run left.
    for old in s.get("/v1/topics", Some(&t)).body.as_array().expect("list") {
        let old = old["name"].as_str().expect("name");
        assert_eq!(s.delete(&format!("/v1/topics/{old}"), Some(&t)).status, 204);
    }
    let create = |topic: &str, partitions: u32| {
        s.post(
            "/v1/topics",
            Some(&t),
            &json!({"name": topic, "partitions": partitions}),
        )
    };
    let created = create(&first, 3);
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(kafka::watermarks(&first).len(), 3, "on the broker");
    assert_eq!(create(&first, 1).status, 409, "exists");
    let over = create(&second, 3);
    assert_eq!(over.status, 409, "{over:?}");
    assert!(
        over.error()
            .contains("over your topic_partitions quota of 5"),
        "{over:?}"
    );
    assert_eq!(create(&second, 2).status, 201);
    for refused in ["a.x", "tp.wc.progress", "tp.wc-count-repartition", "tp.x y"] {
        assert_eq!(create(refused, 1).status, 400, "{refused}");
    }
    let listed = s.get("/v1/topics", Some(&t));
    assert_eq!(
        listed.body,
        json!([{"name": first, "partitions": 3}, {"name": second, "partitions": 2}]),
        "{listed:?}"
    );
    assert_eq!(
        s.delete(&format!("/v1/topics/{first}"), Some(&t)).status,
        204
    );
    assert_eq!(
        s.delete(&format!("/v1/topics/{first}"), Some(&t)).status,
        404
    );
    assert_eq!(
        s.delete(&format!("/v1/topics/{second}"), Some(&t)).status,
        204
    );
    assert_eq!(s.get("/v1/topics", Some(&t)).body, json!([]));
}
