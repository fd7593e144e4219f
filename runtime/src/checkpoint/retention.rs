//! Retention: which checkpoints are kept, and garbage collection of the rest.
//!
//! Invariants: the newest `retain` complete checkpoints are kept (at least two: the
//! exactly-once Kafka protocol may have to restore the one before the newest), with
//! every shared state file any of them references. Incomplete checkpoint directories
//! older than the newest complete one are garbage: their checkpoint failed.

use std::collections::HashSet;

use crate::checkpoint::metadata::{CheckpointMetadata, MetadataError};
use crate::record::CheckpointId;
use crate::storage::CheckpointStorage;

/// The fewest complete checkpoints ever kept.
pub const MIN_RETAINED: usize = 2;

/// Keeps the newest `retain` (at least `MIN_RETAINED`) complete checkpoints and what
/// they reference, removes the rest; returns the kept checkpoints' metadata, oldest
/// first.
pub fn retain(
    storage: &CheckpointStorage,
    retain: usize,
) -> Result<Vec<CheckpointMetadata>, MetadataError> {
    let complete = storage.complete_checkpoints()?;
    let keep: Vec<CheckpointId> = complete
        .iter()
        .rev()
        .take(retain.max(MIN_RETAINED))
        .copied()
        .collect();
    let mut referenced = HashSet::new();
    let mut kept = Vec::with_capacity(keep.len());
    for &id in keep.iter().rev() {
        let metadata = CheckpointMetadata::read(storage, id)?;
        for snapshot in metadata.tasks.values().flat_map(|ops| ops.values()) {
            referenced.extend(snapshot.shared_files.iter().cloned());
        }
        kept.push(metadata);
    }
    let removed = storage.gc(&keep, &referenced)?;
    tracing::debug!(
        checkpoints = ?removed.checkpoints_removed,
        shared_files = removed.shared_files_removed,
        shared_bytes = removed.shared_bytes_removed,
        "checkpoint gc removed"
    );
    Ok(kept)
}
