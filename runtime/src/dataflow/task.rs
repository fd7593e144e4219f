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
//!   coordinator declares n complete only when every task acknowledged it. A snapshot
//!   finished off the task thread (a state upload) is waited for by the task's `Acker`,
//!   which sends the ack; the task forwards the barrier and goes on at once.
//! - A task that fails reports `TaskEvent::Failed` and stops; the coordinator cancels
//!   the others through the shared cancel flag. Nothing staged by a failed checkpoint
//!   is ever committed. A panic on a task thread is such a failure: `run` catches it
//!   (see `task_panic`) and reports it with the task's name and the panic's message.
//! - A batch a source filled is checked before it goes anywhere: one past what its
//!   offsets address (4 GiB of keys or values) fails the task with a clear error.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use crate::dataflow::acker::{Acker, PendingAck};
use crate::dataflow::alignment::{GateEvent, InputGate};
use crate::dataflow::chain::{Chain, ChainOutput};
use crate::dataflow::error::TaskError;
use crate::dataflow::partition::ShuffleWriter;
use crate::dataflow::sink::SinkSet;
use crate::dataflow::source::{Source, SourcePoll};
use crate::dataflow::task_context::{TaskContext, TaskEvent};
use crate::dataflow::task_panic;
use crate::dataflow::watermark_generator::WatermarkGenerator;
use crate::metrics::PipelineMetrics;
use crate::record::OperatorSnapshot;
use crate::record::batch::{BatchLimit, RecordBatch, RecordRef};
use crate::record::ids::DEAD_LETTER_ID;
use crate::record::message::{Barrier, Watermark};

/// How often an idle task checks for cancellation and barrier requests.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long a source waits before polling again after `SourcePoll::Idle`.
const IDLE_BACKOFF: Duration = Duration::from_millis(2);

/// Where the end of a chain goes: the next stage, or nowhere (the chain ends in sinks).
#[derive(Debug)]
pub enum TaskOutput {
    Shuffle(ShuffleWriter),
    Sinks,
}

/// A chain plus the task's dead-letter sink and output: what both task kinds drive.
pub struct Pipe {
    chain: Chain,
    /// The dead-letter output: an ordinary sink, in a set of its own.
    dead_letters: SinkSet,
    output: TaskOutput,
    /// Sends the acks from the first deferred snapshot on (dropped after the chain, so
    /// an operator's upload is stopped before the acker waits for it).
    acker: Option<Acker>,
}

impl Pipe {
    pub fn new(chain: Chain, dead_letters: SinkSet, output: TaskOutput) -> Pipe {
        Pipe {
            chain,
            dead_letters,
            output,
            acker: None,
        }
    }

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
                    batch
                        .try_push(record)
                        .map_err(|e| TaskError::operator(ctx, DEAD_LETTER_ID, Box::new(e)))?;
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
        self.dead_letters
            .write(&batch)
            .map_err(|e| TaskError::sink(ctx, e))
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

    /// The input is quiet: the chain finishes what it put off.
    fn idle(&mut self, ctx: &TaskContext) -> Result<(), TaskError> {
        self.chain.idle().map_err(|e| TaskError::chain(ctx, e))
    }

    /// Snapshots the chain and the dead-letter sink, forwards the barrier, acks it.
    fn barrier(
        &mut self,
        ctx: &TaskContext,
        barrier: Barrier,
        mut snapshots: BTreeMap<String, OperatorSnapshot>,
    ) -> Result<(), TaskError> {
        let mut out = self
            .chain
            .process_barrier(barrier, &mut snapshots)
            .map_err(|e| TaskError::chain(ctx, e))?;
        let deferred = std::mem::take(&mut out.deferred);
        self.deliver(ctx, out)?;
        self.dead_letters
            .barrier(barrier, &mut snapshots)
            .map_err(|e| TaskError::sink(ctx, e))?;
        if let TaskOutput::Shuffle(writer) = &self.output {
            writer
                .send_barrier(barrier)
                .map_err(|_| TaskError::Cancelled)?;
        }
        if !deferred.is_empty() && self.acker.is_none() {
            self.acker = Some(Acker::start(ctx)?);
        }
        match &self.acker {
            Some(acker) => acker.send(PendingAck {
                checkpoint: barrier.id,
                snapshots,
                deferred,
            }),
            None => ctx
                .events
                .send(TaskEvent::Ack {
                    task: ctx.task.clone(),
                    checkpoint: barrier.id,
                    snapshots,
                })
                .map_err(|_| TaskError::Cancelled),
        }
    }

    /// Closes the chain and the dead-letter sink, then waits until every ack is sent.
    fn close(&mut self, ctx: &TaskContext) -> Result<(), TaskError> {
        self.chain.close().map_err(|e| TaskError::chain(ctx, e))?;
        self.dead_letters
            .close()
            .map_err(|e| TaskError::sink(ctx, e))?;
        if let Some(acker) = &mut self.acker {
            acker.close();
        }
        Ok(())
    }
}

/// A source subtask and the chain that follows it up to the first shuffle.
pub struct SourceTask {
    pub ctx: TaskContext,
    input: SourceInput,
    pipe: Pipe,
}

