//! The checkpoint coordinator: triggers aligned checkpoints and drives the sinks'
//! two-phase commit.
//!
//! Protocol, for checkpoint n (docs/src/architecture.md, "Checkpoints: aligned barriers"):
//! 1. Trigger: send barrier n to every source task, `interval` after n - 1 was
//!    triggered (at once if n - 1 took longer). At most one checkpoint is in flight:
//!    n is triggered only after n - 1 is complete AND committed.
//! 2. Collect: every task acknowledges n with its operators' snapshots, after its
//!    inputs aligned on n (see `dataflow::alignment`). A missing ack within the
//!    checkpoint timeout, or any task failure, fails the pipeline: nothing of n is
//!    committed.
//! 3. Pre-commit: every committer makes n's output durable but invisible.
//! 4. Complete: write n's metadata atomically (temp file, fsync, rename, fsync dir).
//! 5. Commit: every committer makes n's output visible. Commits are idempotent and are
//!    redone on recovery, because a crash can fall between 4 and 5.
//! 6. Retain the last `retain` complete checkpoints; garbage-collect the rest; tell the
//!    committers which are kept (`Committer::retained`); worker 0 of a rescaled layout
//!    starts the clean-up of earlier layouts (`layout_cleanup`).
//!
//! The checkpoint timeout bounds steps 1-5 together: pre-commit and commit get the
//! deadline that the acknowledgements had. It is counted in time the process ran: a
//! pause while the acknowledgements are awaited (SIGSTOP, a frozen VM) moves the
//! deadline by its length (`watchdog::RunningDeadline`).
//!
//! A bounded run ends with a final checkpoint, triggered as soon as every source has
//! read all its input; after it, the tasks exit. A stop request (`stop` non-zero: the
//! signal number of a SIGINT or SIGTERM) ends any run with one more ordinary
//! checkpoint, committed like every other, after which the tasks are cancelled: what
//! they produced past its barrier belongs to a checkpoint that never completes, and
//! the next run resumes from the stop checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::checkpoint::commit::{CommitError, Committer};
use crate::checkpoint::layout_cleanup::LayoutCleanup;
use crate::checkpoint::metadata::{CheckpointMetadata, METADATA_FORMAT, MetadataError};
use crate::cluster::LayoutStamp;
use crate::dataflow::error::TaskError;
use crate::dataflow::task_context::TaskEvent;
use crate::fault::{self, FaultPoint};
use crate::metrics::{PipelineMetrics, unix_ms};
use crate::record::message::Barrier;
use crate::record::{CheckpointId, OperatorSnapshot};
use crate::storage::CheckpointStorage;
use crate::watchdog::{self, RunningDeadline};

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(
        "pipeline {pipeline}: checkpoint {checkpoint} timed out after {timeout:?} waiting for {missing:?}{}; the run stops, and a restart resumes from the last committed checkpoint",
        blocked_on(.blocked)
    )]
    Timeout {
        pipeline: String,
        checkpoint: CheckpointId,
        timeout: Duration,
        missing: Vec<String>,
        /// What the pipeline's threads were waiting on (`watchdog::waiting`).
        blocked: Vec<String>,
    },
    #[error("pipeline {pipeline}: checkpoint {checkpoint}: {source}")]
    Storage {
        pipeline: String,
        checkpoint: CheckpointId,
        #[source]
        source: MetadataError,
    },
    #[error("pipeline {pipeline}: checkpoint {checkpoint}: {phase} of {operator} failed: {source}")]
    Commit {
        pipeline: String,
        checkpoint: CheckpointId,
        phase: &'static str,
        operator: String,
        #[source]
        source: CommitError,
    },
    #[error(
        "pipeline {pipeline}: checkpoint {checkpoint}: task {task} acknowledged checkpoint {acked}"
    )]
    Protocol {
        pipeline: String,
        checkpoint: CheckpointId,
        task: String,
        acked: CheckpointId,
    },
    #[error("pipeline {pipeline}: every task stopped before the run finished")]
    TasksGone { pipeline: String },
}

/// ", blocked on: <wait>; <wait>" for the waits a timed-out checkpoint found.
fn blocked_on(waits: &[String]) -> String {
    if waits.is_empty() {
        String::new()
    } else {
        format!(", blocked on: {}", waits.join("; "))
    }
}

/// Every task's acknowledged snapshots: task -> operator id -> snapshot.
type TaskSnapshots = BTreeMap<String, BTreeMap<String, OperatorSnapshot>>;

