//! `weir-kafka-bench`: Kafka -> Kafka throughput of Weir against the local broker
//! (`KAFKA_BOOTSTRAP`), each figure beside a ceiling measured in the same run:
//!
//! (a) ceiling: a plain librdkafka copy, no Weir: a `BaseConsumer` reads the input
//!     topic from the beginning up to the end offsets taken at start, and a
//!     `ThreadedProducer` writes every record to a fresh output topic, then flushes;
//!     two threads, partitions split between them like Weir's two subtasks.
//! (b) Weir: Kafka -> WASM `uppercase` -> Kafka, `delivery = "at-least-once"`.
//! (c) the same with `delivery = "exactly-once"` and checkpoints every second.
//!
//! (b) and (c) run the real `weir run --quiet SPEC` binary and are timed from spawn to
//! exit (process wall time, start-up and shutdown included). Every scenario's output
//! topic is read back (read_committed) and must hold exactly N records.
//!
//! Usage: weir-kafka-bench [--records N] [--out PATH]
//! Writes a JSON file (`--out`, default build/kafka-bench.json) and prints a table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir_tests::kafka::{self, Input};
use weir_tests::{guest, repo_root, take_stderr};

const PARTITIONS: i32 = 3;
const VALUE_BYTES: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Record `i`'s value: its id, then lowercase filler up to `VALUE_BYTES` bytes.
fn value(i: u64) -> String {
    let mut v = format!("record {i:010} ");
    let filler = b"the quick brown fox jumps over the lazy dog ";
    let mut j = 0;
    while v.len() < VALUE_BYTES {
        v.push(filler[j % filler.len()] as char);
        j += 1;
    }
    v
}

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", kafka::bootstrap())
        .set("log_level", "3");
    c
}

/// Threads of the plain copy: the same parallelism as the Weir pipelines (2).
const COPY_THREADS: i32 = 2;

/// (a): copies `input` to `output` with plain librdkafka, one consumer and one producer
/// per thread and partition k going to thread k % COPY_THREADS, like Weir's subtasks;
/// returns (records, seconds).
fn plain_copy(input: &str, output: &str) -> anyhow::Result<(u64, f64)> {
    let probe: BaseConsumer = client_config().create().context("consumer")?;
    // The end offsets at start bound the read.
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (_, high) = probe
            .fetch_watermarks(input, p, TIMEOUT)
            .context("watermarks")?;
        ends.insert(p, high);
    }
    let started = Instant::now();
    let threads: Vec<_> = (0..COPY_THREADS)
        .map(|t| {
            let (input, output) = (input.to_owned(), output.to_owned());
            let ends: BTreeMap<i32, i64> = ends
                .iter()
                .filter(|(p, _)| **p % COPY_THREADS == t)
                .map(|(p, e)| (*p, *e))
                .collect();
            std::thread::spawn(move || copy_partitions(&input, &output, ends))
        })
        .collect();
    let mut copied = 0;
    for t in threads {
        copied += t
            .join()
            .map_err(|_| anyhow::anyhow!("copy thread panicked"))??;
    }
    Ok((copied, started.elapsed().as_secs_f64()))
}

