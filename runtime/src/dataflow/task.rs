//! Task threads: one per source subtask and one per downstream subtask.
//!
//! A task owns a chain of operators and runs it on its own OS thread: guest calls and
//! RocksDB I/O never run on an async executor. Invariants:
//! - A source task injects barrier n between two batches, after recording the source
//!   position that exactly covers the records before it; everything it emits after the
//!   barrier belongs to checkpoint n + 1.
//! - A downstream task snapshots only on `Aligned(n)` from its `InputGate` (see
//!   `alignment`), then forwards the barrier, then acknowledges n to the coordinator.
//!   The ack carries every snapshot of the task's operators, sinks included; the
//!   coordinator declares n complete only when every task acknowledged it.
//! - A task that fails reports `TaskEvent::Failed` and stops; the coordinator cancels
//!   the others through the shared cancel flag. Nothing staged by a failed checkpoint
//!   is ever committed. A panic on a task thread is such a failure: `run` catches it
//!   (see `task_panic`) and reports it with the task's name and the panic's message.
//! - A batch a source filled is checked before it goes anywhere: one past what its
//!   offsets address (4 GiB of keys or values) fails the task with a clear error.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use crate::record::OperatorSnapshot;
use crate::record::CheckpointId;
use crate::dataflow::source::{Source, SourcePoll};
use crate::dataflow::alignment::{GateEvent, InputGate};
use crate::record::batch::{BatchLimit, RecordBatch, RecordRef};
use crate::dataflow::chain::{Chain, ChainOutput};
use crate::dataflow::error::TaskError;
use crate::record::message::{Barrier, Watermark};
use crate::dataflow::operator::Operator;
use crate::dataflow::partition::ShuffleWriter;
use crate::dataflow::task_panic;
use crate::metrics::PipelineMetrics;

/// How often an idle task checks for cancellation and barrier requests.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long a source waits before polling again after `SourcePoll::Idle`.
const IDLE_BACKOFF: Duration = Duration::from_millis(2);

/// What tasks tell the checkpoint coordinator.
#[derive(Debug)]
pub enum TaskEvent {
    /// The task passed barrier `checkpoint` and took these snapshots.
    Ack {
        task: String,
        checkpoint: CheckpointId,
        snapshots: BTreeMap<String, OperatorSnapshot>,
    },
    /// A source task has read all its input (bounded sources).
    Drained {
        task: String,
    },
    Failed {
        task: String,
        error: TaskError,
    },
}

/// What every task shares with the pipeline.
#[derive(Debug, Clone)]
pub struct TaskContext {
    pub pipeline: String,
    pub task: String,
    pub events: Sender<TaskEvent>,
    pub cancel: Arc<AtomicBool>,
    pub metrics: Arc<PipelineMetrics>,
}

impl TaskContext {
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    fn report(&self, result: Result<(), TaskError>) {
        if let Err(error) = result {
            if !matches!(error, TaskError::Cancelled) {
                let _ = self.events.send(TaskEvent::Failed {
                    task: self.task.clone(),
                    error,
                });
            }
        }
    }
}

/// Where the end of a chain goes: the next stage, or nowhere (the chain ends in sinks).
#[derive(Debug)]
pub enum TaskOutput {
    Shuffle(ShuffleWriter),
    Sinks,
}

/// A chain plus the task's dead-letter sink and output: what both task kinds drive.
struct Pipe {
    chain: Chain,
    dead_letters: Box<dyn Operator>,
    output: TaskOutput,
}

impl Pipe {
    fn deliver(&mut self, ctx: &TaskContext, out: ChainOutput) -> Result<(), TaskError> {
        let metrics = &ctx.metrics;
        PipelineMetrics::add(&metrics.records_out, out.records_to_sinks);
        PipelineMetrics::add(&metrics.late_records, out.late_records);
        if !out.dead_letters.is_empty() {
            PipelineMetrics::add(&metrics.dead_letters, out.dead_letters.len() as u64);
            // Dead letters are the refused records and more (JSON escaping): written in
            // as many batches as it takes to stay within what one batch addresses.
            let mut batch = RecordBatch::with_capacity(out.dead_letters.len(), 0);
            for d in &out.dead_letters {
                let line = crate::record::dead_letter::dead_letter_record(d);
                let record = RecordRef {
                    key: &d.key,
                    value: &line,
                    timestamp: d.timestamp,
                };
                if batch.try_push(record).is_err() {
                    self.write_dead_letters(ctx, std::mem::take(&mut batch))?;
                    batch.try_push(record).map_err(|e| {
                        TaskError::operator(ctx, self.dead_letters.id(), Box::new(e))
                    })?;
                }
            }
            self.write_dead_letters(ctx, batch)?;
        }
        if let TaskOutput::Shuffle(writer) = &mut self.output {
            for batch in out.batches {
                writer.send_batch(batch).map_err(|_| TaskError::Cancelled)?;
            }
        }
        Ok(())
    }

