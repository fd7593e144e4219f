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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use crate::dataflow::acker::{Acker, PendingAck};
use crate::dataflow::alignment::{GateEvent, InputGate};
use crate::dataflow::chain::{Chain, ChainError, ChainOutput};
use crate::dataflow::error::TaskError;
use crate::dataflow::operator::OperatorError;
use crate::dataflow::partition::ShuffleWriter;
use crate::dataflow::sink::{SinkError, SinkSet};
use crate::dataflow::source::{Source, SourcePoll};
use crate::dataflow::task_panic;
use crate::dataflow::watermark_generator::WatermarkGenerator;
use crate::metrics::PipelineMetrics;
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::record::batch::{BatchLimit, RecordBatch, RecordRef};
use crate::record::ids::DEAD_LETTER_ID;
use crate::record::message::{Barrier, Watermark};

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
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    fn report(&self, result: Result<(), TaskError>) {
        if let Err(error) = result
            && !matches!(error, TaskError::Cancelled)
        {
            let _ = self.events.send(TaskEvent::Failed {
                task: self.task.clone(),
                error,
            });
        }
    }
}

/// Task errors named after the task's context.
impl TaskError {
    pub(crate) fn chain(ctx: &TaskContext, e: ChainError) -> Self {
        Self::operator(ctx, &e.operator, e.source)
    }

    pub(crate) fn panicked(ctx: &TaskContext, message: String) -> Self {
        TaskError::Panicked {
            pipeline: ctx.pipeline.clone(),
            task: ctx.task.clone(),
            message,
        }
    }

    pub(crate) fn sink(ctx: &TaskContext, e: SinkError) -> Self {
        Self::operator(ctx, &e.sink, e.source)
    }

