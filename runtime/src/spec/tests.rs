//! Spec parsing: one full valid spec, then each kind of refusal and its message.

use std::time::Duration;

use super::*;
use crate::connector::{GeneratorConfig, InputFormat, KeyDistribution, OutputFormat};
use crate::spec::step::DEFAULT_CACHE_ENTRIES;

/// A directory with the guest modules the specs below name.
fn base() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("guests")).expect("mkdir");
    for m in ["filter.wasm", "count.wasm"] {
        std::fs::write(dir.path().join("guests").join(m), b"\0asm").expect("write");
    }
    dir
}

fn parse(text: &str) -> Result<PipelineSpec, SpecError> {
    let dir = base();
    PipelineSpec::parse(text, dir.path(), "spec.toml")
}

fn error(text: &str) -> String {
    parse(text).expect_err("spec should be refused").to_string()
}

const MINIMAL: &str = r#"
name = "p"
[[sources]]
type = "generator"
count = 10
[[sinks]]
type = "stdout"
"#;

/// A spec setting nearly every field (the three `full_spec_*` tests read it).
const FULL_SPEC: &str = r#"
name = "word-count"
parallelism = 2
max_parallelism = 64
batch_size = 512
state_dir = "state"

[checkpoint]
interval = "500ms"
timeout = "2m"
retain = 4

[limits]
memory = "32MiB"
call_timeout = "250ms"

[[sources]]
type = "generator"
count = 1000
rate = 100
keys = 7
value_size = 32
seed = 9
start_time = 0
time_step = "10ms"
event_time_skew = "5ms"
out_of_orderness = "20ms"

[[sources]]
type = "file"
path = "input"
format = "jsonl"
key_field = "user"
timestamp_field = "ts"

[[sources]]
type = "stdin"

[[steps]]
type = "map"
module = "guests/filter.wasm"
name = "clicks"
config = { field = "kind", equals = "click" }

[[steps]]
type = "aggregate"
module = "guests/count.wasm"
key_field = "user"
window = { type = "hopping", size = "10s", slide = "5s" }
allowed_lateness = "1s"
cache_entries = 10

[[steps]]
type = "aggregate"
module = "guests/count.wasm"

[[sinks]]
type = "file"
path = "/tmp/out"
format = "json"

[[sinks]]
type = "stdout"

[dead_letter]
path = "dlq/"
"#;

#[test]
fn full_spec_top_level_settings() {
    let dir = base();
    let spec = PipelineSpec::parse(FULL_SPEC, dir.path(), "spec.toml").expect("valid spec");
    let base = dir.path();
    assert_eq!(spec.name, "word-count");
    assert_eq!(
        (spec.parallelism, spec.max_parallelism, spec.batch_size),
        (2, 64, 512)
    );
    assert_eq!(spec.state_dir, base.join("state"));
    assert_eq!(
        spec.checkpoint,
        CheckpointSpec {
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(120),
            retain: 4,
            dir: crate::storage::CheckpointLocation::Local(base.join("state/checkpoints")),
        }
    );
    assert_eq!(
        spec.limits,
        GuestLimitsSpec {
            memory: 32 << 20,
            call_timeout: Duration::from_millis(250),
            compile_cpu: Duration::from_secs(300),
            compile_memory: 4 << 30,
            guest_log_rate: 64 << 10,
        }
    );
    assert_eq!(spec.dead_letter.path, base.join("dlq/"));
    assert_eq!(spec.base_dir, base);
}

#[test]
fn full_spec_sources() {
    let dir = base();
    let spec = PipelineSpec::parse(FULL_SPEC, dir.path(), "spec.toml").expect("valid spec");
    let base = dir.path();
    assert_eq!(spec.sources.len(), 3);
    assert_eq!(spec.sources[0].out_of_orderness, Duration::from_millis(20));
    assert_eq!(
        spec.sources[0].config,
        SourceConfig::Generator(GeneratorConfig {
            count: 1000,
            rate: 100,
            keys: 7,
            key_distribution: KeyDistribution::Uniform,
            value_size: 32,
            seed: 9,
            start_time: 0,
            time_step: Duration::from_millis(10),
            event_time_skew: Duration::from_millis(5),
        })
    );
    let SourceConfig::File(file) = &spec.sources[1].config else {
        panic!("file source")
    };
    assert_eq!(file.path, base.join("input"));
    assert_eq!(file.format, InputFormat::Jsonl);
    assert_eq!(file.key_field.as_deref(), Some("user"));
    assert_eq!(spec.sources[1].out_of_orderness, Duration::ZERO);
    assert!(spec.reads_stdin());
}

#[test]
fn full_spec_steps_and_sinks() {
    let dir = base();
    let spec = PipelineSpec::parse(FULL_SPEC, dir.path(), "spec.toml").expect("valid spec");
    let base = dir.path();
    let StepSpec::Map(map) = &spec.steps[0] else {
        panic!("map step")
    };
    assert_eq!(map.name.as_deref(), Some("clicks"));
    assert_eq!(map.module, base.join("guests/filter.wasm"));
    assert_eq!(map.config.get("equals").map(String::as_str), Some("click"));
    let StepSpec::Aggregate(agg) = &spec.steps[1] else {
        panic!("aggregate step")
    };
    assert_eq!(
        agg.window,
        Some(WindowSpec::Hopping {
            size: Duration::from_secs(10),
            slide: Duration::from_secs(5)
        })
    );
    assert_eq!(agg.allowed_lateness, Duration::from_secs(1));
    assert_eq!(agg.cache_entries, 10);
    assert_eq!(agg.key_field.as_deref(), Some("user"));
    let StepSpec::Aggregate(plain) = &spec.steps[2] else {
        panic!("aggregate step")
    };
    assert_eq!(
        (plain.window, plain.allowed_lateness, plain.cache_entries),
        (None, Duration::ZERO, DEFAULT_CACHE_ENTRIES)
    );

    assert_eq!(
        spec.sinks[0],
        SinkSpec::File(crate::connector::FileSinkConfig {
            path: "/tmp/out".into(),
            format: OutputFormat::Json,
        })
    );
    assert_eq!(spec.sinks[1].format(), Some(OutputFormat::Value));
}

