//! `Committer`: the second phase of a sink's two-phase commit, run by the coordinator.
//!
//! Invariants: `commit(n, ..)` is called only after checkpoint n's metadata is durable
//! (checkpoint n is complete), and checkpoint n + 1 is triggered only after it returns.
//! It must be idempotent: on recovery the coordinator calls it again with the restored
//! checkpoint's snapshots, because a crash may have come between "complete" and
//! "committed". A commit that fails fails the pipeline into recovery.
//!
//! Both phases get the checkpoint's deadline (trigger + checkpoint timeout): the
//! checkpoint timeout bounds the whole round, so a Kafka transaction's lifetime has a
//! known bound (see `connector::kafka::preflight`).

use std::time::Instant;

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::record::CheckpointId;

pub type CommitError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub trait Committer: Send {
    /// The operator id whose snapshots this committer commits (every subtask's).
    fn operator_id(&self) -> &str;

    /// Phase one, after every task acknowledged `id` and before its metadata is written:
    /// make `id`'s output durable but invisible (a Kafka producer flushes; staged files
    /// were already fsynced by their tasks).
    fn pre_commit(&mut self, _id: CheckpointId, _deadline: Instant) -> Result<(), CommitError> {
        Ok(())
    }

    /// Makes checkpoint `metadata.id`'s staged output visible. The metadata holds every
    /// task's snapshots (`snapshots_of(self.operator_id())` for this sink's own, and the
    /// source positions a Kafka sink commits as its progress marker).
    fn commit(
        &mut self,
        metadata: &CheckpointMetadata,
        deadline: Instant,
    ) -> Result<(), CommitError>;

    /// Called once at start, after restoring `restored` (NONE when starting from
    /// scratch) and redoing its commit: drop whatever was staged for later checkpoints.
    fn discard_uncommitted(&mut self, _restored: CheckpointId) -> Result<(), CommitError> {
        Ok(())
    }

    /// After each commit and garbage collection: `kept` are the complete checkpoints
    /// still in storage (oldest first), the only ones a later run may restore. What none
    /// of them can need again may be released (the Kafka sink purges the repartition
    /// topic below them). Best effort: a failure here is logged, never fails the run.
    fn retained(&mut self, _kept: &[CheckpointMetadata]) {}

    /// The run ends without committing anything more (a failure, or a stop after its
    /// last checkpoint), and its tasks are cancelled: end every wait of this sink's
    /// subtasks on an external system now, rather than at its bound. `failed`: the run
    /// failed, and its connections may be closed without waiting for their peers.
    fn abandon(&mut self, _failed: bool) {}
}
