//! `weir-bench` (`make bench`): Weir's benchmarks, each figure beside a baseline
//! measured in the same run on the same machine, so ratios survive a noisy host.
//!
//! 1. map: generator -> WASM `uppercase` -> discard, against the same transform as a
//!    native Rust operator in the same dataflow (one source task, same batches).
//! 2. aggregate: keyed `word-count` over 1,000,000 distinct keys with RocksDB state,
//!    against a native HashMap count fed the same batches.
//! 3. checkpoint: duration and bytes written for that state, first checkpoint and a
//!    second one of unchanged state (incremental: should copy nothing).
//!
//! Writes a JSON file (`--out`) and prints a table. A benchmark, not a test: nothing
//! here passes or fails.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use weir::connector::generator::{GeneratorConfig, GeneratorSource};
use weir::dataflow::chain::Chain;
use weir::dataflow::operator::{Operator, OperatorError, Output};
use weir::dataflow::operators::aggregate::{AggregateConfig, AggregateOperator, StateLocation};
use weir::dataflow::operators::map::MapOperator;
use weir::dataflow::sink::{Sink, SinkSet};
use weir::dataflow::task::{Pipe, SourceInput, SourceTask, TaskContext, TaskEvent, TaskOutput};
use weir::dataflow::window::WindowAssigner;
use weir::engine::{GuestLimits, WasmEngine};
use weir::metrics::PipelineMetrics;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;
use weir::record::{CheckpointId, OperatorSnapshot};
use weir::storage::CheckpointStorage;

const BATCH: usize = 1024;

/// Counts and drops what it is given.
struct Discard(Arc<AtomicU64>);

impl Sink for Discard {
    fn id(&self) -> &str {
        "discard"
    }
    fn write(&mut self, _: CheckpointId, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn barrier(&mut self, _: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
        Ok(None)
    }
}

/// `sink` alone in a set, writing checkpoint 1 first.
fn sink_set(sink: Discard) -> SinkSet {
    SinkSet::new(vec![Box::new(sink)], CheckpointId::NONE)
}

/// `uppercase` as a native operator: the baseline of the WASM map.
struct NativeUppercase;

impl Operator for NativeUppercase {
    fn id(&self) -> &str {
        "native-uppercase"
    }
    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        let mut mapped = RecordBatch::with_capacity(batch.len(), batch.values.len());
        for r in batch.iter() {
            match std::str::from_utf8(r.value) {
                Ok(text) => mapped.push(r.key, text.to_uppercase().as_bytes(), r.timestamp),
                Err(e) => out.reject(self.id(), e.to_string(), r.key, r.value, r.timestamp),
            }
        }
        out.emit(mapped);
        Ok(())
    }
}

/// Runs generator(`records`) -> `op` -> discard in one real source task; records/s.
fn map_throughput(records: u64, op: Box<dyn Operator>) -> anyhow::Result<f64> {
    let mut config = GeneratorConfig::with_count(records);
    config.value_size = 64;
    let source = GeneratorSource::open(config, 0, 1, None)?;
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let (barrier_tx, barrier_rx) = crossbeam_channel::unbounded();
    let counted = Arc::new(AtomicU64::new(0));
    let ctx = TaskContext {
        pipeline: "bench".into(),
        task: "src0-0".into(),
        events: events_tx,
        cancel: Arc::new(AtomicBool::new(false)),
        metrics: Arc::new(PipelineMetrics::default()),
    };
    let chain = Chain::new(vec![op], sink_set(Discard(counted.clone())));
    let input = SourceInput {
        id: "source-0".into(),
        source: Box::new(source),
        barriers: barrier_rx,
        batch_limit: weir::record::batch::BatchLimit::records(BATCH),
        out_of_orderness: Duration::ZERO,
    };
    let pipe = Pipe::new(
        chain,
        sink_set(Discard(Arc::new(AtomicU64::new(0)))),
        TaskOutput::Sinks,
    );
    let task = SourceTask::new(ctx, input, pipe);
    let started = Instant::now();
    let thread = std::thread::spawn(move || task.run());
    loop {
        match events_rx.recv().context("source task stopped")? {
            TaskEvent::Drained { .. } => break,
            TaskEvent::Failed { error, .. } => anyhow::bail!(error),
            TaskEvent::Ack { .. } => {}
        }
    }
    let elapsed = started.elapsed();
    barrier_tx.send(Barrier {
        id: CheckpointId(1),
        is_final: true,
    })?;
    let _ = thread.join();
    anyhow::ensure!(
        counted.load(Ordering::Relaxed) == records,
        "not every record reached the sink"
    );
    Ok(records as f64 / elapsed.as_secs_f64())
}

