//! Keyed state: the RocksDB backend of stateful operator subtasks.
//!
//! One RocksDB instance per stateful subtask; keys `key_group (u16 BE) | user key | window
//! end`; accumulators cached in memory and written as one `WriteBatch` per barrier or
//! eviction; durability only through incremental checkpoints. Each file states its part.

mod backend;
mod cache;
mod error;
mod key;
mod pending;
mod scan;
mod shared_names;
mod snapshot;

#[cfg(test)]
mod tests;

pub use backend::{CacheBounds, DEFAULT_CACHE_BYTES, DEFAULT_CACHE_CAPACITY, KeyedState};
pub use error::StateError;
pub use key::{DecodedKey, StateKey};
pub use pending::PendingSnapshot;
pub use scan::StateScan;
pub use snapshot::{DbSnapshot, PrivateFile, SharedFile, SnapshotStats};
