//! Keyed state: the RocksDB backend of stateful operator subtasks.
//!
//! One RocksDB instance per stateful subtask; keys `key_group (u16 BE) | user key | window
//! end`; accumulators cached in memory and written back as one `WriteBatch` per barrier
//! or eviction by a writer thread, which sorts it and also takes and uploads checkpoints;
//! durability only through incremental checkpoints; a rescale restores key-group
//! ranges of several subtasks' snapshots into one. Each file states its part.

mod backend;
mod cache;
mod error;
mod key;
mod key_group_restore;
mod pending;
mod scan;
mod shared_names;
mod snapshot;
mod write_layer;
mod writer;

#[cfg(test)]
mod tests;

pub use backend::{
    CacheBounds, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_CAPACITY, KeyHash, KeyedState,
    PROCESS_BLOCK_CACHE_BYTES, PROCESS_MEMTABLE_BYTES, memtable_bytes,
};
pub use cache::SlotId;
pub use error::StateError;
pub use key::{DecodedKey, StateKey};
pub use key_group_restore::{KeyGroupRestoreStats, KeyGroupSource, OverlappingKeyGroups};
pub use scan::StateScan;
pub use snapshot::{DbSnapshot, PrivateFile, SharedFile, SnapshotStats};
pub use writer::SnapshotInProgress;