/// What a source task reads, and how.
pub struct SourceInput {
    /// Operator id under which the source position is snapshotted (e.g. `source-0`).
    pub id: String,
    pub source: Box<dyn Source>,
    /// Barrier requests from the coordinator.
    pub barriers: Receiver<Barrier>,
    /// What one batch of the source may hold: `batch_size` records, `batch_bytes` bytes.
    pub batch_limit: BatchLimit,
    /// Bounded out-of-orderness of event time, for watermarks.
    pub out_of_orderness: Duration,
}

/// A source subtask's share of the pipeline's consumer lag, refreshed once a second.
#[derive(Debug, Default)]
struct LagShare {
    reported: u64,
    at: Option<Instant>,
}

impl LagShare {
    const EVERY: Duration = Duration::from_secs(1);

    fn report(&mut self, source: &dyn Source, metrics: &PipelineMetrics) {
        if self.at.is_some_and(|at| at.elapsed() < Self::EVERY) {
            return;
        }
        self.at = Some(Instant::now());
        if let Some(lag) = source.lag() {
            PipelineMetrics::replace_share(&metrics.consumer_lag, self.reported, lag);
            self.reported = lag;
        }
    }
}

impl SourceTask {
    pub fn new(ctx: TaskContext, input: SourceInput, pipe: Pipe) -> Self {
        Self { ctx, input, pipe }
    }

    /// Runs until the final barrier has passed, the task fails (or panics), or it is
    /// cancelled.
    pub fn run(mut self) {
        let result = task_panic::catch(|| self.run_inner())
            .unwrap_or_else(|message| Err(TaskError::panicked(&self.ctx, message)));
        self.ctx.report(result);
    }

    fn run_inner(&mut self) -> Result<(), TaskError> {
        let mut watermarks = WatermarkGenerator::new(self.input.out_of_orderness);
        let mut drained = false;
        // The first batch with room for 64 bytes a record; each next one sized like the
        // last sent.
        let limit = self.input.batch_limit;
        let mut batch = RecordBatch::with_capacity(
            limit.records,
            limit.records.saturating_mul(64).min(limit.bytes),
        );
        let mut lag = LagShare::default();
        loop {
            lag.report(self.input.source.as_ref(), &self.ctx.metrics);
            if self.ctx.cancelled() {
                return Err(TaskError::Cancelled);
            }
            // A barrier request is served between two batches.
            let wait = if drained { Some(POLL_INTERVAL) } else { None };
            if let Some(barrier) = self.next_barrier(wait)? {
                let mut snapshots = BTreeMap::new();
                snapshots.insert(
                    self.input.id.clone(),
                    OperatorSnapshot::new(self.input.source.position()),
                );
                self.pipe.barrier(&self.ctx, barrier, snapshots)?;
                if barrier.is_final {
                    return self.pipe.close(&self.ctx);
                }
                continue;
            }
            if drained {
                self.pipe.idle(&self.ctx)?;
                continue;
            }
            let status = self
                .input
                .source
                .poll(&mut batch, self.input.batch_limit)
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
                watermarks.observe(&batch.timestamps);
                let next = batch.sized_like();
                let full = std::mem::replace(&mut batch, next);
                self.pipe.batch(&self.ctx, full)?;
            }
            // The source's own event-time frontier, when it tracks one, is preferred
            // to the largest timestamp seen (see `watermark_generator`).
            if let Some(watermark) = watermarks.after_batch(self.input.source.event_time_frontier())
            {
                self.pipe.watermark(&self.ctx, watermark)?;
            }
            match status {
                SourcePoll::Ready => {}
                SourcePoll::Idle => {
                    self.pipe.idle(&self.ctx)?;
                    std::thread::sleep(IDLE_BACKOFF);
                }
                SourcePoll::Drained => {
                    drained = true;
                    // A drained source's last figure (0 for a bounded one) at once.
                    lag.at = None;
                    self.drained(&mut watermarks)?;
                }
            }
        }
    }

    /// The source has no more input: its end-of-input watermark goes out, and the
    /// pipeline hears of it.
    fn drained(&mut self, watermarks: &mut WatermarkGenerator) -> Result<(), TaskError> {
        if let Some(end) = watermarks.at_end_of_input() {
            self.pipe.watermark(&self.ctx, end)?;
        }
        let _ = self.ctx.events.send(TaskEvent::Drained {
            task: self.ctx.task.clone(),
        });
        Ok(())
    }

    fn next_barrier(&self, wait: Option<Duration>) -> Result<Option<Barrier>, TaskError> {
        match wait {
            None => match self.input.barriers.try_recv() {
                Ok(b) => Ok(Some(b)),
                Err(TryRecvError::Empty) => Ok(None),
                Err(TryRecvError::Disconnected) => Err(TaskError::Cancelled),
            },
            Some(timeout) => match self.input.barriers.recv_timeout(timeout) {
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
    pub fn new(ctx: TaskContext, gate: InputGate, pipe: Pipe) -> Self {
        Self { ctx, gate, pipe }
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
                GateEvent::Timeout => self.pipe.idle(&self.ctx)?,
            }
        }
    }
}

#[cfg(test)]
#[path = "task_tests.rs"]
mod tests;
