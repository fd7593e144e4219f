//! `weir-kafka-bench`: Kafka -> Kafka throughput of Weir against the local broker
//! (`KAFKA_BOOTSTRAP`), each figure beside ceilings measured in the same run:
//!
//! (r), (q) the ceiling: the librdkafka producer alone with Weir's sink settings (see
//!     `produce_alone`) and Kafka's own consumer perf tool over the input; a copy
//!     through the broker both consumes and produces, so it runs no faster than the
//!     slower of the two. (p) Kafka's producer perf tool, for reference (its one Java
//!     thread is slower than (r); see `perf_tools`).
//! (a) a tuned librdkafka copy, no Weir, two threads with the partitions split
//!     between them like Weir's two subtasks. Each thread reads every partition from
//!     its own queue (`split_partition_queue`), takes up to a batch (1,024 records) from
//!     each, produces them all, then serves the producer (`BaseProducer::poll`); it
//!     reads the input topic from the beginning up to the end offsets taken at start.
//!     Its consumers and producers carry the settings Weir's source and sink derive
//!     from a default spec (`consumer_settings`, `producer_settings`: queue sizes,
//!     fetch sizes, linger, batch size), its producers are idempotent (`acks=all`, no
//!     compression) like Weir's, each with one exactly-once producer's share of the
//!     sink's `buffer_bytes`. What it leaves out is exactly what Weir adds: the
//!     dataflow, the guest, checkpoints and transactions.
//! (b) Weir: Kafka -> WASM `uppercase` -> Kafka, `delivery = "at-least-once"`.
//! (c) the same with `delivery = "exactly-once"` and checkpoints every second, and
//!     (c100) every 100 ms.
//!
//! Two rates per scenario. "records/s" is records over the whole wall time. "steady" is
//! taken from the output itself: every output topic is created with
//! `message.timestamp.type = LogAppendTime`, so each record read back carries the
//! broker's clock when it was appended; the middle 80% of a run's output records (by
//! that time) over the time between the first and the last of them, as input records:
//! `0.8 x records / (t90 - t10)`. The same window for every scenario, start-up and the
//! tail left out. (For the word counts the output is a changelog, about one record per
//! key per batch, so its progress stands for the input's.)
//!
//! (b) and (c) run the real `weir run --quiet SPEC` binary and are timed from spawn to
//! exit (process wall time, start-up and shutdown included: every rate is records over
//! that whole time); the same run on an empty topic shows what start-up and shutdown
//! cost, never taken off. Peak RSS is the child's `VmHWM` (/proc/<pid>/status), read
//! every 20 ms until it exits; the broker's RSS (`VmRSS`) is read after each scenario.
//! Every scenario's output topic is read back
//! (read_committed) and every record checked: each id exactly once, each value exactly
//! the input's (uppercased by the guest). Then the exactly-once latency (produce ->
//! read_committed) at 100 ms, 500 ms and 1 s checkpoint intervals.
//!
//! (w2)/(w3) run (c) as 2 or 3 `--worker I/N` processes; (k1) is a keyed word count in
//! one process, (k2)/(k3) the same as 2 or 3 workers shuffling through the repartition
//! topic. A (kN) pipeline first runs over a warm-up tenth of the records and is stopped;
//! the measured run is its second, resumed from its checkpoints over the records
//! produced after. The first run pays for its fresh topics (on this project's VMs a
//! new partition's first index entry alone costs the broker a page fault over the
//! whole sparse, preallocated 10 MiB index file, two per partition of the repartition
//! topic), one-time costs that a long-running pipeline does not see again.
//!
//! Usage: weir-kafka-bench [--records N] [--keyed-records K] [--word-runs R] [--out PATH]
//!                         [--only p,q,r,a,b,c,c100,w2,w3,k1,k2,k3,latency]
//!                         [--source-buffer SIZE] [--sink-buffer SIZE]
//!                         [--keyed-interval DURATION] [--repartition-partitions R]
//! N defaults to 1,000,000, K (the (kN) runs' records) to 3,000,000; `--only` picks
//! scenarios (default: all). `--word-runs R` gives the (kN) input runs of R records of
//! one word (default 1: each record the next of the 10,000 words), so their aggregates
//! see few keys per batch and commit a changelog of about the same (small) size, the
//! shuffle's cost measured apart from the output's.
//! `--keyed-interval` sets the (kN) runs' checkpoint interval (default 1s),
//! `--repartition-partitions` their spec's `repartition_partitions` (default: the
//! spec's default), for trying what the repartition topic's shape costs.
//! `--source-buffer` / `--sink-buffer` set `buffer_bytes` in Weir's specs (and size the
//! copy's queues alike), for trying budgets; without them the defaults apply.
//! Writes a JSON file (`--out`, default build/kafka-bench.json) and prints a table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir::connector::kafka::{KafkaSinkConfig, KafkaSourceConfig};
use weir_tests::kafka::{self, Input};
use weir_tests::process_cpu::{CpuMark, CpuUse};
use weir_tests::{guest, repo_root, take_stderr};

mod perf_tools;
mod produce_alone;

const PARTITIONS: i32 = 3;
const VALUE_BYTES: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Record `i`'s value: its id, then lowercase filler up to `VALUE_BYTES` bytes.
pub fn value(i: u64) -> String {
    let mut v = format!("record {i:010} ");
    let filler = b"the quick brown fox jumps over the lazy dog ";
    let mut j = 0;
    while v.len() < VALUE_BYTES {
        v.push(filler[j % filler.len()] as char);
        j += 1;
    }
    v
}

pub fn client_config() -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", kafka::bootstrap())
        .set("log_level", "3");
    c
}

/// Threads of the plain copy: the same parallelism as the Weir pipelines (2).
const COPY_THREADS: i32 = 2;
/// Records the copy takes from one partition queue before producing them.
const COPY_BATCH: usize = 1024;

/// The queue budgets: the spec defaults unless `--source-buffer` / `--sink-buffer`.
#[derive(Debug, Clone, Copy, Default)]
struct Budgets {
    source: Option<usize>,
    sink: Option<usize>,
}

