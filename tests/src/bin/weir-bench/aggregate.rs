//! The aggregate benchmark: keyed `word-count` with RocksDB state against a native
//! HashMap count fed the same batches, in two shapes, and the checkpoints of that state.
//!
//! - distinct: `keys` distinct keys, each seen once, with the DEFAULT cache bounds
//!   (`DEFAULT_CACHE_CAPACITY` entries, `DEFAULT_CACHE_BYTES`): with 1,000,000 keys the
//!   cache is full after a tenth of the run and every record misses it, reads RocksDB and
//!   pushes an older accumulator out (written back).
//! - hot: [`HOT_KEYS`] keys, [`HOT_ROUNDS`] records each, round-robin: every record but
//!   the first of its key hits the cache.
//!
//! Each shape reports records/s (wall clock) and CPU ns/record of the calling thread
//! (RocksDB's background flushes and compactions run on other threads and are not
//! counted), for Weir and for the baseline, over the same batches.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir::dataflow::operator::{Operator, Output};
use weir::dataflow::operators::aggregate::{AggregateConfig, AggregateOperator, StateLocation};
use weir::dataflow::window::WindowAssigner;
use weir::engine::{EmitBatch, GroupBatch, GuestLimits, GuestModule, WasmEngine};
use weir::record::CheckpointId;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;
use weir::state::{CacheBounds, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_CAPACITY};
use weir::storage::CheckpointStorage;

use crate::{BATCH, thread_cpu};

/// Distinct keys of the hot shape.
pub const HOT_KEYS: u64 = 1_000;
/// Records per key in the hot shape.
pub const HOT_ROUNDS: u64 = 1_000;

/// Batches of `records` records over `keys` keys, round-robin (`word0`, `word1`, ...).
fn key_batches(keys: u64, records: u64) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    let mut batch = RecordBatch::with_capacity(BATCH, BATCH * 8);
    for i in 0..records {
        batch.push(format!("word{}", i % keys).as_bytes(), b"1", i as i64);
        if batch.len() == BATCH {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

/// Throughput of one side of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    pub records_per_s: f64,
    /// CPU time of the calling thread (user + system) per record.
    pub cpu_ns_per_record: f64,
}

/// One shape: Weir's aggregate and the native baseline over the same batches.
#[derive(Debug, Clone, Copy)]
pub struct AggregateRun {
    pub keys: u64,
    pub records: u64,
    pub weir: Measure,
    pub native: Measure,
}

impl AggregateRun {
    pub fn ratio(&self) -> f64 {
        self.weir.records_per_s / self.native.records_per_s
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "keys": self.keys,
            "records": self.records,
            "wasm_rocksdb_records_per_s": self.weir.records_per_s,
            "native_hashmap_records_per_s": self.native.records_per_s,
            "ratio": self.ratio(),
            "wasm_cpu_ns_per_record": self.weir.cpu_ns_per_record,
            "native_cpu_ns_per_record": self.native.cpu_ns_per_record,
        })
    }
}

/// The word-count guest's two calls alone (no state, no grouping), on batches of
/// [`BATCH`] keys with one record each: what one update and one emit cost per key, in CPU
/// time of the calling thread.
#[derive(Debug, Clone, Copy)]
pub struct GuestCallCosts {
    pub update_ns_per_key: f64,
    pub emit_ns_per_key: f64,
    /// The fused `update-and-emit`, which does both in one call.
    pub update_and_emit_ns_per_key: f64,
}

/// Calls per measured guest function in [`guest_call_costs`].
const GUEST_CALLS: u32 = 1000;

