//! The checkpoint-pause benchmark: how long the WASM `word-count` aggregate stops
//! emitting while it checkpoints a state of 1,000,000 keys, as its task thread sees it.
//!
//! One operator, the default cache, fed batches of keys in a scattered order (every key
//! seen several times, so every checkpoint has a cache full of dirty accumulators to
//! hand over), a checkpoint every `EVERY` records, the next one only once the previous
//! is durable (as the coordinator does). The figure is the longest gap between two
//! consecutive output batches, in two modes of the same run:
//! - `deferred`: what Weir does: `handle_barrier` does the synchronous part and the
//!   upload finishes on another thread (the task's acknowledger, here a waiter thread);
//! - `inline`: the snapshot waited for on the task thread (what Weir did before issue
//!   10: the pipeline stops until the upload is durable), the baseline.
//!
//! Beside it, the longest `handle_barrier` call (the synchronous part), the longest gap
//! between outputs with no barrier in it (a batch's own cost, the floor of the pause),
//! and the longest barrier-to-durable time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::dataflow::operator::{Operator, Output, Snapshot};
use weir::dataflow::operators::aggregate::AggregateOperator;
use weir::engine::GuestModule;
use weir::record::CheckpointId;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;

use crate::BATCH;
use crate::aggregate::open_aggregate;

/// Records between two checkpoint triggers.
const EVERY: u64 = 500_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Deferred,
    Inline,
}

#[derive(Debug, Default)]
pub struct PauseFigures {
    pub checkpoints: u64,
    /// Longest gap between two output batches with a barrier between them.
    pub longest_pause: Duration,
    /// Longest gap between two output batches with no barrier between them.
    pub longest_gap_without_barrier: Duration,
    /// Longest `handle_barrier` call: the synchronous part, on the task thread.
    pub longest_barrier_call: Duration,
    /// Longest time from a barrier to its snapshot being durable.
    pub longest_checkpoint: Duration,
    pub records_per_s: f64,
}

/// `records` records over `keys` keys, key `i * step mod keys` for record i (a scattered
/// order that visits every key once per `keys` records).
fn scattered_batches(records: u64, keys: u64) -> Vec<RecordBatch> {
    const STEP: u64 = 7_919;
    let mut batches = Vec::new();
    let mut batch = RecordBatch::with_capacity(BATCH, BATCH * 10);
    for i in 0..records {
        let k = (i.wrapping_mul(STEP)) % keys;
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

pub fn pause_figures(
    module: Arc<GuestModule>,
    records: u64,
    keys: u64,
    mode: Mode,
) -> anyhow::Result<PauseFigures> {
    let batches = scattered_batches(records, keys);
    let dir = tempfile::tempdir()?;
    let mut op = open_aggregate(&module, dir.path(), true)?;

    // The waiter thread finishes deferred snapshots and reports how long each took.
    let (pending_tx, pending_rx) = crossbeam_channel::unbounded::<(Instant, Snapshot)>();
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<anyhow::Result<Duration>>();
    let waiter = std::thread::spawn(move || {
        for (barrier_at, snapshot) in pending_rx {
            let result = snapshot
                .wait()
                .map(|_| barrier_at.elapsed())
                .map_err(|e| anyhow::anyhow!(e));
            if done_tx.send(result).is_err() {
                return;
            }
        }
    });

    let mut figures = PauseFigures::default();
    let (mut in_flight, mut since_trigger, mut seen) = (false, 0u64, 0u64);
    let mut last_output: Option<Instant> = None;
    let mut barrier_since_output = false;
    let started = Instant::now();
    for batch in batches {
        if let Ok(done) = done_rx.try_recv() {
            figures.longest_checkpoint = figures.longest_checkpoint.max(done?);
            in_flight = false;
        }
        if since_trigger >= EVERY && !in_flight {
            since_trigger = 0;
            in_flight = checkpoint(&mut op, mode, &mut figures, &pending_tx)?;
            barrier_since_output = true;
        }
        seen += batch.len() as u64;
        since_trigger += batch.len() as u64;
        let mut out = Output::default();
        op.handle_batch(batch, &mut out)
            .map_err(|e| anyhow::anyhow!(e))?;
        if out.batches.iter().all(RecordBatch::is_empty) {
            continue;
        }
        let now = Instant::now();
        if let Some(last) = last_output {
            let gap = now - last;
            if barrier_since_output {
                figures.longest_pause = figures.longest_pause.max(gap);
            } else {
                figures.longest_gap_without_barrier = figures.longest_gap_without_barrier.max(gap);
            }
        }
        last_output = Some(now);
        barrier_since_output = false;
    }
    figures.records_per_s = seen as f64 / started.elapsed().as_secs_f64();
    // The input ends: a copy put off at the last barrier is finished, as at a close.
    op.on_close().map_err(|e| anyhow::anyhow!(e))?;
    drop(pending_tx);
    for done in done_rx.iter() {
        figures.longest_checkpoint = figures.longest_checkpoint.max(done?);
    }
    let _ = waiter.join();
    Ok(figures)
}

/// Checkpoint `figures.checkpoints + 1` of `op`: the barrier call timed; in `Deferred`
/// mode the snapshot goes to the waiter thread (`pending`; returns true: in flight),
/// in `Inline` mode it is waited for here.
fn checkpoint(
    op: &mut AggregateOperator,
    mode: Mode,
    figures: &mut PauseFigures,
    pending: &crossbeam_channel::Sender<(Instant, Snapshot)>,
) -> anyhow::Result<bool> {
    figures.checkpoints += 1;
    let barrier = Barrier {
        id: CheckpointId(figures.checkpoints),
        is_final: false,
    };
    let barrier_at = Instant::now();
    let snapshot = op
        .handle_barrier(barrier, &mut Output::default())
        .map_err(|e| anyhow::anyhow!(e))?
        .ok_or_else(|| anyhow::anyhow!("an aggregate has state to snapshot"))?;
    figures.longest_barrier_call = figures.longest_barrier_call.max(barrier_at.elapsed());
    match mode {
        Mode::Deferred => {
            pending
                .send((barrier_at, snapshot))
                .map_err(|_| anyhow::anyhow!("the waiter thread stopped"))?;
            Ok(true)
        }
        Mode::Inline => {
            // The copy a barrier put off, finished first (as on a quiet input).
            op.on_idle().map_err(|e| anyhow::anyhow!(e))?;
            snapshot.wait().map_err(|e| anyhow::anyhow!(e))?;
            figures.longest_checkpoint = figures.longest_checkpoint.max(barrier_at.elapsed());
            Ok(false)
        }
    }
}
