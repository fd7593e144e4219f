//! Checkpoint storage: where checkpoints are kept (state files shared between
//! checkpoints, each checkpoint's private files and its metadata), and the fence that
//! stops an instance that no longer owns its pipeline from writing there.
//!
//! Below `state` (which uploads snapshots here) and `checkpoint` (which writes the
//! metadata); it imports only `record`.

pub mod checkpoint_storage;
pub mod fence;

pub use checkpoint_storage::{CheckpointStorage, StorageError};
pub use fence::Fence;