fn guest_call_costs(module: &GuestModule) -> anyhow::Result<GuestCallCosts> {
    let mut instance = module.instantiate_aggregator(&GuestLimits::default(), BTreeMap::new())?;
    let records = key_batches(BATCH as u64, BATCH as u64).remove(0);
    let mut groups = GroupBatch {
        accumulator_ends: vec![0; BATCH],
        accumulators: Vec::new(),
        record_ends: (1..=BATCH as u32).collect(),
        records: records.clone(),
    };
    let first = instance.update(groups.clone())?;
    groups.accumulators = first.accumulators;
    groups.accumulator_ends = first.accumulator_ends;
    let started = thread_cpu()?;
    for _ in 0..GUEST_CALLS {
        let out = instance.update(groups.clone())?;
        anyhow::ensure!(out.accumulator_ends.len() == BATCH);
    }
    let update = thread_cpu()? - started;
    let mut entries = EmitBatch::default();
    for r in records.iter() {
        entries.keys.extend_from_slice(r.key);
        entries.key_ends.push(entries.keys.len() as u32);
        entries.windows.push(None);
    }
    entries.accumulators = groups.accumulators;
    entries.accumulator_ends = groups.accumulator_ends;
    let started = thread_cpu()?;
    for _ in 0..GUEST_CALLS {
        let out = instance.emit(entries.clone())?;
        anyhow::ensure!(out.len() == BATCH);
    }
    let emit = thread_cpu()? - started;
    anyhow::ensure!(
        instance.has_update_and_emit(),
        "word_count.wasm does not export update-and-emit: rebuild it (make guests)"
    );
    groups.accumulators = entries.accumulators;
    groups.accumulator_ends = entries.accumulator_ends;
    let started = thread_cpu()?;
    for _ in 0..GUEST_CALLS {
        let (out, records) = instance.update_and_emit(groups.clone())?;
        anyhow::ensure!(out.accumulator_ends.len() == BATCH && records.len() == BATCH);
    }
    let update_and_emit = thread_cpu()? - started;
    let per_key = |d: Duration| d.as_nanos() as f64 / f64::from(GUEST_CALLS) / BATCH as f64;
    Ok(GuestCallCosts {
        update_ns_per_key: per_key(update),
        emit_ns_per_key: per_key(emit),
        update_and_emit_ns_per_key: per_key(update_and_emit),
    })
}

pub struct AggregateFigures {
    /// The guest's calls alone.
    pub guest: GuestCallCosts,
    /// `keys` distinct keys, default cache.
    pub distinct: AggregateRun,
    /// [`HOT_KEYS`] keys x [`HOT_ROUNDS`] records, default cache.
    pub hot: AggregateRun,
    /// The same, with `update` and `emit` as two calls instead of the fused one.
    pub hot_two_calls: Measure,
    pub first_checkpoint: (Duration, u64, u64),
    pub second_checkpoint: (Duration, u64, u64),
}