impl Budgets {
    /// Weir's default source config, with the bench's budget.
    fn source(&self) -> KafkaSourceConfig {
        let mut c = KafkaSourceConfig::new("in");
        if let Some(b) = self.source {
            c.buffer_bytes = b;
        }
        c
    }

    /// Weir's default (exactly-once) sink config, with the bench's budget.
    fn sink(&self) -> KafkaSinkConfig {
        let mut c = KafkaSinkConfig::new("out");
        if let Some(b) = self.sink {
            c.buffer_bytes = b;
        }
        c
    }

    /// Lines for a Weir spec's source and sink tables.
    fn source_line(&self) -> String {
        self.source
            .map_or(String::new(), |b| format!("buffer_bytes = \"{b}B\"\n"))
    }

    fn sink_line(&self) -> String {
        self.sink
            .map_or(String::new(), |b| format!("buffer_bytes = \"{b}B\"\n"))
    }
}

/// (a): copies `input` to `output` with tuned librdkafka, one consumer and one
/// producer per thread and partition k going to thread k % COPY_THREADS, like Weir's
/// subtasks; returns (records, seconds).
fn plain_copy(input: &str, output: &str, budgets: Budgets) -> anyhow::Result<(u64, f64)> {
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
            std::thread::spawn(move || copy_partitions(&input, &output, ends, budgets))
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

/// An idempotent librdkafka producer with `sink`'s settings (`producer_settings`:
/// linger, batch size, queue bounds), as Weir's sink makes one.
pub fn idempotent_producer(
    sink: &KafkaSinkConfig,
) -> anyhow::Result<BaseProducer<DefaultProducerContext>> {
    let mut config = client_config();
    config.set("enable.idempotence", "true");
    for (key, value) in sink.producer_settings() {
        config.set(key, value);
    }
    config.create().context("producer")
}

/// Hands `record` to `producer`, serving it while its queue is full (as Weir's sink
/// waits: backpressure, never a dropped record).
pub fn produce_one<'a>(
    producer: &BaseProducer<DefaultProducerContext>,
    mut record: BaseRecord<'a, [u8], [u8]>,
    output: &str,
) -> anyhow::Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, _)) => bail!("produce to {output}: {e}"),
        }
    }
}

/// One thread of the plain copy: partitions `ends.keys()` up to their end offsets,
/// each from its own queue, produced in batches.
fn copy_partitions(
    input: &str,
    output: &str,
    ends: BTreeMap<i32, i64>,
    budgets: Budgets,
) -> anyhow::Result<u64> {
    let mut config = client_config();
    config
        .set("group.id", kafka::unique_name("bench-ceiling"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "false");
    for (key, value) in budgets.source().consumer_settings(ends.len()) {
        config.set(key, value);
    }
    let consumer: Arc<BaseConsumer> = Arc::new(config.create().context("consumer")?);
    let producer = idempotent_producer(&budgets.sink())?;
    let mut tpl = TopicPartitionList::new();
    let mut queues = Vec::new();
    for p in ends.keys() {
        queues.push((
            *p,
            consumer
                .split_partition_queue(input, *p)
                .context("partition queue")?,
        ));
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
        let mut read = 0;
        for (p, queue) in &queues {
            let (p, end) = (*p, ends[p]);
            let mut taken = 0;
            while taken < COPY_BATCH && next[&p] < end {
                let Some(m) = queue.poll(Duration::ZERO) else {
                    break;
                };
                let m = m.context("consume")?;
                taken += 1;
                if m.offset() >= end {
                    next.insert(p, end);
                    break;
                }
                next.insert(p, m.offset() + 1);
                let mut record =
                    BaseRecord::<[u8], [u8]>::to(output).payload(m.payload().unwrap_or(&[]));
                if let Some(k) = m.key() {
                    record = record.key(k);
                }
                produce_one(&producer, record, output)?;
                copied += 1;
            }
            read += taken;
        }
        // Serves delivery reports; and the consumer's events, waiting a little when
        // every queue was empty.
        producer.poll(Duration::ZERO);
        let wait = if read == 0 { 1 } else { 0 };
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(wait)) {
            bail!("consumer: {e}");
        }
    }
    producer.flush(Duration::from_secs(120)).context("flush")?;
    Ok(copied)
}

/// Writes the spec of a Weir Kafka -> `run.shape` -> Kafka pipeline with `delivery`,
/// checkpoints every `interval`.
fn weir_spec(dir: &Path, run: &WeirRun<'_>, input: &str, output: &str, bounded: bool) -> PathBuf {
    let name = kafka::unique_name(&format!("bench-{}", run.delivery));
    let source = format!(
        "[[sources]]\ntype = \"kafka\"\ntopic = \"{input}\"\nstart = \"earliest\"\nbounded = {bounded}\n{}",
        run.budgets.source_line()
    );
    let state = dir.join(format!("state-{name}"));
    if run.shape == Shape::WordCount {
        let text = format!(
            "name = \"{name}\"\nparallelism = 2\nstate_dir = {state}\n{partitions}\n[checkpoint]\ninterval = \"{interval}\"\n\n{source}\n\n\
             [[steps]]\ntype = \"aggregate\"\nname = \"{REPARTITION_STEP}\"\nmodule = {count}\n\n\
             [[sinks]]\ntype = \"kafka\"\ntopic = \"{output}\"\ndelivery = \"{delivery}\"\n{sink}\n",
            state = weir_tests::toml_path(&state),
            partitions = run
                .repartition_partitions
                .map_or_else(String::new, |r| format!("repartition_partitions = {r}\n")),
            interval = run.interval,
            count = weir_tests::toml_path(&guest("word_count")),
            delivery = run.delivery,
            sink = run.budgets.sink_line(),
        );
        return weir_tests::write_file(dir, &format!("{name}.toml"), &text);
    }
    kafka::uppercase_spec(
        dir,
        &name,
        &state,
        run.interval,
        &source,
        output,
        &format!(
            "delivery = \"{}\"\n{}",
            run.delivery,
            run.budgets.sink_line()
        ),
    )
}