    fn write_dead_letters(
        &mut self,
        ctx: &TaskContext,
        batch: RecordBatch,
    ) -> Result<(), TaskError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut ignored = crate::dataflow::operator::Output::default();
        self.dead_letters
            .handle_batch(batch, &mut ignored)
            .map_err(|source| TaskError::operator(ctx, self.dead_letters.id(), source))
    }

    fn batch(&mut self, ctx: &TaskContext, batch: RecordBatch) -> Result<(), TaskError> {
        let out = self
            .chain
            .process_batch(batch)
            .map_err(|e| TaskError::chain(ctx, e))?;
        self.deliver(ctx, out)
    }

    fn watermark(&mut self, ctx: &TaskContext, watermark: Watermark) -> Result<(), TaskError> {
        let out = self
            .chain
            .process_watermark(watermark)
            .map_err(|e| TaskError::chain(ctx, e))?;
        self.deliver(ctx, out)?;
        if let TaskOutput::Shuffle(writer) = &self.output {
            writer
                .send_watermark(watermark)
                .map_err(|_| TaskError::Cancelled)?;
        }
        Ok(())
    }

    /// Snapshots the chain and the dead-letter sink, forwards the barrier, acks it.
    fn barrier(
        &mut self,
        ctx: &TaskContext,
        barrier: Barrier,
        mut snapshots: BTreeMap<String, OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        let out = self
            .chain
            .process_barrier(barrier, &mut snapshots)
            .map_err(|e| TaskError::chain(ctx, e))?;
        self.deliver(ctx, out)?;
        let mut ignored = crate::dataflow::operator::Output::default();
        if let Some(s) = self
            .dead_letters
            .handle_barrier(barrier, &mut ignored)
            .map_err(|source| TaskError::operator(ctx, self.dead_letters.id(), source))?
        {
            snapshots.insert(self.dead_letters.id().to_owned(), s);
        }
        if let TaskOutput::Shuffle(writer) = &self.output {
            writer
                .send_barrier(barrier)
                .map_err(|_| TaskError::Cancelled)?;
        }
        ctx.events
            .send(TaskEvent::Ack {
                task: ctx.task.clone(),
                checkpoint: barrier.id,
                snapshots,
            })
            .map_err(|_| TaskError::Cancelled)
    }

    fn close(&mut self, ctx: &TaskContext) -> Result<(), TaskError> {
        self.chain.close().map_err(|e| TaskError::chain(ctx, e))?;
        self.dead_letters
            .on_close()
            .map_err(|source| TaskError::operator(ctx, self.dead_letters.id(), source))
    }
}

/// A source subtask and the chain that follows it up to the first shuffle.
pub struct SourceTask {
    pub ctx: TaskContext,
    /// Operator id under which the source position is snapshotted (e.g. `source-0`).
    pub source_id: String,
    pub source: Box<dyn Source>,
    /// Barrier requests from the coordinator.
    pub barriers: Receiver<Barrier>,
    /// What one batch of the source may hold: `batch_size` records, `batch_bytes` bytes.
    pub batch_limit: BatchLimit,
    /// Bounded out-of-orderness of event time, for watermarks.
    pub out_of_orderness: Duration,
    pipe: Pipe,
}