/// One thread of the plain copy: partitions `ends.keys()` up to their end offsets.
fn copy_partitions(input: &str, output: &str, ends: BTreeMap<i32, i64>) -> anyhow::Result<u64> {
    let consumer: BaseConsumer = client_config()
        .set("group.id", kafka::unique_name("bench-ceiling"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .context("consumer")?;
    let producer: ThreadedProducer<DefaultProducerContext> = client_config()
        .set("linger.ms", "5")
        .create()
        .context("producer")?;
    let mut tpl = TopicPartitionList::new();
    for p in ends.keys() {
        tpl.add_partition_offset(input, *p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut next: BTreeMap<i32, i64> = ends.keys().map(|p| (*p, 0)).collect();
    let done = |next: &BTreeMap<i32, i64>| ends.iter().all(|(p, end)| next[p] >= *end);
    let mut copied = 0u64;
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done(&next) {
        ensure!(
            Instant::now() < deadline,
            "plain copy did not reach the end offsets"
        );
        let Some(m) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = m.context("consume")?;
        if m.offset() >= ends[&m.partition()] {
            continue;
        }
        next.insert(m.partition(), m.offset() + 1);
        let mut record = BaseRecord::<[u8], [u8]>::to(output).payload(m.payload().unwrap_or(&[]));
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("produce to {output}: {e}"),
            }
        }
        copied += 1;
    }
    producer.flush(Duration::from_secs(120)).context("flush")?;
    Ok(copied)
}

/// The `weir` binary: `WEIR_BIN`, else next to this one (both in target/debug).
/// (`weir_tests::weir_bin` expects a test executable, one directory deeper.)
fn weir_bin() -> anyhow::Result<PathBuf> {
    if let Some(bin) = std::env::var_os("WEIR_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe()?;
    let bin = exe.parent().context("exe has a parent")?.join("weir");
    ensure!(
        bin.is_file(),
        "{} is missing: run `cargo build --bins` first (or set WEIR_BIN)",
        bin.display()
    );
    Ok(bin)
}

/// (b)/(c): runs `weir run --quiet` on a Kafka -> uppercase -> Kafka spec; seconds.
/// Writes the spec of a Weir Kafka -> `uppercase` -> Kafka pipeline with `delivery`.
fn weir_spec(dir: &Path, input: &str, output: &str, delivery: &str, bounded: bool) -> PathBuf {
    let name = kafka::unique_name(&format!("bench-{delivery}"));
    let source = format!(
        "[[sources]]\ntype = \"kafka\"\ntopic = \"{input}\"\nstart = \"earliest\"\nbounded = {bounded}\n"
    );
    let state = dir.join(format!("state-{name}"));
    kafka::uppercase_spec(
        dir,
        &name,
        &state,
        "1s",
        &source,
        output,
        &format!("delivery = \"{delivery}\""),
    )
}

/// Starts `weir run --quiet spec` against the benchmark's broker.
fn spawn_weir(spec: &Path, stderr: Stdio) -> anyhow::Result<std::process::Child> {
    std::process::Command::new(weir_bin()?)
        .env_remove("WEIR_FAULT")
        .args(["run", "--quiet"])
        .arg(spec)
        .env("KAFKA_BOOTSTRAP", kafka::bootstrap())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("spawn weir")
}

fn weir_run(dir: &Path, input: &str, output: &str, delivery: &str) -> anyhow::Result<f64> {
    let spec = weir_spec(dir, input, output, delivery, true);
    let started = Instant::now();
    let mut child = spawn_weir(&spec, Stdio::piped())?;
    // stderr is drained after exit; --quiet keeps it small.
    let status = child.wait().context("wait for weir")?;
    let seconds = started.elapsed().as_secs_f64();
    let err = take_stderr(&mut child);
    ensure!(
        status.success(),
        "weir run ({delivery}) failed: {status}\n{err}"
    );
    Ok(seconds)
}

/// Reads `output` back with read_committed and checks it holds `records` records
/// (uppercased if `upper`).
fn verify(output: &str, records: u64, upper: bool) -> anyhow::Result<()> {
    let values = kafka::committed_values(output);
    ensure!(
        values.len() as u64 == records,
        "output topic {output} holds {} records read_committed, expected {records}",
        values.len()
    );
    if upper {
        ensure!(
            values.iter().all(|v| !v.chars().any(char::is_lowercase)),
            "output topic {output} has records that were not uppercased"
        );
    }
    Ok(())
}

struct Row {
    scenario: &'static str,
    records: u64,
    seconds: f64,
}

impl Row {
    fn rate(&self) -> f64 {
        self.records as f64 / self.seconds
    }
}

/// End-to-end latency of exactly-once: `count` records produced at `rate` records/s,
/// each stamped with its send time, through a running (unbounded) exactly-once pipeline;
/// latency = when a read_committed consumer receives the output record minus that stamp
/// (uppercase keeps the timestamp). Returns (p50, p99) in milliseconds.
fn exactly_once_latency(dir: &Path, count: u64, rate: u64) -> anyhow::Result<(f64, f64)> {
    let input = kafka::unique_name("bench-latency-in");
    let output = kafka::unique_name("bench-latency-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let spec = weir_spec(dir, &input, &output, "exactly-once", false);
    let mut child = spawn_weir(&spec, Stdio::null())?;
    // Let the pipeline start before the clock matters.
    std::thread::sleep(Duration::from_secs(3));

    let reader_output = output.clone();
    let reader = std::thread::spawn(move || -> anyhow::Result<Vec<i64>> {
        let consumer: BaseConsumer = client_config()
            .set("group.id", kafka::unique_name("bench-latency-reader"))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .create()
            .context("consumer")?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&reader_output, p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
        let mut latencies = Vec::with_capacity(count as usize);
        let deadline = Instant::now() + Duration::from_secs(120);
        while (latencies.len() as u64) < count {
            ensure!(
                Instant::now() < deadline,
                "only {} of {count} records arrived",
                latencies.len()
            );
            if let Some(m) = consumer.poll(Duration::from_millis(50)) {
                let m = m.context("consume")?;
                let sent = m.timestamp().to_millis().unwrap_or(0);
                latencies.push(now_ms() - sent);
            }
        }
        Ok(latencies)
    });

    let producer: ThreadedProducer<DefaultProducerContext> = client_config()
        .set("linger.ms", "0")
        .create()
        .context("producer")?;
    let started = Instant::now();
    for i in 0..count {
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let value = format!("latency probe {i}");
        let key = format!("k{i}");
        let record = BaseRecord::to(&input)
            .key(key.as_str())
            .payload(value.as_str())
            .timestamp(now_ms());
        producer
            .send(record)
            .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    }
    producer.flush(Duration::from_secs(30)).context("flush")?;
    let latencies = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reader panicked"))?;
    let _ = child.kill();
    let _ = child.wait();
    let mut latencies = latencies?;
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64;
    Ok((at(0.50), at(0.99)))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn main() -> anyhow::Result<()> {
    let mut records: u64 = 1_000_000;
    let mut out = repo_root().join("build/kafka-bench.json");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--records" => records = args.next().context("--records N")?.parse()?,
            "--out" => out = PathBuf::from(args.next().context("--out PATH")?),
            other => bail!(
                "unknown argument {other}; usage: weir-kafka-bench [--records N] [--out PATH]"
            ),
        }
    }
    ensure!(records > 0, "--records must be positive");
    // Fail early, with what to do, if anything is missing.
    let _ = kafka::bootstrap();
    let _ = guest("uppercase");
    let _ = weir_bin()?;

    let input = kafka::unique_name("bench-in");
    kafka::create_topic(&input, PARTITIONS);
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let inputs: Vec<Input> = (0..records)
        .map(|i| Input {
            partition: (i % PARTITIONS as u64) as i32,
            key: format!("k{i}"),
            value: value(i),
            timestamp: now,
        })
        .collect();
    eprintln!("producing {records} records of {VALUE_BYTES} bytes to {input}");
    let produced = Instant::now();
    kafka::produce(&input, &inputs);
    drop(inputs);
    eprintln!("  produced in {:.1}s", produced.elapsed().as_secs_f64());

    let dir = tempfile::tempdir()?;
    let mut rows = Vec::new();

    let out_a = kafka::unique_name("bench-out-plain");
    kafka::create_topic(&out_a, PARTITIONS);
    eprintln!("(a) plain librdkafka copy -> {out_a}");
    let (copied, seconds) = plain_copy(&input, &out_a)?;
    ensure!(
        copied == records,
        "plain copy read {copied} records, expected {records}"
    );
    verify(&out_a, records, false)?;
    rows.push(Row {
        scenario: "(a) librdkafka copy, no Weir",
        records,
        seconds,
    });

    for (scenario, delivery) in [
        ("(b) Weir uppercase, at-least-once", "at-least-once"),
        (
            "(c) Weir uppercase, exactly-once, checkpoint 1s",
            "exactly-once",
        ),
    ] {
        let output = kafka::unique_name(&format!("bench-out-{delivery}"));
        kafka::create_topic(&output, PARTITIONS);
        eprintln!("{scenario} -> {output}");
        let seconds = weir_run(dir.path(), &input, &output, delivery)?;
        verify(&output, records, true)?;
        rows.push(Row {
            scenario,
            records,
            seconds,
        });
    }

    let ceiling = rows[0].rate();
    println!("records: {records} x {VALUE_BYTES}-byte values over {PARTITIONS} partitions");
    println!();
    println!("| scenario | records/s | ratio to (a) | wall s |");
    println!("|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.3} | {:.2} |",
            r.scenario,
            r.rate(),
            r.rate() / ceiling,
            r.seconds
        );
    }
    eprintln!(
        "latency: 10,000 records at 2,000 records/s through a running exactly-once pipeline ..."
    );
    let (p50, p99) = exactly_once_latency(dir.path(), 10_000, 2_000)?;
    println!();
    println!(
        "exactly-once end-to-end latency (produce -> read_committed, 1 s checkpoints): p50 {p50:.0} ms, p99 {p99:.0} ms"
    );
    println!("(b)/(c) wall time includes weir start-up, guest compilation and shutdown");

    let json = serde_json::json!({
        "records": records,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "scenarios": rows.iter().map(|r| serde_json::json!({
            "scenario": r.scenario,
            "records": r.records,
            "wall_seconds": r.seconds,
            "records_per_second": r.rate(),
            "ratio_to_ceiling": r.rate() / ceiling,
        })).collect::<Vec<_>>(),
        "exactly_once_latency_ms": { "p50": p50, "p99": p99, "checkpoint_interval_ms": 1000 },
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&json)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
