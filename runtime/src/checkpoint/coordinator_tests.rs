//! The coordinator driven in process: fake tasks are events queued on the coordinator's
//! channel (acknowledgements, drains, failures), fake sinks are `FakeCommitter`s that
//! record every call and whether the checkpoint's metadata existed when it came, and
//! storage is a real `CheckpointStorage` in a temporary directory.
//!
//! Nothing here waits on the clock: a checkpoint is triggered by a stop request set
//! before the run (with an hour-long interval) or, for several checkpoints in a row, by a
//! zero interval with a committer that requests the stop; acknowledgement timeouts are
//! an hour (never reached) or zero (already past). Unless a test needs the tasks alive,
//! their channel is closed once its events are queued, so a broken coordinator that
//! waits for more ends at once with `TasksGone` instead of hanging.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::json;

use super::{Coordinator, CoordinatorConfig, CoordinatorError, RunEnd};
use crate::checkpoint::commit::{CommitError, Committer};
use crate::checkpoint::metadata::{CheckpointMetadata, METADATA_FORMAT};
use crate::dataflow::error::TaskError;
use crate::dataflow::task_context::TaskEvent;
use crate::metrics::PipelineMetrics;
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::record::message::Barrier;
use crate::storage::CheckpointStorage;

const PIPELINE: &str = "orders";
/// The one source task; it receives the barriers.
const SOURCE: &str = "source-0";
/// The task holding both sinks' operators.
const SINK: &str = "sink-0";
const SINK_A: &str = "sink-a";
const SINK_B: &str = "sink-b";
const SIGTERM: usize = 15;
/// An interval or timeout no test reaches.
const HOUR: Duration = Duration::from_secs(3600);

/// What a fake committer was asked to do, and whether the checkpoint's metadata was
/// durable at that moment.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    PreCommit {
        operator: &'static str,
        checkpoint: u64,
        complete: bool,
    },
    Commit {
        operator: &'static str,
        checkpoint: u64,
        complete: bool,
        /// The `state` of every snapshot of this operator in the metadata it was given.
        staged: Vec<serde_json::Value>,
    },
}

fn pre(operator: &'static str, checkpoint: u64) -> Call {
    Call::PreCommit {
        operator,
        checkpoint,
        complete: false,
    }
}

fn commit(operator: &'static str, checkpoint: u64) -> Call {
    Call::Commit {
        operator,
        checkpoint,
        complete: true,
        staged: vec![sink_state(operator, checkpoint)],
    }
}

