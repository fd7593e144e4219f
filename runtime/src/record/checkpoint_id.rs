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
}

impl std::fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
