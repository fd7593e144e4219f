//! The aggregate benchmark: keyed `word-count` over RocksDB state, against two native
//! baselines fed the same batches, in three shapes; and the checkpoints of that state.
//!
//! Shapes, each with the DEFAULT cache bounds (`DEFAULT_CACHE_CAPACITY` entries,
//! `DEFAULT_CACHE_BYTES`):
//! - hot: [`HOT_KEYS`] keys, [`HOT_ROUNDS`] records each, round-robin: every record but
//!   the first of its key hits the cache;
//! - revisited: `keys` keys, `2 x keys` records, keys in a uniform order: with 1,000,000
//!   keys most records miss the cache and find their key in RocksDB;
//! - distinct: `keys` keys, each seen once: every record misses, and RocksDB has nothing.
//!
//! Sides (see `ShapeFigures`): Weir's aggregate operator; a native count over the same
//! `KeyedState` (the state path without WASM); a tuned in-memory hashbrown count. Each
//! side's figures are medians over `RUNS` runs of records/s (with its spread), and CPU
//! ns/record of the calling thread and of the whole process (`measure`); Weir's and the
//! fold's spans end once their state is checkpointed, so the state writer, RocksDB's
//! flushes and compactions are counted, not left running when the clock stops.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir::dataflow::operator::{Operator, Output};
use weir::dataflow::operators::aggregate::{AggregateConfig, AggregateOperator, StateLocation};
use weir::dataflow::partition::key_group;
use weir::dataflow::window::WindowAssigner;
use weir::engine::{EmitBatch, GroupBatch, GuestLimits, GuestModule, WasmEngine};
use weir::record::CheckpointId;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;
use weir::state::{
    CacheBounds, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_CAPACITY, KeyedState, StateKey, memtable_bytes,
};
use weir::storage::CheckpointStorage;

use crate::BATCH;
use crate::measure::{Figures, RUNS, Sample, sample, thread_cpu};

/// Distinct keys of the hot shape.
pub const HOT_KEYS: u64 = 1_000;
/// Records per key in the hot shape.
pub const HOT_ROUNDS: u64 = 1_000;

/// Batches of `records` records over `keys` keys (`word0`, `word1`, ...): round-robin,
/// or, if `shuffled`, each key drawn uniformly (splitmix64 of the index), so that a key
/// comes back after about `keys` others.
fn key_batches(keys: u64, records: u64, shuffled: bool) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    let mut batch = RecordBatch::with_capacity(BATCH, BATCH * 8);
    for i in 0..records {
        let k = if shuffled {
            splitmix64(i) % keys
        } else {
            i % keys
        };
        batch.push(format!("word{k}").as_bytes(), b"1", i as i64);
        if batch.len() == BATCH {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

fn splitmix64(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
    let records = key_batches(BATCH as u64, BATCH as u64, false).remove(0);
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
    /// Each shape (hot, distinct, revisited) with its three sides.
    pub shapes: Vec<ShapeFigures>,
    /// Checkpoints of the distinct shape's state (the last run's): the first, taken
    /// inside Weir's measured span, and a second of the unchanged state.
    pub first_checkpoint: (Duration, u64, u64),
    pub second_checkpoint: (Duration, u64, u64),
}

/// A stream of keyed records the benchmark runs every side over.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    pub keys: u64,
    pub records: u64,
    /// Keys in a uniform pseudo-random order (else round-robin).
    pub shuffled: bool,
}

impl Shape {
    fn batches(&self) -> Vec<RecordBatch> {
        key_batches(self.keys, self.records, self.shuffled)
    }
}

/// Weir and its two baselines over one shape.
pub struct ShapeFigures {
    pub shape: Shape,
    /// WASM word-count over RocksDB state (the aggregate operator), state checkpointed
    /// inside the span.
    pub weir: Figures,
    /// The same state path natively: a count per record over `KeyedState` (cache,
    /// write-backs, RocksDB), checkpointed inside the span; no WASM, no grouping.
    pub state_fold: Figures,
    /// A tuned in-memory count: hashbrown (foldhash), pre-sized, no allocation on a
    /// hit, the same JSON written directly; no state store, nothing durable.
    pub hashmap: Figures,
}

impl ShapeFigures {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.shape.name,
            "keys": self.shape.keys,
            "records": self.shape.records,
            "shuffled": self.shape.shuffled,
            "weir": self.weir.json("WASM word-count + KeyedState (RocksDB), checkpointed"),
            "state_fold": self.state_fold.json("native count over KeyedState (RocksDB), checkpointed"),
            "hashmap": self.hashmap.json("native hashbrown + foldhash count, in memory"),
            "ratio_to_state_fold": self.weir.records_per_s / self.state_fold.records_per_s,
            "ratio_to_hashmap": self.weir.records_per_s / self.hashmap.records_per_s,
        })
    }
}

