//! `Fence`: the flag an instance raises when it learns it no longer owns its pipeline.
//!
//! Invariant: once raised, it stays raised, and checkpoint storage refuses every write
//! (no snapshot upload, no metadata, no discard, no retention or garbage collection).
//! An instance learns it was fenced from Kafka (another instance initialised the same
//! transactional ids, or the broker aborted its transaction); from then on the storage
//! it shares with the new owner is the new owner's, and a stale retention pass could
//! delete a shared file the new owner just uploaded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Cheap to clone: every clone sees the same flag.
#[derive(Debug, Clone, Default)]
pub struct Fence(Arc<AtomicBool>);

impl Fence {
    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