#[test]
fn checkpoint_dir_is_a_directory_or_an_s3_prefix() {
    let dir = base();
    let spec = PipelineSpec::parse(
        &format!("{MINIMAL}[checkpoint]\ndir = \"s3://weir-ckpt/teams/p/\"\n"),
        dir.path(),
        "spec.toml",
    )
    .expect("valid");
    assert_eq!(
        spec.checkpoint.dir,
        crate::storage::CheckpointLocation::S3(crate::storage::S3Location {
            bucket: "weir-ckpt".into(),
            prefix: "teams/p".into(),
        })
    );
    let spec = PipelineSpec::parse(
        &format!("{MINIMAL}[checkpoint]\ndir = \"ckpt\"\n"),
        dir.path(),
        "spec.toml",
    )
    .expect("valid");
    assert_eq!(
        spec.checkpoint.dir,
        crate::storage::CheckpointLocation::Local(dir.path().join("ckpt"))
    );
    let e = error(&format!("{MINIMAL}[checkpoint]\ndir = \"gs://b/p\"\n"));
    assert!(
        e.contains("gs:// is not a supported checkpoint store"),
        "{e}"
    );
}

#[test]
fn defaults() {
    let dir = base();
    let spec = PipelineSpec::parse(MINIMAL, dir.path(), "spec.toml").expect("valid");
    assert_eq!(
        (spec.parallelism, spec.max_parallelism, spec.batch_size),
        (1, 128, 1024)
    );
    assert_eq!(spec.state_dir, dir.path().join(".weir/p"));
    assert_eq!(
        spec.checkpoint.dir,
        crate::storage::CheckpointLocation::Local(dir.path().join(".weir/p/checkpoints"))
    );
    assert_eq!(
        (spec.checkpoint.interval, spec.checkpoint.timeout),
        (Duration::from_secs(1), Duration::from_secs(60))
    );
    assert_eq!(spec.checkpoint.retain, 3);
    assert_eq!(
        spec.limits,
        GuestLimitsSpec {
            memory: 64 << 20,
            call_timeout: Duration::from_secs(1),
            compile_cpu: Duration::from_secs(300),
            compile_memory: 4 << 30,
            guest_log_rate: 64 << 10,
        }
    );
    assert_eq!(
        spec.dead_letter.path,
        dir.path().join(".weir/p/dead-letter")
    );
    assert_eq!(
        spec.sources[0].config,
        SourceConfig::Generator(GeneratorConfig::with_count(10))
    );
    assert!(spec.steps.is_empty());
}

#[test]
fn load_resolves_against_the_spec_directory() {
    let dir = base();
    let path = dir.path().join("spec.toml");
    std::fs::write(
        &path,
        MINIMAL.replace("name = \"p\"", "name = \"p\"\nstate_dir = \"s\""),
    )
    .expect("write");
    let spec = PipelineSpec::load(&path).expect("valid");
    assert_eq!(spec.state_dir, dir.path().join("s"));

    let missing = dir.path().join("nope.toml");
    assert_eq!(
        PipelineSpec::load(&missing)
            .expect_err("missing")
            .to_string(),
        format!(
            "cannot read pipeline spec {}: No such file or directory",
            missing.display()
        )
    );
    std::fs::write(&path, "name = \"p\"\nparallelism = 0\n").expect("write");
    assert_eq!(
        PipelineSpec::load(&path).expect_err("invalid").to_string(),
        format!("{} line 2: parallelism must be at least 1", path.display())
    );
}

#[test]
fn unknown_key_names_line_and_key() {
    let e = error("name = \"p\"\nparalelism = 2\n");
    assert!(
        e.starts_with(
            "spec.toml line 2: unknown field `paralelism`, expected one of `name`, `parallelism`"
        ),
        "{e}"
    );
    assert!(!e.contains('\n'));

    let e = error(&MINIMAL.replace("count = 10", "count = 10\nrat = 5"));
    assert!(
        e.starts_with("spec.toml line 6: unknown field `rat`, expected one of `count`, `rate`"),
        "{e}"
    );

    let e = error(&format!("{MINIMAL}[checkpoint]\nintervl = \"1s\"\n"));
    assert!(
        e.starts_with("spec.toml line 9: checkpoint: unknown field `intervl`"),
        "{e}"
    );

    let e = error(&MINIMAL.replace("type = \"stdout\"", "type = \"stdout\"\nformat = \"csv\""));
    assert!(
        e.starts_with(
            "spec.toml line 8: format: unknown variant `csv`, expected `value` or `json`"
        ),
        "{e}"
    );
}

#[test]
fn bad_duration() {
    let e = error(&format!("{MINIMAL}[checkpoint]\ninterval = \"10 s\"\n"));
    assert_eq!(
        e,
        "spec.toml line 9: checkpoint.interval: invalid duration \"10 s\": expected a duration such as \"500ms\", \"10s\", \"5m\" or \"1h\""
    );
    let e = error(&format!("{MINIMAL}[checkpoint]\ninterval = 10\n"));
    assert!(
        e.starts_with(
            "spec.toml line 9: checkpoint.interval: invalid type: integer `10`, expected a duration"
        ),
        "{e}"
    );
    let e = error(&format!("{MINIMAL}[checkpoint]\ntimeout = \"0s\"\n"));
    assert_eq!(
        e,
        "spec.toml line 9: checkpoint.timeout must be between 1s and 1h, not 0ms"
    );
    let e = error(&MINIMAL.replace("count = 10", "count = 10\nout_of_orderness = \"1.5s\""));
    assert!(
        e.starts_with("spec.toml line 6: out_of_orderness: invalid duration \"1.5s\""),
        "{e}"
    );
}

