//! `GuestStore`: one guest instance's `Store` and the discipline of every call into it.
//!
//! Invariants, for instantiation and for every call:
//! - Before: the epoch deadline is reset to `call_timeout` (rounded up to whole ticks,
//!   plus one tick), and the host's `CallDeadline` armed with the same ticks, the memory
//!   limiter's "limit hit" mark is cleared and the stderr tail emptied. So no call can
//!   run longer than `call_timeout` + one `EPOCH_TICK`, whether the guest computes or
//!   waits in a host call (`host_poll.rs` cuts every wait off at the deadline).
//! - After a failure the error is classified, most specific first: epoch interrupt, or
//!   the deadline passing in a host call (`DeadlineReached`) -> `CpuDeadline`; refused
//!   memory growth -> `MemoryLimit`; hostcall fuel exhausted (more than
//!   `MAX_GUEST_TRANSFER_BYTES` passed to the host at once) -> `TransferLimit`; an SDK's
//!   uncaught-exception line on stderr -> `GuestException`; a Rust panic message on
//!   stderr -> `GuestPanic`; anything else -> `Trap` (with the guest's
//!   stderr and the wasm backtrace when there is one). Every message is one line:
//!   guest text escaped, wasmtime's lines joined (`guest_text.rs`).
//! - After any such failure the store is poisoned: every later call returns `Poisoned`
//!   without entering the guest. The caller instantiates again from its `GuestModule`.
//! - Recycling: the linear memory an instance has right after instantiation is its
//!   baseline, and `limits.memory_bytes` minus the baseline its headroom. Once an
//!   instance has grown by half its headroom, `wants_recycling` says so, and its owner
//!   replaces it with a fresh instance before the next call. A guest's memory never
//!   shrinks, and the interpreted guests' toolchains never give some of it back (a
//!   componentize-js guest runs no garbage collection during calls, a
//!   componentize-py guest never frees the bytes lists it returns), so without this a
//!   long run would end at the memory limit; with it, an instance's memory stays below
//!   its baseline plus half its headroom (plus one call's growth), over any number of
//!   calls. A guest that does not leak never reaches the mark and is never recycled.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::{Store, Trap, WasmBacktrace};

use super::call_deadline::{CallDeadline, DeadlineReached};
use super::code_tier::InstanceTier;
use super::epoch_ticker::{EPOCH_TICK, EpochTicker};
use super::error::EngineError;
use super::guest_output::{panic_message, uncaught_exception};
use super::guest_text::{escape, one_line};
use super::host::HostState;
use super::limits::{GuestLimiter, GuestLimits};
use super::output_limits::MAX_GUEST_TRANSFER_BYTES;

/// Longest trap description kept in an error message.
const MAX_TRAP_MESSAGE: usize = 4 << 10; // 4 KiB

pub(crate) struct GuestStore {
    module: Arc<str>,
    limits: GuestLimits,
    /// `limits.call_timeout` in epoch ticks, computed once.
    deadline_ticks: u64,
    store: Store<HostState>,
    /// Why the instance is unusable, once it is.
    poisoned: Option<String>,
    /// Linear memory right after instantiation (the first successful call).
    baseline_bytes: Option<usize>,
    /// The code tier this instance was made from, and its module's.
    tier: InstanceTier,
    /// Keeps the deadline firing while this instance lives.
    _ticker: Arc<EpochTicker>,
}

impl GuestStore {
    pub(crate) fn new(
        engine: &wasmtime::Engine,
        module: Arc<str>,
        ticker: Arc<EpochTicker>,
        tier: InstanceTier,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Self {
        let state = HostState::new(
            module.clone(),
            config,
            GuestLimiter::new(limits.memory_bytes),
            CallDeadline::new(ticker.clock().clone()),
            limits.log.clone(),
        );
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_trap();
        store.set_hostcall_fuel(MAX_GUEST_TRANSFER_BYTES);
        Self {
            module,
            limits: limits.clone(),
            deadline_ticks: deadline_ticks(limits.call_timeout),
            store,
            poisoned: None,
            baseline_bytes: None,
            tier,
            _ticker: ticker,
        }
    }

    pub(crate) fn module(&self) -> &str {
        &self.module
    }

    /// The instance's linear memory in bytes, all its memories summed.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.store.data().limiter.granted_bytes()
    }

    /// Whether the instance has grown by half the headroom it started with (see the
    /// module's invariants): its owner should replace it before the next call.
    pub(crate) fn wants_recycling(&self) -> bool {
        self.baseline_bytes.is_some_and(|baseline| {
            past_recycling_mark(self.memory_bytes(), baseline, self.limits.memory_bytes)
        })
    }

    /// Whether the module has faster code than this instance was made from: its owner
    /// should replace it before the next call (see `code_tier.rs`).
    pub(crate) fn code_outdated(&self) -> bool {
        self.tier.outdated()
    }

