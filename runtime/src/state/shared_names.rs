//! `SharedNames`: the names under which one DB lineage's SSTs live in shared storage.
//!
//! RocksDB numbers SST files uniquely only within one DB lineage. After a restore from
//! checkpoint c, the DB continues numbering from c's MANIFEST, and can create a
//! `000042.sst` whose name a discarded checkpoint newer than c already used for different
//! bytes. So a shared name is `<incarnation>-<local stem>`, where the incarnation is a
//! random-ish 64-bit id drawn for every `KeyedState` opened (fresh or restored).
//!
//! Invariants:
//! - A shared name always denotes the same bytes: local numbers never repeat within one
//!   incarnation, and incarnations are unique (random hasher keys, pid, time, counter).
//! - The map local name -> shared name holds the files of the last snapshot, or of the
//!   restored snapshot: such a file keeps its name, so an unchanged SST is never uploaded
//!   twice. Files that left the DB (compacted away) leave the map at the next snapshot.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::state::DbSnapshot;

/// Counts incarnations drawn by this process.
static INCARNATIONS: AtomicU64 = AtomicU64::new(0);

#[derive(Debug)]
pub(crate) struct SharedNames {
    incarnation: u64,
    by_local: HashMap<String, String>,
}

impl SharedNames {
    /// A new lineage: a fresh DB.
    pub(crate) fn new() -> Self {
        Self {
            incarnation: new_incarnation(),
            by_local: HashMap::new(),
        }
    }

    /// A new lineage continuing from `snapshot`: its files keep their shared names.
    pub(crate) fn restored(snapshot: &DbSnapshot) -> Self {
        let by_local = snapshot
            .shared
            .iter()
            .map(|file| (file.local_name.clone(), file.shared_name.clone()))
            .collect();
        Self {
            incarnation: new_incarnation(),
            by_local,
        }
    }

    /// The shared name of local SST `local_name` (e.g. `000012.sst`).
    pub(crate) fn shared_name(&self, local_name: &str) -> String {
        match self.by_local.get(local_name) {
            Some(name) => name.clone(),
            None => {
                let stem = local_name.strip_suffix(".sst").unwrap_or(local_name);
                format!("{:016x}-{stem}", self.incarnation)
            }
        }
    }

    /// Makes the map exactly the given (local name, shared name) pairs.
    pub(crate) fn replace(&mut self, files: impl IntoIterator<Item = (String, String)>) {
        self.by_local = files.into_iter().collect();
    }
}

fn new_incarnation() -> u64 {
    // RandomState is seeded randomly per process (and per instance); mixing in the pid,
    // the time and a counter keeps ids distinct even if that seeding were weak.
    let mut hasher = RandomState::new().build_hasher();
    std::process::id().hash(&mut hasher);
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        .hash(&mut hasher);
    INCARNATIONS
        .fetch_add(1, Ordering::Relaxed)
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_shared_names_differ_between_incarnations() {
        let a = SharedNames::new();
        let b = SharedNames::new();
        assert_ne!(a.shared_name("000042.sst"), b.shared_name("000042.sst"));
        assert!(a.shared_name("000042.sst").ends_with("-000042"));
        let mut a = a;
        a.replace([("000042.sst".to_owned(), "kept".to_owned())]);
        assert_eq!(a.shared_name("000042.sst"), "kept");
    }
}