#[test]
fn numbers_out_of_range() {
    assert_eq!(
        error("name = \"p\"\nparallelism = 0\n"),
        "spec.toml line 2: parallelism must be at least 1"
    );
    assert_eq!(
        error("name = \"p\"\nparallelism = 257\n"),
        "spec.toml line 2: parallelism must be at most 256"
    );
    let e = error(&MINIMAL.replace(
        "name = \"p\"",
        "name = \"p\"\nparallelism = 8\nmax_parallelism = 4",
    ));
    assert!(
        e.starts_with("spec.toml line 4: parallelism 8 exceeds max_parallelism 4"),
        "{e}"
    );
    let e = error(&MINIMAL.replace(
        "name = \"p\"",
        "name = \"p\"\nmax_parallelism = 4\nrepartition_partitions = 8",
    ));
    assert_eq!(
        e,
        "spec.toml line 4: repartition_partitions 8 exceeds max_parallelism 4: each partition holds a range of key groups, at least one"
    );
    let e = error(&MINIMAL.replace("name = \"p\"", "name = \"p\"\nrepartition_partitions = 0"));
    assert_eq!(
        e,
        "spec.toml line 3: repartition_partitions must be at least 1"
    );
    let e = error(&MINIMAL.replace(
        "name = \"p\"",
        "name = \"p\"\nmax_parallelism = 4096\nrepartition_partitions = 2048",
    ));
    assert_eq!(
        e,
        "spec.toml line 4: repartition_partitions must be at most 1024"
    );
    let e = error(&format!("{MINIMAL}[checkpoint]\nretain = 1\n"));
    assert_eq!(e, "spec.toml line 9: retain must be at least 2");
    let e = error(&format!("{MINIMAL}[limits]\nmemory = \"512KiB\"\n"));
    assert_eq!(e, "spec.toml line 9: memory must be at least 1MiB");
    let e = error(&MINIMAL.replace("count = 10", "count = 10\nkeys = 0"));
    assert_eq!(e, "spec.toml line 6: keys must be at least 1");
    for bad in ["0.0", "-1.1", "10.5", "nan"] {
        let e = error(&MINIMAL.replace(
            "count = 10",
            &format!("count = 10\nkey_distribution = {{ zipf = {bad} }}"),
        ));
        assert!(
            e.starts_with("spec.toml line 6: the zipf exponent must be above 0 and at most 10"),
            "{bad}: {e}"
        );
    }
    let e = error(&MINIMAL.replace("count = 10", "count = 10\nkey_distribution = \"zipfian\""));
    assert!(e.contains("unknown variant `zipfian`"), "{e}");
    let e = error(&MINIMAL.replace("count = 10", "count = -1"));
    assert!(
        e.starts_with("spec.toml line 5: count: invalid value: integer `-1`"),
        "{e}"
    );
}

#[test]
fn names() {
    let e = error("name = \"Word Count\"\n");
    assert!(
        e.starts_with("spec.toml line 1: name \"Word Count\" contains 'W'"),
        "{e}"
    );
    assert_eq!(
        error("parallelism = 1\n"),
        "spec.toml: missing field `name`"
    );
}

#[test]
fn windows() {
    let step = |window: &str| {
        format!(
            "{MINIMAL}[[steps]]\ntype = \"aggregate\"\nmodule = \"guests/count.wasm\"\nwindow = {window}\n"
        )
    };
    let e = error(&step(
        "{ type = \"hopping\", size = \"10s\", slide = \"3s\" }",
    ));
    assert_eq!(
        e,
        "spec.toml line 11: hopping window slide 3s must divide its size 10s"
    );
    let e = error(&step(
        "{ type = \"hopping\", size = \"10s\", slide = \"20s\" }",
    ));
    assert_eq!(
        e,
        "spec.toml line 11: hopping window slide 20s is longer than its size 10s"
    );
    let e = error(&step("{ type = \"sliding\", size = \"10s\" }"));
    assert!(
        e.starts_with(
            "spec.toml line 11: window.type: unknown variant `sliding`, expected `tumbling` or `hopping`"
        ),
        "{e}"
    );
    let e = error(&step(
        "{ type = \"tumbling\", size = \"10s\", slide = \"5s\" }",
    ));
    assert!(e.contains("unknown field `slide`"), "{e}");
    assert!(parse(&step("{ type = \"tumbling\", size = \"10s\" }")).is_ok());

    let e = error(&format!(
        "{MINIMAL}[[steps]]\ntype = \"aggregate\"\nmodule = \"guests/count.wasm\"\nallowed_lateness = \"1s\"\n"
    ));
    assert!(
        e.starts_with("spec.toml line 11: allowed_lateness needs a window"),
        "{e}"
    );
}

#[test]
fn missing_sources_or_sinks() {
    assert_eq!(
        error("name = \"p\"\n[[sinks]]\ntype = \"stdout\"\n"),
        "spec.toml: a pipeline needs at least one source: add a [[sources]] table"
    );
    assert_eq!(
        error("name = \"p\"\nsources = []\n[[sinks]]\ntype = \"stdout\"\n"),
        "spec.toml line 2: a pipeline needs at least one source: add a [[sources]] table"
    );
    assert_eq!(
        error("name = \"p\"\n[[sources]]\ntype = \"stdin\"\n"),
        "spec.toml: a pipeline needs at least one sink: add a [[sinks]] table"
    );
    let e = error("name = \"p\"\nsources = 3\n");
    assert!(
        e.starts_with("spec.toml line 2: sources must be an array of tables"),
        "{e}"
    );
}

#[test]
fn a_custom_transactional_prefix_namespaces_the_default_source_group() {
    let kafka = MINIMAL
        .replace(
            "type = \"generator\"\ncount = 10",
            "type = \"kafka\"\ntopic = \"team-a.in\"",
        )
        .replace(
            "type = \"stdout\"",
            "type = \"kafka\"\ntopic = \"team-a.out\"\ntransactional_prefix = \"team-a.\"",
        );
    let spec = parse(&kafka).expect("kafka spec parses");
    let SourceConfig::Kafka(c) = &spec.sources[0].config else {
        panic!("not a kafka source");
    };
    assert_eq!(c.group.as_deref(), Some("team-a.p"));
    // An explicit group stays the spec's.
    let named = kafka.replace(
        "topic = \"team-a.in\"",
        "topic = \"team-a.in\"\ngroup = \"g\"",
    );
    let spec = parse(&named).expect("kafka spec parses");
    let SourceConfig::Kafka(c) = &spec.sources[0].config else {
        panic!("not a kafka source");
    };
    assert_eq!(c.group.as_deref(), Some("g"));
}

