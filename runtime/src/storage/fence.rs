//! `Fence`: the flag an instance raises when it learns it no longer owns its pipeline.
//!
//! Invariant: once raised, it stays raised, and checkpoint storage refuses every write
//! (no snapshot upload, no metadata, no discard, no retention or garbage collection).
//! An instance learns it was fenced from Kafka (another instance initialised the same
//! transactional ids, or the broker aborted its transaction); from then on the storage
//! it shares with the new owner is the new owner's, and a stale retention pass could
//! delete a shared file the new owner just uploaded.

use std::sync::{Arc, OnceLock};

/// Cheap to clone: every clone sees the same flag, and the reason it was raised for.
#[derive(Debug, Clone, Default)]
pub struct Fence(Arc<OnceLock<String>>);

impl Fence {
    /// Raises the fence; `reason` says why (the first one given is kept), and becomes
    /// part of every refused write's error.
    pub fn raise(&self, reason: impl Into<String>) {
        let _ = self.0.set(reason.into());
    }

    /// Why the fence was raised, if it was.
    pub fn reason(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}