/// How often the coordinator looks at the stop flag while it waits for the next trigger.
const STOP_POLL: Duration = Duration::from_millis(50);

/// How a run that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every source drained; this was the final checkpoint.
    Finished(CheckpointId),
    /// Stopped on request (the signal number) after this checkpoint committed.
    Stopped {
        checkpoint: CheckpointId,
        signal: usize,
    },
}

impl RunEnd {
    /// The last checkpoint of the run.
    pub fn checkpoint(self) -> CheckpointId {
        match self {
            RunEnd::Finished(id) | RunEnd::Stopped { checkpoint: id, .. } => id,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    pub pipeline: String,
    pub interval: Duration,
    pub timeout: Duration,
    pub retain: usize,
    pub parallelism: usize,
    pub max_parallelism: u16,
    /// The layout of workers this run is (written into every checkpoint's metadata).
    pub layout: LayoutStamp,
    /// The partitions of this worker's repartition topic, if it has one (written into
    /// every checkpoint's metadata).
    pub repartition_partitions: Option<u16>,
    /// Step id -> SHA-256 of the module it runs (written into every checkpoint's
    /// metadata).
    pub modules: BTreeMap<String, String>,
}

/// The coordinator of one pipeline run.
pub struct Coordinator {
    pub config: CoordinatorConfig,
    pub storage: Arc<CheckpointStorage>,
    pub events: Receiver<TaskEvent>,
    /// One barrier channel per source task, by task name.
    pub sources: BTreeMap<String, Sender<Barrier>>,
    /// Every task that acknowledges checkpoints.
    pub tasks: BTreeSet<String>,
    pub committers: Vec<Box<dyn Committer>>,
    pub cancel: Arc<AtomicBool>,
    /// Non-zero: stop after one more checkpoint (the value is the signal's number).
    pub stop: Arc<AtomicUsize>,
    pub metrics: Arc<PipelineMetrics>,
    /// The id this run's checkpoints are numbered after (see `pipeline::run`).
    pub last: CheckpointId,
    /// The last committed checkpoint: the restored one (`NONE` from scratch), then each
    /// one this run commits. Recorded in every checkpoint's metadata.
    pub committed: CheckpointId,
    /// Worker 0 of a rescaled layout: removes the earlier layouts' checkpoints once
    /// they are no longer needed (started after step 6).
    pub cleanup: Option<LayoutCleanup>,
}

impl Coordinator {
    /// Runs checkpoints until the final one (bounded sources), a stop request or a
    /// failure. Unless the run finished, every task is cancelled before returning.
    pub fn run(mut self) -> Result<RunEnd, CoordinatorError> {
        let result = self.run_inner();
        if !matches!(result, Ok(RunEnd::Finished(_))) {
            self.cancel.store(true, Ordering::SeqCst);
            for committer in &mut self.committers {
                committer.abandon(result.is_err());
            }
        }
        result
    }

    fn run_inner(&mut self) -> Result<RunEnd, CoordinatorError> {
        let mut drained = BTreeSet::new();
        let mut next = Instant::now() + self.config.interval;
        loop {
            let all_drained = drained.len() == self.sources.len();
            let signal = self.stop.load(Ordering::SeqCst);
            if all_drained || signal != 0 || Instant::now() >= next {
                let id = self.last.next();
                let triggered = Instant::now();
                self.checkpoint(id, all_drained, &mut drained)?;
                if all_drained {
                    return Ok(RunEnd::Finished(id));
                }
                if signal != 0 {
                    return Ok(RunEnd::Stopped {
                        checkpoint: id,
                        signal,
                    });
                }
                // On the interval, not interval-after-commit: output is visible when its
                // checkpoint commits, so the interval is the latency users see. A
                // checkpoint that took longer is followed by the next one at once.
                next = triggered + self.config.interval;
                continue;
            }
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(STOP_POLL);
            match self.events.recv_timeout(wait) {
                Ok(event) => self.on_other_event(event, self.last, &mut drained)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CoordinatorError::TasksGone {
                        pipeline: self.config.pipeline.clone(),
                    });
                }
            }
        }
    }