type Calls = Arc<Mutex<Vec<Call>>>;
type Deadlines = Arc<Mutex<Vec<(&'static str, u64, Instant)>>>;
/// Per `retained` call: the kept checkpoints' ids, and the ids still in storage then.
type Told = Arc<Mutex<Vec<(Vec<u64>, Vec<u64>)>>>;

struct FakeCommitter {
    operator: &'static str,
    storage: Arc<CheckpointStorage>,
    calls: Calls,
    deadlines: Deadlines,
    fail_pre_commit: Option<u64>,
    fail_commit: Option<u64>,
    /// After committing this checkpoint, request a stop (as SIGTERM would).
    stop_after_commit: Option<(u64, Arc<AtomicUsize>)>,
    /// What each `retained` call was told.
    retained: Told,
    /// Counts `abandon` calls (of every committer of the rig).
    abandoned: Arc<AtomicUsize>,
}

impl FakeCommitter {
    fn complete(&self, id: CheckpointId) -> bool {
        self.storage.is_complete(id).expect("is_complete")
    }

    fn boxed(self) -> Box<dyn Committer> {
        Box::new(self)
    }
}

impl Committer for FakeCommitter {
    fn operator_id(&self) -> &str {
        self.operator
    }

    fn abandon(&mut self, _failed: bool) {
        self.abandoned.fetch_add(1, Ordering::SeqCst);
    }

    fn pre_commit(&mut self, id: CheckpointId, deadline: Instant) -> Result<(), CommitError> {
        let call = Call::PreCommit {
            operator: self.operator,
            checkpoint: id.0,
            complete: self.complete(id),
        };
        self.calls.lock().expect("calls").push(call);
        let entry = ("pre-commit", id.0, deadline);
        self.deadlines.lock().expect("deadlines").push(entry);
        if self.fail_pre_commit == Some(id.0) {
            return Err("broker unavailable".into());
        }
        Ok(())
    }

    fn commit(
        &mut self,
        metadata: &CheckpointMetadata,
        deadline: Instant,
    ) -> Result<(), CommitError> {
        let id = metadata.id;
        let call = Call::Commit {
            operator: self.operator,
            checkpoint: id.0,
            complete: self.complete(id),
            staged: metadata
                .snapshots_of(self.operator)
                .into_iter()
                .map(|s| s.state.clone())
                .collect(),
        };
        self.calls.lock().expect("calls").push(call);
        let entry = ("commit", id.0, deadline);
        self.deadlines.lock().expect("deadlines").push(entry);
        if self.fail_commit == Some(id.0) {
            return Err("transaction fenced".into());
        }
        if let Some((after, stop)) = &self.stop_after_commit
            && *after == id.0
        {
            stop.store(SIGTERM, Ordering::SeqCst);
        }
        Ok(())
    }

    fn retained(&mut self, kept: &[CheckpointMetadata]) {
        let ids: Vec<u64> = kept.iter().map(|m| m.id.0).collect();
        let stored = self.storage.checkpoint_ids().expect("ids");
        let stored = stored.into_iter().map(|id| id.0).collect();
        self.retained.lock().expect("retained").push((ids, stored));
    }
}

fn sink_state(operator: &str, checkpoint: u64) -> serde_json::Value {
    json!({ "operator": operator, "staged": checkpoint })
}

fn snapshot(
    state: serde_json::Value,
    files: u64,
    bytes: u64,
    state_bytes: u64,
) -> OperatorSnapshot {
    OperatorSnapshot {
        files_added: files,
        bytes_added: bytes,
        state_bytes,
        ..OperatorSnapshot::new(state)
    }
}

/// What `task` snapshots at checkpoint `id`: the source its offset, the sink task one
/// snapshot per sink operator.
fn snapshots(task: &str, id: u64) -> BTreeMap<String, OperatorSnapshot> {
    match task {
        SOURCE => BTreeMap::from([(
            "source".to_owned(),
            snapshot(json!({ "offset": id * 10 }), 2, 300, 5000),
        )]),
        _ => BTreeMap::from([
            (
                SINK_A.to_owned(),
                snapshot(sink_state(SINK_A, id), 1, 40, 700),
            ),
            (SINK_B.to_owned(), snapshot(sink_state(SINK_B, id), 0, 0, 0)),
        ]),
    }
}

fn ack(task: &str, id: u64) -> TaskEvent {
    TaskEvent::Ack {
        task: task.to_owned(),
        checkpoint: CheckpointId(id),
        snapshots: snapshots(task, id),
    }
}

/// Both tasks acknowledge checkpoint `id`.
fn acks(id: u64) -> [TaskEvent; 2] {
    [ack(SOURCE, id), ack(SINK, id)]
}

/// Queues `events` and closes the channel: the tasks sent this, then exited.
fn send_and_exit(events: Sender<TaskEvent>, queued: impl IntoIterator<Item = TaskEvent>) {
    for event in queued {
        events.send(event).expect("queue event");
    }
}

struct Settings {
    interval: Duration,
    timeout: Duration,
    retain: usize,
    last: CheckpointId,
    committed: CheckpointId,
}

impl Default for Settings {
    /// Checkpoints only on a stop request or a drain; acknowledgements never time out.
    fn default() -> Self {
        Self {
            interval: HOUR,
            timeout: HOUR,
            retain: 2,
            last: CheckpointId::NONE,
            committed: CheckpointId::NONE,
        }
    }
}

/// Everything around one coordinator run.
struct Rig {
    storage: Arc<CheckpointStorage>,
    events: Receiver<TaskEvent>,
    barrier_tx: Sender<Barrier>,
    barriers: Receiver<Barrier>,
    calls: Calls,
    deadlines: Deadlines,
    cancel: Arc<AtomicBool>,
    stop: Arc<AtomicUsize>,
    metrics: Arc<PipelineMetrics>,
    abandoned: Arc<AtomicUsize>,
}

impl Rig {
    /// The rig, and the tasks' end of the event channel.
    fn open(dir: &Path) -> (Rig, Sender<TaskEvent>) {
        let storage =
            CheckpointStorage::open(dir.join("checkpoints"), "test").expect("open storage");
        let (events_tx, events) = crossbeam_channel::unbounded();
        let (barrier_tx, barriers) = crossbeam_channel::unbounded();
        let rig = Rig {
            storage: Arc::new(storage),
            events,
            barrier_tx,
            barriers,
            calls: Calls::default(),
            deadlines: Deadlines::default(),
            cancel: Arc::default(),
            stop: Arc::default(),
            metrics: Arc::default(),
            abandoned: Arc::default(),
        };
        (rig, events_tx)
    }

    fn committer(&self, operator: &'static str) -> FakeCommitter {
        FakeCommitter {
            operator,
            storage: self.storage.clone(),
            calls: self.calls.clone(),
            deadlines: self.deadlines.clone(),
            fail_pre_commit: None,
            fail_commit: None,
            stop_after_commit: None,
            retained: Arc::default(),
            abandoned: self.abandoned.clone(),
        }
    }

    fn request_stop(&self) {
        self.stop.store(SIGTERM, Ordering::SeqCst);
    }

    fn coordinator(&self, settings: Settings, committers: Vec<Box<dyn Committer>>) -> Coordinator {
        Coordinator {
            config: CoordinatorConfig {
                pipeline: PIPELINE.to_owned(),
                interval: settings.interval,
                timeout: settings.timeout,
                retain: settings.retain,
                parallelism: 1,
                max_parallelism: 128,
                layout: crate::cluster::LayoutStamp::first(1),
                repartition_partitions: None,
                modules: BTreeMap::new(),
            },
            storage: self.storage.clone(),
            events: self.events.clone(),
            sources: BTreeMap::from([(SOURCE.to_owned(), self.barrier_tx.clone())]),
            tasks: BTreeSet::from([SOURCE.to_owned(), SINK.to_owned()]),
            committers,
            cancel: self.cancel.clone(),
            stop: self.stop.clone(),
            metrics: self.metrics.clone(),
            last: settings.last,
            committed: settings.committed,
            cleanup: None,
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }

    /// The barriers sent to the source so far.
    fn barriers(&self) -> Vec<u64> {
        self.barriers.try_iter().map(|b| b.id.0).collect()
    }

    fn complete(&self) -> Vec<u64> {
        let complete = self.storage.complete_checkpoints().expect("list");
        complete.into_iter().map(|id| id.0).collect()
    }

    fn metadata(&self, id: u64) -> CheckpointMetadata {
        CheckpointMetadata::read(&self.storage, CheckpointId(id)).expect("metadata")
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// How many times a committer of the rig was told the run is abandoned.
    fn abandoned(&self) -> usize {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// (checkpoints completed, last checkpoint id) as the metrics report them.
    fn completed_metrics(&self) -> (u64, u64) {
        let m = self.metrics.snapshot();
        (m.checkpoints_completed, m.last_checkpoint_id)
    }
}

/// Issue (a): a sink that cannot pre-commit aborts the checkpoint. The second sink's
/// pre-commit fails after the first one's succeeded: no metadata is written, no sink is
/// committed (not even the one that pre-committed), no further barrier is sent, the run
/// returns the error naming checkpoint, phase and operator, and the tasks are cancelled.
#[test]
fn a_failing_pre_commit_aborts_the_checkpoint_and_fails_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let mut failing = rig.committer(SINK_B);
    failing.fail_pre_commit = Some(1);
    let committers = vec![rig.committer(SINK_A).boxed(), failing.boxed()];
    send_and_exit(tasks, acks(1));
    rig.request_stop();

    let result = rig.coordinator(Settings::default(), committers).run();

    let Err(err) = result else {
        panic!("expected the pre-commit failure, got {result:?}");
    };
    assert_eq!(
        err.to_string(),
        "pipeline orders: checkpoint 1: pre-commit of sink-b failed: broker unavailable"
    );
    let CoordinatorError::Commit {
        checkpoint,
        phase,
        operator,
        ..
    } = &err
    else {
        panic!("expected CoordinatorError::Commit, got {err:?}");
    };
    assert_eq!(
        (*checkpoint, *phase, operator.as_str()),
        (CheckpointId(1), "pre-commit", SINK_B)
    );
    assert_eq!(rig.calls(), vec![pre(SINK_A, 1), pre(SINK_B, 1)]);
    assert!(
        !rig.storage
            .is_complete(CheckpointId(1))
            .expect("is_complete")
    );
    assert_eq!(rig.complete(), Vec::<u64>::new());
    assert_eq!(rig.completed_metrics(), (0, 0));
    assert_eq!(rig.barriers(), vec![1]);
    assert!(rig.cancelled());
}

/// Issue (b): a sink that cannot commit fails the pipeline. Checkpoint 1 commits;
/// checkpoint 2 completes (its metadata is durable, so recovery will redo its commit),
/// but the first sink's commit fails: the second sink is not committed, checkpoint 3 is
/// never triggered, and the error names checkpoint 2.
#[test]
fn a_failing_commit_fails_the_run_naming_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let mut failing = rig.committer(SINK_A);
    failing.fail_commit = Some(2);
    let committers = vec![failing.boxed(), rig.committer(SINK_B).boxed()];
    send_and_exit(tasks, [acks(1), acks(2), acks(3)].into_iter().flatten());
    let settings = Settings {
        interval: Duration::ZERO,
        ..Settings::default()
    };

    let result = rig.coordinator(settings, committers).run();

    let Err(err) = result else {
        panic!("expected the commit failure, got {result:?}");
    };
    assert_eq!(
        err.to_string(),
        "pipeline orders: checkpoint 2: commit of sink-a failed: transaction fenced"
    );
    let CoordinatorError::Commit {
        pipeline,
        checkpoint,
        phase,
        operator,
        source,
    } = &err
    else {
        panic!("expected CoordinatorError::Commit, got {err:?}");
    };
    assert_eq!(
        (pipeline.as_str(), *checkpoint, *phase, operator.as_str()),
        (PIPELINE, CheckpointId(2), "commit", SINK_A)
    );
    assert_eq!(source.to_string(), "transaction fenced");
    assert_eq!(
        rig.calls(),
        vec![
            pre(SINK_A, 1),
            pre(SINK_B, 1),
            commit(SINK_A, 1),
            commit(SINK_B, 1),
            pre(SINK_A, 2),
            pre(SINK_B, 2),
            commit(SINK_A, 2),
        ]
    );
    assert_eq!(rig.complete(), vec![1, 2]);
    assert_eq!(rig.completed_metrics(), (2, 2));
    assert_eq!(rig.barriers(), vec![1, 2]);
    assert!(rig.cancelled());
}

/// Issue (c): checkpoint ids are never reused. A run commits 1 and aborts 2 (its
/// pre-commit fails). The restarted run numbers after `CheckpointId::numbering_base`,
/// from what storage holds and the restored checkpoint 1, exactly as `pipeline::run`
/// does; its checkpoints are base + 1, base + 2, all above the aborted 2. Run with and
/// without the aborted checkpoint's files in storage (a task uploads state before it
/// acknowledges; a stateless pipeline uploads nothing).
#[test]
fn checkpoint_ids_are_never_reused_after_an_abort_and_a_restart() {
    // (aborted checkpoint left files, restart base, ids of the restarted run)
    for (uploaded, base, ids) in [(true, 3, [4, 5]), (false, 2, [3, 4])] {
        let dir = tempfile::tempdir().expect("tempdir");
        commit_1_and_abort_2(dir.path(), uploaded);

        // Restart, numbered as `pipeline::run` numbers it.
        let (rig, tasks) = Rig::open(dir.path());
        let newest = rig.storage.checkpoint_ids().expect("ids").into_iter().max();
        let restored = rig
            .storage
            .latest_complete()
            .expect("latest")
            .expect("restored");
        assert_eq!(restored, CheckpointId(1));
        let last = CheckpointId::numbering_base(newest, restored);
        assert_eq!(last, CheckpointId(base), "uploaded: {uploaded}");
        let mut stopping = rig.committer(SINK_A);
        stopping.stop_after_commit = Some((ids[0], rig.stop.clone()));
        send_and_exit(tasks, [acks(ids[0]), acks(ids[1])].into_iter().flatten());
        let settings = Settings {
            interval: Duration::ZERO,
            last,
            committed: restored,
            ..Settings::default()
        };
        let result = rig.coordinator(settings, vec![stopping.boxed()]).run();

        assert_eq!(
            result.expect("restarted run"),
            RunEnd::Stopped {
                checkpoint: CheckpointId(ids[1]),
                signal: SIGTERM
            }
        );
        assert_eq!(rig.barriers(), ids.to_vec());
        assert_eq!(
            rig.calls(),
            vec![
                pre(SINK_A, ids[0]),
                commit(SINK_A, ids[0]),
                pre(SINK_A, ids[1]),
                commit(SINK_A, ids[1]),
            ]
        );
        assert_eq!(rig.complete(), ids.to_vec());
        // Each records the checkpoint committed before it: the restored one, then its
        // predecessor in this run.
        assert_eq!(rig.metadata(ids[0]).committed_before, CheckpointId(1));
        assert_eq!(rig.metadata(ids[1]).committed_before, CheckpointId(ids[0]));
    }
}

/// The first run of `checkpoint_ids_are_never_reused_after_an_abort_and_a_restart`
/// in `dir`: 1 commits, 2 is aborted (its pre-commit fails), with or without files of
/// 2 `uploaded` to storage.
fn commit_1_and_abort_2(dir: &Path, uploaded: bool) {
    let (rig, tasks) = Rig::open(dir);
    if uploaded {
        let file = dir.join("CURRENT");
        std::fs::write(&file, b"MANIFEST-000001\n").expect("write");
        rig.storage
            .put_private(CheckpointId(2), SOURCE, "CURRENT", &file)
            .expect("upload");
    }
    let mut failing = rig.committer(SINK_A);
    failing.fail_pre_commit = Some(2);
    send_and_exit(tasks, [acks(1), acks(2)].into_iter().flatten());
    let settings = Settings {
        interval: Duration::ZERO,
        ..Settings::default()
    };
    let result = rig.coordinator(settings, vec![failing.boxed()]).run();
    assert!(
        matches!(
            result,
            Err(CoordinatorError::Commit {
                checkpoint: CheckpointId(2),
                phase: "pre-commit",
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(rig.barriers(), vec![1, 2]);
    assert_eq!(
        rig.calls(),
        vec![pre(SINK_A, 1), commit(SINK_A, 1), pre(SINK_A, 2)]
    );
    assert_eq!(rig.complete(), vec![1]);
}

/// The two-phase commit's order, for two sinks: every pre-commit comes before the
/// metadata exists, every commit after, and each commit is handed the metadata holding
/// its operator's staged snapshot. The metadata holds exactly what the tasks
/// acknowledged and the sums of their uploads. A stop request ends the run after this
/// one ordinary checkpoint, and cancels the tasks.
#[test]
fn pre_commit_then_metadata_then_commit_for_every_sink() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let committers = vec![rig.committer(SINK_A).boxed(), rig.committer(SINK_B).boxed()];
    send_and_exit(tasks, acks(6));
    rig.request_stop();
    let settings = Settings {
        last: CheckpointId(5),
        committed: CheckpointId(4),
        ..Settings::default()
    };

    let result = rig.coordinator(settings, committers).run();

    assert_eq!(
        result.expect("run"),
        RunEnd::Stopped {
            checkpoint: CheckpointId(6),
            signal: SIGTERM
        }
    );
    assert_eq!(
        rig.calls(),
        vec![
            pre(SINK_A, 6),
            pre(SINK_B, 6),
            commit(SINK_A, 6),
            commit(SINK_B, 6)
        ]
    );
    let metadata = rig.metadata(6);
    assert_eq!(metadata.format, METADATA_FORMAT);
    assert_eq!(metadata.pipeline, PIPELINE);
    assert_eq!(metadata.id, CheckpointId(6));
    assert!(!metadata.is_final);
    assert_eq!((metadata.parallelism, metadata.max_parallelism), (1, 128));
    assert_eq!(
        (
            metadata.files_added,
            metadata.bytes_added,
            metadata.state_bytes
        ),
        (2 + 1, 300 + 40, 5000 + 700)
    );
    assert_eq!(metadata.committed_before, CheckpointId(4));
    let expected: BTreeMap<_, _> = [SOURCE, SINK]
        .into_iter()
        .map(|task| (task.to_owned(), snapshots(task, 6)))
        .collect();
    assert_eq!(metadata.tasks, expected);
    assert_eq!(rig.completed_metrics(), (1, 6));
    assert_eq!(rig.barriers(), vec![6]);
    assert!(rig.cancelled());
}

/// The checkpoint timeout bounds the whole round: both phases get the deadline the
/// acknowledgements had (trigger + timeout), not a fresh one each.
#[test]
fn pre_commit_and_commit_share_the_acknowledgement_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    send_and_exit(tasks, acks(1));
    rig.request_stop();
    let committers = vec![rig.committer(SINK_A).boxed(), rig.committer(SINK_B).boxed()];

    let before = Instant::now();
    let result = rig.coordinator(Settings::default(), committers).run();
    let after = Instant::now();

    assert!(result.is_ok(), "{result:?}");
    let deadlines = rig.deadlines.lock().expect("deadlines").clone();
    let phases: Vec<_> = deadlines
        .iter()
        .map(|&(phase, id, _)| (phase, id))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("pre-commit", 1),
            ("pre-commit", 1),
            ("commit", 1),
            ("commit", 1)
        ]
    );
    let deadline = deadlines[0].2;
    for &(phase, _, d) in &deadlines {
        assert_eq!(d, deadline, "{phase} got a deadline of its own");
    }
    assert!(before + HOUR <= deadline && deadline <= after + HOUR);
}

/// A task that has not acknowledged by the deadline fails the run; the error lists
/// exactly the tasks still missing and what the pipeline was blocked on (its watched
/// waits), nothing of the checkpoint is committed, and the committers are told the run
/// is abandoned. The timeout is zero, so the deadline has passed once the queued ack is
/// read; the tasks stay alive (their channel open) so the wait can only end by the
/// timeout.
#[test]
fn a_missing_ack_times_out_naming_the_missing_task() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    tasks.send(ack(SOURCE, 1)).expect("queue");
    rig.request_stop();
    let settings = Settings {
        timeout: Duration::ZERO,
        ..Settings::default()
    };

    let sink_wait = crate::watchdog::watch(PIPELINE, "a sink's wait".into(), Instant::now());
    let result = rig
        .coordinator(settings, vec![rig.committer(SINK_A).boxed()])
        .run();
    drop(sink_wait);

    let Err(CoordinatorError::Timeout {
        pipeline,
        checkpoint,
        timeout,
        missing,
        blocked,
    }) = &result
    else {
        panic!("expected a timeout, got {result:?}");
    };
    assert_eq!(
        (pipeline.as_str(), *checkpoint, *timeout, missing),
        (
            PIPELINE,
            CheckpointId(1),
            Duration::ZERO,
            &vec![SINK.to_owned()]
        )
    );
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert!(blocked[0].starts_with("a sink's wait (for "), "{blocked:?}");
    let line = result.expect_err("timeout").to_string();
    assert!(line.contains("blocked on: a sink's wait"), "{line}");
    assert!(
        line.ends_with("a restart resumes from the last committed checkpoint"),
        "{line}"
    );
    assert_eq!(rig.abandoned(), 1);
    assert_eq!(rig.calls(), vec![]);
    assert_eq!(rig.complete(), Vec::<u64>::new());
    assert!(rig.cancelled());
    drop(tasks);
}

/// A task that fails while the coordinator collects acknowledgements fails the run with
/// that task's error; no sink is pre-committed.
#[test]
fn a_task_failure_during_a_checkpoint_fails_the_run_before_any_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let failed = TaskEvent::Failed {
        task: SINK.to_owned(),
        error: TaskError::Protocol {
            pipeline: PIPELINE.to_owned(),
            task: SINK.to_owned(),
            message: "bad batch".to_owned(),
        },
    };
    send_and_exit(tasks, [ack(SOURCE, 1), failed]);
    rig.request_stop();

    let result = rig
        .coordinator(Settings::default(), vec![rig.committer(SINK_A).boxed()])
        .run();

    let Err(err @ CoordinatorError::Task(_)) = result else {
        panic!("expected the task's failure, got {result:?}");
    };
    assert_eq!(err.to_string(), "pipeline orders, task sink-0: bad batch");
    assert_eq!(rig.calls(), vec![]);
    assert_eq!(rig.complete(), Vec::<u64>::new());
    assert!(rig.cancelled());
}