/// Batches of `keys` distinct keys, each seen once.
fn distinct_key_batches(keys: u64) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    let mut batch = RecordBatch::with_capacity(BATCH, BATCH * 8);
    for i in 0..keys {
        batch.push(format!("word{i}").as_bytes(), b"1", i as i64);
        if batch.len() == BATCH {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

struct AggregateFigures {
    wasm_rps: f64,
    native_rps: f64,
    first_checkpoint: (Duration, u64, u64),
    second_checkpoint: (Duration, u64, u64),
}

fn aggregate_figures(
    engine: &WasmEngine,
    guests: &std::path::Path,
    keys: u64,
) -> anyhow::Result<AggregateFigures> {
    let batches = distinct_key_batches(keys);
    let module = Arc::new(engine.load(&guests.join("word_count.wasm"))?);
    let dir = tempfile::tempdir()?;
    let storage = Arc::new(CheckpointStorage::open(dir.path().join("checkpoints"))?);
    let mut op = AggregateOperator::open(
        AggregateConfig {
            id: "step-0".into(),
            module,
            limits: GuestLimits::default(),
            guest_config: BTreeMap::new(),
            windows: WindowAssigner::Global,
            allowed_lateness_ms: 0,
            max_parallelism: 128,
            batch_size: BATCH,
            cache: 2_000_000.into(),
            max_accumulator_bytes: 1 << 20,
        },
        StateLocation {
            work_dir: dir.path().join("work"),
            storage,
            storage_task: "bench.step-0".into(),
        },
        None,
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let started = Instant::now();
    let mut emitted = 0usize;
    for batch in batches.iter().cloned() {
        let mut out = Output::default();
        op.handle_batch(batch, &mut out)
            .map_err(|e| anyhow::anyhow!(e))?;
        emitted += out.batches.iter().map(RecordBatch::len).sum::<usize>();
    }
    let wasm_rps = keys as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        emitted as u64 == keys,
        "word-count emitted {emitted} updates for {keys} keys"
    );

    let started = Instant::now();
    let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut native_emitted = 0usize;
    for batch in batches.iter().cloned() {
        let mut out = RecordBatch::with_capacity(batch.len(), batch.len() * 24);
        for r in batch.iter() {
            let c = counts.entry(r.key.to_vec()).or_insert(0);
            *c += 1;
            let word = String::from_utf8_lossy(r.key);
            out.push(
                r.key,
                format!(r#"{{"word":"{word}","count":{c}}}"#).as_bytes(),
                r.timestamp,
            );
        }
        native_emitted += out.len();
    }
    let native_rps = keys as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(native_emitted as u64 == keys);

    let mut checkpoint = |id: u64| -> anyhow::Result<(Duration, u64, u64)> {
        let started = Instant::now();
        let snapshot = op
            .handle_barrier(
                Barrier {
                    id: CheckpointId(id),
                    is_final: false,
                },
                &mut Output::default(),
            )
            .map_err(|e| anyhow::anyhow!(e))?
            .context("aggregate snapshot")?;
        Ok((
            started.elapsed(),
            snapshot.files_added,
            snapshot.bytes_added,
        ))
    };
    let first_checkpoint = checkpoint(1)?;
    let second_checkpoint = checkpoint(2)?;
    Ok(AggregateFigures {
        wasm_rps,
        native_rps,
        first_checkpoint,
        second_checkpoint,
    })
}

fn main() -> anyhow::Result<()> {
    let mut out = PathBuf::from("build/bench.json");
    let mut records: u64 = 2_000_000;
    let mut keys: u64 = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => out = PathBuf::from(args.next().context("--out PATH")?),
            "--records" => records = args.next().context("--records N")?.parse()?,
            "--keys" => keys = args.next().context("--keys N")?.parse()?,
            other => anyhow::bail!(
                "unknown argument {other}; usage: weir-bench [--out PATH] [--records N] [--keys N]"
            ),
        }
    }
    let guests = weir_tests::guests_dir();
    let engine = WasmEngine::new(None)?;
    let uppercase = Arc::new(engine.load(&guests.join("uppercase.wasm"))?);

    eprintln!("map: {records} records, WASM uppercase vs native ...");
    // Warm up both paths once (page faults, instantiation), then measure.
    map_throughput(records / 10, Box::new(NativeUppercase))?;
    let native_map = map_throughput(records, Box::new(NativeUppercase))?;
    let wasm_map = map_throughput(
        records,
        Box::new(MapOperator::new(
            "step-0".into(),
            uppercase,
            GuestLimits::default(),
            BTreeMap::new(),
        )),
    )?;

    eprintln!("aggregate: word-count over {keys} distinct keys, RocksDB vs HashMap ...");
    let agg = aggregate_figures(&engine, &guests, keys)?;

    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let rows = [
        (
            "map: WASM uppercase (records/s)",
            wasm_map,
            native_map,
            "native Rust uppercase",
        ),
        (
            "aggregate: WASM word-count + RocksDB (records/s)",
            agg.wasm_rps,
            agg.native_rps,
            "native HashMap count",
        ),
    ];
    println!("| benchmark | Weir | baseline | ratio | baseline is |");
    println!("|---|---:|---:|---:|---|");
    for (name, weir, base, what) in rows {
        println!(
            "| {name} | {weir:.0} | {base:.0} | {:.2} | {what} |",
            weir / base
        );
    }
    let (d1, f1, b1) = agg.first_checkpoint;
    let (d2, f2, b2) = agg.second_checkpoint;
    println!();
    println!("| checkpoint of {keys} keys | duration | SST files added | MiB added |");
    println!("|---|---:|---:|---:|");
    println!("| first | {} ms | {f1} | {:.1} |", d1.as_millis(), mb(b1));
    println!(
        "| second, state unchanged | {} ms | {f2} | {:.1} |",
        d2.as_millis(),
        mb(b2)
    );

    let json = serde_json::json!({
        "machine": { "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) },
        "map": { "records": records, "wasm_records_per_s": wasm_map, "native_records_per_s": native_map, "ratio": wasm_map / native_map },
        "aggregate": { "keys": keys, "wasm_rocksdb_records_per_s": agg.wasm_rps, "native_hashmap_records_per_s": agg.native_rps, "ratio": agg.wasm_rps / agg.native_rps },
        "checkpoint": {
            "first": { "ms": d1.as_millis() as u64, "files_added": f1, "bytes_added": b1 },
            "second_unchanged": { "ms": d2.as_millis() as u64, "files_added": f2, "bytes_added": b2 },
        },
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&json)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