/// The benchmarks' aggregate step: `module`, unwindowed, the default cache, state and
/// checkpoints under `dir`; the guest's fused `update-and-emit` used if
/// `update_and_emit` (else `update` and `emit` as two calls).
pub fn open_aggregate(
    module: &Arc<GuestModule>,
    dir: &std::path::Path,
    update_and_emit: bool,
) -> anyhow::Result<AggregateOperator> {
    AggregateOperator::open(
        AggregateConfig {
            id: "step-0".into(),
            module: module.clone(),
            limits: GuestLimits::default(),
            guest_config: BTreeMap::new(),
            windows: WindowAssigner::Global,
            allowed_lateness_ms: 0,
            max_parallelism: MAX_PARALLELISM,
            batch_size: BATCH,
            cache: default_bounds(),
            max_accumulator_bytes: 1 << 20,
            update_and_emit,
            state_note: String::new(),
            on_error: weir::dataflow::operators::OnError::Fail,
        },
        StateLocation {
            work_dir: dir.join("work"),
            storage: storage(dir)?,
            storage_task: "bench.step-0".into(),
        },
        None,
    )
    .map_err(|e| anyhow::anyhow!(e))
}

const MAX_PARALLELISM: u16 = 128;

/// The cache bounds a spec gets by default, for a process of one stateful subtask.
fn default_bounds() -> CacheBounds {
    CacheBounds {
        entries: DEFAULT_CACHE_CAPACITY,
        bytes: DEFAULT_CACHE_BYTES,
        memtable_bytes: memtable_bytes(1),
    }
}

fn storage(dir: &std::path::Path) -> anyhow::Result<Arc<CheckpointStorage>> {
    Ok(Arc::new(CheckpointStorage::open(
        dir.join("checkpoints"),
        "weir-bench",
    )?))
}

/// Takes checkpoint `id` of `op` and waits until it is durable: its duration, SST
/// files and bytes added.
fn checkpoint(op: &mut AggregateOperator, id: u64) -> anyhow::Result<(Duration, u64, u64)> {
    let started = Instant::now();
    let barrier = Barrier {
        id: CheckpointId(id),
        is_final: false,
    };
    let snapshot = op
        .handle_barrier(barrier, &mut Output::default())
        .map_err(|e| anyhow::anyhow!(e))?
        .context("aggregate snapshot")?;
    // No input follows: the copy a barrier may put off is finished as on a quiet input.
    op.on_idle().map_err(|e| anyhow::anyhow!(e))?;
    let snapshot = snapshot.wait().map_err(|e| anyhow::anyhow!(e))?;
    Ok((
        started.elapsed(),
        snapshot.files_added,
        snapshot.bytes_added,
    ))
}

