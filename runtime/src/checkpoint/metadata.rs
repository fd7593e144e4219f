//! `CheckpointMetadata`: what makes a checkpoint complete and restorable.
//!
//! Invariants: the metadata is written after every task acknowledged the checkpoint,
//! atomically (see `storage::write_metadata`); a checkpoint without metadata does not
//! exist. It records every operator snapshot of every task (source positions, state
//! file lists, staged sink output), so restoring checkpoint n needs nothing else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::{LayoutStamp, Worker};
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::storage::{CheckpointLocation, CheckpointStorage, StorageError};

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("checkpoint {checkpoint}: unreadable metadata: {source}")]
    Corrupt {
        checkpoint: CheckpointId,
        #[source]
        source: serde_json::Error,
    },
}

/// Bumped when the layout changes incompatibly.
pub const METADATA_FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub format: u32,
    pub pipeline: String,
    pub id: CheckpointId,
    /// Wall-clock time the checkpoint completed, ms since the Unix epoch.
    pub completed_at_ms: u64,
    pub parallelism: usize,
    pub max_parallelism: u16,
    /// The last checkpoint of a bounded run: restoring it finishes at once.
    pub is_final: bool,
    /// From trigger to the last acknowledgement.
    pub duration_ms: u64,
    /// State files this checkpoint added to storage, and their bytes.
    pub files_added: u64,
    pub bytes_added: u64,
    /// Bytes of all the state this checkpoint references.
    #[serde(default)]
    pub state_bytes: u64,
    /// The last checkpoint whose output was committed when this one was taken (`NONE`:
    /// none yet). Recovery reads it when the Kafka progress markers are missing: a
    /// checkpoint taken after a commit proves that a marker existed and was lost.
    #[serde(default)]
    pub committed_before: CheckpointId,
    /// The layout of workers that took it (see `cluster::layout`); none in checkpoints
    /// written before layouts existed, which read as their location's first layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<LayoutStamp>,
    /// The partitions of the repartition topic of the worker that took it (key-group
    /// ranges, see `connector::kafka::repartition`): none for a worker without one,
    /// and in checkpoints written before ranges existed, whose topics had one
    /// partition per key group (`repartition_partitions_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repartition_partitions: Option<u16>,
    /// The guest each step ran when this checkpoint was taken: step id -> hex SHA-256
    /// of its module's bytes. Empty in checkpoints written before it existed. Recovery
    /// compares it with the modules it loads (`pipeline::module_changes`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub modules: BTreeMap<String, String>,
    /// task -> operator id -> snapshot.
    pub tasks: BTreeMap<String, BTreeMap<String, OperatorSnapshot>>,
}

impl CheckpointMetadata {
    /// The snapshot of `operator` taken by `task`, if it took one.
    pub fn snapshot(&self, task: &str, operator: &str) -> Option<&OperatorSnapshot> {
        self.tasks.get(task)?.get(operator)
    }

    /// Every task's snapshot of `operator`.
    pub fn snapshots_of(&self, operator: &str) -> Vec<&OperatorSnapshot> {
        self.tasks
            .values()
            .filter_map(|ops| ops.get(operator))
            .collect()
    }

    /// Writes the metadata, completing the checkpoint (atomically, see `storage`).
    pub fn write(&self, storage: &CheckpointStorage) -> Result<(), MetadataError> {
        let json = serde_json::to_vec_pretty(self).map_err(|source| MetadataError::Corrupt {
            checkpoint: self.id,
            source,
        })?;
        Ok(storage.write_metadata(self.id, &json)?)
    }

    /// Reads complete checkpoint `id`'s metadata.
    pub fn read(storage: &CheckpointStorage, id: CheckpointId) -> Result<Self, MetadataError> {
        let bytes = storage.read_metadata(id)?;
        serde_json::from_slice(&bytes).map_err(|source| MetadataError::Corrupt {
            checkpoint: id,
            source,
        })
    }

    /// The metadata of the newest complete checkpoint at `location`, if any; reads
    /// only. Another worker's location may be read this way while that worker writes.
    pub fn newest_at(location: &CheckpointLocation) -> Result<Option<Self>, MetadataError> {
        let storage = CheckpointStorage::open_read_only(location)?;
        match storage.latest_complete()? {
            Some(id) => Ok(Some(Self::read(&storage, id)?)),
            None => Ok(None),
        }
    }

    /// An empty checkpoint `id` of `pipeline` (parallelism 1, 128 key groups, no
    /// layout stamp, no tasks), for tests to fill in.
    #[cfg(test)]
    pub(crate) fn empty_for_test(pipeline: &str, id: u64) -> Self {
        CheckpointMetadata {
            format: METADATA_FORMAT,
            pipeline: pipeline.to_owned(),
            id: CheckpointId(id),
            completed_at_ms: 0,
            parallelism: 1,
            max_parallelism: 128,
            is_final: false,
            duration_ms: 0,
            files_added: 0,
            bytes_added: 0,
            state_bytes: 0,
            committed_before: CheckpointId::NONE,
            layout: None,
            repartition_partitions: None,
            modules: BTreeMap::new(),
            tasks: BTreeMap::new(),
        }
    }

    /// The partitions of the repartition topic that `operator` (the repartition
    /// source) read when this checkpoint was taken, if it holds that operator: as
    /// recorded, or one per key group for a checkpoint written before key-group ranges
    /// existed.
    pub fn repartition_partitions_of(&self, operator: &str) -> Option<u16> {
        let read = self.tasks.values().any(|ops| ops.contains_key(operator));
        read.then(|| self.repartition_partitions.unwrap_or(self.max_parallelism))
    }

    /// The layout that took this checkpoint: its stamp, or for a checkpoint written
    /// before stamps existed, the first layout of `worker`'s number of workers.
    pub fn layout_of(&self, worker: Worker) -> LayoutStamp {
        self.layout
            .unwrap_or_else(|| LayoutStamp::first(worker.count()))
    }
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;