impl SourceTask {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: TaskContext,
        source_id: String,
        source: Box<dyn Source>,
        barriers: Receiver<Barrier>,
        batch_limit: BatchLimit,
        out_of_orderness: Duration,
        chain: Chain,
        dead_letters: Box<dyn Operator>,
        output: TaskOutput,
    ) -> Self {
        Self {
            ctx,
            source_id,
            source,
            barriers,
            batch_limit,
            out_of_orderness,
            pipe: Pipe {
                chain,
                dead_letters,
                output,
            },
        }
    }

    /// Runs until the final barrier has passed, the task fails (or panics), or it is
    /// cancelled.
    pub fn run(mut self) {
        let result = task_panic::catch(|| self.run_inner())
            .unwrap_or_else(|message| Err(TaskError::panicked(&self.ctx, message)));
        self.ctx.report(result);
    }

    fn run_inner(&mut self) -> Result<(), TaskError> {
        let ooo = i64::try_from(self.out_of_orderness.as_millis()).unwrap_or(i64::MAX);
        let mut max_timestamp = i64::MIN;
        let mut watermark = Watermark::START;
        let mut drained = false;
        let new_batch = |limit: BatchLimit| {
            RecordBatch::with_capacity(
                limit.records,
                limit.records.saturating_mul(64).min(limit.bytes),
            )
        };
        let mut batch = new_batch(self.batch_limit);
        loop {
            if self.ctx.cancelled() {
                return Err(TaskError::Cancelled);
            }
            // A barrier request is served between two batches.
            let wait = if drained { Some(POLL_INTERVAL) } else { None };
            if let Some(barrier) = self.next_barrier(wait)? {
                let mut snapshots = BTreeMap::new();
                snapshots.insert(
                    self.source_id.clone(),
                    OperatorSnapshot::new(self.source.position()),
                );
                self.pipe.barrier(&self.ctx, barrier, snapshots)?;
                if barrier.is_final {
                    return self.pipe.close(&self.ctx);
                }
                continue;
            }
            if drained {
                continue;
            }
            let status = self
                .source
                .poll(&mut batch, self.batch_limit)
                .map_err(|source| TaskError::Source {
                    pipeline: self.ctx.pipeline.clone(),
                    task: self.ctx.task.clone(),
                    source,
                })?;
            batch
                .check_size()
                .map_err(|source| TaskError::SourceBatch {
                    pipeline: self.ctx.pipeline.clone(),
                    task: self.ctx.task.clone(),
                    source,
                })?;
            if !batch.is_empty() {
                PipelineMetrics::add(&self.ctx.metrics.records_in, batch.len() as u64);
                max_timestamp = batch
                    .timestamps
                    .iter()
                    .copied()
                    .fold(max_timestamp, i64::max);
                let full = std::mem::replace(&mut batch, new_batch(self.batch_limit));
                self.pipe.batch(&self.ctx, full)?;
            }
            // The event time all input has reached: the source's own frontier when it
            // tracks one (per-partition, for Kafka; it may advance without a record),
            // else the largest timestamp seen.
            let frontier = self.source.event_time_frontier().unwrap_or(max_timestamp);
            // Flink's bounded out-of-orderness: no record at or below it is expected.
            let next = Watermark(frontier.saturating_sub(ooo).saturating_sub(1));
            if next > watermark {
                watermark = next;
                self.pipe.watermark(&self.ctx, watermark)?;
            }
            match status {
                SourcePoll::Ready => {}
                SourcePoll::Idle => std::thread::sleep(IDLE_BACKOFF),
                SourcePoll::Drained => {
                    drained = true;
                    self.pipe.watermark(&self.ctx, Watermark::END)?;
                    let _ = self.ctx.events.send(TaskEvent::Drained {
                        task: self.ctx.task.clone(),
                    });
                }
            }
        }
    }

    fn next_barrier(&self, wait: Option<Duration>) -> Result<Option<Barrier>, TaskError> {
        match wait {
            None => match self.barriers.try_recv() {
                Ok(b) => Ok(Some(b)),
                Err(TryRecvError::Empty) => Ok(None),
                Err(TryRecvError::Disconnected) => Err(TaskError::Cancelled),
            },
            Some(timeout) => match self.barriers.recv_timeout(timeout) {
                Ok(b) => Ok(Some(b)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err(TaskError::Cancelled),
            },
        }
    }
}

/// A subtask downstream of a shuffle: aligns its inputs, runs its chain.
pub struct StageTask {
    pub ctx: TaskContext,
    gate: InputGate,
    pipe: Pipe,
}

impl StageTask {
    pub fn new(
        ctx: TaskContext,
        gate: InputGate,
        chain: Chain,
        dead_letters: Box<dyn Operator>,
        output: TaskOutput,
    ) -> Self {
        Self {
            ctx,
            gate,
            pipe: Pipe {
                chain,
                dead_letters,
                output,
            },
        }
    }

    /// Runs until its inputs end, the task fails (or panics), or it is cancelled.
    pub fn run(mut self) {
        let result = task_panic::catch(|| self.run_inner())
            .unwrap_or_else(|message| Err(TaskError::panicked(&self.ctx, message)));
        self.ctx.report(result);
    }