/// Feeds `batches` to a new aggregate under `dir`, then checkpoints it (in the span);
/// checks it emitted one update per (batch, key). The operator is returned for more
/// checkpoints, with the first one's figures.
fn run_weir(
    module: &Arc<GuestModule>,
    dir: &std::path::Path,
    batches: &[RecordBatch],
) -> anyhow::Result<(Sample, AggregateOperator, (Duration, u64, u64))> {
    let expected: usize = batches
        .iter()
        .map(|b| b.iter().map(|r| r.key).collect::<HashSet<_>>().len())
        .sum();
    let mut op = open_aggregate(module, dir, true)?;
    let (mut emitted, mut first) = (0usize, (Duration::ZERO, 0, 0));
    let measured = sample(|| {
        for batch in batches.iter().cloned() {
            let mut out = Output::default();
            op.handle_batch(batch, &mut out)
                .map_err(|e| anyhow::anyhow!(e))?;
            emitted += out.batches.iter().map(RecordBatch::len).sum::<usize>();
        }
        first = checkpoint(&mut op, 1)?;
        Ok(())
    })?;
    anyhow::ensure!(
        emitted == expected,
        "word-count emitted {emitted} updates, expected {expected}"
    );
    Ok((measured, op, first))
}

/// The guest's JSON (`{"word":"<key>","count":N}`) for a key that needs no escaping
/// (the benchmark's keys are `word<N>`), written into `json`.
fn write_count_json(json: &mut Vec<u8>, key: &[u8], count: u64) {
    json.clear();
    json.extend_from_slice(br#"{"word":""#);
    json.extend_from_slice(key);
    json.extend_from_slice(br#"","count":"#);
    json.extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
    json.push(b'}');
}

/// The tuned in-memory baseline (see [`ShapeFigures::hashmap`]): one JSON record per
/// input record.
#[allow(
    clippy::unnecessary_to_owned,
    reason = "each batch is cloned as on the Weir side, which hands the operator an owned batch"
)]
fn run_hashmap(keys: u64, batches: &[RecordBatch]) -> anyhow::Result<Sample> {
    let records: usize = batches.iter().map(RecordBatch::len).sum();
    let mut emitted = 0usize;
    let measured = sample(|| {
        let mut counts: hashbrown::HashMap<Box<[u8]>, u64> =
            hashbrown::HashMap::with_capacity(keys as usize);
        let mut json = Vec::with_capacity(64);
        for batch in batches.iter().cloned() {
            let mut out = RecordBatch::with_capacity(batch.len(), batch.byte_len() * 4);
            for r in batch.iter() {
                let count = match counts.get_mut(r.key) {
                    Some(c) => {
                        *c += 1;
                        *c
                    }
                    None => *counts.entry(r.key.into()).or_insert(1),
                };
                write_count_json(&mut json, r.key, count);
                out.push(r.key, &json, r.timestamp);
            }
            emitted += std::hint::black_box(out).len();
        }
        Ok(())
    })?;
    anyhow::ensure!(emitted == records);
    Ok(measured)
}

