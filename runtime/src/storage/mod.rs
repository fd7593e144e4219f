//! Checkpoint storage: where checkpoints are kept (state files shared between
//! checkpoints, each checkpoint's private files and its metadata), on a local directory
//! or in an S3-compatible object store, and the fence that stops an instance that no
//! longer owns its pipeline from writing there.
//!
//! Below `state` (which uploads snapshots here) and `checkpoint` (which writes the
//! metadata); it imports only `record`. `CheckpointStorage` is the one type callers
//! use; its `//!` states the invariants; `backend::StorageBackend` is what each of
//! the two backends (`local`, `object`) implements, and `local_files` the durable file
//! operations both use on local disk.

mod backend;
mod blocking;
pub mod checkpoint_storage;
mod error;
pub mod fence;
mod local;
mod local_files;
pub mod location;
pub mod names;
mod object;

pub use backend::{CheckpointInfo, GcReport};
pub use checkpoint_storage::CheckpointStorage;
pub use error::StorageError;
pub use fence::Fence;
pub use location::{CheckpointLocation, S3Location};
