//! Bad Kafka configurations are refused at start, each with one line saying what to
//! change, and nothing is written to any topic: transaction timeout too small or above
//! the broker's maximum, a missing output or input topic (one named as Weir's own
//! repartition topics are: waited for, never to be created by hand), an unreachable
//! broker, an empty transactional prefix, a producer buffer too small for the largest
//! record.

use std::path::Path;
use std::time::{Duration, Instant};

use weir_tests::kafka;
use weir_tests::{guest, stderr_of, toml_path, weir, write_file};

/// Runs a Kafka -> uppercase -> Kafka pipeline with extra sink settings `sink_extra`
/// (and the given topics / bootstrap), expecting a refusal; returns its one line.
fn refused(
    dir: &Path,
    name: &str,
    input: &str,
    output: &str,
    bootstrap: &str,
    sink_extra: &str,
) -> String {
    let text = format!(
        r#"
name = "{name}"
state_dir = {state}

[checkpoint]
interval = "500ms"

[[sources]]
type = "kafka"
bootstrap = "{bootstrap}"
topic = "{input}"
start = "earliest"
bounded = true
connect_timeout = "3s"
failover_timeout = "1s"

[[steps]]
type = "map"
module = {upper}

[[sinks]]
type = "kafka"
bootstrap = "{bootstrap}"
topic = "{output}"
connect_timeout = "3s"
{sink_extra}
"#,
        state = toml_path(&dir.join(name)),
        upper = toml_path(&guest("uppercase")),
    );
    let spec = write_file(dir, &format!("{name}.toml"), &text);
    let started = Instant::now();
    let out = weir()
        .args(["run", "--quiet"])
        .arg(&spec)
        .output()
        .expect("run weir");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "refusal took {:?}",
        started.elapsed()
    );
    assert!(!out.status.success(), "{name}: the run must be refused");
    let err = stderr_of(&out);
    assert_eq!(
        err.trim().lines().count(),
        1,
        "{name}: one line, got: {err}"
    );
    eprintln!("{name} refused in {:?}: {}", started.elapsed(), err.trim());
    err
}

/// A refused configuration: (pipeline name, input topic, output topic, bootstrap, a
/// line added to the sink, what the one-line refusal says).
type Case<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, &'a [&'a str]);

/// The refused configurations over topics `input` and `output` (which exist),
/// `missing` (which does not) and `own` (a missing topic named as the pipeline's own
/// repartition topics are) on broker `b`; `no_topic` says how `missing` is refused.
fn cases<'a>(
    (input, output): (&'a str, &'a str),
    (missing, own): (&'a str, &'a str),
    b: &'a str,
    no_topic: &'a [&'a str],
) -> [Case<'a>; 8] {
    [
        // Issue 51: never "create it" for a topic Weir makes itself, after waiting for
        // it (`failover_timeout`, 1 s here).
        (
            "cfg-own",
            own,
            output,
            b,
            "",
            &[
                "is one Weir makes for the pipeline itself",
                "did not list it within 1s",
                "do not create it by hand",
            ],
        ),
        (
            "cfg-small",
            input,
            output,
            b,
            r#"transaction_timeout = "10s""#,
            &[
                "transaction_timeout 10s is too small: it must exceed checkpoint interval 500ms + 2 x checkpoint timeout 1m + restart_budget 30s = 150500ms",
            ],
        ),
        (
            "cfg-large",
            input,
            output,
            b,
            r#"transaction_timeout = "20m""#,
            &[
                "transaction_timeout 20m exceeds the broker's transaction.max.timeout.ms = 900000: lower transaction_timeout to at most 900000ms",
            ],
        ),
        ("cfg-no-out", input, missing, b, "", no_topic),
        ("cfg-no-in", missing, output, b, "", no_topic),
        (
            "cfg-unreachable",
            input,
            output,
            "127.0.0.1:1",
            "",
            &[
                "cannot reach Kafka at 127.0.0.1:1 within 3s",
                "check `bootstrap` (or KAFKA_BOOTSTRAP) and that the broker is running",
            ],
        ),
        (
            "cfg-prefix",
            input,
            output,
            b,
            r#"transactional_prefix = """#,
            &["transactional_prefix must not be empty"],
        ),
        // A producer queue that could not hold the largest record librdkafka sends.
        (
            "cfg-buffer",
            input,
            output,
            b,
            r#"buffer_bytes = "1MiB""#,
            &["buffer_bytes must be at least 2MiB (it was 1048576 bytes)"],
        ),
    ]
}

#[test]
fn bad_configurations_are_refused_and_write_nothing() {
    let _one_at_a_time = kafka::exclusive();
    let dir = tempfile::tempdir().expect("tempdir");
    let b = kafka::bootstrap();
    let input = kafka::unique_name("cfg-in");
    let output = kafka::unique_name("cfg-out");
    kafka::create_topic(&input, 1);
    kafka::create_topic(&output, 1);
    kafka::produce(
        &input,
        &[kafka::Input {
            partition: 0,
            key: "k".into(),
            value: "hello".into(),
            timestamp: 1,
        }],
    );

    let missing = kafka::unique_name("cfg-missing");
    let no_topic = format!("topic {missing} does not exist on {b}: create it");
    let no_topic = [no_topic.as_str()];
    let own = format!("{missing}-repartition");
    let cases = cases((&input, &output), (&missing, &own), &b, &no_topic);
    for (name, from, to, bootstrap, setting, says) in cases {
        let e = refused(dir.path(), name, from, to, bootstrap, setting);
        for said in says {
            assert!(e.contains(said), "{name}: {e}");
        }
    }

    // Nothing was written: the output topic is empty, no group committed offsets.
    assert_eq!(
        kafka::end_offsets_sum(&output),
        0,
        "the output topic must stay empty"
    );
    for (name, ..) in cases {
        assert!(
            kafka::committed_offsets(&format!("weir.{name}"), &input).is_empty(),
            "{name} committed offsets"
        );
    }
}