/// The native fold over `KeyedState` (see [`ShapeFigures::state_fold`]): the state
/// path the aggregate operator takes, without grouping or WASM. Per batch, each
/// record's state key is encoded and hashed once and the misses prefetched in one
/// MultiGet; per record, a get (at the slot the prefetch found) and a put (at the slot
/// the get found) of its count (8
/// bytes), and one JSON record out. Checkpointed in the span.
#[allow(
    clippy::unnecessary_to_owned,
    reason = "each batch is cloned as on the Weir side, which hands the operator an owned batch"
)]
fn run_state_fold(dir: &std::path::Path, batches: &[RecordBatch]) -> anyhow::Result<Sample> {
    let records: usize = batches.iter().map(RecordBatch::len).sum();
    let storage = storage(dir)?;
    let mut state = KeyedState::open_fresh(dir.join("work"), default_bounds())?;
    let mut emitted = 0usize;
    let measured = sample(|| {
        let (mut scratch, mut json) = (Vec::with_capacity(64), Vec::with_capacity(64));
        let (mut keys, mut spans, mut hints) = (Vec::new(), Vec::new(), Vec::new());
        for batch in batches.iter().cloned() {
            keys.clear();
            spans.clear();
            for r in batch.iter() {
                StateKey::encode_into(&mut scratch, key_group(r.key, MAX_PARALLELISM), r.key, None);
                let start = keys.len();
                keys.extend_from_slice(&scratch);
                spans.push((state.key_hash(&scratch), start..keys.len()));
            }
            state.prefetch(
                spans.iter().map(|(h, at)| (*h, &keys[at.clone()])),
                &mut hints,
            )?;
            let mut out = RecordBatch::with_capacity(batch.len(), batch.byte_len() * 4);
            for (n, (r, (hash, at))) in batch.iter().zip(&spans).enumerate() {
                let key = &keys[at.clone()];
                let hint = hints.get(n).copied().flatten();
                let (value, slot) = state.get_with_slot(hint, *hash, key)?;
                let count = match value {
                    Some(v) => u64::from_le_bytes(v.try_into().context("an 8-byte count")?) + 1,
                    None => 1,
                };
                state.put_at(slot, *hash, key, &count.to_le_bytes())?;
                write_count_json(&mut json, r.key, count);
                out.push(r.key, &json, r.timestamp);
            }
            emitted += std::hint::black_box(out).len();
        }
        state.snapshot(&storage, CheckpointId(1), "bench.fold")?;
        Ok(())
    })?;
    anyhow::ensure!(emitted == records);
    Ok(measured)
}

/// The last run's Weir operator over a shape, its state dir and its first checkpoint.
struct LastRun {
    op: AggregateOperator,
    first_checkpoint: (Duration, u64, u64),
    _dir: tempfile::TempDir,
}

/// Every side over `shape`, [`RUNS`] times, sides interleaved within a run.
fn run_shape(module: &Arc<GuestModule>, shape: Shape) -> anyhow::Result<(ShapeFigures, LastRun)> {
    eprintln!("  {} ...", shape.name);
    let batches = shape.batches();
    let (mut weir, mut fold, mut map) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..RUNS {
        let dir = tempfile::tempdir()?;
        let (s, op, first_checkpoint) = run_weir(module, dir.path(), &batches)?;
        weir.push(s);
        last = Some(LastRun {
            op,
            first_checkpoint,
            _dir: dir,
        });
        fold.push(run_state_fold(tempfile::tempdir()?.path(), &batches)?);
        map.push(run_hashmap(shape.keys, &batches)?);
    }
    let figures = ShapeFigures {
        shape,
        weir: Figures::of(shape.records, &weir),
        state_fold: Figures::of(shape.records, &fold),
        hashmap: Figures::of(shape.records, &map),
    };
    Ok((figures, last.context("no run")?))
}

pub fn aggregate_figures(
    engine: &WasmEngine,
    guests: &std::path::Path,
    keys: u64,
) -> anyhow::Result<AggregateFigures> {
    let module = Arc::new(engine.load(&guests.join("word_count.wasm"))?);
    let guest = guest_call_costs(&module)?;
    let mut shapes = Vec::new();
    for shape in [
        Shape {
            name: "hot: 1,000 keys x 1,000 (cache hits)",
            keys: HOT_KEYS,
            records: HOT_KEYS * HOT_ROUNDS,
            shuffled: false,
        },
        Shape {
            name: "revisited: keys twice over, uniform order",
            keys,
            records: 2 * keys,
            shuffled: true,
        },
    ] {
        shapes.push(run_shape(&module, shape)?.0);
    }
    let distinct = Shape {
        name: "distinct: each key once",
        keys,
        records: keys,
        shuffled: false,
    };
    let (figures, mut last) = run_shape(&module, distinct)?;
    shapes.push(figures);
    let second_checkpoint = checkpoint(&mut last.op, 2)?;
    Ok(AggregateFigures {
        guest,
        shapes,
        first_checkpoint: last.first_checkpoint,
        second_checkpoint,
    })
}
