//! `CheckpointId`: the number of a checkpoint, strictly increasing within a pipeline.
//!
//! Checkpoint 0 never exists: ids start at 1, and "restored from 0" means "started
//! from scratch". The word "epoch" is kept for wasmtime's interrupt ticker only.

use serde::{Deserialize, Serialize};

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The id before the first checkpoint: nothing restored.
    pub const NONE: CheckpointId = CheckpointId(0);

    pub fn next(self) -> CheckpointId {
        CheckpointId(self.0 + 1)
    }

    /// The id a run's checkpoints are numbered after: one past every checkpoint id
    /// found in storage at start (`newest`, read before recovery discards anything) and
    /// past the restored one. A restarted run never reuses an id, and leaves one unused:
    /// a fenced instance of the same pipeline may still be finishing the checkpoint
    /// after its last (its transaction will fail to commit, but its files land in
    /// storage under that id).
    pub fn numbering_base(newest: Option<CheckpointId>, restored: CheckpointId) -> CheckpointId {
        match newest {
            None => restored,
            Some(newest) => newest.max(restored).next(),
        }
    }
}

impl std::fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
