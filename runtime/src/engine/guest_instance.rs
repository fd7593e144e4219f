//! `GuestInstance`: what a live guest instance tells the operator that owns it, whatever
//! its world.
//!
//! Invariant: `memory_bytes` is the instance's linear memory now, all its memories
//! summed, as the memory limit counts it (it never shrinks while the instance lives);
//! `wants_recycling` is true once the instance has grown by half the headroom it started
//! with (see `guest_store.rs`, recycling), and then the owner drops it and instantiates
//! a fresh one before its next call. `code_outdated` is true once the module has faster
//! code than the instance was made from (see `code_tier.rs`); the owner replaces it the
//! same way.

pub trait GuestInstance {
    /// The module this instance runs.
    fn module_name(&self) -> &str;
    /// The instance's linear memory in bytes.
    fn memory_bytes(&self) -> usize;
    /// Whether to replace the instance with a fresh one before its next call.
    fn wants_recycling(&self) -> bool;
    /// Whether the module has faster code than this instance runs.
    fn code_outdated(&self) -> bool;
}