/// Catches: librdkafka's queues left at their defaults (hundreds of MiB) because
/// `buffer_bytes` was dropped or misparsed, or a budget too small for the largest
/// record accepted without a message naming the field.
#[test]
fn kafka_buffer_bytes() {
    use crate::connector::kafka::config::{DEFAULT_SINK_BUFFER_BYTES, DEFAULT_SOURCE_BUFFER_BYTES};
    let kafka = MINIMAL
        .replace(
            "type = \"generator\"\ncount = 10",
            "type = \"kafka\"\ntopic = \"in\"",
        )
        .replace("type = \"stdout\"", "type = \"kafka\"\ntopic = \"out\"");
    let buffers = |text: &str| {
        let spec = parse(text).expect("kafka spec parses");
        let SourceConfig::Kafka(source) = &spec.sources[0].config else {
            panic!("not a kafka source");
        };
        let SinkSpec::Kafka(sink) = &spec.sinks[0] else {
            panic!("not a kafka sink");
        };
        (source.buffer_bytes, sink.buffer_bytes)
    };
    assert_eq!(
        buffers(&kafka),
        (DEFAULT_SOURCE_BUFFER_BYTES, DEFAULT_SINK_BUFFER_BYTES)
    );
    let sized = kafka
        .replace(
            "topic = \"in\"",
            "topic = \"in\"\nbuffer_bytes = \"512KiB\"",
        )
        .replace(
            "topic = \"out\"",
            "topic = \"out\"\nbuffer_bytes = \"64MiB\"",
        );
    assert_eq!(buffers(&sized), (512 << 10, 64 << 20));

    let source_small = kafka.replace("topic = \"in\"", "topic = \"in\"\nbuffer_bytes = \"1KiB\"");
    assert_eq!(
        error(&source_small),
        "spec.toml line 6: buffer_bytes must be at least 256KiB (it was 1024 bytes): \
         librdkafka's queues need room for the largest record"
    );
    let sink_small = kafka.replace(
        "topic = \"out\"",
        "topic = \"out\"\nbuffer_bytes = \"1MiB\"",
    );
    assert_eq!(
        error(&sink_small),
        "spec.toml line 9: buffer_bytes must be at least 2MiB (it was 1048576 bytes): \
         librdkafka's queues need room for the largest record"
    );
    let sink_large = kafka.replace(
        "topic = \"out\"",
        "topic = \"out\"\nbuffer_bytes = \"2GiB\"",
    );
    assert_eq!(
        error(&sink_large),
        "spec.toml line 9: buffer_bytes must be at most 1GiB (it was 2147483648 bytes)"
    );
    let e = error(&kafka.replace("topic = \"in\"", "topic = \"in\"\nbuffer_bytes = 1000000"));
    assert!(e.contains("a size such as"), "{e}");
}

#[test]
fn connector_types() {
    // Kafka: typed configs; the source's group defaults to one named for the pipeline.
    let kafka = MINIMAL
        .replace(
            "type = \"generator\"\ncount = 10",
            "type = \"kafka\"\ntopic = \"in\"\nbounded = true",
        )
        .replace("type = \"stdout\"", "type = \"kafka\"\ntopic = \"out\"");
    let spec = parse(&kafka).expect("kafka spec parses");
    match &spec.sources[0].config {
        SourceConfig::Kafka(c) => {
            assert_eq!(c.topic.as_deref(), Some("in"));
            assert!(c.bounded);
            assert_eq!(c.group.as_deref(), Some("weir.p"));
        }
        other => panic!("not a kafka source: {other:?}"),
    }
    match &spec.sinks[0] {
        SinkSpec::Kafka(c) => {
            assert_eq!(c.topic, "out");
            assert_eq!(c.transactional_prefix, "weir.");
            assert_eq!(
                c.delivery,
                crate::connector::kafka::DeliveryGuarantee::ExactlyOnce
            );
        }
        other => panic!("not a kafka sink: {other:?}"),
    }
    let e = error(&MINIMAL.replace("type = \"generator\"", "type = \"kafka\""));
    assert!(
        e.starts_with("spec.toml line 5: unknown field `count`"),
        "{e}"
    );
    let e = error(&kafka.replace("topic = \"in\"\n", ""));
    assert!(
        e.starts_with("spec.toml line 3: a kafka source needs `topic"),
        "{e}"
    );
    let e = error(&kafka.replace(
        "topic = \"out\"",
        "topic = \"out\"\ntransactional_prefix = \"\"",
    ));
    assert!(
        e.starts_with("spec.toml line 10: transactional_prefix must not be empty"),
        "{e}"
    );
    let e = error(&MINIMAL.replace("type = \"generator\"", "type = \"socket\""));
    assert_eq!(
        e,
        "spec.toml line 4: unknown source type \"socket\", expected one of \"generator\", \"file\", \"stdin\", \"kafka\""
    );
    let e = error(&MINIMAL.replace("type = \"generator\"\n", ""));
    assert!(
        e.starts_with("spec.toml line 3: source has no `type`"),
        "{e}"
    );

    let two_stdin = MINIMAL.replace(
        "[[sinks]]",
        "[[sources]]\ntype = \"stdin\"\n[[sources]]\ntype = \"stdin\"\n[[sinks]]",
    );
    assert_eq!(
        error(&two_stdin),
        "spec.toml line 8: only one source may read stdin"
    );

    let lines_with_key = MINIMAL.replace(
        "type = \"generator\"\ncount = 10",
        "type = \"file\"\npath = \"in\"\nkey_field = \"user\"",
    );
    assert_eq!(
        error(&lines_with_key),
        "spec.toml line 6: key_field needs format = \"jsonl\""
    );
}

#[test]
fn steps() {
    let e = error(&format!(
        "{MINIMAL}[[steps]]\ntype = \"map\"\nmodule = \"guests/missing.wasm\"\n"
    ));
    assert!(
        e.starts_with("spec.toml line 10: module guests/missing.wasm not found (looked for "),
        "{e}"
    );
    let e = error(&format!(
        "{MINIMAL}[[steps]]\ntype = \"map\"\nmodule = \"guests/filter.wasm\"\nconfig = {{ n = 3 }}\n"
    ));
    assert!(
        e.starts_with("spec.toml line 11: config.n: invalid type: integer `3`, expected a string"),
        "{e}"
    );
    let twice = format!(
        "{MINIMAL}[[steps]]\ntype = \"map\"\nmodule = \"guests/filter.wasm\"\nname = \"a\"\n\
         [[steps]]\ntype = \"map\"\nmodule = \"guests/filter.wasm\"\nname = \"a\"\n"
    );
    assert_eq!(
        error(&twice),
        "spec.toml line 15: step name \"a\" is used twice"
    );
    let e = error(&format!(
        "{MINIMAL}[[steps]]\ntype = \"reduce\"\nmodule = \"guests/filter.wasm\"\n"
    ));
    assert_eq!(
        e,
        "spec.toml line 9: unknown step type \"reduce\", expected one of \"map\", \"aggregate\""
    );
}

#[test]
fn toml_syntax_errors_name_the_line() {
    let e = error("name = \"p\"\nparallelism = = 2\n");
    assert!(e.starts_with("spec.toml line 2: "), "{e}");
    assert!(!e.contains('\n'));
}