/// Runs `work` over `records` records and measures it.
fn measure(records: u64, work: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<Measure> {
    let (wall, cpu) = (Instant::now(), thread_cpu()?);
    work()?;
    let cpu = thread_cpu()? - cpu;
    Ok(Measure {
        records_per_s: records as f64 / wall.elapsed().as_secs_f64(),
        cpu_ns_per_record: cpu.as_nanos() as f64 / records as f64,
    })
}

/// The benchmarks' aggregate step: `module`, unwindowed, the default cache, state and
/// checkpoints under `dir`; the guest's fused `update-and-emit` used if
/// `update_and_emit` (else `update` and `emit` as two calls).
pub fn open_aggregate(
    module: &Arc<GuestModule>,
    dir: &std::path::Path,
    update_and_emit: bool,
) -> anyhow::Result<AggregateOperator> {
    let storage = Arc::new(CheckpointStorage::open(
        dir.join("checkpoints"),
        "weir-bench",
    )?);
    AggregateOperator::open(
        AggregateConfig {
            id: "step-0".into(),
            module: module.clone(),
            limits: GuestLimits::default(),
            guest_config: BTreeMap::new(),
            windows: WindowAssigner::Global,
            allowed_lateness_ms: 0,
            max_parallelism: 128,
            batch_size: BATCH,
            cache: CacheBounds {
                entries: DEFAULT_CACHE_CAPACITY,
                bytes: DEFAULT_CACHE_BYTES,
                memtable_bytes: weir::state::memtable_bytes(1),
            },
            max_accumulator_bytes: 1 << 20,
            update_and_emit,
        },
        StateLocation {
            work_dir: dir.join("work"),
            storage,
            storage_task: "bench.step-0".into(),
        },
        None,
    )
    .map_err(|e| anyhow::anyhow!(e))
}

/// Feeds `batches` to `op`; checks it emitted one update per (batch, key).
fn run_weir(op: &mut AggregateOperator, batches: &[RecordBatch]) -> anyhow::Result<Measure> {
    let records: u64 = batches.iter().map(|b| b.len() as u64).sum();
    let expected: usize = batches
        .iter()
        .map(|b| b.iter().map(|r| r.key).collect::<HashSet<_>>().len())
        .sum();
    let mut emitted = 0usize;
    let measured = measure(records, || {
        for batch in batches.iter().cloned() {
            let mut out = Output::default();
            op.handle_batch(batch, &mut out)
                .map_err(|e| anyhow::anyhow!(e))?;
            emitted += out.batches.iter().map(RecordBatch::len).sum::<usize>();
        }
        Ok(())
    })?;
    anyhow::ensure!(
        emitted == expected,
        "word-count emitted {emitted} updates, expected {expected}"
    );
    Ok(measured)
}

/// The native baseline: a HashMap count emitting one JSON record per input record.
#[allow(
    clippy::unnecessary_to_owned,
    reason = "each batch is cloned as on the Weir side, which hands the operator an owned batch"
)]
fn run_native(batches: &[RecordBatch]) -> anyhow::Result<Measure> {
    let records: u64 = batches.iter().map(|b| b.len() as u64).sum();
    let mut native_emitted = 0u64;
    let measured = measure(records, || {
        let mut counts: HashMap<Vec<u8>, u64> = HashMap::new();
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
            native_emitted += out.len() as u64;
        }
        Ok(())
    })?;
    anyhow::ensure!(native_emitted == records);
    Ok(measured)
}

pub fn aggregate_figures(
    engine: &WasmEngine,
    guests: &std::path::Path,
    keys: u64,
) -> anyhow::Result<AggregateFigures> {
    let module = Arc::new(engine.load(&guests.join("word_count.wasm"))?);
    let guest = guest_call_costs(&module)?;

    let hot_records = HOT_KEYS * HOT_ROUNDS;
    let batches = key_batches(HOT_KEYS, hot_records);
    let hot_dir = tempfile::tempdir()?;
    let mut op = open_aggregate(&module, hot_dir.path(), true)?;
    let weir = run_weir(&mut op, &batches)?;
    drop(op);
    let two_calls_dir = tempfile::tempdir()?;
    let mut op = open_aggregate(&module, two_calls_dir.path(), false)?;
    let hot_two_calls = run_weir(&mut op, &batches)?;
    let native = run_native(&batches)?;
    let hot = AggregateRun {
        keys: HOT_KEYS,
        records: hot_records,
        weir,
        native,
    };
    drop(op);

    let batches = key_batches(keys, keys);
    let dir = tempfile::tempdir()?;
    let mut op = open_aggregate(&module, dir.path(), true)?;
    let weir = run_weir(&mut op, &batches)?;
    let native = run_native(&batches)?;
    let distinct = AggregateRun {
        keys,
        records: keys,
        weir,
        native,
    };

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
            .context("aggregate snapshot")?
            .wait()
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok((
            started.elapsed(),
            snapshot.files_added,
            snapshot.bytes_added,
        ))
    };
    let first_checkpoint = checkpoint(1)?;
    let second_checkpoint = checkpoint(2)?;
    Ok(AggregateFigures {
        guest,
        distinct,
        hot,
        hot_two_calls,
        first_checkpoint,
        second_checkpoint,
    })
}
