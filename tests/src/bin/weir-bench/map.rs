//! The map benchmark: generator -> `op` -> discard in one real source task, so the WASM
//! `uppercase` and the native operator see the same batches.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use weir::connector::generator::{GeneratorConfig, GeneratorSource};
use weir::dataflow::chain::Chain;
use weir::dataflow::operator::{Operator, OperatorError, Output};
use weir::dataflow::sink::{Sink, SinkSet};
use weir::dataflow::task::{Pipe, SourceInput, SourceTask, TaskContext, TaskEvent, TaskOutput};
use weir::metrics::PipelineMetrics;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;
use weir::record::{CheckpointId, OperatorSnapshot};

use crate::BATCH;

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
pub struct NativeUppercase;

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
pub fn map_throughput(records: u64, op: Box<dyn Operator>) -> anyhow::Result<f64> {
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
