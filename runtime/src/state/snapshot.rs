//! `DbSnapshot`: what one subtask's RocksDB contributed to a checkpoint. It is serialized
//! into the checkpoint's metadata and is all `KeyedState::restore` needs.
//!
//! Invariants:
//! - `shared` lists EVERY SST of the DB at the checkpoint (new and reused), so the
//!   snapshot alone rebuilds the DB, and GC can keep exactly the files it names
//!   (see [`DbSnapshot::shared_refs`]).
//! - Shared names are unique across DB lineages (see `shared_names`), so a name always
//!   denotes the same bytes, whichever checkpoint uploaded it.
//! - `private` files live under `chk-<checkpoint_id>/<task>/` and belong to this
//!   checkpoint only.
//! - `stats` describe the upload, not the DB: `files_added`/`bytes_added` count only SSTs
//!   that were not in the storage yet (0 for a checkpoint of unchanged state).

use serde::{Deserialize, Serialize};

use crate::record::CheckpointId;

/// One SST referenced by a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedFile {
    /// File name inside the DB directory, e.g. `000012.sst`.
    pub local_name: String,
    /// Name in the storage's `shared/<task>/` (without `.sst`).
    pub shared_name: String,
    /// Bytes.
    pub size: u64,
}

/// One non-SST file (CURRENT, MANIFEST-*, OPTIONS-*, ...) private to the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivateFile {
    /// File name inside the DB directory and under `chk-<id>/<task>/`.
    pub name: String,
    /// Bytes.
    pub size: u64,
}

/// Upload statistics of one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotStats {
    /// SST files newly added to the shared storage by this checkpoint.
    pub files_added: u64,
    /// Bytes of those SST files.
    pub bytes_added: u64,
    /// Bytes of the private files (always written).
    pub private_bytes: u64,
}

/// One subtask's RocksDB at one checkpoint. See the module doc.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DbSnapshot {
    /// The task (operator subtask) whose storage directories hold the files.
    pub task: String,
    pub checkpoint_id: CheckpointId,
    /// Every SST of the DB, sorted by local name.
    pub shared: Vec<SharedFile>,
    /// Every other file of the RocksDB checkpoint, sorted by name.
    pub private: Vec<PrivateFile>,
    pub stats: SnapshotStats,
}

impl DbSnapshot {
    /// `(task, shared name)` of every shared file this snapshot needs: what GC must keep.
    pub fn shared_refs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.shared
            .iter()
            .map(|file| (self.task.clone(), file.shared_name.clone()))
    }

    /// Bytes of the whole DB at this checkpoint (shared and private files).
    pub fn total_bytes(&self) -> u64 {
        let shared: u64 = self.shared.iter().map(|file| file.size).sum();
        let private: u64 = self.private.iter().map(|file| file.size).sum();
        shared + private
    }
}
