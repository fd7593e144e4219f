//! `KafkaCommitter`: the coordinator's handle on the commit unit's two phases (see the
//! protocol at the top of `sink.rs`). One committer serves every Kafka sink of the
//! pipeline, since they share one transaction per checkpoint.
//!
//! Invariants: `pre_commit(n)` flushes T(n); `commit(metadata n)` adds the marker n and
//! commits T(n), and is a no-op for a checkpoint at or before the last committed one
//! (the coordinator redoes the restored checkpoint's commit on recovery, and that
//! checkpoint is, by construction, the last committed one). `discard_uncommitted` has
//! nothing to do: `init_transactions` already aborted what later checkpoints wrote.

use std::sync::Arc;
use std::time::Instant;

use crate::checkpoint::commit::{CommitError, Committer};
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::error::ConnectorError;
use crate::connector::kafka::commit_unit::KafkaCommitUnit;
use crate::record::CheckpointId;

#[derive(Debug)]
pub struct KafkaCommitter {
    operator_id: String,
    unit: Arc<KafkaCommitUnit>,
}

impl KafkaCommitter {
    /// `operator_id`: the id of the pipeline's first Kafka sink (named in errors).
    pub fn new(operator_id: impl Into<String>, unit: Arc<KafkaCommitUnit>) -> Self {
        KafkaCommitter {
            operator_id: operator_id.into(),
            unit,
        }
    }
}

impl Committer for KafkaCommitter {
    fn operator_id(&self) -> &str {
        &self.operator_id
    }

    fn pre_commit(&mut self, id: CheckpointId, deadline: Instant) -> Result<(), CommitError> {
        self.unit
            .pre_commit(id, deadline)
            .map_err(ConnectorError::from)?;
        Ok(())
    }

    fn commit(
        &mut self,
        metadata: &CheckpointMetadata,
        deadline: Instant,
    ) -> Result<(), CommitError> {
        self.unit
            .commit(metadata, deadline)
            .map_err(ConnectorError::from)?;
        Ok(())
    }

    fn retained(&mut self, kept: &[CheckpointMetadata]) {
        self.unit.retained(kept);
    }

    fn abandon(&mut self, failed: bool) {
        self.unit.abandon(failed);
    }
}
