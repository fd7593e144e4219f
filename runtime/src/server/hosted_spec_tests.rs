use std::path::Path;

use serde_json::json;

use super::*;

/// A spec edit and the start of the refusal it must meet.
type Case = (Box<dyn Fn(&mut Value)>, &'static str);

const MODULE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// An aggregator of the tenant's.
const AGGREGATOR: &str = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";

fn spec() -> Value {
    json!({
        "name": "wc",
        "parallelism": 2,
        "sources": [{"type": "kafka", "topic": "a.in", "bounded": true}],
        "steps": [{"type": "map", "name": "upper", "module": MODULE}],
        "sinks": [{"type": "kafka", "topic": "a.out"}],
    })
}

fn build_in(dir: &Path, spec: &Value) -> Result<HostedSpec, ApiError> {
    build_as_workers(dir, spec, 1)
}

/// `spec` built to run as `workers` processes, the tenant's quota being 3.
fn build_as_workers(dir: &Path, spec: &Value, workers: u32) -> Result<HostedSpec, ApiError> {
    let module_file = dir.join(format!("{MODULE}.wasm"));
    std::fs::write(&module_file, b"not read here").expect("module file");
    let ns = TenantNamespace::new(dir, "a");
    let quotas = Quotas {
        parallelism: Some(2),
        guest_memory: Some(128 << 20),
        call_timeout_ms: Some(500),
        workers: Some(3),
        ..Quotas::default()
    };
    let kafka = KafkaAccess {
        bootstrap: Some("127.0.0.1:1".into()),
        security: None,
    };
    let module = |id: &str| {
        let world = match id {
            MODULE => "mapper",
            AGGREGATOR => "aggregator",
            _ => return None,
        };
        Some(TenantModule {
            path: module_file.clone(),
            world: world.into(),
        })
    };
    HostedSpec::build(
        spec,
        &HostedContext {
            namespace: &ns,
            quotas: &quotas,
            kafka: &kafka,
            module: &module,
            workers,
        },
    )
}

fn refusal(mut edit: impl FnMut(&mut Value)) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = spec();
    edit(&mut s);
    build_in(dir.path(), &s)
        .expect_err("refused")
        .message()
        .to_owned()
}

#[test]
fn a_good_spec_is_completed_inside_the_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hosted = build_in(dir.path(), &spec()).expect("accepted");
    assert_eq!(hosted.name, "wc");
    assert_eq!(
        hosted.modules,
        BTreeMap::from([("upper".to_owned(), MODULE.to_owned())])
    );
    let parsed = PipelineSpec::parse(&hosted.toml, dir.path(), "spec").expect("parses");
    let pipeline_dir = dir.path().join("tenants/a/pipelines/wc");
    assert_eq!(parsed.state_dir, pipeline_dir.join("state"));
    assert_eq!(
        parsed.checkpoint.dir,
        crate::storage::CheckpointLocation::Local(pipeline_dir.join("checkpoints"))
    );
    assert_eq!(parsed.limits.memory, 64 << 20);
    assert_eq!(parsed.limits.call_timeout, Duration::from_millis(500));
    let crate::spec::sink::SinkSpec::Kafka(sink) = &parsed.sinks[0] else {
        panic!("kafka sink");
    };
    assert_eq!(sink.transactional_prefix, "a.");
    let crate::spec::source::SourceConfig::Kafka(source) = &parsed.sources[0].config else {
        panic!("kafka source");
    };
    assert_eq!(source.group.as_deref(), Some("a.wc"));
    assert_eq!(
        parsed.steps[0].module(),
        dir.path().join(format!("{MODULE}.wasm"))
    );
}

