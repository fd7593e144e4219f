//! Checkpoints: ids, storage, metadata, the coordinator, retention and sink commits.
pub mod commit;
pub mod coordinator;
pub mod fence;
pub mod id;
pub mod metadata;
pub mod retention;
pub mod storage;

pub use fence::Fence;
pub use id::CheckpointId;
