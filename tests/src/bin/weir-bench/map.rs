//! The map benchmark, two figures:
//! - end to end: generator -> `op` -> discard in one real source task, so the WASM
//!   `uppercase` and the native operator see the same batches (records/s, wall time;
//!   the generator is most of the native pipeline's cost);
//! - the operator alone: `op.handle_batch` on the same pre-built batches, no generator,
//!   no task, timed in CPU time of the calling thread (`getrusage(RUSAGE_THREAD)`, so
//!   time the thread spends descheduled on a busy machine does not count). Each call's
//!   input is cloned and its output dropped outside the timed span; the WASM operator's
//!   instantiation is outside it too (a warm-up round).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use weir::connector::generator::{GeneratorConfig, GeneratorSource};
use weir::dataflow::chain::Chain;
use weir::dataflow::operator::{Operator, OperatorError, Output};
use weir::dataflow::sink::{Sink, SinkSet};
use weir::dataflow::task::{Pipe, SourceInput, SourceTask, TaskOutput};
use weir::dataflow::task_context::{TaskContext, TaskEvent};
use weir::metrics::PipelineMetrics;
use weir::record::batch::RecordBatch;
use weir::record::message::Barrier;
use weir::record::{CheckpointId, OperatorSnapshot};

use crate::BATCH;
use crate::measure::{Sample, sample, thread_cpu};

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

/// `uppercase` as a native operator, record by record: the per-record baseline of the
/// WASM map. Each value is copied once, into the output batch, and upper-cased there.
pub struct NativeUppercase;

impl Operator for NativeUppercase {
    fn id(&self) -> &str {
        "native-uppercase"
    }
    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
        let mut mapped = RecordBatch::with_capacity(batch.len(), batch.values.len());
        for r in batch.iter() {
            // The guest's algorithm (ASCII fast path, anything else through std), with
            // std's ASCII check and case mapping (natively the faster form).
            if r.value.is_ascii() {
                mapped.push(r.key, r.value, r.timestamp);
                let end = mapped.values.len();
                mapped.values[end - r.value.len()..].make_ascii_uppercase();
                continue;
            }
            match std::str::from_utf8(r.value) {
                Ok(text) => mapped.push(r.key, text.to_uppercase().as_bytes(), r.timestamp),
                Err(e) => out.reject(self.id(), e.to_string(), r.key, r.value, r.timestamp),
            }
        }
        out.emit(mapped);
        Ok(())
    }
}

/// `uppercase` as a native columnar operator: the batch's value column upper-cased in
/// place in one pass when it is all ASCII (the generator's always is), else record by
/// record. The ceiling of a map: no copy at all.
pub struct NativeColumnarUppercase;

impl Operator for NativeColumnarUppercase {
    fn id(&self) -> &str {
        "native-columnar-uppercase"
    }
    fn handle_batch(
        &mut self,
        mut batch: RecordBatch,
        out: &mut Output,
    ) -> Result<(), OperatorError> {
        if !batch.values.is_ascii() {
            return NativeUppercase.handle_batch(batch, out);
        }
        batch.values.make_ascii_uppercase();
        out.emit(batch);
        Ok(())
    }
}

/// Runs generator(`records`) -> `op` -> discard in one real source task, timed from
/// the task's start until it has drained (process CPU: the task thread and everything
/// else the process ran meanwhile).
pub fn map_throughput(records: u64, op: Box<dyn Operator>) -> anyhow::Result<Sample> {
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
    let mut thread = None;
    let measured = sample(|| {
        thread = Some(std::thread::spawn(move || task.run()));
        loop {
            match events_rx.recv().context("source task stopped")? {
                TaskEvent::Drained { .. } => return Ok(()),
                TaskEvent::Failed { error, .. } => anyhow::bail!(error),
                TaskEvent::Ack { .. } => {}
            }
        }
    })?;
    barrier_tx.send(Barrier {
        id: CheckpointId(1),
        is_final: true,
    })?;
    if let Some(thread) = thread {
        let _ = thread.join();
    }
    anyhow::ensure!(
        counted.load(Ordering::Relaxed) == records,
        "not every record reached the sink"
    );
    Ok(measured)
}

/// Records `first..first + n` of the end-to-end benchmark's generator (same seed and
/// value size), as one batch.
pub fn generator_range(first: u64, n: u64) -> RecordBatch {
    let mut config = GeneratorConfig::with_count(first + n);
    config.value_size = 64;
    let mut scratch = Default::default();
    let mut batch = RecordBatch::default();
    for i in first..first + n {
        config.push_record(i, &mut batch, &mut scratch);
    }
    batch
}

/// The first `records` records of the end-to-end benchmark's generator, in batches of
/// [`BATCH`]: the input of [`operator_alone`].
pub fn generator_batches(records: u64) -> Vec<RecordBatch> {
    (0..records)
        .step_by(BATCH)
        .map(|first| generator_range(first, (records - first).min(BATCH as u64)))
        .collect()
}

/// One pass of `op` over `batches`: CPU ns per input record spent in `handle_batch`.
/// Fails if a record is rejected or the output count differs from the input's (both
/// operators map one to one over the generator's UTF-8 values).
fn operator_round(op: &mut dyn Operator, batches: &[RecordBatch]) -> anyhow::Result<f64> {
    let (mut cpu_ns, mut records) = (0u64, 0u64);
    for batch in batches {
        let input = batch.clone();
        let mut out = Output::default();
        let before = thread_cpu()?;
        op.handle_batch(input, &mut out)
            .map_err(|e| anyhow::anyhow!("{}: {e}", op.id()))?;
        cpu_ns += (thread_cpu()? - before).as_nanos() as u64;
        let emitted: usize = out.batches.iter().map(RecordBatch::len).sum();
        anyhow::ensure!(
            emitted == batch.len() && out.dead_letters.is_empty(),
            "{}: {emitted} records out of {}, {} rejected",
            op.id(),
            batch.len(),
            out.dead_letters.len()
        );
        records += batch.len() as u64;
    }
    Ok(cpu_ns as f64 / records as f64)
}

/// The operator-alone figure of one operator: CPU ns/record, the median of its rounds.
#[derive(Debug, Clone, Copy)]
pub struct OperatorAlone {
    pub wasm_ns_per_record: f64,
    pub native_ns_per_record: f64,
}

/// `wasm` and `native` on the same `batches`, `rounds` rounds each, alternating (so a
/// change in the machine's load falls on both), after one warm-up round each.
pub fn operator_alone(
    wasm: &mut dyn Operator,
    native: &mut dyn Operator,
    batches: &[RecordBatch],
    rounds: usize,
) -> anyhow::Result<OperatorAlone> {
    operator_round(wasm, batches)?;
    operator_round(native, batches)?;
    let (mut w, mut n) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        w.push(operator_round(wasm, batches)?);
        n.push(operator_round(native, batches)?);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(OperatorAlone {
        wasm_ns_per_record: median(w),
        native_ns_per_record: median(n),
    })
}