#[test]
fn fields_the_server_chooses_are_refused_by_name() {
    let cases: Vec<Case> = vec![
        (
            Box::new(|s| s["sources"][0]["group"] = json!("b.wc")),
            "spec field sources[0].group:",
        ),
        (
            Box::new(|s| s["sinks"][0]["transactional_prefix"] = json!("b.")),
            "spec field sinks[0].transactional_prefix:",
        ),
        (
            Box::new(|s| s["state_dir"] = json!("/tmp/x")),
            "spec field state_dir:",
        ),
        (
            Box::new(|s| s["checkpoint"] = json!({"dir": "/tmp/x"})),
            "spec field checkpoint.dir:",
        ),
        (
            Box::new(|s| s["dead_letter"] = json!({"path": "/tmp/x"})),
            "spec field dead_letter:",
        ),
        (
            Box::new(|s| s["sinks"][0]["bootstrap"] = json!("evil:9092")),
            "spec field sinks[0].bootstrap:",
        ),
        (
            Box::new(|s| s["limits"] = json!({"compile_cpu": "3600s"})),
            "spec field limits.compile_cpu:",
        ),
    ];
    for (edit, expected) in cases {
        let e = refusal(edit);
        assert!(e.starts_with(expected), "{e}");
    }
}

#[test]
fn an_object_store_checkpoint_dir_is_refused_and_says_why() {
    // A tenant naming a bucket would reach whatever the server's credentials reach.
    for url in ["s3://other-tenant/a/checkpoints", "s3://weir-test"] {
        let e = refusal(|s| s["checkpoint"] = json!({"dir": url}));
        assert!(e.starts_with("spec field checkpoint.dir:"), "{e}");
        assert!(
            e.contains("s3:// are not available to hosted pipelines"),
            "{e}"
        );
    }
}

#[test]
fn topics_outside_the_prefix_and_foreign_connectors_are_refused() {
    let e = refusal(|s| s["sources"][0]["topic"] = json!("b.in"));
    assert_eq!(
        e,
        "spec field sources[0].topic: topic \"b.in\" is outside your prefix \"a.\""
    );
    let e = refusal(|s| s["sinks"][0]["topic"] = json!("ab.out"));
    assert!(
        e.starts_with("spec field sinks[0].topic: topic \"ab.out\" is outside"),
        "{e}"
    );
    let e = refusal(|s| s["sources"][0] = json!({"type": "kafka", "topics": ["a.x", "b.y"]}));
    assert!(e.starts_with("spec field sources[0].topics[1]:"), "{e}");
    let e = refusal(|s| s["sources"][0] = json!({"type": "file", "path": "/etc/passwd"}));
    assert!(
        e.starts_with("spec field sources[0].type: \"file\" is not available"),
        "{e}"
    );
    let e = refusal(|s| s["sinks"][0] = json!({"type": "stdout"}));
    assert!(
        e.starts_with("spec field sinks[0].type: \"stdout\" is not available"),
        "{e}"
    );
}

#[test]
fn quotas_and_foreign_modules_are_enforced() {
    let e = refusal(|s| s["parallelism"] = json!(3));
    assert!(
        e.starts_with("spec field parallelism: 3 exceeds the tenant's quota of 2"),
        "{e}"
    );
    let e = refusal(|s| s["parallelism"] = json!(-1));
    assert_eq!(
        e,
        "spec field parallelism: -1 is not a number of subtasks: use 1 to 2"
    );
    // A module of the wrong world is refused at create, naming both.
    let e = refusal(|s| s["steps"][0]["module"] = json!(AGGREGATOR));
    assert_eq!(
        e,
        format!(
            "spec field steps[0].module: module {AGGREGATOR} is an aggregator; a map step needs a mapper"
        )
    );
    let e = refusal(|s| s["limits"] = json!({"memory": "1GiB"}));
    assert!(e.starts_with("spec field limits.memory:"), "{e}");
    let e = refusal(|s| s["limits"] = json!({"call_timeout": "2s"}));
    assert!(e.starts_with("spec field limits.call_timeout:"), "{e}");
    let other = "f".repeat(64);
    let e = refusal(|s| s["steps"][0]["module"] = json!(other));
    assert!(
        e.starts_with("spec field steps[0].module: you have no module"),
        "{e}"
    );
    let e = refusal(|s| s["steps"][0]["module"] = json!("../../etc/passwd"));
    assert!(e.starts_with("module id"), "{e}");
    let e = refusal(|s| s["name"] = json!("../x"));
    assert!(e.starts_with("pipeline name"), "{e}");
}

