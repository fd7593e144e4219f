//! `weir test`'s engine: one guest module over sample records, in this process, with no
//! spec, no state directory the user sees and no checkpoints.
//!
//! Invariants:
//! - The module runs as a pipeline runs it: the same operator (`MapOperator` or
//!   `AggregateOperator`, by the module's world), the same default limits and cache
//!   bounds, batches of at most [`SampleRun::batch_size`] records.
//! - An aggregate's state lives in a temporary directory removed when the run ends.
//!   After each batch the watermark is the largest event time seen so far (no
//!   out-of-orderness allowed: a sample is in order or its late records show as dead
//!   letters), and at the end of input it jumps to the end of time, so every window
//!   fires exactly once.
//! - Everything the operator emits reaches the caller as it happens, in stream order:
//!   a batch's output and dead letters, then the windows its watermark fired.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::dataflow::operator::{Operator, OperatorError, Output};
use crate::dataflow::operators::aggregate::{AggregateConfig, AggregateOperator, StateLocation};
use crate::dataflow::operators::map::MapOperator;
use crate::dataflow::window::WindowAssigner;
use crate::engine::{GuestLimits, GuestModule, World};
use crate::record::batch::RecordBatch;
use crate::record::message::Watermark;
use crate::record::{DeadLetter, ids};
use crate::spec::step::{
    DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES, DEFAULT_MAX_ACCUMULATOR_BYTES,
};
use crate::state::{CacheBounds, memtable_bytes};
use crate::storage::CheckpointStorage;

/// One module over sample records.
#[derive(Debug, Clone)]
pub struct SampleRun {
    pub module: Arc<GuestModule>,
    /// A tumbling window for an aggregate; `None`: unwindowed.
    pub window: Option<Duration>,
    /// The step's configuration, as a spec's `config` table gives it.
    pub config: BTreeMap<String, String>,
    pub batch_size: usize,
}

/// What the run emitted, in stream order.
#[derive(Debug)]
pub enum SampleEvent<'a> {
    /// Records the step emitted.
    Output(&'a RecordBatch),
    /// A record the step refused (or a late one), with the reason.
    DeadLetter(&'a DeadLetter),
    /// The watermark advanced to this event time (windows up to it fired).
    Watermark(i64),
}

impl SampleRun {
    /// Runs `records` through the module, calling `on_event` for everything emitted.
    /// A guest failure ends the run with its error.
    pub fn run(
        &self,
        records: &RecordBatch,
        mut on_event: impl FnMut(SampleEvent<'_>),
    ) -> Result<(), OperatorError> {
        let state_dir = tempfile::tempdir()?;
        let mut operator = self.operator(state_dir.path())?;
        let mut watermark = Watermark::START;
        for batch in self.batches(records) {
            let mut out = Output::default();
            let latest = batch.timestamps.iter().copied().max();
            operator.handle_batch(batch, &mut out)?;
            let moved = latest.map(Watermark).filter(|&t| t > watermark);
            if let Some(advanced) = moved {
                watermark = advanced;
                operator.handle_watermark(watermark, &mut out)?;
            }
            report(&out, moved, &mut on_event);
        }
        let mut out = Output::default();
        operator.handle_watermark(Watermark::END, &mut out)?;
        report(&out, Some(Watermark::END), &mut on_event);
        operator.on_close()
    }

    fn batches(&self, records: &RecordBatch) -> Vec<RecordBatch> {
        let mut batches = Vec::new();
        let mut batch = RecordBatch::default();
        for r in records.iter() {
            batch.push(r.key, r.value, r.timestamp);
            if batch.len() == self.batch_size.max(1) {
                batches.push(std::mem::take(&mut batch));
            }
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
        batches
    }

    /// The module's operator, its state (an aggregate's) under `state_dir`.
    fn operator(&self, state_dir: &std::path::Path) -> Result<Box<dyn Operator>, OperatorError> {
        let id = ids::step_id(0);
        let limits = GuestLimits::default();
        if self.module.world() == World::Mapper {
            return Ok(Box::new(MapOperator::new(
                id,
                self.module.clone(),
                limits,
                self.config.clone(),
            )));
        }
        let config = AggregateConfig {
            id,
            module: self.module.clone(),
            limits,
            guest_config: self.config.clone(),
            windows: match self.window {
                None => WindowAssigner::Global,
                Some(size) => WindowAssigner::Tumbling {
                    size_ms: size.as_millis().clamp(1, i64::MAX as u128) as i64,
                },
            },
            allowed_lateness_ms: 0,
            max_parallelism: 1,
            batch_size: self.batch_size,
            cache: CacheBounds {
                entries: DEFAULT_CACHE_ENTRIES,
                bytes: DEFAULT_CACHE_BYTES,
                memtable_bytes: memtable_bytes(1),
            },
            max_accumulator_bytes: DEFAULT_MAX_ACCUMULATOR_BYTES,
            update_and_emit: true,
            state_note: String::new(),
            on_error: crate::dataflow::operators::OnError::Fail,
        };
        let location = StateLocation {
            work_dir: state_dir.join("work"),
            storage: Arc::new(CheckpointStorage::open(
                state_dir.join("checkpoints"),
                "test",
            )?),
            storage_task: "test.step-0".into(),
        };
        Ok(Box::new(AggregateOperator::open(config, location, None)?))
    }
}

/// Hands `out` to `on_event`: records, dead letters, then the watermark if it moved.
fn report(out: &Output, moved: Option<Watermark>, on_event: &mut impl FnMut(SampleEvent<'_>)) {
    for batch in &out.batches {
        on_event(SampleEvent::Output(batch));
    }
    for dead in &out.dead_letters {
        on_event(SampleEvent::DeadLetter(dead));
    }
    if let Some(watermark) = moved {
        on_event(SampleEvent::Watermark(watermark.0));
    }
}
