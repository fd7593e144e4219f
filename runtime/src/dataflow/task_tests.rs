//! In-process tests of task threads: hostile sources, barriers, acks, cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;

use super::*;
use crate::dataflow::operator::{Operator, OperatorError, Output};
use crate::dataflow::sink::Sink;
use crate::dataflow::source::SourceError;
use crate::record::CheckpointId;
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
            "pipeline p, task source-0-0: panicked: event time overflows (at runtime/src/dataflow/task_tests.rs:"
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

    fn handle_batch(&mut self, batch: RecordBatch, out: &mut Output) -> Result<(), OperatorError> {
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

    fn handle_watermark(&mut self, w: Watermark, _out: &mut Output) -> Result<(), OperatorError> {
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