/// An acknowledgement of another checkpoint (here a duplicate of the last one, 4,
/// while 5 is in flight) is a protocol error, not counted towards 5. The error's
/// `checkpoint` is the one in flight, 5; its `acked` the stray 4.
#[test]
fn an_ack_for_another_checkpoint_is_a_protocol_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    send_and_exit(tasks, [ack(SOURCE, 5), ack(SINK, 4), ack(SINK, 5)]);
    rig.request_stop();
    let settings = Settings {
        last: CheckpointId(4),
        committed: CheckpointId(4),
        ..Settings::default()
    };

    let result = rig
        .coordinator(settings, vec![rig.committer(SINK_A).boxed()])
        .run();

    let Err(CoordinatorError::Protocol {
        pipeline,
        checkpoint,
        task,
        acked,
    }) = result
    else {
        panic!("expected a protocol error, got {result:?}");
    };
    assert_eq!(
        (pipeline.as_str(), checkpoint, task.as_str(), acked),
        (PIPELINE, CheckpointId(5), SINK, CheckpointId(4))
    );
    assert_eq!(rig.calls(), vec![]);
    assert_eq!(rig.complete(), Vec::<u64>::new());
    assert!(rig.cancelled());
}

/// A bounded run: once every source has drained, the next checkpoint is final (in its
/// barrier and its metadata), the run finishes with it, and the tasks are left to exit
/// on their own (not cancelled).
#[test]
fn a_drained_run_ends_with_a_final_checkpoint_without_cancelling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let drained = TaskEvent::Drained {
        task: SOURCE.to_owned(),
    };
    send_and_exit(tasks, [drained, ack(SOURCE, 1), ack(SINK, 1)]);

    let result = rig
        .coordinator(Settings::default(), vec![rig.committer(SINK_A).boxed()])
        .run();

    assert_eq!(result.expect("run"), RunEnd::Finished(CheckpointId(1)));
    let barriers: Vec<Barrier> = rig.barriers.try_iter().collect();
    assert_eq!(
        barriers,
        vec![Barrier {
            id: CheckpointId(1),
            is_final: true
        }]
    );
    assert!(rig.metadata(1).is_final);
    assert_eq!(rig.calls(), vec![pre(SINK_A, 1), commit(SINK_A, 1)]);
    assert!(!rig.cancelled());
}