    pub(crate) fn operator(ctx: &TaskContext, operator: &str, source: OperatorError) -> Self {
        TaskError::Operator {
            pipeline: ctx.pipeline.clone(),
            task: ctx.task.clone(),
            operator: operator.to_owned(),
            source,
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
        let new_batch = |limit: BatchLimit| {
            RecordBatch::with_capacity(
                limit.records,
                limit.records.saturating_mul(64).min(limit.bytes),
            )
        };
        let mut batch = new_batch(self.input.batch_limit);
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
                let full = std::mem::replace(&mut batch, new_batch(self.input.batch_limit));
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
mod tests {
    use super::*;
    use crate::dataflow::operator::{Operator, OperatorError, Output};
    use crate::dataflow::sink::Sink;
    use crate::dataflow::source::SourceError;
    use crate::record::batch::MAX_BATCH_BYTES;
    use crate::record::message::Message;

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
        ) -> Result<SourcePoll, SourceError> {
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

    impl Sink for Discard {
        fn id(&self) -> &str {
            "dead-letter"
        }

        fn write(&mut self, _: CheckpointId, _: &RecordBatch) -> Result<(), OperatorError> {
            Ok(())
        }

        fn barrier(&mut self, _: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
            Ok(None)
        }
    }

    fn no_sinks() -> SinkSet {
        SinkSet::new(Vec::new(), CheckpointId::NONE)
    }

    /// `source-0` reading `source` in batches of at most 16 records, no out-of-orderness.
    fn input(source: Box<dyn Source>, barriers: Receiver<Barrier>) -> SourceInput {
        SourceInput {
            id: "source-0".into(),
            source,
            barriers,
            batch_limit: BatchLimit::records(16),
            out_of_orderness: Duration::ZERO,
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
            input(Box::new(source), barriers),
            Pipe::new(
                Chain::new(Vec::new(), no_sinks()),
                SinkSet::new(vec![Box::new(Discard)], CheckpointId::NONE),
                TaskOutput::Sinks,
            ),
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

    // ------------------------------------------------------- barriers through tasks

    type Log = Arc<std::sync::Mutex<Vec<String>>>;

    /// Logs every call as `<id> <call>`; passes records on, refusing (as late) those
    /// whose value starts with `bad`; at barrier n emits `<id>@snapshot<n>` and
    /// snapshots `n`.
    struct Logged {
        id: &'static str,
        log: Log,
    }

    impl Logged {
        fn boxed(id: &'static str, log: &Log) -> Box<dyn Operator> {
            Box::new(Logged {
                id,
                log: log.clone(),
            })
        }

        /// A sink set of one `Logged` sink, writing checkpoint 1 first.
        fn sink(id: &'static str, log: &Log) -> SinkSet {
            let sink = Logged {
                id,
                log: log.clone(),
            };
            SinkSet::new(vec![Box::new(sink)], CheckpointId::NONE)
        }

        fn note(&self, what: String) {
            self.log
                .lock()
                .expect("log")
                .push(format!("{} {what}", self.id));
        }
    }

    fn values(batch: &RecordBatch) -> String {
        batch
            .iter()
            .map(|r| String::from_utf8_lossy(r.value).into_owned())
            .collect::<Vec<_>>()
            .join(",")
    }

    impl Operator for Logged {
        fn id(&self) -> &str {
            self.id
        }

        fn handle_batch(
            &mut self,
            batch: RecordBatch,
            out: &mut Output,
        ) -> Result<(), OperatorError> {
            self.note(format!("batch {}", values(&batch)));
            let mut kept = RecordBatch::default();
            for r in batch.iter() {
                if r.value.starts_with(b"bad") {
                    out.late_records += 1;
                    out.reject(self.id, "bad", r.key, r.value, r.timestamp);
                } else {
                    kept.push_ref(r);
                }
            }
            out.emit(kept);
            Ok(())
        }

        fn handle_watermark(
            &mut self,
            w: Watermark,
            _out: &mut Output,
        ) -> Result<(), OperatorError> {
            self.note(format!("wm {}", w.0));
            Ok(())
        }

        fn handle_barrier(
            &mut self,
            barrier: Barrier,
            out: &mut Output,
        ) -> Result<Option<crate::dataflow::operator::Snapshot>, OperatorError> {
            self.note(format!("snapshot {}", barrier.id));
            let mut b = RecordBatch::default();
            b.push(
                b"k",
                format!("{}@snapshot{}", self.id, barrier.id).as_bytes(),
                0,
            );
            out.emit(b);
            Ok(Some(
                OperatorSnapshot::new(serde_json::json!(barrier.id.0)).into(),
            ))
        }

        fn on_close(&mut self) -> Result<(), OperatorError> {
            self.note("close".into());
            Ok(())
        }
    }

    /// As a sink: logs the same calls, and snapshots `n` at barrier n.
    impl Sink for Logged {
        fn id(&self) -> &str {
            self.id
        }

        fn write(&mut self, _: CheckpointId, batch: &RecordBatch) -> Result<(), OperatorError> {
            self.note(format!("batch {}", values(batch)));
            Ok(())
        }

        fn barrier(&mut self, barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
            self.note(format!("snapshot {}", barrier.id));
            Ok(Some(OperatorSnapshot::new(serde_json::json!(barrier.id.0))))
        }

        fn close(&mut self) -> Result<(), OperatorError> {
            self.note("close".into());
            Ok(())
        }
    }

    fn context(task: &str) -> (TaskContext, Receiver<TaskEvent>) {
        let (events, received) = crossbeam_channel::unbounded();
        let ctx = TaskContext {
            pipeline: "p".into(),
            task: task.into(),
            events,
            cancel: Arc::new(AtomicBool::new(false)),
            metrics: Arc::new(PipelineMetrics::default()),
        };
        (ctx, received)
    }

    /// Runs `run` on its own thread until it returns. A task that never finishes
    /// (alignment stuck) fails the test instead of hanging it.
    fn run_to_end(ctx: &TaskContext, run: impl FnOnce() + Send + 'static) {
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let thread = std::thread::spawn(move || {
            run();
            let _ = done_tx.send(());
        });
        let finished = done.recv_timeout(Duration::from_secs(20)).is_ok();
        ctx.cancel.store(true, Ordering::Relaxed);
        thread.join().expect("the task thread does not panic");
        assert!(finished, "the task did not finish on its own");
    }

    fn render_message(m: Message) -> String {
        match m {
            Message::Batch(b) => format!("batch {}", values(&b)),
            Message::Watermark(w) => format!("wm {}", w.0),
            Message::Barrier(b) if b.is_final => format!("barrier {} final", b.id),
            Message::Barrier(b) => format!("barrier {}", b.id),
        }
    }

    fn render_event(e: TaskEvent) -> String {
        match e {
            TaskEvent::Ack {
                task,
                checkpoint,
                snapshots,
            } => {
                let snapshots: Vec<String> = snapshots
                    .into_iter()
                    .map(|(id, s)| format!("{id}={}", s.state))
                    .collect();
                format!("{task} ack {checkpoint}: {}", snapshots.join(" "))
            }
            TaskEvent::Drained { task } => format!("{task} drained"),
            TaskEvent::Failed { task, error } => format!("{task} failed: {error}"),
        }
    }

    /// Records from different inputs interleave as the gate's select picks them: sorts
    /// each run of consecutive entries holding an input record (`in:`), keeps the
    /// order of everything else.
    fn settle(entries: Vec<String>) -> Vec<String> {
        let mut settled = Vec::with_capacity(entries.len());
        let mut run: Vec<String> = Vec::new();
        for e in entries {
            if e.contains("in:") {
                run.push(e);
                continue;
            }
            run.sort();
            settled.append(&mut run);
            settled.push(e);
        }
        run.sort();
        settled.append(&mut run);
        settled
    }

    fn input_batch(value: &str) -> Message {
        let mut b = RecordBatch::default();
        b.push(b"k", format!("in:{value}").as_bytes(), 0);
        Message::Batch(b)
    }

    fn input_barrier(n: u64, is_final: bool) -> Message {
        Message::Barrier(Barrier {
            id: CheckpointId(n),
            is_final,
        })
    }

    /// What a stage task did with `inputs` (each sent in full, then ended): the log of
    /// its chain (`step-0`) and dead-letter sink, what it sent downstream, its events.
    struct StageRun {
        log: Vec<String>,
        output: Vec<String>,
        events: Vec<String>,
    }

    fn run_stage(inputs: Vec<Vec<Message>>) -> StageRun {
        let log = Log::default();
        let mut receivers = Vec::new();
        for messages in inputs {
            let (tx, rx) = crossbeam_channel::bounded(messages.len().max(1));
            for m in messages {
                tx.send(m).expect("send");
            }
            receivers.push(rx);
        }
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        let (ctx, events) = context("stage-0");
        let task = StageTask::new(
            ctx.clone(),
            InputGate::new(receivers),
            Pipe::new(
                Chain::new(vec![Logged::boxed("step-0", &log)], no_sinks()),
                Logged::sink("dead-letter", &log),
                TaskOutput::Shuffle(ShuffleWriter::new(vec![out_tx], 128)),
            ),
        );
        run_to_end(&ctx, move || task.run());
        let log = settle(std::mem::take(&mut *log.lock().expect("log")));
        StageRun {
            log,
            output: settle(out_rx.try_iter().map(render_message).collect()),
            events: events.try_iter().map(render_event).collect(),
        }
    }

    const END: i64 = i64::MAX;

    /// Barrier 1 reaches input 0 first: what input 0 holds behind it waits until input
    /// 1 delivered 1 too; then the chain snapshots once, what it emitted while
    /// snapshotting goes downstream, then the barrier, once, then the ack. After the
    /// inputs end, the final watermark closes everything before the task closes.
    #[test]
    fn a_stage_task_aligns_snapshots_once_and_forwards_the_barrier_after_the_snapshot() {
        let run = run_stage(vec![
            vec![
                input_batch("a1"),
                input_barrier(1, false),
                input_batch("a2"),
                input_barrier(2, true),
            ],
            vec![
                input_batch("b1"),
                input_batch("b2"),
                input_barrier(1, false),
                input_batch("b3"),
                input_barrier(2, true),
            ],
        ]);
        assert_eq!(
            run.log,
            [
                "step-0 batch in:a1",
                "step-0 batch in:b1",
                "step-0 batch in:b2",
                "step-0 snapshot 1",
                "dead-letter snapshot 1",
                "step-0 batch in:a2",
                "step-0 batch in:b3",
                "step-0 snapshot 2",
                "dead-letter snapshot 2",
                &format!("step-0 wm {END}"),
                "step-0 close",
                "dead-letter close",
            ]
        );
        assert_eq!(
            run.output,
            [
                "batch in:a1",
                "batch in:b1",
                "batch in:b2",
                "batch step-0@snapshot1",
                "barrier 1",
                "batch in:a2",
                "batch in:b3",
                "batch step-0@snapshot2",
                "barrier 2 final",
                &format!("wm {END}"),
            ]
        );
        assert_eq!(
            run.events,
            [
                "stage-0 ack 1: dead-letter=1 step-0=1",
                "stage-0 ack 2: dead-letter=2 step-0=2",
            ]
        );
    }

    /// An input that ends does not hold a barrier back: the others align without it.
    /// The merged watermark reaches the end only once every input has ended, and the
    /// chain sees it before it closes.
    #[test]
    fn an_ended_input_does_not_hold_alignment_back() {
        let run = run_stage(vec![
            vec![
                input_batch("a1"),
                input_barrier(1, false),
                input_batch("a2"),
            ],
            vec![input_batch("b1")],
        ]);
        assert_eq!(
            run.log,
            [
                "step-0 batch in:a1",
                "step-0 batch in:b1",
                "step-0 snapshot 1",
                "dead-letter snapshot 1",
                "step-0 batch in:a2",
                &format!("step-0 wm {END}"),
                "step-0 close",
                "dead-letter close",
            ]
        );
        assert_eq!(
            run.output,
            [
                "batch in:a1",
                "batch in:b1",
                "batch step-0@snapshot1",
                "barrier 1",
                "batch in:a2",
                &format!("wm {END}"),
            ]
        );
        assert_eq!(run.events, ["stage-0 ack 1: dead-letter=1 step-0=1"]);
    }

    /// Two inputs delivering different barriers is an upstream bug: the task fails
    /// naming it, and snapshots and forwards nothing.
    #[test]
    fn interleaved_barriers_fail_the_stage_task_without_a_snapshot() {
        let run = run_stage(vec![
            vec![input_barrier(1, false)],
            vec![input_barrier(2, false)],
        ]);
        assert_eq!(run.log, Vec::<String>::new());
        assert_eq!(run.output, Vec::<String>::new());
        let failure = |input, id, pending| {
            format!(
                "stage-0 failed: pipeline p, task stage-0: barrier protocol violated: input \
                 {input} delivered barrier {id} while barrier {pending} is being aligned"
            )
        };
        // Which barrier the gate reads first is the select's choice.
        assert!(
            run.events == [failure(1, 2, 1)] || run.events == [failure(0, 1, 2)],
            "{:?}",
            run.events
        );
    }

    /// A bounded source's script: each poll returns the next batch of (value, event
    /// time) and may ask for a barrier, as the coordinator would between two polls; the
    /// last poll says `Drained`. Its position is the number of records returned.
    type ScriptedPoll = (Vec<(&'static str, i64)>, Option<Barrier>);

    struct Scripted {
        polls: std::collections::VecDeque<ScriptedPoll>,
        returned: u64,
        barriers: Sender<Barrier>,
    }

    impl Source for Scripted {
        fn poll(
            &mut self,
            out: &mut RecordBatch,
            _limit: BatchLimit,
        ) -> Result<SourcePoll, SourceError> {
            let Some((records, barrier)) = self.polls.pop_front() else {
                return Ok(SourcePoll::Drained);
            };
            for (value, ts) in records {
                out.push(b"k", value.as_bytes(), ts);
                self.returned += 1;
            }
            if let Some(b) = barrier {
                self.barriers.send(b).expect("barrier request");
            }
            Ok(if self.polls.is_empty() {
                SourcePoll::Drained
            } else {
                SourcePoll::Ready
            })
        }

        fn position(&self) -> crate::record::SourcePosition {
            serde_json::json!(self.returned)
        }
    }

    /// A source task serves a barrier between two batches: its snapshot of the source
    /// position covers exactly the records sent before the barrier, the chain's output
    /// at the barrier and refused records reach their outputs before it, and the final
    /// barrier, after the end-of-input watermark, ends the task.
    #[test]
    fn a_source_task_snapshots_the_position_the_barrier_follows() {
        let log = Log::default();
        let (barrier_tx, barriers) = crossbeam_channel::unbounded();
        let b = |n, is_final| Barrier {
            id: CheckpointId(n),
            is_final,
        };
        let source = Scripted {
            polls: [
                (vec![("in:r1", 1_000)], None),
                (vec![("bad-r2", 2_000), ("in:r3", 2_500)], Some(b(1, false))),
                (vec![("in:r4", 3_000)], Some(b(2, true))),
            ]
            .into(),
            returned: 0,
            barriers: barrier_tx,
        };
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        let (ctx, events) = context("source-0-0");
        let task = SourceTask::new(
            ctx.clone(),
            input(Box::new(source), barriers),
            Pipe::new(
                Chain::new(vec![Logged::boxed("step-0", &log)], no_sinks()),
                Logged::sink("dead-letter", &log),
                TaskOutput::Shuffle(ShuffleWriter::new(vec![out_tx], 128)),
            ),
        );
        run_to_end(&ctx, move || task.run());

        let dead_letter =
            r#"{"operator":"step-0","reason":"bad","key":"k","value":"bad-r2","timestamp":2000}"#;
        assert_eq!(
            *log.lock().expect("log"),
            [
                "step-0 batch in:r1",
                "step-0 wm 999",
                "step-0 batch bad-r2,in:r3",
                &format!("dead-letter batch {dead_letter}"),
                "step-0 wm 2499",
                "step-0 snapshot 1",
                "dead-letter snapshot 1",
                "step-0 batch in:r4",
                "step-0 wm 2999",
                &format!("step-0 wm {END}"),
                "step-0 snapshot 2",
                "dead-letter snapshot 2",
                "step-0 close",
                "dead-letter close",
            ]
        );
        assert_eq!(
            out_rx.try_iter().map(render_message).collect::<Vec<_>>(),
            [
                "batch in:r1",
                "wm 999",
                "batch in:r3",
                "wm 2499",
                "batch step-0@snapshot1",
                "barrier 1",
                "batch in:r4",
                "wm 2999",
                &format!("wm {END}"),
                "batch step-0@snapshot2",
                "barrier 2 final",
            ]
        );
        assert_eq!(
            events.try_iter().map(render_event).collect::<Vec<_>>(),
            [
                "source-0-0 ack 1: dead-letter=1 source-0=3 step-0=1",
                "source-0-0 drained",
                "source-0-0 ack 2: dead-letter=2 source-0=4 step-0=2",
            ]
        );
        let metrics = &ctx.metrics;
        assert_eq!(metrics.records_in.load(Ordering::Relaxed), 4);
        assert_eq!(metrics.dead_letters.load(Ordering::Relaxed), 1);
        assert_eq!(metrics.late_records.load(Ordering::Relaxed), 1);
    }
}
