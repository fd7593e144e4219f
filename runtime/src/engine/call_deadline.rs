//! `CallDeadline`: the current guest call's deadline, as host functions that wait see it.
//!
//! Invariants:
//! - `GuestStore::call` arms it before every call (and instantiation) with the same
//!   number of ticks as the store's epoch deadline, counted on the same ticks
//!   ([`EpochClock`]): "the deadline has passed" means the same thing to wasmtime's
//!   epoch check in guest code and to a host function. Before the first call it has
//!   passed already (no guest code runs outside a call).
//! - A host function that waits (only `wasi:io/poll`, see `host_poll.rs`) never waits
//!   past it: when it passes, the host function fails with [`DeadlineReached`], which
//!   the store reports as `EngineError::CpuDeadline`, exactly like an interrupt in guest
//!   code. So time a guest spends blocked in the host counts against its deadline, and
//!   blocking ends there.
//! - Arming costs one relaxed atomic load and one store: a call that never waits in the
//!   host does not read the wall clock.

use std::time::Duration;

use super::epoch_ticker::{EPOCH_TICK, EpochClock};

/// The tick at which the current call's deadline passes.
#[derive(Debug)]
pub(crate) struct CallDeadline {
    clock: EpochClock,
    /// Tick (on `clock`) at which the deadline passes.
    deadline: u64,
}

impl CallDeadline {
    /// A deadline on `clock`, already passed until [`CallDeadline::arm`] is called.
    pub(crate) fn new(clock: EpochClock) -> Self {
        Self { clock, deadline: 0 }
    }

    /// Starts a call that may run `ticks` more ticks (the store's epoch deadline).
    pub(crate) fn arm(&mut self, ticks: u64) {
        self.deadline = self.clock.now().saturating_add(ticks);
    }

    /// Time left before the deadline, estimated from the ticks left (zero once it has
    /// passed). Ticks come no faster than [`EPOCH_TICK`], so waiting this long never
    /// overshoots the deadline; a waiter that wakes early checks again.
    pub(crate) fn remaining(&self) -> Duration {
        let ticks = self.deadline.saturating_sub(self.clock.now());
        EPOCH_TICK
            .checked_mul(u32::try_from(ticks).unwrap_or(u32::MAX))
            .unwrap_or(Duration::MAX)
    }
}

/// The error a waiting host function fails with when the call's deadline passes; the
/// store classifies it as `EngineError::CpuDeadline`.
#[derive(Debug, thiserror::Error)]
#[error("guest call reached its deadline while waiting in a host call")]
pub(crate) struct DeadlineReached;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_counted_in_ticks_and_passed_until_armed() {
        let clock = EpochClock::default();
        let mut deadline = CallDeadline::new(clock.clone());
        assert_eq!(deadline.remaining(), Duration::ZERO);
        deadline.arm(3);
        assert_eq!(deadline.remaining(), EPOCH_TICK * 3);
        deadline.arm(u64::MAX);
        assert!(deadline.remaining() >= Duration::from_secs(365 * 24 * 3600));
    }
}