/// Issue 7: values the runtime cannot compute with are refused by the spec, each with
/// one line naming the line and the bound.
#[test]
fn values_past_what_the_runtime_represents() {
    let generator = |field: &str| MINIMAL.replace("count = 10", &format!("count = 10\n{field}"));
    assert_eq!(
        error(&generator("event_time_skew = \"18446744073709551615ms\"")),
        "spec.toml line 6: event_time_skew: duration \"18446744073709551615ms\" is too large: at most \"876000h\" (100 years)"
    );
    assert_eq!(
        error(&generator("time_step = \"876001h\"")),
        "spec.toml line 6: time_step: duration \"876001h\" is too large: at most \"876000h\" (100 years)"
    );
    assert_eq!(
        error(&generator("start_time = -9223372036854775808")),
        "spec.toml line 6: start_time -9223372036854775808 is outside the event-time range \
         -8640000000000000..=8640000000000000 (ms since the Unix epoch)"
    );
    assert_eq!(
        error(&generator(
            "start_time = -8640000000000000\nevent_time_skew = \"1ms\""
        )),
        "spec.toml line 7: start_time - event_time_skew = -8640000000000001 is before the \
         earliest event time -8640000000000000: lower event_time_skew"
    );
    assert_eq!(
        error(&MINIMAL.replace(
            "count = 10",
            "count = 18446744073709551615\ntime_step = \"1ms\""
        )),
        "spec.toml line 6: start_time + (count - 1) x time_step = 18446745773709551614 is past \
         the latest event time 8640000000000000: lower count or time_step"
    );
    let at_the_edges = generator(
        "start_time = -8636000000000000\nevent_time_skew = \"876000h\"\ntime_step = \"876000h\"",
    );
    assert!(parse(&at_the_edges).is_ok());

    let e = error(&format!(
        "{MINIMAL}[checkpoint]\ninterval = \"99999999999999999999h\"\n"
    ));
    assert_eq!(
        e,
        "spec.toml line 9: checkpoint.interval: duration \"99999999999999999999h\" is too large: at most \"876000h\" (100 years)"
    );
    let e = error(&format!(
        "{MINIMAL}[limits]\nmemory = \"18446744073709551615B\"\n"
    ));
    assert_eq!(
        e,
        "spec.toml line 9: limits.memory: size \"18446744073709551615B\" is too large: at most \"1024GiB\" (1 TiB)"
    );
}

/// Issue 7 §5: guest limits have maxima.
#[test]
fn guest_limits_have_maxima() {
    let limits = |line: &str| format!("{MINIMAL}[limits]\n{line}\n");
    assert_eq!(
        error(&limits("memory = \"4097MiB\"")),
        "spec.toml line 9: memory must be at most 4GiB: a wasm32 guest cannot address more"
    );
    assert_eq!(
        error(&limits("call_timeout = \"61s\"")),
        "spec.toml line 9: call_timeout must be at most 60s: a guest call holds up its task's checkpoints for as long as it runs"
    );
    assert_eq!(
        error(&limits("compile_cpu = \"3601s\"")),
        "spec.toml line 9: compile_cpu must be whole seconds from 1s to 3600s"
    );
    assert_eq!(
        error(&limits("compile_cpu = \"1500ms\"")),
        "spec.toml line 9: compile_cpu must be whole seconds from 1s to 3600s"
    );
    assert_eq!(
        error(&limits("compile_memory = \"255MiB\"")),
        "spec.toml line 9: compile_memory must be from 256MiB to 64GiB"
    );
    for rate in ["1023B", "65MiB"] {
        assert_eq!(
            error(&limits(&format!("guest_log_rate = \"{rate}\""))),
            "spec.toml line 9: guest_log_rate must be from 1KiB to 64MiB (bytes a second)"
        );
    }
    let spec = parse(&format!(
        "{}[checkpoint]\ntimeout = \"61s\"\n",
        limits(
            "memory = \"4GiB\"\ncall_timeout = \"1m\"\ncompile_cpu = \"1h\"\ncompile_memory = \"64GiB\"\nguest_log_rate = \"64MiB\""
        )
    ))
    .expect("at the maxima");
    assert_eq!(
        spec.limits,
        GuestLimitsSpec {
            memory: 4 << 30,
            call_timeout: Duration::from_secs(60),
            compile_cpu: Duration::from_secs(3600),
            compile_memory: 64 << 30,
            guest_log_rate: 64 << 20,
        }
    );
}

/// Issue 7 §2: a hopping window puts a record in at most 1,000 windows.
#[test]
fn hopping_window_fan_out_is_bounded() {
    let step = |window: &str| {
        format!(
            "{MINIMAL}[[steps]]\ntype = \"aggregate\"\nmodule = \"guests/count.wasm\"\nwindow = {window}\n"
        )
    };
    assert_eq!(
        error(&step(
            "{ type = \"hopping\", size = \"1h\", slide = \"1ms\" }"
        )),
        "spec.toml line 11: hopping window size 1h and slide 1ms put every record in 3600000 \
         windows; at most 1000 are allowed: make slide at least 3600ms"
    );
    assert_eq!(
        error(&step(
            "{ type = \"hopping\", size = \"1001s\", slide = \"1s\" }"
        )),
        "spec.toml line 11: hopping window size 1001s and slide 1s put every record in 1001 \
         windows; at most 1000 are allowed: make slide at least 1001ms"
    );
    assert!(
        parse(&step(
            "{ type = \"hopping\", size = \"1000s\", slide = \"1s\" }"
        ))
        .is_ok()
    );
}

/// Issue 7 §5: a file sink's path that is a file is refused by name, not reported as an
/// input directory that cannot be listed.
#[test]
fn file_sink_path_that_is_a_file() {
    let dir = base();
    std::fs::write(dir.path().join("out.txt"), "x").expect("write");
    let text = MINIMAL.replace("type = \"stdout\"", "type = \"file\"\npath = \"out.txt\"");
    let e = PipelineSpec::parse(&text, dir.path(), "spec.toml").expect_err("a file");
    assert_eq!(
        e.to_string(),
        "spec.toml line 8: path out.txt is not a directory: a file sink writes its files into a directory"
    );
    std::fs::create_dir(dir.path().join("out")).expect("mkdir");
    let text = MINIMAL.replace("type = \"stdout\"", "type = \"file\"\npath = \"out\"");
    assert!(PipelineSpec::parse(&text, dir.path(), "spec.toml").is_ok());
}