    /// An event that arrives outside the acknowledgements of the checkpoint in flight:
    /// a drained source is recorded, a failed task fails the run, and an
    /// acknowledgement is a protocol error reported against `checkpoint` (the one in
    /// flight, or the last one when idle).
    fn on_other_event(
        &self,
        event: TaskEvent,
        checkpoint: CheckpointId,
        drained: &mut BTreeSet<String>,
    ) -> Result<(), CoordinatorError> {
        match event {
            TaskEvent::Drained { task } => {
                drained.insert(task);
                Ok(())
            }
            TaskEvent::Failed { error, .. } => Err(error.into()),
            TaskEvent::Ack {
                task,
                checkpoint: acked,
                ..
            } => Err(CoordinatorError::Protocol {
                pipeline: self.config.pipeline.clone(),
                checkpoint,
                task,
                acked,
            }),
        }
    }

    /// Checkpoint `id`, steps 1-6 of the protocol in this order; the first failure
    /// ends it, and nothing after the failing step happens.
    fn checkpoint(
        &mut self,
        id: CheckpointId,
        is_final: bool,
        drained: &mut BTreeSet<String>,
    ) -> Result<(), CoordinatorError> {
        let started = Instant::now();
        self.trigger(Barrier { id, is_final });
        let mut deadline = RunningDeadline::new(started + self.config.timeout);
        let acks = self.collect_acks(id, &mut deadline, drained)?;
        let duration = started.elapsed();
        self.pre_commit(id, deadline.at())?;
        let metadata = self.complete(id, is_final, duration, acks)?;
        self.commit(&metadata, deadline.at())?;
        self.retain(id)
    }

    /// Step 1: sends the barrier to every source task.
    fn trigger(&self, barrier: Barrier) {
        for tx in self.sources.values() {
            // A source that is gone has failed; its Failed event explains why.
            let _ = tx.send(barrier);
        }
        fault::hit(FaultPoint::CheckpointTriggered);
    }

