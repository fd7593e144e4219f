//! Per-instance resource limits, and the `ResourceLimiter` that enforces them.
//!
//! Invariants:
//! - The total linear memory of one guest instance (every memory of every core instance
//!   inside the component, summed) never exceeds [`GuestLimits::memory_bytes`]. A growth
//!   past it is refused (`memory.grow` returns -1 to the guest) and remembered, so that
//!   the trap the guest then raises (Rust aborts on allocation failure) is reported as
//!   `EngineError::MemoryLimit`, not as a vague `unreachable`.
//! - A guest that recovers from a refused growth (e.g. `Vec::try_reserve`) is not
//!   punished: the "limit hit" mark is cleared before every call and only consulted when
//!   that call fails.
//! - One call into a guest runs at most [`GuestLimits::call_timeout`] plus one epoch tick
//!   (see `epoch_ticker.rs`), counting the time it spends waiting in host calls (see
//!   `call_deadline.rs`).

use std::time::Duration;

use wasmtime::ResourceLimiter;

use super::guest_log_budget::GuestLogBudget;

/// Default linear memory per guest instance.
pub const DEFAULT_GUEST_MEMORY: usize = 64 << 20; // 64 MiB

/// Default wall-clock budget of one guest call (one batch), host calls included.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// Table elements per instance: generous for any real guest (Rust guests use a few
/// hundred), small enough that a hostile `table.grow` cannot exhaust host memory.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// Limits applied to every instance of a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLimits {
    /// Total linear memory of one instance, in bytes.
    pub memory_bytes: usize,
    /// Longest one call into the guest may run (measured in epoch ticks, so the real
    /// bound is this plus one tick), time blocked in host calls (a sleep) included.
    pub call_timeout: Duration,
    /// The run's budget of guest text (stdout, stderr, `log`), shared by every
    /// instance: clone one budget into every step's limits.
    pub log: GuestLogBudget,
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            memory_bytes: DEFAULT_GUEST_MEMORY,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            log: GuestLogBudget::default(),
        }
    }
}

/// Enforces [`GuestLimits::memory_bytes`] over all memories of one store and records
/// whether a growth was refused.
#[derive(Debug)]
pub(crate) struct GuestLimiter {
    limit_bytes: usize,
    /// Bytes granted so far, over all memories of the store. Wasm memories never shrink.
    granted_bytes: usize,
    /// Set when a growth was refused since the last [`GuestLimiter::reset_hit`].
    hit: bool,
}

impl GuestLimiter {
    pub(crate) fn new(limit_bytes: usize) -> Self {
        Self {
            limit_bytes,
            granted_bytes: 0,
            hit: false,
        }
    }

    pub(crate) fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    /// The instance's linear memory now, over all its memories (wasm memories never
    /// shrink, and every growth, the initial size included, passes through here).
    pub(crate) fn granted_bytes(&self) -> usize {
        self.granted_bytes
    }

    /// Whether a memory growth was refused since the last reset.
    pub(crate) fn hit(&self) -> bool {
        self.hit
    }

    pub(crate) fn reset_hit(&mut self) {
        self.hit = false;
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        let extra = desired.saturating_sub(current);
        match self.granted_bytes.checked_add(extra) {
            Some(total) if total <= self.limit_bytes => {
                self.granted_bytes = total;
                Ok(true)
            }
            _ => {
                self.hit = true;
                Ok(false)
            }
        }
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS && maximum.is_none_or(|max| desired <= max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_summed_over_memories_and_refusal_is_recorded() {
        let mut l = GuestLimiter::new(10 << 16);
        assert!(l.memory_growing(0, 6 << 16, None).expect("limiter"));
        assert!(l.memory_growing(0, 4 << 16, None).expect("limiter")); // a second memory
        assert!(!l.hit());
        assert!(!l.memory_growing(6 << 16, 7 << 16, None).expect("limiter"));
        assert!(l.hit());
        l.reset_hit();
        assert!(!l.hit());
    }
}