/// Issue 7 §2: every host memory bound has a default and is refused below 1 KiB.
#[test]
fn memory_bounds_have_defaults_and_minima() {
    let agg = format!("{MINIMAL}[[steps]]\ntype = \"aggregate\"\nmodule = \"guests/count.wasm\"\n");
    let spec = parse(&agg.replace("type = \"generator\"\ncount = 10", "type = \"stdin\""))
        .expect("defaults");
    assert_eq!(spec.batch_bytes, 16 << 20);
    let SourceConfig::Stdin(stdin) = &spec.sources[0].config else {
        panic!("stdin source")
    };
    assert_eq!(stdin.max_line_bytes, 1 << 20);
    let StepSpec::Aggregate(step) = &spec.steps[0] else {
        panic!("aggregate step")
    };
    assert_eq!(
        (
            step.cache_entries,
            step.cache_bytes,
            step.max_accumulator_bytes
        ),
        (u32::MAX as usize, 64 << 20, 1 << 20),
        "no entry bound of its own by default: the byte bound binds"
    );

    let set = format!(
        "batch_bytes = \"1MiB\"\n{}cache_bytes = \"8MiB\"\nmax_accumulator_bytes = \"64KiB\"\n",
        agg.replace(
            "count = 10",
            "count = 10\n[[sources]]\ntype = \"file\"\npath = \"in\"\nmax_line_bytes = \"2KiB\""
        )
    );
    let spec = parse(&set).expect("set");
    assert_eq!(spec.batch_bytes, 1 << 20);
    let SourceConfig::File(file) = &spec.sources[1].config else {
        panic!("file source")
    };
    assert_eq!(file.max_line_bytes, 2 << 10);
    let StepSpec::Aggregate(step) = &spec.steps[0] else {
        panic!("aggregate step")
    };
    assert_eq!(
        (step.cache_bytes, step.max_accumulator_bytes),
        (8 << 20, 64 << 10)
    );

    assert_eq!(
        error(&format!("batch_bytes = \"512B\"\n{MINIMAL}")),
        "spec.toml line 1: batch_bytes must be at least 1KiB"
    );
    assert_eq!(
        error(&format!("{agg}cache_bytes = \"1B\"\n")),
        "spec.toml line 11: cache_bytes must be at least 1KiB"
    );
    assert_eq!(
        error(&format!("{agg}max_accumulator_bytes = \"1000B\"\n")),
        "spec.toml line 11: max_accumulator_bytes must be at least 1KiB"
    );
    assert_eq!(
        error(&MINIMAL.replace(
            "type = \"generator\"\ncount = 10",
            "type = \"stdin\"\nmax_line_bytes = \"0B\""
        )),
        "spec.toml line 5: max_line_bytes must be at least 1KiB"
    );
}

/// Issue 7 §2: a pipeline has at most 64 steps (each one an operator in every subtask).
#[test]
fn steps_are_bounded() {
    let steps = |n: usize| {
        let mut text = MINIMAL.to_owned();
        for _ in 0..n {
            text.push_str("[[steps]]\ntype = \"map\"\nmodule = \"guests/filter.wasm\"\n");
        }
        text
    };
    assert_eq!(parse(&steps(64)).expect("64 steps").steps.len(), 64);
    // Step 65 starts on line 8 + 64 x 3.
    assert_eq!(
        error(&steps(65)),
        "spec.toml line 200: a pipeline has at most 64 steps, this one has 65: combine steps into fewer guests"
    );
    assert_eq!(
        error(&steps(20_000)),
        "spec.toml line 200: a pipeline has at most 64 steps, this one has 20000: combine steps into fewer guests"
    );
}

/// Issue 7 §3: whatever numbers a spec holds, parsing it does not panic; a spec it
/// accepts keeps every documented bound, and its generator's event times and their
/// windows compute without overflow; a spec it refuses gets one line.
mod properties {
    use proptest::prelude::*;

    use super::*;
    use crate::connector::generator::Scratch;
    use crate::dataflow::window::MAX_WINDOWS_PER_RECORD;
    use crate::dataflow::window::{self, WindowAssigner};
    use crate::field::checks::MAX_EVENT_TIME_MS;
    use crate::field::units::MAX_DURATION;
    use crate::record::batch::RecordBatch;

    const MAX_DURATION_MS: u64 = MAX_DURATION.as_millis() as u64;