/// Host buffers a worker keeps for the tenant stay at most the runtime's defaults: a
/// tenant cannot make its worker hold a 1 GiB Kafka queue or cache.
#[test]
fn host_buffers_above_the_defaults_are_refused_by_name() {
    let aggregate = |s: &mut Value, field: &str, value: Value| {
        s["steps"][0] = json!({"type": "aggregate", "module": AGGREGATOR});
        s["steps"][0][field] = value;
    };
    let cases: Vec<Case> = vec![
        (
            Box::new(|s| s["sources"][0]["buffer_bytes"] = json!("1GiB")),
            "spec field sources[0].buffer_bytes: 1073741824 exceeds 4194304",
        ),
        (
            Box::new(|s| s["sinks"][0]["buffer_bytes"] = json!("9MiB")),
            "spec field sinks[0].buffer_bytes: 9437184 exceeds 8388608",
        ),
        (
            Box::new(|s| s["batch_bytes"] = json!("17MiB")),
            "spec field batch_bytes: 17825792 exceeds 16777216",
        ),
        (
            Box::new(|s| s["limits"] = json!({"guest_log_rate": "1MiB"})),
            "spec field limits.guest_log_rate: 1048576 exceeds 65536",
        ),
        (
            // 1,024 partitions per keyed step on the shared cluster (the spec's own
            // bound), for as many steps and pipelines as the quotas allow.
            Box::new(|s| {
                s["max_parallelism"] = json!(1024);
                s["repartition_partitions"] = json!(1024);
            }),
            "spec field repartition_partitions: 1024 exceeds 32",
        ),
        (
            Box::new(move |s| aggregate(s, "cache_bytes", json!("1GiB"))),
            "spec field steps[0].cache_bytes: 1073741824 exceeds 67108864",
        ),
    ];
    for (edit, expected) in cases {
        let e = refusal(edit);
        assert!(e.starts_with(expected), "{e}");
    }
    // Lower than the defaults is the tenant's choice.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = spec();
    s["sources"][0]["buffer_bytes"] = json!("1MiB");
    s["batch_bytes"] = json!("1MiB");
    s["repartition_partitions"] = json!(8);
    s["limits"] = json!({"guest_log_rate": "8KiB"});
    build_in(dir.path(), &s).expect("smaller buffers are accepted");
}

