//! `wasi:io/poll` for guests: no wait outlives the current call's deadline.
//!
//! Invariants:
//! - `poll` and `pollable.block` are the only host functions a guest can wait in. Every
//!   other linked import returns at once: stdout and stderr never block
//!   (`guest_output.rs`), stdin is closed, clocks, random, exit, environment, terminal
//!   and weir's own imports do not wait, and files and sockets are linked but grant
//!   nothing (`host.rs`): with no preopened directory no file descriptor exists, and
//!   with TCP, UDP and name lookup disallowed no socket or lookup does, so no
//!   (blocking) filesystem or socket operation ever starts. Bounding these two bounds
//!   the time of every host call; a guest's `std::thread::sleep`
//!   (`monotonic-clock.subscribe-duration` + `block`, or `poll`) is one of them.
//! - Each wait is wasmtime-wasi's own poll over the guest's pollables plus one host timer
//!   (a `monotonic-clock` pollable) set to the call's remaining time
//!   ([`CallDeadline::remaining`]). If a guest pollable is ready, the guest gets what
//!   wasmtime-wasi would have returned (without the timer's index). If only the timer
//!   fired, the deadline is checked on the epoch clock: passed -> the call fails with
//!   [`DeadlineReached`] (reported as the usual deadline error naming the module);
//!   not yet (ticks run late) -> wait again for what is left.
//! - The timer resource is deleted before the function returns, whatever the outcome,
//!   so the guest's resource table does not grow with its polls.
//! - `pollable.ready` never waits and is wasmtime-wasi's unchanged.

use wasmtime::component::Resource;
use wasmtime_wasi::clocks::WasiClocksView;
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as _;
use wasmtime_wasi::p2::bindings::sync::io::poll;

use super::call_deadline::DeadlineReached;
use super::host::HostState;

impl poll::Host for HostState {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        self.poll_until_deadline(pollables)
    }
}

impl poll::HostPollable for HostState {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        poll::HostPollable::ready(self.table(), pollable)
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        self.poll_until_deadline(vec![pollable]).map(|_ready| ())
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        poll::HostPollable::drop(self.table(), pollable)
    }
}

impl HostState {
    /// `poll(pollables)`, cut off at the call's deadline with [`DeadlineReached`].
    fn poll_until_deadline(
        &mut self,
        pollables: Vec<Resource<DynPollable>>,
    ) -> wasmtime::Result<Vec<u32>> {
        if pollables.is_empty() {
            // wasmtime-wasi traps on an empty list; keep its error.
            return poll::Host::poll(self.table(), pollables);
        }
        let timer_index = u32::try_from(pollables.len())?;
        loop {
            let left = self.deadline.remaining();
            if left.is_zero() {
                return Err(DeadlineReached.into());
            }
            let nanos = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
            let timer = self.clocks().subscribe_duration(nanos)?;
            // The guest's handles are borrows (`list<borrow<pollable>>`, `borrow<pollable>`):
            // passing them again by representation is what the guest did.
            let list = pollables
                .iter()
                .map(|p| Resource::new_borrow(p.rep()))
                .chain([Resource::new_borrow(timer.rep())])
                .collect();
            let ready = poll::Host::poll(self.table(), list);
            poll::HostPollable::drop(self.table(), timer)?;
            let mut ready = ready?;
            ready.retain(|&i| i != timer_index);
            if !ready.is_empty() {
                return Ok(ready);
            }
        }
    }
}
