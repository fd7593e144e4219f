//! The checkpoint coordinator: triggers aligned checkpoints and drives the sinks'
//! two-phase commit.
//!
//! Protocol, for checkpoint n (DESIGN.md, "Checkpoints"):
//! 1. Trigger: send barrier n to every source task. At most one checkpoint is in
//!    flight: n is triggered only after n - 1 is complete AND committed.
//! 2. Collect: every task acknowledges n with its operators' snapshots, after its
//!    inputs aligned on n (see `dataflow::alignment`). A missing ack within the
//!    checkpoint timeout, or any task failure, fails the pipeline: nothing of n is
//!    committed.
//! 3. Pre-commit: every committer makes n's output durable but invisible.
//! 4. Complete: write n's metadata atomically (temp file, fsync, rename, fsync dir).
//! 5. Commit: every committer makes n's output visible. Commits are idempotent and are
//!    redone on recovery, because a crash can fall between 4 and 5.
//! 6. Retain the last `retain` complete checkpoints; garbage-collect the rest.
//!
//! The checkpoint timeout bounds steps 1-5 together: pre-commit and commit get the
//! deadline that the acknowledgements had.
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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::checkpoint::commit::{CommitError, Committer};
use crate::checkpoint::metadata::{CheckpointMetadata, METADATA_FORMAT, MetadataError};
use crate::dataflow::error::TaskError;
use crate::dataflow::task::TaskEvent;
use crate::fault::{self, FaultPoint};
use crate::metrics::PipelineMetrics;
use crate::record::CheckpointId;
use crate::record::message::Barrier;
use crate::storage::CheckpointStorage;

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(
        "pipeline {pipeline}: checkpoint {checkpoint} timed out after {timeout:?} waiting for {missing:?}"
    )]
    Timeout {
        pipeline: String,
        checkpoint: CheckpointId,
        timeout: Duration,
        missing: Vec<String>,
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
}

impl Coordinator {
    /// Runs checkpoints until the final one (bounded sources), a stop request or a
    /// failure. Unless the run finished, every task is cancelled before returning.
    pub fn run(mut self) -> Result<RunEnd, CoordinatorError> {
        let result = self.run_inner();
        if !matches!(result, Ok(RunEnd::Finished(_))) {
            self.cancel.store(true, Ordering::SeqCst);
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
                next = Instant::now() + self.config.interval;
                continue;
            }
            let wait = next
                .saturating_duration_since(Instant::now())
                .min(STOP_POLL);
            match self.events.recv_timeout(wait) {
                Ok(event) => self.on_idle_event(event, &mut drained)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CoordinatorError::TasksGone {
                        pipeline: self.config.pipeline.clone(),
                    });
                }
            }
        }
    }

    fn on_idle_event(
        &self,
        event: TaskEvent,
        drained: &mut BTreeSet<String>,
    ) -> Result<(), CoordinatorError> {
        match event {
            TaskEvent::Drained { task } => {
                drained.insert(task);
                Ok(())
            }
            TaskEvent::Failed { error, .. } => Err(error.into()),
            TaskEvent::Ack {
                task, checkpoint, ..
            } => Err(CoordinatorError::Protocol {
                pipeline: self.config.pipeline.clone(),
                checkpoint: self.last,
                task,
                acked: checkpoint,
            }),
        }
    }

    fn checkpoint(
        &mut self,
        id: CheckpointId,
        is_final: bool,
        drained: &mut BTreeSet<String>,
    ) -> Result<(), CoordinatorError> {
        let started = Instant::now();
        let barrier = Barrier { id, is_final };
        for tx in self.sources.values() {
            // A source that is gone has failed; its Failed event explains why.
            let _ = tx.send(barrier);
        }
        fault::hit(FaultPoint::CheckpointTriggered);

        let deadline = started + self.config.timeout;
        let mut acks: BTreeMap<String, _> = BTreeMap::new();
        while acks.len() < self.tasks.len() {
            match self
                .events
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(TaskEvent::Ack {
                    task,
                    checkpoint,
                    snapshots,
                }) if checkpoint == id => {
                    acks.insert(task, snapshots);
                }
                Ok(event) => self.on_idle_event(event, drained)?,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(CoordinatorError::Timeout {
                        pipeline: self.config.pipeline.clone(),
                        checkpoint: id,
                        timeout: self.config.timeout,
                        missing: self
                            .tasks
                            .iter()
                            .filter(|t| !acks.contains_key(*t))
                            .cloned()
                            .collect(),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CoordinatorError::TasksGone {
                        pipeline: self.config.pipeline.clone(),
                    });
                }
            }
        }
        let duration = started.elapsed();

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

        let (files_added, bytes_added, state_bytes) = acks
            .values()
            .flat_map(|ops| ops.values())
            .fold((0, 0, 0), |(f, b, t), s| {
                (f + s.files_added, b + s.bytes_added, t + s.state_bytes)
            });
        let metadata = CheckpointMetadata {
            format: METADATA_FORMAT,
            pipeline: self.config.pipeline.clone(),
            id,
            completed_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            parallelism: self.config.parallelism,
            max_parallelism: self.config.max_parallelism,
            is_final,
            duration_ms: duration.as_millis() as u64,
            files_added,
            bytes_added,
            state_bytes,
            committed_before: self.committed,
            tasks: acks,
        };
        metadata
            .write(&self.storage)
            .map_err(|source| CoordinatorError::Storage {
                pipeline: self.config.pipeline.clone(),
                checkpoint: id,
                source,
            })?;
        PipelineMetrics::add(&self.metrics.checkpoints_completed, 1);
        self.metrics
            .last_checkpoint_id
            .store(id.0, Ordering::Relaxed);
        self.metrics
            .last_checkpoint_duration_ms
            .store(duration.as_millis() as u64, Ordering::Relaxed);
        tracing::debug!(pipeline = %self.config.pipeline, checkpoint = %id, ?duration, files_added, bytes_added, "checkpoint complete");

        fault::hit(FaultPoint::BeforeCommit);
        commit_all(
            &self.config.pipeline,
            &mut self.committers,
            &metadata,
            deadline,
        )?;
        fault::hit(FaultPoint::AfterCommit);
        self.last = id;
        self.committed = id;

        crate::checkpoint::retention::retain(&self.storage, self.config.retain).map_err(
            |source| CoordinatorError::Storage {
                pipeline: self.config.pipeline.clone(),
                checkpoint: id,
                source,
            },
        )?;
        Ok(())
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