/// After each commit the coordinator keeps the newest `retain` complete checkpoints and
/// removes the rest: four checkpoints with `retain = 3` leave 2, 3 and 4.
#[test]
fn retention_keeps_the_newest_checkpoints_after_each_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let mut stopping = rig.committer(SINK_A);
    stopping.stop_after_commit = Some((3, rig.stop.clone()));
    send_and_exit(tasks, (1..=4).flat_map(acks));
    let settings = Settings {
        interval: Duration::ZERO,
        retain: 3,
        ..Settings::default()
    };

    let result = rig.coordinator(settings, vec![stopping.boxed()]).run();

    assert_eq!(
        result.expect("run"),
        RunEnd::Stopped {
            checkpoint: CheckpointId(4),
            signal: SIGTERM
        }
    );
    assert_eq!(rig.barriers(), vec![1, 2, 3, 4]);
    assert_eq!(rig.complete(), vec![2, 3, 4]);
    let ids = rig.storage.checkpoint_ids().expect("ids");
    assert_eq!(ids, vec![CheckpointId(2), CheckpointId(3), CheckpointId(4)]);
}

/// Catches: a committer told of checkpoints that garbage collection removed, or told
/// before it (the Kafka sink purges its repartition partitions below the oldest kept
/// checkpoint: one it was not told about, or one about to go, would let it purge too
/// little or records a restore still needs).
#[test]
fn every_committer_is_told_the_kept_checkpoints_after_garbage_collection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    let mut stopping = rig.committer(SINK_A);
    stopping.stop_after_commit = Some((4, rig.stop.clone()));
    let told = stopping.retained.clone();
    send_and_exit(tasks, (1..=5).flat_map(acks));
    let settings = Settings {
        interval: Duration::ZERO,
        retain: 3,
        ..Settings::default()
    };

    rig.coordinator(settings, vec![stopping.boxed()])
        .run()
        .expect("run");

    let told = told.lock().expect("retained").clone();
    let kept: Vec<Vec<u64>> = told.iter().map(|(kept, _)| kept.clone()).collect();
    assert_eq!(
        kept,
        vec![
            vec![1],
            vec![1, 2],
            vec![1, 2, 3],
            vec![2, 3, 4],
            vec![3, 4, 5]
        ],
        "oldest first, after each commit"
    );
    for (kept, stored) in &told {
        assert_eq!(kept, stored, "told after the rest was removed");
    }
}

/// Every task gone while the coordinator waits for the next trigger fails the run.
#[test]
fn tasks_gone_while_idle_fail_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (rig, tasks) = Rig::open(dir.path());
    drop(tasks);

    let result = rig
        .coordinator(Settings::default(), vec![rig.committer(SINK_A).boxed()])
        .run();

    let Err(CoordinatorError::TasksGone { pipeline }) = result else {
        panic!("expected TasksGone, got {result:?}");
    };
    assert_eq!(pipeline, PIPELINE);
    assert_eq!(rig.barriers(), Vec::<u64>::new());
    assert_eq!(rig.calls(), vec![]);
    assert!(rig.cancelled());
}