/// Issue 50: knobs that held the shared server's disk, the broker's readers or a worker's
/// start for as long as a tenant liked (a 4 GiB accumulator, 900 s transactions, an
/// hour's connect timeout, windows and lateness of 1000 days, a generator of 10^12
/// records) are capped, each refusal
/// naming the field, the cap and why; at the caps they are accepted.
#[test]
fn knobs_that_outlast_a_shared_server_are_capped_by_name() {
    let aggregate = |s: &mut Value, field: &str, value: Value| {
        s["steps"][0] = json!({"type": "aggregate", "module": AGGREGATOR});
        s["steps"][0][field] = value;
    };
    let cases: Vec<Case> = vec![
        (
            Box::new(move |s| aggregate(s, "max_accumulator_bytes", json!("4GiB"))),
            "spec field steps[0].max_accumulator_bytes: 4294967296 exceeds 1048576",
        ),
        (
            Box::new(move |s| {
                aggregate(s, "window", json!({"type": "tumbling", "size": "24000h"}))
            }),
            "spec field steps[0].window.size: 24000h exceeds 168h, the most a shared server allows (a window keeps its state until it fires)",
        ),
        (
            Box::new(move |s| {
                aggregate(s, "window", json!({"type": "tumbling", "size": "1h"}));
                s["steps"][0]["allowed_lateness"] = json!("24000h");
            }),
            "spec field steps[0].allowed_lateness: 24000h exceeds 168h",
        ),
        (
            Box::new(|s| s["sinks"][0]["transaction_timeout"] = json!("900s")),
            "spec field sinks[0].transaction_timeout: 15m exceeds 5m, the most a shared server allows (a dead worker's open transaction holds back read_committed readers that long)",
        ),
        (
            Box::new(|s| s["sources"][0]["connect_timeout"] = json!("3600s")),
            "spec field sources[0].connect_timeout: 1h exceeds 1m",
        ),
        (
            Box::new(|s| s["sinks"][0]["connect_timeout"] = json!("61s")),
            "spec field sinks[0].connect_timeout: 61s exceeds 1m",
        ),
        (
            Box::new(|s| s["sources"][0]["failover_timeout"] = json!("1h")),
            "spec field sources[0].failover_timeout: 1h exceeds 1m",
        ),
        (
            Box::new(|s| {
                s["sources"] = json!([{"type": "generator", "count": 1_000_000_000_000u64}])
            }),
            "spec field sources[0].count: 1000000000000 exceeds 1000000000, the most a shared server allows",
        ),
    ];
    for (edit, expected) in cases {
        let e = refusal(edit);
        assert!(e.starts_with(expected), "{e}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = spec();
    aggregate(
        &mut s,
        "window",
        json!({"type": "tumbling", "size": "168h"}),
    );
    s["steps"][0]["allowed_lateness"] = json!("168h");
    s["steps"][0]["max_accumulator_bytes"] = json!("1MiB");
    s["sinks"][0]["transaction_timeout"] = json!("5m");
    s["sources"][0]["connect_timeout"] = json!("60s");
    build_in(dir.path(), &s).expect("at the caps");
    s["sources"] = json!([{"type": "generator", "count": MAX_HOSTED_GENERATOR_COUNT}]);
    build_in(dir.path(), &s).expect("a generator at its cap");
}

fn workers_refusal(spec: &Value, workers: u32) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    build_as_workers(dir.path(), spec, workers)
        .expect_err("refused")
        .message()
        .to_owned()
}

/// The word count: a map, then an unwindowed keyed aggregate, Kafka in and out.
fn keyed_spec() -> Value {
    let mut s = spec();
    s["steps"]
        .as_array_mut()
        .expect("steps")
        .push(json!({"type": "aggregate", "name": "count", "module": AGGREGATOR}));
    s
}

#[test]
fn a_keyed_kafka_spec_runs_as_workers_within_the_quota() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut windowed = keyed_spec();
    windowed["steps"][1]["window"] = json!({"type": "tumbling", "size": "1s"});
    let mut two_keyed = keyed_spec();
    two_keyed["steps"].as_array_mut().expect("steps").push(
        json!({"type": "aggregate", "name": "again", "module": AGGREGATOR, "key_field": "count"}),
    );
    for workers in 1..=3 {
        build_as_workers(dir.path(), &keyed_spec(), workers).expect("accepted");
        build_as_workers(dir.path(), &windowed, workers).expect("windowed accepted");
        build_as_workers(dir.path(), &two_keyed, workers).expect("two keyed steps accepted");
    }
}

#[test]
fn workers_over_the_quota_or_none_are_refused_naming_the_quota() {
    assert_eq!(
        workers_refusal(&spec(), 4),
        "workers: 4 exceeds the tenant's quota of 3 workers per pipeline (quota workers)"
    );
    assert_eq!(
        workers_refusal(&spec(), 0),
        "workers: 0: a pipeline runs as one worker at least"
    );
}

#[test]
fn a_spec_that_cannot_run_as_workers_is_refused_with_for_workers_reason() {
    let mut generator = spec();
    generator["sources"] = json!([{"type": "generator", "count": 10}]);
    let line = workers_refusal(&generator, 2);
    assert!(
        line.starts_with("pipeline wc, worker 0/2: source ")
            && line.contains("is a generator source, which every worker would read whole"),
        "{line}"
    );
    // One worker runs either as it always did.
    let dir = tempfile::tempdir().expect("tempdir");
    build_as_workers(dir.path(), &generator, 1).expect("a generator as one worker");
}

#[test]
fn a_refusal_of_the_parser_names_the_tenants_field_not_a_generated_line() {
    let e = refusal(|s| {
        s["steps"][0] = json!({"type": "aggregate", "module": AGGREGATOR, "window": {"type": "tumbling", "size": "soon"}});
    });
    assert!(
        e.starts_with("spec field steps[0].window: ") && e.contains("\"soon\""),
        "{e}"
    );
    assert!(!e.contains(" line "), "{e}");
    let e = refusal(|s| s["checkpoint"] = json!({"interval": "1ms"}));
    assert!(e.starts_with("spec field checkpoint.interval: "), "{e}");
}