/// What a benchmarked pipeline computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The WASM `uppercase` map: no shuffle.
    Uppercase,
    /// The WASM `word-count` aggregate (unwindowed) over the records' keys: a keyed
    /// shuffle, in process for one worker, through the repartition topic for more.
    WordCount,
}

/// One `weir run` of the bench: what it computes, its delivery, checkpoint interval and
/// budgets, and how many worker processes run the pipeline (`--worker I/N`; 1: one
/// plain process).
struct WeirRun<'a> {
    shape: Shape,
    delivery: &'a str,
    interval: &'a str,
    budgets: Budgets,
    workers: u32,
    /// `repartition_partitions` in a word count's spec, if set.
    repartition_partitions: Option<usize>,
}

/// Starts `weir run --quiet spec` (as worker `worker` of `workers` if more than one)
/// against the benchmark's broker.
fn spawn_weir(
    spec: &Path,
    (worker, workers): (u32, u32),
    stderr: Stdio,
) -> anyhow::Result<std::process::Child> {
    let mut command = std::process::Command::new(weir_tests::weir_bin());
    command.env_remove("WEIR_FAULT").args(["run", "--quiet"]);
    if workers > 1 {
        command.args(["--worker", &format!("{worker}/{workers}")]);
    }
    command
        .arg(spec)
        .env("KAFKA_BOOTSTRAP", kafka::bootstrap())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("spawn weir")
}

/// The peak resident set of process `pid` so far (`VmHWM`), in bytes; `None` once it
/// has exited.
fn peak_rss(pid: u32) -> Option<u64> {
    weir_tests::proc_status_bytes(pid, "VmHWM")
}

/// The name of the word count's aggregate step: its repartition topic is
/// `weir.<pipeline>-count-repartition` with N > 1 workers.
const REPARTITION_STEP: &str = "count";