    /// A number as a spec might write it, mostly out of range or past a type's edge.
    fn wild_number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            prop::sample::select(vec![
                "0",
                "-1",
                "4294967296",
                "9223372036854775807",
                "-9223372036854775808",
                "18446744073709551615",
                "99999999999999999999999",
            ])
            .prop_map(String::from),
        ]
    }

    fn wild_duration() -> impl Strategy<Value = String> {
        (
            prop_oneof![
                any::<u64>().prop_map(|n| n.to_string()),
                Just("18446744073709551616".to_owned())
            ],
            prop::sample::select(vec!["ms", "s", "m", "h"]),
        )
            .prop_map(|(n, unit)| format!("\"{n}{unit}\""))
    }

    fn wild_size() -> impl Strategy<Value = String> {
        (
            any::<u64>(),
            prop::sample::select(vec!["B", "KiB", "MiB", "GiB"]),
        )
            .prop_map(|(n, unit)| format!("\"{n}{unit}\""))
    }

    /// Mostly `valid`, sometimes `wild`: most specs are accepted, the rest are refused
    /// for about one field.
    fn field(
        valid: impl Strategy<Value = String> + 'static,
        wild: impl Strategy<Value = String> + 'static,
    ) -> BoxedStrategy<String> {
        prop_oneof![29 => valid, 1 => wild].boxed()
    }

    fn int(range: std::ops::RangeInclusive<u64>) -> BoxedStrategy<String> {
        field(range.prop_map(|n| n.to_string()), wild_number())
    }

    fn millis(range: std::ops::RangeInclusive<u64>) -> BoxedStrategy<String> {
        field(range.prop_map(|n| format!("\"{n}ms\"")), wild_duration())
    }

    fn window() -> BoxedStrategy<String> {
        let valid = (
            1..=MAX_DURATION_MS / MAX_WINDOWS_PER_RECORD as u64,
            1..=1_000u64,
        )
            .prop_map(|(slide, n)| (slide * n, slide));
        let wild = (1..=MAX_DURATION_MS, 1..=MAX_DURATION_MS);
        prop_oneof![9 => valid, 1 => wild]
            .prop_map(|(size, slide)| {
                format!("{{ type = \"hopping\", size = \"{size}ms\", slide = \"{slide}ms\" }}")
            })
            .boxed()
    }

    fn spec_text() -> impl Strategy<Value = String> {
        let pipeline = (
            int(1..=256),
            int(256..=32_768),
            int(1..=65_536),
            millis(1..=MAX_DURATION_MS),
            millis(1..=MAX_DURATION_MS),
            int(2..=u64::from(u32::MAX)),
            field(
                (1..=4_096u64).prop_map(|n| format!("\"{n}MiB\"")),
                wild_size(),
            ),
            millis(1..=60_000),
        );
        let generator = (
            field(
                prop_oneof![9 => 0..=1_000_000_000u64, 1 => Just(u64::MAX)]
                    .prop_map(|n| n.to_string()),
                wild_number(),
            ),
            int(0..=u64::MAX),
            int(1..=u64::MAX),
            field(
                prop_oneof![0..=4_096u64, Just(1u64 << 20)].prop_map(|n| n.to_string()),
                wild_number(),
            ),
            int(0..=u64::MAX),
            field(
                (-MAX_EVENT_TIME_MS..=MAX_EVENT_TIME_MS).prop_map(|n| n.to_string()),
                wild_number(),
            ),
            millis(0..=1_000_000),
            millis(0..=MAX_DURATION_MS),
            millis(0..=MAX_DURATION_MS),
        );
        let aggregate = (
            window(),
            millis(0..=MAX_DURATION_MS),
            int(1..=u64::from(u32::MAX)),
        );
        (pipeline, generator, aggregate).prop_map(|(p, g, a)| {
            format!(
                "name = \"p\"\nparallelism = {}\nmax_parallelism = {}\nbatch_size = {}\n\
                 [checkpoint]\ninterval = {}\ntimeout = {}\nretain = {}\n\
                 [limits]\nmemory = {}\ncall_timeout = {}\n\
                 [[sources]]\ntype = \"generator\"\ncount = {}\nrate = {}\nkeys = {}\n\
                 value_size = {}\nseed = {}\nstart_time = {}\ntime_step = {}\n\
                 event_time_skew = {}\nout_of_orderness = {}\n\
                 [[steps]]\ntype = \"aggregate\"\nmodule = \"guests/count.wasm\"\n\
                 window = {}\nallowed_lateness = {}\ncache_entries = {}\n\
                 [[sinks]]\ntype = \"stdout\"\n",
                p.0,
                p.1,
                p.2,
                p.3,
                p.4,
                p.5,
                p.6,
                p.7,
                g.0,
                g.1,
                g.2,
                g.3,
                g.4,
                g.5,
                g.6,
                g.7,
                g.8,
                a.0,
                a.1,
                a.2
            )
        })
    }

    fn ms(d: Duration) -> i64 {
        i64::try_from(d.as_millis()).expect("a spec duration fits i64 milliseconds")
    }

    /// What an accepted spec promises, and what its generator and window compute.
    fn check_accepted(spec: &PipelineSpec) {
        assert!((1..=256).contains(&spec.parallelism));
        assert!((spec.parallelism..=32_768).contains(&spec.max_parallelism));
        assert!((1..=65_536).contains(&spec.batch_size));
        assert!((1 << 20..=4 << 30).contains(&spec.limits.memory));
        let call = spec.limits.call_timeout;
        assert!(call >= Duration::from_millis(1) && call <= Duration::from_secs(60));
        for d in [spec.checkpoint.interval, spec.checkpoint.timeout] {
            assert!(d <= MAX_DURATION);
        }
        let SourceConfig::Generator(generator) = &spec.sources[0].config else {
            panic!("a generator source")
        };
        let ooo = ms(spec.sources[0].out_of_orderness);
        let StepSpec::Aggregate(aggregate) = &spec.steps[0] else {
            panic!("an aggregate step")
        };
        let Some(WindowSpec::Hopping { size, slide }) = aggregate.window else {
            panic!("a hopping window")
        };
        let per_record = size.as_millis() / slide.as_millis();
        assert!(per_record <= MAX_WINDOWS_PER_RECORD);
        let assigner = WindowAssigner::Hopping {
            size_ms: ms(size),
            slide_ms: ms(slide),
        };
        let lateness = ms(aggregate.allowed_lateness);

        let last = generator.count.saturating_sub(1);
        let mut batch = RecordBatch::default();
        let mut scratch = Scratch::default();
        for i in [0, last / 2, last] {
            generator.push_record(i, &mut batch, &mut scratch);
        }
        let mut windows = Vec::new();
        for &ts in &batch.timestamps {
            assert!(
                (-MAX_EVENT_TIME_MS..=MAX_EVENT_TIME_MS).contains(&ts),
                "{ts}"
            );
            let watermark = ts.saturating_sub(ooo).saturating_sub(1);
            windows.clear();
            assigner.assign(ts, &mut windows);
            assert_eq!(windows.len() as u128, per_record);
            for w in &windows {
                assert!(w.start <= ts && ts < w.end);
                assert_eq!(
                    i128::from(w.end) - i128::from(w.start),
                    size.as_millis() as i128
                );
                let _ = window::is_late(*w, lateness, watermark);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn numeric_fields_are_refused_or_safe(text in spec_text()) {
            let dir = base();
            match PipelineSpec::parse(&text, dir.path(), "spec.toml") {
                Ok(spec) => check_accepted(&spec),
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(e.starts_with("spec.toml line "), "{}", e);
                    prop_assert!(!e.contains('\n'), "{}", e);
                }
            }
        }
    }

    /// A valid spec with every kind of table, the seed of the parser fuzz below.
    const SEED: &str = r#"
name = "fuzz"
parallelism = 2
batch_size = 512
[checkpoint]
interval = "200ms"
[limits]
memory = "8MiB"
[[sources]]
type = "generator"
count = 100
[[sources]]
type = "kafka"
topics = ["a", "b"]
bootstrap = "127.0.0.1:1"
[[steps]]
type = "map"
module = "guests/filter.wasm"
config = { field = "kind" }
[[steps]]
type = "aggregate"
module = "guests/count.wasm"
window = { type = "hopping", size = "10s", slide = "5s" }
[[sinks]]
type = "stdout"
format = "json"
[dead_letter]
path = "dlq"
"#;

    /// The seed with one value replaced by a wild one of any TOML type: mostly still
    /// TOML, so the checks behind the syntax are what gets exercised.
    fn revalued_spec() -> impl Strategy<Value = String> {
        let lines: Vec<&'static str> = SEED.lines().collect();
        let value = prop_oneof![
            wild_number(),
            wild_duration(),
            any::<String>().prop_map(|t| format!("{t:?}")),
            prop::sample::select(vec![
                "\"\"",
                "\"0ms\"",
                "\"1B\"",
                "\"64GiB\"",
                "[]",
                "{}",
                "[1, \"a\"]",
                "{ type = \"session\" }",
                "true",
                "-0",
                "1.5",
                "\"../..\"",
                "\"/dev/zero\"",
            ])
            .prop_map(String::from),
        ];
        (0..lines.len(), value).prop_map(move |(n, value)| {
            let mut out = String::new();
            for (i, line) in lines.iter().enumerate() {
                match line.split_once(" = ") {
                    Some((key, _)) if i == n => out.push_str(&format!("{key} = {value}")),
                    _ => out.push_str(line),
                }
                out.push('\n');
            }
            out
        })
    }

    /// The seed with a random span replaced by random text, often TOML's own tokens.
    fn mutated_spec() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            any::<char>().prop_map(String::from),
            prop::sample::select(vec![
                "\"",
                "'",
                "[",
                "]",
                "[[",
                "]]",
                "{",
                "}",
                "=",
                ",",
                "\n",
                "\\",
                "#",
                "\"\"\"",
                "-",
                "1e999",
                "inf",
                "nan",
                "true",
                "0x",
                "\u{0}",
                "é",
                "\n[[sources]]\n",
                "\ntype = \"file\"\n",
                "\nname = \"x\"\n",
            ])
            .prop_map(String::from),
        ];
        (
            0..SEED.len(),
            0..40usize,
            prop::collection::vec(token, 0..6),
        )
            .prop_map(|(at, cut, insert)| {
                let mut text: Vec<char> = SEED.chars().collect();
                let at = at.min(text.len());
                let end = (at + cut).min(text.len());
                text.splice(at..end, insert.concat().chars());
                text.into_iter().collect()
            })
    }

    /// Fuzzes the spec parser from text: no input panics it, and every refusal is one
    /// line. Prints how many cases ran.
    #[test]
    fn the_parser_never_panics_and_refuses_in_one_line() {
        use proptest::test_runner::{Config, TestRunner};
        use std::cell::Cell;

        let dir = base();
        if let Err(e) = PipelineSpec::parse(SEED, dir.path(), "spec.toml") {
            panic!("the seed must be a valid spec: {e}");
        }
        let (accepted, refused) = (Cell::new(0u32), Cell::new(0u32));
        let mut runner = TestRunner::new(Config {
            cases: 2048,
            ..Config::default()
        });
        runner
            .run(&prop_oneof![mutated_spec(), revalued_spec()], |text| {
                match PipelineSpec::parse(&text, dir.path(), "spec.toml") {
                    Ok(_) => accepted.set(accepted.get() + 1),
                    Err(e) => {
                        let line = e.to_string();
                        prop_assert!(!line.contains('\n'), "two lines for {text:?}: {line}");
                        refused.set(refused.get() + 1);
                    }
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "spec parser fuzz: {} cases run ({} accepted, {} refused)",
            accepted.get() + refused.get(),
            accepted.get(),
            refused.get()
        );
    }
}

/// Catches: a default that is not capped at the key groups (a spec with fewer than 32
/// key groups would be refused, or cut into empty ranges), or a given value ignored.
#[test]
fn repartition_partitions_default_to_32_at_most_the_key_groups() {
    let partitions = |extra: &str| {
        parse(&MINIMAL.replace("name = \"p\"", &format!("name = \"p\"\n{extra}")))
            .expect("valid")
            .repartition_partitions
    };
    assert_eq!(partitions(""), 32);
    assert_eq!(partitions("max_parallelism = 8"), 8);
    assert_eq!(partitions("max_parallelism = 4096"), 32);
    assert_eq!(partitions("repartition_partitions = 128"), 128);
    assert_eq!(
        partitions("max_parallelism = 16\nrepartition_partitions = 3"),
        3
    );
}

/// Issue 33: checkpoint settings have floors and caps (an interval of 1 ms made an idle
/// worker checkpoint seven times a second; retain = 100000 and 1000-day timeouts were
/// accepted), and a guest's call_timeout must fit in the checkpoint timeout (a guest
/// call that ran to its deadline timed out the checkpoint, naming no module).
#[test]
fn checkpoint_settings_have_floors_caps_and_room_for_a_guest_call() {
    let checkpoint = |lines: &str| format!("{MINIMAL}[checkpoint]\n{lines}\n");
    assert_eq!(
        error(&checkpoint("interval = \"1ms\"")),
        "spec.toml line 9: checkpoint.interval must be between 10ms and 24h, not 1ms"
    );
    assert_eq!(
        error(&checkpoint("interval = \"25h\"")),
        "spec.toml line 9: checkpoint.interval must be between 10ms and 24h, not 25h"
    );
    assert_eq!(
        error(&checkpoint("timeout = \"24000h\"")),
        "spec.toml line 9: checkpoint.timeout must be between 1s and 1h, not 24000h"
    );
    assert_eq!(
        error(&checkpoint("retain = 100000")),
        "spec.toml line 9: retain must be at most 1000"
    );
    let spec = parse(&checkpoint(
        "interval = \"10ms\"\ntimeout = \"1h\"\nretain = 1000",
    ))
    .expect("at the bounds");
    assert_eq!(
        (
            spec.checkpoint.interval,
            spec.checkpoint.timeout,
            spec.checkpoint.retain
        ),
        (Duration::from_millis(10), Duration::from_secs(3600), 1000)
    );
    let e = error(&format!(
        "{}[limits]\ncall_timeout = \"10s\"\n",
        checkpoint("timeout = \"10s\"")
    ));
    assert_eq!(
        e,
        "spec.toml: limits.call_timeout 10s must be shorter than checkpoint.timeout 10s: a guest call that ran to its deadline would time out the checkpoint instead of failing as the guest's fault; lower call_timeout or raise the checkpoint timeout"
    );
}

/// Issue 35 item 5: a misspelt key, section, step type or the `type` key itself says
/// what was probably meant, in the same one line.
#[test]
fn misspellings_say_what_was_probably_meant() {
    let module = "module = \"m.wasm\"\n";
    let e = error(&format!("{MINIMAL}[[steps]]\ntpye = \"map\"\n{module}"));
    assert_eq!(
        e,
        "spec.toml line 8: step has no `type` (`tpye` is not `type`): expected one of \"map\", \"aggregate\""
    );
    let e = error(&format!(
        "{MINIMAL}[[steps]]\ntype = \"agregate\"\n{module}"
    ));
    assert!(
        e.ends_with("expected one of \"map\", \"aggregate\"; did you mean \"aggregate\"?"),
        "{e}"
    );
    let e = error(&format!(
        "{MINIMAL}[[steps]]\ntype = \"aggregate\"\n{module}windw = {{ type = \"tumbling\", size = \"1s\" }}\n"
    ));
    assert!(e.contains("unknown field `windw`"), "{e}");
    assert!(e.ends_with("; did you mean `window`?"), "{e}");
    let e = error(&format!("{MINIMAL}[[step]]\ntype = \"map\"\n{module}"));
    assert!(e.contains("unknown field `step`"), "{e}");
    assert!(e.ends_with("; did you mean `steps`?"), "{e}");
}