    /// Step 2: waits by `deadline` for every task's acknowledgement of `id`; returns
    /// their snapshots by task.
    fn collect_acks(
        &self,
        id: CheckpointId,
        deadline: &mut RunningDeadline,
        drained: &mut BTreeSet<String>,
    ) -> Result<TaskSnapshots, CoordinatorError> {
        let mut acks = TaskSnapshots::new();
        while acks.len() < self.tasks.len() {
            let event = self
                .events
                .recv_timeout(deadline.wait_for(Instant::now(), Duration::MAX));
            deadline.woke(Instant::now());
            match event {
                Ok(TaskEvent::Ack {
                    task,
                    checkpoint,
                    snapshots,
                }) if checkpoint == id => {
                    acks.insert(task, snapshots);
                }
                Ok(event) => self.on_other_event(event, id, drained)?,
                Err(RecvTimeoutError::Timeout) if deadline.passed(Instant::now()) => {
                    return Err(self.timeout(id, &acks));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CoordinatorError::TasksGone {
                        pipeline: self.config.pipeline.clone(),
                    });
                }
            }
        }
        Ok(acks)
    }

    /// The timeout of checkpoint `id`, naming the tasks missing from `acks`.
    fn timeout(&self, id: CheckpointId, acks: &TaskSnapshots) -> CoordinatorError {
        CoordinatorError::Timeout {
            pipeline: self.config.pipeline.clone(),
            checkpoint: id,
            timeout: self.config.timeout,
            missing: self
                .tasks
                .iter()
                .filter(|t| !acks.contains_key(*t))
                .cloned()
                .collect(),
            blocked: watchdog::waiting(&self.config.pipeline),
        }
    }

    /// Step 3: every committer makes `id`'s output durable but invisible, in order; the
    /// first failure aborts the checkpoint.
    fn pre_commit(&mut self, id: CheckpointId, deadline: Instant) -> Result<(), CoordinatorError> {
        fault::hit(FaultPoint::BeforePreCommit);
        for committer in &mut self.committers {
            committer
                .pre_commit(id, deadline)
                .map_err(|source| CoordinatorError::Commit {
                    pipeline: self.config.pipeline.clone(),
                    checkpoint: id,
                    phase: "pre-commit",
                    operator: committer.operator_id().to_owned(),
                    source,
                })?;
        }
        fault::hit(FaultPoint::AfterPreCommit);
        Ok(())
    }

    /// Step 4: writes `id`'s metadata, which makes the checkpoint complete, then
    /// reports it in the metrics. Returns the metadata the commit is handed.
    fn complete(
        &self,
        id: CheckpointId,
        is_final: bool,
        duration: Duration,
        acks: TaskSnapshots,
    ) -> Result<CheckpointMetadata, CoordinatorError> {
        let metadata = self.metadata(id, is_final, duration, acks);
        metadata
            .write(&self.storage)
            .map_err(|source| self.storage_error(id, source))?;
        self.record_complete(&metadata, duration);
        Ok(metadata)
    }

    /// The metadata of checkpoint `id`: what the tasks acknowledged and the sums of
    /// their uploads.
    fn metadata(
        &self,
        id: CheckpointId,
        is_final: bool,
        duration: Duration,
        acks: TaskSnapshots,
    ) -> CheckpointMetadata {
        let (files_added, bytes_added, state_bytes) = acks
            .values()
            .flat_map(|ops| ops.values())
            .fold((0, 0, 0), |(f, b, t), s| {
                (f + s.files_added, b + s.bytes_added, t + s.state_bytes)
            });
        CheckpointMetadata {
            format: METADATA_FORMAT,
            pipeline: self.config.pipeline.clone(),
            id,
            completed_at_ms: unix_ms(),
            parallelism: self.config.parallelism,
            max_parallelism: self.config.max_parallelism,
            is_final,
            duration_ms: duration.as_millis() as u64,
            files_added,
            bytes_added,
            state_bytes,
            committed_before: self.committed,
            layout: Some(self.config.layout),
            repartition_partitions: self.config.repartition_partitions,
            modules: self.config.modules.clone(),
            tasks: acks,
        }
    }

    /// Reports a complete checkpoint in the metrics and the log.
    fn record_complete(&self, metadata: &CheckpointMetadata, duration: Duration) {
        let (id, files_added, bytes_added) =
            (metadata.id, metadata.files_added, metadata.bytes_added);
        PipelineMetrics::add(&self.metrics.checkpoints_completed, 1);
        self.metrics
            .last_checkpoint_id
            .store(id.0, Ordering::Relaxed);
        self.metrics
            .last_checkpoint_duration_ms
            .store(duration.as_millis() as u64, Ordering::Relaxed);
        self.metrics
            .last_checkpoint_unix_ms
            .store(metadata.completed_at_ms, Ordering::Relaxed);
        tracing::debug!(pipeline = %self.config.pipeline, checkpoint = %id, ?duration, files_added, bytes_added, "checkpoint complete");
    }

    /// Step 5: every committer makes the complete checkpoint's output visible; then it
    /// is this run's last and last committed checkpoint.
    fn commit(
        &mut self,
        metadata: &CheckpointMetadata,
        deadline: Instant,
    ) -> Result<(), CoordinatorError> {
        fault::hit(FaultPoint::BeforeCommit);
        commit_all(
            &self.config.pipeline,
            &mut self.committers,
            metadata,
            deadline,
        )?;
        fault::hit(FaultPoint::AfterCommit);
        self.last = metadata.id;
        self.committed = metadata.id;
        Ok(())
    }

    /// Step 6: keeps the newest `retain` complete checkpoints, removes the rest, and
    /// tells every committer which are kept.
    fn retain(&mut self, id: CheckpointId) -> Result<(), CoordinatorError> {
        let kept = crate::checkpoint::retention::retain(&self.storage, self.config.retain)
            .map_err(|source| self.storage_error(id, source))?;
        for committer in &mut self.committers {
            committer.retained(&kept);
        }
        if let Some(cleanup) = &mut self.cleanup {
            cleanup.after_commit();
        }
        Ok(())
    }

    fn storage_error(&self, id: CheckpointId, source: MetadataError) -> CoordinatorError {
        CoordinatorError::Storage {
            pipeline: self.config.pipeline.clone(),
            checkpoint: id,
            source,
        }
    }
}

/// Commits checkpoint `metadata.id` in every committer by `deadline`; also used to
/// redo the commit of the restored checkpoint on recovery.
pub fn commit_all(
    pipeline: &str,
    committers: &mut [Box<dyn Committer>],
    metadata: &CheckpointMetadata,
    deadline: Instant,
) -> Result<(), CoordinatorError> {
    for (i, committer) in committers.iter_mut().enumerate() {
        committer
            .commit(metadata, deadline)
            .map_err(|source| CoordinatorError::Commit {
                pipeline: pipeline.to_owned(),
                checkpoint: metadata.id,
                phase: "commit",
                operator: committer.operator_id().to_owned(),
                source,
            })?;
        if i == 0 {
            fault::hit(FaultPoint::AfterCommitRequest);
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