    fn run_inner(&mut self) -> Result<(), TaskError> {
        let started = Instant::now();
        loop {
            if self.ctx.cancelled() {
                return Err(TaskError::Cancelled);
            }
            let event = self
                .gate
                .next(POLL_INTERVAL)
                .map_err(|e| TaskError::Protocol {
                    pipeline: self.ctx.pipeline.clone(),
                    task: self.ctx.task.clone(),
                    message: e.to_string(),
                })?;
            match event {
                GateEvent::Batch(batch) => self.pipe.batch(&self.ctx, batch)?,
                GateEvent::Watermark(w) => self.pipe.watermark(&self.ctx, w)?,
                GateEvent::Aligned(barrier) => {
                    self.pipe.barrier(&self.ctx, barrier, BTreeMap::new())?
                }
                GateEvent::End => {
                    tracing::debug!(task = %self.ctx.task, elapsed = ?started.elapsed(), "inputs ended");
                    return self.pipe.close(&self.ctx);
                }
                GateEvent::Timeout => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::ConnectorError;
    use crate::record::batch::MAX_BATCH_BYTES;
    use crate::dataflow::operator::{OperatorError, Output};

    /// A source that misbehaves the way a host bug would.
    enum Hostile {
        Panics,
        /// Fills a batch past what its offsets address (a `push` past 4 GiB).
        OverfillsBatch,
    }

    impl Source for Hostile {
        fn poll(
            &mut self,
            out: &mut RecordBatch,
            _limit: BatchLimit,
        ) -> Result<SourcePoll, ConnectorError> {
            match self {
                Hostile::Panics => {
                    let step: i64 = std::hint::black_box(i64::MAX);
                    out.push(b"", b"", step.checked_add(1).expect("event time overflows"));
                    Ok(SourcePoll::Ready)
                }
                Hostile::OverfillsBatch => {
                    // Zero pages, never touched: address space, not memory.
                    out.values = vec![0; MAX_BATCH_BYTES + 1];
                    out.value_ends.push(u32::MAX);
                    out.key_ends.push(0);
                    out.timestamps.push(0);
                    Ok(SourcePoll::Ready)
                }
            }
        }

        fn position(&self) -> crate::record::SourcePosition {
            serde_json::Value::Null
        }
    }

    struct Discard;

    impl Operator for Discard {
        fn id(&self) -> &str {
            "dead-letter"
        }

        fn handle_batch(
            &mut self,
            _batch: RecordBatch,
            _out: &mut Output,
        ) -> Result<(), OperatorError> {
            Ok(())
        }
    }

    /// Runs a source task over `source` on its own thread; returns the first event.
    fn first_event(source: Hostile) -> TaskEvent {
        task_panic::install_hook();
        let (events, received) = crossbeam_channel::unbounded();
        let (_barrier_tx, barriers) = crossbeam_channel::unbounded();
        let ctx = TaskContext {
            pipeline: "p".into(),
            task: "source-0-0".into(),
            events,
            cancel: Arc::new(AtomicBool::new(false)),
            metrics: Arc::new(PipelineMetrics::default()),
        };
        let task = SourceTask::new(
            ctx.clone(),
            "source-0".into(),
            Box::new(source),
            barriers,
            BatchLimit::records(16),
            Duration::ZERO,
            Chain::new(Vec::new(), Vec::new()),
            Box::new(Discard),
            TaskOutput::Sinks,
        );
        let thread = std::thread::spawn(move || task.run());
        let event = received
            .recv_timeout(Duration::from_secs(10))
            .expect("the task reports at once, not by a timeout");
        ctx.cancel.store(true, Ordering::Relaxed);
        thread.join().expect("the panic stays inside the task");
        event
    }

    fn failure(event: TaskEvent) -> String {
        match event {
            TaskEvent::Failed { task, error } => {
                assert_eq!(task, "source-0-0");
                error.to_string()
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn a_panicking_task_fails_at_once_naming_itself_and_the_panic() {
        let e = failure(first_event(Hostile::Panics));
        assert!(
            e.starts_with(
                "pipeline p, task source-0-0: panicked: event time overflows (at runtime/src/dataflow/task.rs:"
            ),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn a_source_batch_past_4_gib_fails_the_task() {
        assert_eq!(
            failure(first_event(Hostile::OverfillsBatch)),
            "pipeline p, task source-0-0: source: a batch of 1 record needs 4294967296 bytes of values, \
             more than the 4294967295 (4 GiB) a batch can address: lower batch_size"
        );
    }
}