    /// Runs `f` (an instantiation or one export call) under the limits.
    pub(crate) fn call<R>(
        &mut self,
        f: impl FnOnce(&mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, EngineError> {
        if let Some(cause) = &self.poisoned {
            return Err(EngineError::Poisoned {
                module: self.module.to_string(),
                cause: cause.clone(),
            });
        }
        self.store.set_epoch_deadline(self.deadline_ticks);
        let state = self.store.data_mut();
        state.deadline.arm(self.deadline_ticks);
        state.limiter.reset_hit();
        self.store.data().output.start_call();
        let result = f(&mut self.store);
        self.store.data().output.flush();
        if result.is_ok() && self.baseline_bytes.is_none() {
            self.baseline_bytes = Some(self.memory_bytes());
        }
        result.map_err(|e| {
            let err = self.classify(&e);
            tracing::debug!(module = &*self.module, error = ?e, "guest call failed");
            let text = err.to_string();
            let cause = text
                .strip_prefix(&format!("{}: ", self.module))
                .unwrap_or(&text);
            self.poisoned = Some(cause.to_owned());
            err
        })
    }

    fn classify(&self, e: &wasmtime::Error) -> EngineError {
        let module = self.module.to_string();
        let state = self.store.data();
        if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt))
            || e.downcast_ref::<DeadlineReached>().is_some()
        {
            return EngineError::CpuDeadline {
                module,
                timeout: self.limits.call_timeout,
            };
        }
        if state.limiter.hit() {
            return EngineError::MemoryLimit {
                module,
                limit_bytes: state.limiter.limit_bytes(),
            };
        }
        if is_hostcall_fuel_exhausted(e) {
            return EngineError::TransferLimit {
                module,
                limit_bytes: MAX_GUEST_TRANSFER_BYTES,
            };
        }
        let stderr = state.output.stderr_tail();
        if let Some(message) = uncaught_exception(&stderr) {
            return EngineError::GuestException { module, message };
        }
        if let Some(message) = panic_message(&stderr) {
            return EngineError::GuestPanic { module, message };
        }
        let backtrace = e.downcast_ref::<WasmBacktrace>().map(ToString::to_string);
        let mut message = match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => format!("guest called exit({})", exit.0),
            None => match e.downcast_ref::<Trap>() {
                Some(trap) => one_line(&trap.to_string()),
                // The chain without the backtrace context (appended once, below).
                None => one_line(
                    &e.chain()
                        .map(|cause| cause.to_string())
                        .filter(|cause| Some(cause) != backtrace.as_ref())
                        .collect::<Vec<_>>()
                        .join(": "),
                ),
            },
        };
        if !stderr.trim().is_empty() {
            message.push_str("; guest stderr: ");
            message.push_str(&escape(stderr.trim_end()));
        }
        if let Some(bt) = &backtrace {
            message.push_str("; ");
            message.push_str(&one_line(bt));
        }
        if message.len() > MAX_TRAP_MESSAGE {
            let mut end = MAX_TRAP_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str(" ...");
        }
        EngineError::Trap { module, message }
    }
}

/// Whether `e` is wasmtime's "hostcall fuel exhausted" trap. Its type is private to
/// wasmtime, so it is recognised by its message (pinned by an engine test).
fn is_hostcall_fuel_exhausted(e: &wasmtime::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    })
}

/// Whether an instance now at `memory` bytes, which had `baseline` bytes right after
/// instantiation, has grown by half its headroom up to `limit` (see the module's
/// invariants).
fn past_recycling_mark(memory: usize, baseline: usize, limit: usize) -> bool {
    let grown = memory.saturating_sub(baseline);
    let headroom = limit.saturating_sub(baseline);
    grown > 0 && grown.saturating_mul(2) >= headroom
}

/// Epoch ticks to allow for `timeout`: rounded up, plus one because the first tick may
/// come at any moment after the deadline is set.
fn deadline_ticks(timeout: std::time::Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos();
    let ticks = timeout.as_nanos().div_ceil(tick).max(1);
    u64::try_from(ticks).unwrap_or(u64::MAX - 1) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_instance_is_recycled_once_it_used_half_its_headroom() {
        const MIB: usize = 1 << 20;
        // 10 MiB at start under 64 MiB: the mark is 37 MiB.
        assert!(!past_recycling_mark(10 * MIB, 10 * MIB, 64 * MIB));
        assert!(!past_recycling_mark(37 * MIB - 1, 10 * MIB, 64 * MIB));
        assert!(past_recycling_mark(37 * MIB, 10 * MIB, 64 * MIB));
        // Near its limit from the start: half of what is left, never at every call.
        assert!(!past_recycling_mark(63 * MIB, 63 * MIB, 64 * MIB));
        assert!(!past_recycling_mark(
            63 * MIB + (64 << 10),
            63 * MIB,
            64 * MIB
        ));
        assert!(past_recycling_mark(63 * MIB + MIB / 2, 63 * MIB, 64 * MIB));
        // No growth is never a reason, whatever the headroom.
        assert!(!past_recycling_mark(70 * MIB, 70 * MIB, 64 * MIB));
    }

    #[test]
    fn deadline_rounds_up_and_adds_a_tick() {
        assert_eq!(deadline_ticks(Duration::from_secs(1)), 101);
        assert_eq!(deadline_ticks(Duration::from_millis(15)), 3);
        assert_eq!(deadline_ticks(Duration::ZERO), 2);
    }
}
