//! Spec parsing: one full valid spec, then each kind of refusal and its message.

use std::time::Duration;

use super::*;
use crate::connector::{GeneratorConfig, InputFormat, OutputFormat};

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

#[test]
fn full_spec() {
    let dir = base();
    let text = r#"
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
    let spec = PipelineSpec::parse(text, dir.path(), "spec.toml").expect("valid spec");
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
            dir: base.join("state/checkpoints"),
        }
    );
    assert_eq!(
        spec.limits,
        GuestLimitsSpec {
            memory: 32 << 20,
            call_timeout: Duration::from_millis(250)
        }
    );
    assert_eq!(spec.dead_letter.path, base.join("dlq/"));
    assert_eq!(spec.base_dir, base);

    assert_eq!(spec.sources.len(), 3);
    assert_eq!(spec.sources[0].out_of_orderness, Duration::from_millis(20));
    assert_eq!(
        spec.sources[0].config,
        SourceConfig::Generator(GeneratorConfig {
            count: 1000,
            rate: 100,
            keys: 7,
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
        (None, Duration::ZERO, 100_000)
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
fn defaults() {
    let dir = base();
    let spec = PipelineSpec::parse(MINIMAL, dir.path(), "spec.toml").expect("valid");
    assert_eq!(
        (spec.parallelism, spec.max_parallelism, spec.batch_size),
        (1, 128, 1024)
    );
    assert_eq!(spec.state_dir, dir.path().join(".weir/p"));
    assert_eq!(spec.checkpoint.dir, dir.path().join(".weir/p/checkpoints"));
    assert_eq!(
        (spec.checkpoint.interval, spec.checkpoint.timeout),
        (Duration::from_secs(1), Duration::from_secs(60))
    );
    assert_eq!(spec.checkpoint.retain, 3);
    assert_eq!(
        spec.limits,
        GuestLimitsSpec {
            memory: 64 << 20,
            call_timeout: Duration::from_secs(1)
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
    assert!(
        e.starts_with("spec.toml line 9: checkpoint.timeout: a duration of 0 is not allowed"),
        "{e}"
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
    let e = error(&format!("{MINIMAL}[checkpoint]\nretain = 1\n"));
    assert_eq!(e, "spec.toml line 9: retain must be at least 2");
    let e = error(&format!("{MINIMAL}[limits]\nmemory = \"512KiB\"\n"));
    assert_eq!(e, "spec.toml line 9: memory must be at least 1MiB");
    let e = error(&MINIMAL.replace("count = 10", "count = 10\nkeys = 0"));
    assert_eq!(e, "spec.toml line 6: keys must be at least 1");
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