/// Whether N > 1 word-count workers are done with `input`: the pipeline's group has
/// committed every input offset (the input is not transactional: its end offsets are
/// its records), and no committed record of the repartition topic is left to read
/// after the group's committed offsets (read_committed, to the end of every
/// partition). Workers with a repartition topic never end on their own.
fn keyed_workers_drained(spec: &Path, input: &str) -> anyhow::Result<bool> {
    let name = spec
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the spec is named after its pipeline")?;
    let group = format!("weir.{name}");
    let read: i64 = kafka::committed_offsets(&group, input)
        .values()
        .map(|(offset, _)| offset)
        .sum();
    if read < kafka::end_offsets_sum(input) {
        return Ok(false);
    }
    let topic = format!("weir.{name}-{REPARTITION_STEP}-repartition");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka::bootstrap())
        .set("group.id", format!("{group}-bench-probe"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("log_level", "3")
        .create()?;
    let partitions = consumer
        .fetch_metadata(Some(&topic), TIMEOUT)?
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len());
    if partitions == 0 {
        // Not created yet: the workers are still starting.
        return Ok(false);
    }
    let committed = kafka::committed_offsets(&group, &topic);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        let from = committed
            .get(&p)
            .map_or(Offset::Beginning, |(o, _)| Offset::Offset(*o));
        tpl.add_partition_offset(&topic, p, from)?;
    }
    consumer.assign(&tpl)?;
    let mut at_end = 0;
    let deadline = Instant::now() + TIMEOUT;
    while at_end < partitions {
        ensure!(
            Instant::now() < deadline,
            "{topic}: no end of partition in {TIMEOUT:?}"
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(_)) => return Ok(false),
            Some(Err(KafkaError::PartitionEOF(_))) => at_end += 1,
            Some(Err(e)) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// (b)/(c)/(wN)/(kN): runs `weir run --quiet` on a bounded Kafka -> `run.shape` -> Kafka
/// spec, as `run.workers` processes at once; (seconds until the last one ended, the sum
/// of their peak RSS in bytes). N > 1 word-count workers are stopped with SIGTERM once
/// [`keyed_workers_drained`]; their time is taken then.
fn weir_run(
    dir: &Path,
    run: &WeirRun<'_>,
    input: &str,
    output: &str,
) -> anyhow::Result<(f64, u64)> {
    let spec = weir_spec(dir, run, input, output, true);
    run_spec(run, &spec, input)
}

/// [`weir_run`] of an existing `spec` reading `input`: run again after more input, it
/// resumes from its checkpoints.
fn run_spec(run: &WeirRun<'_>, spec: &Path, input: &str) -> anyhow::Result<(f64, u64)> {
    let started = Instant::now();
    let mut children = (0..run.workers)
        .map(|w| spawn_weir(spec, (w, run.workers), Stdio::piped()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut peaks = vec![0; children.len()];
    let mut statuses = vec![None; children.len()];
    let stop_when_drained = run.shape == Shape::WordCount && run.workers > 1;
    let mut drained_after = None;
    let mut next_check = Instant::now();
    // stderr is drained after exit; --quiet keeps it small.
    while statuses.iter().any(Option::is_none) {
        if stop_when_drained && drained_after.is_none() && Instant::now() >= next_check {
            next_check = Instant::now() + Duration::from_millis(200);
            if keyed_workers_drained(spec, input)? {
                drained_after = Some(started.elapsed().as_secs_f64());
                for child in &children {
                    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                }
            }
        }
        for (i, child) in children.iter_mut().enumerate() {
            if statuses[i].is_some() {
                continue;
            }
            if let Some(rss) = peak_rss(child.id()) {
                peaks[i] = peaks[i].max(rss);
            }
            statuses[i] = child.try_wait().context("wait for weir")?;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = drained_after.unwrap_or_else(|| started.elapsed().as_secs_f64());
    for (child, status) in children.iter_mut().zip(statuses.into_iter().flatten()) {
        let err = take_stderr(child);
        // Stopped by SIGTERM after a final checkpoint: exit 143.
        let stopped = drained_after.is_some() && status.code() == Some(143);
        ensure!(
            status.success() || stopped,
            "weir run ({} at {}, {} workers) failed: {status}\n{err}",
            run.delivery,
            run.interval,
            run.workers
        );
    }
    Ok((seconds, peaks.iter().sum()))
}

/// Reads the word counts in `output` back with read_committed and checks them: every
/// word of the input, each word's highest count its number of records, `records` in all.
/// Returns the output records' timestamps.
fn verify_counts(output: &str, records: u64, words: u64) -> anyhow::Result<Vec<i64>> {
    let mut highest: BTreeMap<String, u64> = BTreeMap::new();
    let read = kafka::read_all_timed(output, "read_committed");
    for (_, value, _) in &read {
        let json: serde_json::Value = serde_json::from_str(value)
            .with_context(|| format!("a word count in {output}: {value}"))?;
        let (Some(word), Some(count)) = (json["word"].as_str(), json["count"].as_u64()) else {
            bail!("not a word count in {output}: {value}");
        };
        let entry = highest.entry(word.to_owned()).or_default();
        *entry = (*entry).max(count);
    }
    ensure!(
        highest.len() as u64 == words && highest.values().sum::<u64>() == records,
        "output topic {output}: {} words counting {} records, expected {words} counting {records}",
        highest.len(),
        highest.values().sum::<u64>()
    );
    Ok(read.into_iter().map(|(_, _, t)| t).collect())
}

/// Reads `output` back with read_committed and checks every record: each id of
/// `0..records` exactly once, each value exactly what the input's was (`value(id)`),
/// uppercased if `upper`. One loss plus one duplicate fails, as does a changed byte.
/// Returns the records' timestamps.
pub fn verify(output: &str, records: u64, upper: bool) -> anyhow::Result<Vec<i64>> {
    let read = kafka::read_all_timed(output, "read_committed");
    ensure!(
        read.len() as u64 == records,
        "output topic {output} holds {} records read_committed, expected {records}",
        read.len()
    );
    let mut seen = vec![false; records as usize];
    for (_, got, _) in &read {
        let id = got
            .get("record ".len().."record ".len() + 10)
            .and_then(|digits| digits.parse::<u64>().ok())
            .filter(|&id| id < records)
            .with_context(|| format!("output topic {output}: no record id in {got:?}"))?;
        let mut expected = value(id);
        if upper {
            expected.make_ascii_uppercase();
        }
        ensure!(
            *got == expected,
            "output topic {output}: record {id} is {got:?}, expected {expected:?}"
        );
        ensure!(
            !std::mem::replace(&mut seen[id as usize], true),
            "output topic {output}: record {id} twice"
        );
    }
    Ok(read.into_iter().map(|(_, _, t)| t).collect())
}

struct Row {
    scenario: &'static str,
    records: u64,
    seconds: f64,
    /// The steady-state rate from the output's append times (see the module docs).
    steady: Option<f64>,
    /// The broker's resident set after the run.
    broker_rss: Option<u64>,
    /// Peak RSS of the `weir run` process (Weir scenarios only).
    peak_rss: Option<u64>,
    /// Wall time of the same `weir run` on an empty input: start-up and shutdown.
    fixed_seconds: Option<f64>,
    /// (records, wall seconds) of the warm-up run on fresh topics before the measured
    /// one (word-count scenarios only).
    warm_up: Option<(u64, f64)>,
    /// CPU over the measured run: the `weir` processes, the broker, this process (for
    /// (a) the copy itself; for the others producing nothing, only watching).
    cpu: CpuUse,
    /// Records the measured run committed to its output (Weir scenarios): one per input
    /// record for a copy; for a word count its changelog, one record per key per batch
    /// the aggregate received, so it depends on how the records were batched.
    output: Option<u64>,
}

impl Row {
    /// A row with nothing but its rate and CPU.
    fn new(scenario: &'static str, records: u64, seconds: f64, cpu: CpuUse) -> Row {
        Row {
            scenario,
            records,
            seconds,
            steady: None,
            broker_rss: broker_rss(),
            peak_rss: None,
            fixed_seconds: None,
            warm_up: None,
            cpu,
            output: None,
        }
    }

    /// Whether the row copies the input topic, record for record (the ceiling and the
    /// copy (a) bound those rows; a word count (kN) reads other records and commits a
    /// changelog).
    fn is_copy(&self) -> bool {
        !self.scenario.starts_with("(k")
    }

    fn rate(&self) -> f64 {
        self.records as f64 / self.seconds
    }
}

/// The broker's resident set now (`VmRSS`), in bytes.
fn broker_rss() -> Option<u64> {
    let pid = weir_tests::process_cpu::kafka_broker_pid()?;
    weir_tests::proc_status_bytes(u32::try_from(pid).ok()?, "VmRSS")
}

/// A fresh output topic whose records carry the broker's append time.
pub fn output_topic(prefix: &str) -> String {
    let topic = kafka::unique_name(prefix);
    kafka::create_topic_with(
        &topic,
        PARTITIONS,
        &[("message.timestamp.type", "LogAppendTime")],
    );
    topic
}

/// The steady-state rate of a run over `records` input records, from its output's
/// append times (ms) at or after `since_ms`: the middle 80% of those output records
/// over the time between the first and the last of them, scaled to input records.
/// `None` when too few records, or all in one millisecond.
pub fn steady_rate(records: u64, mut times: Vec<i64>, since_ms: i64) -> Option<f64> {
    times.retain(|t| *t >= since_ms);
    times.sort_unstable();
    let n = times.len();
    if n < 10 {
        return None;
    }
    let (first, last) = (times[n / 10], times[n * 9 / 10]);
    (last > first).then(|| 0.8 * records as f64 / ((last - first) as f64 / 1e3))
}

/// End-to-end latency of exactly-once: `count` records produced at `rate` records/s,
/// each stamped with its send time, through a running (unbounded) exactly-once pipeline
/// checkpointing every `interval`; latency = when a read_committed consumer receives
/// the output record minus that stamp (uppercase keeps the timestamp). Returns (p50,
/// p99) in milliseconds.
fn exactly_once_latency(
    dir: &Path,
    interval: &str,
    budgets: Budgets,
    count: u64,
    rate: u64,
) -> anyhow::Result<(f64, f64)> {
    let input = kafka::unique_name("bench-latency-in");
    let output = kafka::unique_name("bench-latency-out");
    kafka::create_topic(&input, PARTITIONS);
    kafka::create_topic(&output, PARTITIONS);
    let run = WeirRun {
        shape: Shape::Uppercase,
        delivery: "exactly-once",
        interval,
        budgets,
        workers: 1,
        repartition_partitions: None,
    };
    let spec = weir_spec(dir, &run, &input, &output, false);
    let mut child = spawn_weir(&spec, (0, 1), Stdio::null())?;
    let result = measure_latency(&input, &output, count, rate);
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The produce -> read_committed latencies of `count` records at `rate`, once one
/// warm-up record went through (so start-up, guest compilation included, is not
/// measured); (p50, p99) in ms.
fn measure_latency(input: &str, output: &str, count: u64, rate: u64) -> anyhow::Result<(f64, f64)> {
    let consumer = latency_reader(output)?;
    let producer: ThreadedProducer<DefaultProducerContext> = client_config()
        .set("linger.ms", "0")
        .create()
        .context("producer")?;
    producer
        .send(BaseRecord::to(input).key("warm-up").payload("warm-up"))
        .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    producer.flush(Duration::from_secs(30)).context("flush")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        ensure!(
            Instant::now() < deadline,
            "the warm-up record did not come through within 120 s"
        );
        if let Some(m) = consumer.poll(Duration::from_millis(50)) {
            m.context("consume")?;
            break;
        }
    }

    let reader = std::thread::spawn(move || -> anyhow::Result<Vec<i64>> {
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

    let started = Instant::now();
    for i in 0..count {
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let value = format!("latency probe {i}");
        let key = format!("k{i}");
        let record = BaseRecord::to(input)
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
    let mut latencies = latencies?;
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64;
    Ok((at(0.50), at(0.99)))
}

/// A read_committed consumer of `output`, from the beginning, that does not wait on the
/// broker longer than [`LATENCY_READER_FETCH_WAIT_MS`].
fn latency_reader(output: &str) -> anyhow::Result<BaseConsumer> {
    let consumer: BaseConsumer = client_config()
        .set("group.id", kafka::unique_name("bench-latency-reader"))
        .set("isolation.level", "read_committed")
        // A fetch that finds nothing committed waits this long on the broker, and the
        // commit that makes records readable does not end that wait (measured: at 100 ms
        // checkpoints, p50 850 ms with librdkafka's default 500 against 100-190 ms with
        // 10): without it, this would time the reader's fetch wait, not Weir.
        .set(
            "fetch.wait.max.ms",
            LATENCY_READER_FETCH_WAIT_MS.to_string(),
        )
        .set("enable.auto.commit", "false")
        .create()
        .context("consumer")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(output, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The latency reader's `fetch.wait.max.ms` (see `measure_latency`).
const LATENCY_READER_FETCH_WAIT_MS: u32 = 10;
/// Latency probe: records and their rate.
const LATENCY_RECORDS: u64 = 10_000;
const LATENCY_RATE: u64 = 2_000;
/// Checkpoint intervals of the latency runs.
const LATENCY_INTERVALS: [&str; 3] = ["100ms", "500ms", "1s"];
const USAGE: &str = "usage: weir-kafka-bench [--records N] [--keyed-records K] [--word-runs R] [--out PATH] [--only p,q,r,a,b,c,c100,w2,w3,k1,k2,k3,latency] [--source-buffer SIZE] [--sink-buffer SIZE] [--keyed-interval DURATION] [--repartition-partitions R]";
/// Records of the word-count scenarios (k1-k3) unless `--keyed-records` says: their
/// records cross the repartition topic at its writers' checkpoint commits, so a (k2)
/// run ends about one checkpoint interval after a (k1) run over the same records, a
/// fixed cost that a run of 1,000,000 records (about 2 s) does not amortise.
const KEYED_RECORDS: u64 = 3_000_000;
/// Distinct keys of the word-count scenarios (k1-k3).
const WORDS: u64 = 10_000;
/// The word-count scenarios' warm-up run reads `records / WARM_UP_PART` records first.
const WARM_UP_PART: u64 = 10;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The command line.
struct Args {
    records: u64,
    /// Records of the word-count scenarios (k1-k3).
    keyed_records: u64,
    /// How many consecutive word-count records share a word (1: each the next word).
    word_runs: u64,
    out: PathBuf,
    only: Option<Vec<String>>,
    budgets: Budgets,
    keyed_interval: String,
    repartition_partitions: Option<usize>,
}

impl Args {
    fn parse() -> anyhow::Result<Args> {
        let mut a = Args {
            records: 1_000_000,
            keyed_records: KEYED_RECORDS,
            word_runs: 1,
            out: repo_root().join("build/kafka-bench.json"),
            only: None,
            budgets: Budgets::default(),
            keyed_interval: "1s".to_owned(),
            repartition_partitions: None,
        };
        let size = |v: Option<String>, what: &str| -> anyhow::Result<usize> {
            let v = v.with_context(|| format!("{what} SIZE"))?;
            weir::field::units::parse_size(&v).map_err(|e| anyhow::anyhow!("{what}: {e}"))
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--records" => a.records = args.next().context("--records N")?.parse()?,
                "--keyed-records" => {
                    a.keyed_records = args.next().context("--keyed-records N")?.parse()?;
                }
                "--word-runs" => {
                    a.word_runs = args.next().context("--word-runs R")?.parse::<u64>()?.max(1);
                }
                "--out" => a.out = PathBuf::from(args.next().context("--out PATH")?),
                "--only" => {
                    let list = args.next().context("--only LIST")?;
                    a.only = Some(list.split(',').map(str::to_owned).collect());
                }
                "--source-buffer" => a.budgets.source = Some(size(args.next(), "--source-buffer")?),
                "--sink-buffer" => a.budgets.sink = Some(size(args.next(), "--sink-buffer")?),
                "--keyed-interval" => {
                    a.keyed_interval = args.next().context("--keyed-interval DURATION")?;
                    weir::field::units::parse_duration(&a.keyed_interval)
                        .map_err(|e| anyhow::anyhow!("--keyed-interval: {e}"))?;
                }
                "--repartition-partitions" => {
                    a.repartition_partitions =
                        Some(args.next().context("--repartition-partitions R")?.parse()?)
                }
                other => bail!("unknown argument {other}; {USAGE}"),
            }
        }
        ensure!(a.records > 0, "--records must be positive");
        Ok(a)
    }

    /// Whether `--only` picked `scenario` (everything without `--only`).
    fn wanted(&self, scenario: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == scenario))
    }
}

/// The Weir scenarios: `--only` key, label, pipeline, delivery, checkpoint interval
/// (the word counts take `--keyed-interval`), worker processes.
const SCENARIOS: [(&str, &str, Shape, &str, &str, u32); 8] = [
    (
        "b",
        "(b) Weir uppercase, at-least-once",
        Shape::Uppercase,
        "at-least-once",
        "1s",
        1,
    ),
    (
        "c",
        "(c) Weir uppercase, exactly-once, checkpoint 1s",
        Shape::Uppercase,
        "exactly-once",
        "1s",
        1,
    ),
    (
        "c100",
        "(c100) Weir uppercase, exactly-once, checkpoint 100ms",
        Shape::Uppercase,
        "exactly-once",
        "100ms",
        1,
    ),
    (
        "w2",
        "(w2) as (c), 2 worker processes (--worker I/2)",
        Shape::Uppercase,
        "exactly-once",
        "1s",
        2,
    ),
    (
        "w3",
        "(w3) as (c), 3 worker processes (--worker I/3)",
        Shape::Uppercase,
        "exactly-once",
        "1s",
        3,
    ),
    (
        "k1",
        "(k1) Weir word-count (keyed, in-process shuffle), exactly-once, 1s",
        Shape::WordCount,
        "exactly-once",
        "1s",
        1,
    ),
    (
        "k2",
        "(k2) as (k1), 2 workers (shuffle through the repartition topic)",
        Shape::WordCount,
        "exactly-once",
        "1s",
        2,
    ),
    (
        "k3",
        "(k3) as (k1), 3 workers (shuffle through the repartition topic)",
        Shape::WordCount,
        "exactly-once",
        "1s",
        3,
    ),
];

fn main() -> anyhow::Result<()> {
    let args = Args::parse()?;
    // Fail early, with what to do, if anything is missing.
    let _ = kafka::bootstrap();
    let _ = guest("uppercase");
    let _ = weir_tests::weir_bin();
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let input = produce_input(args.records, now);
    let dir = tempfile::tempdir()?;
    let mut rows = Vec::new();
    if args.wanted("p") {
        rows.push(perf_tools::producer_row(args.records, args.budgets)?);
    }
    if args.wanted("q") {
        rows.push(perf_tools::consumer_row(&input, args.records)?);
    }
    if args.wanted("r") {
        rows.push(produce_alone::producer_row(args.records, args.budgets)?);
    }
    if args.wanted("a") {
        rows.push(ceiling_row(&input, &args)?);
    }
    rows.extend(weir_rows(dir.path(), &input, &args, now)?);
    let ratios = print_throughput(&rows, &args);
    let latency = if args.wanted("latency") {
        latency_rows(dir.path(), args.budgets)?
    } else {
        Vec::new()
    };
    write_json(&args, &rows, ratios, latency)
}

/// A fresh input topic holding `records` records (`value(i)`), spread over the partitions.
fn produce_input(records: u64, now: i64) -> String {
    let input = kafka::unique_name("bench-in");
    kafka::create_topic(&input, PARTITIONS);
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
    eprintln!("  produced in {:.1}s", produced.elapsed().as_secs_f64());
    input
}

/// (a): the tuned librdkafka copy, its output checked record by record.
fn ceiling_row(input: &str, args: &Args) -> anyhow::Result<Row> {
    let records = args.records;
    let out_a = output_topic("bench-out-plain");
    eprintln!("(a) tuned librdkafka copy -> {out_a}");
    let mark = CpuMark::now();
    let (copied, seconds) = plain_copy(input, &out_a, args.budgets)?;
    let cpu = mark.elapsed();
    ensure!(
        copied == records,
        "plain copy read {copied} records, expected {records}"
    );
    let times = verify(&out_a, records, false)?;
    Ok(Row {
        steady: steady_rate(records, times, 0),
        ..Row::new("(a) librdkafka copy, no Weir", records, seconds, cpu)
    })
}

/// Every wanted Weir scenario, each beside the same run on an empty topic (its start-up
/// and shutdown).
fn weir_rows(dir: &Path, input: &str, args: &Args, now: i64) -> anyhow::Result<Vec<Row>> {
    let empty = kafka::unique_name("bench-empty-in");
    kafka::create_topic(&empty, PARTITIONS);
    // Each word-count scenario's topic gets the first `warm_up` of these, then all.
    let words: Vec<Input> = if ["k1", "k2", "k3"].iter().any(|k| args.wanted(k)) {
        (0..args.keyed_records)
            .map(|i| Input {
                partition: (i % PARTITIONS as u64) as i32,
                key: format!("w{}", (i / args.word_runs) % WORDS),
                value: "1".to_owned(),
                timestamp: now,
            })
            .collect()
    } else {
        Vec::new()
    };
    // Record i's word is number (i / word_runs) % WORDS.
    let distinct_words = WORDS.min(args.keyed_records.div_ceil(args.word_runs));
    let mut rows = Vec::new();
    for (key, scenario, shape, delivery, interval, workers) in SCENARIOS {
        if !args.wanted(key) {
            continue;
        }
        let output = output_topic(&format!("bench-out-{delivery}"));
        eprintln!("{scenario} -> {output}");
        let run = WeirRun {
            shape,
            delivery,
            interval: if shape == Shape::WordCount {
                &args.keyed_interval
            } else {
                interval
            },
            budgets: args.budgets,
            workers,
            repartition_partitions: args.repartition_partitions,
        };
        let records = match shape {
            Shape::Uppercase => args.records,
            Shape::WordCount => args.keyed_records,
        };
        let m = match shape {
            Shape::Uppercase => {
                let mark = CpuMark::now();
                let (seconds, peak) = weir_run(dir, &run, input, &output)?;
                let cpu = mark.elapsed();
                let times = verify(&output, args.records, true)?;
                MeasuredRun {
                    seconds,
                    peak,
                    warm_up: None,
                    cpu,
                    steady: steady_rate(args.records, times, 0),
                    output: Some(args.records),
                }
            }
            Shape::WordCount => word_count_run(dir, &run, (&words, distinct_words), &output)?,
        };
        let broker_rss = broker_rss();
        let (fixed, _) = weir_run(dir, &run, &empty, &output)?;
        rows.push(Row {
            steady: m.steady,
            broker_rss,
            peak_rss: Some(m.peak),
            fixed_seconds: Some(fixed),
            warm_up: m.warm_up,
            output: m.output,
            ..Row::new(scenario, records, m.seconds, m.cpu)
        });
    }
    Ok(rows)
}

/// A word-count scenario: a warm-up part of the input first, then all of it through the
/// same pipeline, resumed from its checkpoints, so the measured run finds its topics as
/// a long-running pipeline does (see the module docs). `words`: the input, and how many
/// distinct words it holds.
fn word_count_run(
    dir: &Path,
    run: &WeirRun<'_>,
    (words, distinct_words): (&[Input], u64),
    output: &str,
) -> anyhow::Result<MeasuredRun> {
    let records = words.len() as u64;
    let warm_up = (records / WARM_UP_PART).max(1);
    let topic = kafka::unique_name("bench-words");
    kafka::create_topic(&topic, PARTITIONS);
    let spec = weir_spec(dir, run, &topic, output, true);
    kafka::produce(&topic, &words[..warm_up as usize]);
    let (warm_up_seconds, _) = run_spec(run, &spec, &topic)?;
    eprintln!("  warm-up: {warm_up} records in {warm_up_seconds:.2}s");
    kafka::produce(&topic, words);
    let since_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let mark = CpuMark::now();
    let (seconds, peak) = run_spec(run, &spec, &topic)?;
    let cpu = mark.elapsed();
    let times = verify_counts(output, warm_up + records, distinct_words)?;
    let changelog = times.iter().filter(|&&t| t >= since_ms).count() as u64;
    Ok(MeasuredRun {
        seconds,
        peak,
        warm_up: Some((warm_up, warm_up_seconds)),
        cpu,
        steady: steady_rate(records, times, since_ms),
        output: Some(changelog),
    })
}

/// A Weir scenario's measured run: wall s, peak RSS, (warm-up records, warm-up wall s),
/// CPU, steady-state rate, output records.
struct MeasuredRun {
    seconds: f64,
    peak: u64,
    warm_up: Option<(u64, f64)>,
    cpu: CpuUse,
    steady: Option<f64>,
    output: Option<u64>,
}

/// Ratios between scenarios of the same run, for the JSON file.
struct Ratios {
    c100_over_c: Option<f64>,
    workers_over_one: Vec<serde_json::Value>,
}

/// Prints the throughput table and the ratios between scenarios.
fn print_throughput(rows: &[Row], args: &Args) -> Ratios {
    let rate_of = |prefix: &str| {
        rows.iter()
            .find(|r| r.scenario.starts_with(prefix))
            .map(Row::rate)
    };
    let copy = rate_of("(a)");
    let ceiling = perf_ceiling(rows);
    println!(
        "records: {} x {VALUE_BYTES}-byte values over {PARTITIONS} partitions; the word counts (kN) {} records of {WORDS} words in runs of {}",
        args.records, args.keyed_records, args.word_runs
    );
    println!("budgets: {:?} (None: the spec default)", args.budgets);
    println!(
        "word count (kN): checkpoints every {} (their labels name the default, 1s), repartition_partitions {} (None: the spec default)",
        args.keyed_interval,
        args.repartition_partitions
            .map_or_else(|| "None".to_owned(), |r| r.to_string())
    );
    println!();
    println!(
        "| scenario | records/s | steady records/s | steady, ratio to min((r), (q)) | ratio to (a) | wall s | of which start-up and shutdown s | peak RSS MiB | broker RSS MiB | CPU s: weir / broker / bench |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let ratio = |rate: Option<f64>, to: Option<f64>| match (rate, to) {
        (Some(rate), Some(to)) => format!("{:.3}", rate / to),
        _ => "-".to_owned(),
    };
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
    for r in rows {
        println!(
            "| {} | {:.0} | {} | {} | {} | {:.2} | {} | {} | {} | {} |",
            r.scenario,
            r.rate(),
            opt(r.steady, 0),
            ratio(r.steady.filter(|_| r.is_copy()), ceiling),
            ratio(Some(r.rate()).filter(|_| r.is_copy()), copy),
            r.seconds,
            opt(r.fixed_seconds, 2),
            opt(r.peak_rss.map(mib), 1),
            opt(r.broker_rss.map(mib), 0),
            cpu_cell(&r.cpu),
        );
    }
    let ratios = print_ratios(&rate_of);
    for r in rows.iter().filter(|r| !r.is_copy()) {
        if let Some(output) = r.output {
            println!(
                "{}: {output} changelog records committed for {} input records",
                &r.scenario[..4],
                r.records
            );
        }
    }
    println!(
        "(b)/(c)/(wN)/(kN) wall time includes weir start-up, guest compilation and shutdown; \
         every rate is records / that whole wall time (start-up and shutdown, measured as the same run on an empty \
         topic, are shown, never taken off); (k2)/(k3) wall = until their input and \
         repartition topic are read and committed; (kN) is the second run of its pipeline, after a warm-up \
         run over a tenth as many records on fresh topics; \
         (wN)/(kN) peak RSS is the sum over its processes; CPU: user + system seconds of \
         the measured run's weir processes (all of them, all threads; for (p)/(q) the perf \
         tool's JVM), of the broker (/proc/<pid>/stat) and of this process (for (a), the \
         copy); steady = the middle 80% of the output by broker append time; (p) is the \
         producer perf tool's own rate, (q) its consumer's fetch rate, (r) librdkafka \
         producing alone, and min((r) steady, (q)) the ceiling"
    );
    ratios
}

/// The ceiling: the slower of (r)'s steady rate (producing alone) and (q)'s rate
/// (consuming alone), when both ran.
fn perf_ceiling(rows: &[Row]) -> Option<f64> {
    let find = |prefix: &str| rows.iter().find(|r| r.scenario.starts_with(prefix));
    let produce = find("(r)")?.steady?;
    let consume = find("(q)")?.rate();
    Some(produce.min(consume))
}

/// A row's CPU seconds: weir processes / broker / this process.
fn cpu_cell(cpu: &CpuUse) -> String {
    let broker = cpu
        .broker
        .map_or("?".to_owned(), |d| format!("{:.2}", d.as_secs_f64()));
    format!(
        "{:.2} / {broker} / {:.2}",
        cpu.children.as_secs_f64(),
        cpu.own.as_secs_f64()
    )
}

/// (c100) over (c), and each worker split over its one-process run, printed.
fn print_ratios(rate_of: &dyn Fn(&str) -> Option<f64>) -> Ratios {
    let c100_over_c = match (rate_of("(c100)"), rate_of("(c)")) {
        (Some(fast), Some(slow)) => {
            println!();
            println!(
                "exactly-once throughput at 100 ms / at 1 s checkpoints: {:.3}",
                fast / slow
            );
            Some(fast / slow)
        }
        _ => None,
    };
    let mut workers_over_one = Vec::new();
    for (prefix, one_prefix, workers, what) in [
        ("(w2)", "(c)", 2, "uppercase"),
        ("(w3)", "(c)", 3, "uppercase"),
        ("(k2)", "(k1)", 2, "word-count"),
        ("(k3)", "(k1)", 3, "word-count"),
    ] {
        if let (Some(split), Some(one)) = (rate_of(prefix), rate_of(one_prefix)) {
            println!(
                "exactly-once {what}: throughput of {workers} worker processes / of one: {:.3}",
                split / one
            );
            workers_over_one.push(
                serde_json::json!({"pipeline": what, "workers": workers, "ratio": split / one}),
            );
        }
    }
    Ratios {
        c100_over_c,
        workers_over_one,
    }
}

/// The exactly-once latency at each of [`LATENCY_INTERVALS`], printed and returned.
fn latency_rows(dir: &Path, budgets: Budgets) -> anyhow::Result<Vec<serde_json::Value>> {
    println!();
    println!(
        "exactly-once end-to-end latency (produce -> read_committed), {LATENCY_RECORDS} records at {LATENCY_RATE} records/s:"
    );
    println!();
    println!("| checkpoint interval | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    let mut latency = Vec::new();
    for interval in LATENCY_INTERVALS {
        eprintln!("latency at {interval} checkpoints ...");
        let (p50, p99) =
            exactly_once_latency(dir, interval, budgets, LATENCY_RECORDS, LATENCY_RATE)?;
        println!("| {interval} | {p50:.0} | {p99:.0} |");
        latency.push(serde_json::json!({
            "checkpoint_interval": interval, "p50_ms": p50, "p99_ms": p99,
        }));
    }
    Ok(latency)
}

/// Writes every figure to `args.out`.
fn write_json(
    args: &Args,
    rows: &[Row],
    ratios: Ratios,
    latency: Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    let copy = rows
        .iter()
        .find(|r| r.scenario.starts_with("(a)"))
        .map(Row::rate);
    let ceiling = perf_ceiling(rows);
    let json = serde_json::json!({
        "perf_tools_ceiling_records_per_second": ceiling,
        "records": args.records,
        "keyed_records": args.keyed_records,
        "word_runs": args.word_runs,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "source_buffer_bytes": args.budgets.source().buffer_bytes,
        "sink_buffer_bytes": args.budgets.sink().buffer_bytes,
        "keyed_checkpoint_interval": args.keyed_interval,
        "repartition_partitions": args.repartition_partitions,
        "scenarios": rows.iter().map(|r| serde_json::json!({
            "scenario": r.scenario,
            "records": r.records,
            "wall_seconds": r.seconds,
            "records_per_second": r.rate(),
            "steady_records_per_second": r.steady,
            "steady_ratio_to_perf_tools_ceiling": r.steady.zip(ceiling).filter(|_| r.is_copy()).map(|(s, c)| s / c),
            "ratio_to_copy": copy.filter(|_| r.is_copy()).map(|c| r.rate() / c),
            "broker_rss_bytes": r.broker_rss,
            "start_up_and_shutdown_seconds": r.fixed_seconds,
            "peak_rss_bytes": r.peak_rss,
            "warm_up_records": r.warm_up.map(|(n, _)| n),
            "warm_up_wall_seconds": r.warm_up.map(|(_, s)| s),
            "weir_cpu_seconds": r.cpu.children.as_secs_f64(),
            "broker_cpu_seconds": r.cpu.broker.map(|d| d.as_secs_f64()),
            "bench_cpu_seconds": r.cpu.own.as_secs_f64(),
            "output_records": r.output,
        })).collect::<Vec<_>>(),
        "exactly_once_100ms_over_1s": ratios.c100_over_c,
        "exactly_once_workers_over_one": ratios.workers_over_one,
        "exactly_once_latency_ms": latency,
    });
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&json)?)?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
