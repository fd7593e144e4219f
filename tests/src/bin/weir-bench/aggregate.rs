//! The aggregate benchmark: keyed `word-count` with RocksDB state against a native
//! HashMap count fed the same batches, and the checkpoints of that state.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use weir::dataflow::operator::{Operator, Output};
use weir::dataflow::operators::aggregate::{AggregateConfig, AggregateOperator, StateLocation};
use weir::dataflow::window::WindowAssigner;
use weir::engine::{GuestLimits, WasmEngine};
use weir::record::CheckpointId;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;
use weir::storage::CheckpointStorage;

use crate::BATCH;

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

pub struct AggregateFigures {
    pub wasm_rps: f64,
    pub native_rps: f64,
    pub first_checkpoint: (Duration, u64, u64),
    pub second_checkpoint: (Duration, u64, u64),
}

pub fn aggregate_figures(
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
        wasm_rps,
        native_rps,
        first_checkpoint,
        second_checkpoint,
    })
}
