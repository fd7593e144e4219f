//! Checkpoint storage: where checkpoints are kept (state files shared between
//! checkpoints, each checkpoint's private files and its metadata), on a local directory
//! or in an S3-compatible object store, and the fence that stops an instance that no
//! longer owns its pipeline from writing there.
//!
//! Below `state` (which uploads snapshots here) and `checkpoint` (which writes the
//! metadata); it imports only `record`. `CheckpointStorage` is the one type callers
//! use; its `//!` states the invariants both backends keep.

mod blocking;
pub mod checkpoint_storage;
mod error;
pub mod fence;
pub mod layout;
mod local;
pub mod location;
mod object;

pub use checkpoint_storage::{CheckpointInfo, CheckpointStorage, GcReport};
pub use error::StorageError;
pub use fence::Fence;
pub use location::{CheckpointLocation, S3Location};
