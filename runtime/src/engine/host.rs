//! `HostState`: the data of one guest's `Store`, and the host functions it backs.
//!
//! Invariants:
//! - One `HostState` per guest instance; nothing in it is shared with another instance
//!   except the module name.
//! - The WASI context grants nothing, though all of WASI 0.2 is linked (`linker.rs`):
//!   no preopened directory (`wasi:filesystem` has no descriptor to act on, every path
//!   fails), no environment variable, no argument, no working directory, stdin closed
//!   (reads end at once), TCP, UDP and `ip-name-lookup` disallowed and every socket
//!   address refused by the address check as well, so no socket is created, bound or
//!   connected and no name is resolved. Each refusal is an error the guest sees and
//!   may handle, never a trap.
//! - stdout and stderr are not WASI's own streams: `get-stdout`/`get-stderr` are
//!   implemented here and hand out [`GuestOutput`] handles, so guest output lands in
//!   `tracing`, tagged with the module, bounded (`guest_output.rs`).
//! - `weir:transform/log` writes to `tracing` with the module name, the message escaped
//!   onto one line (`guest_text::escape`), within the run's `GuestLogBudget` as guest
//!   stdout and stderr are; `config.get` reads
//!   only this instance's step configuration.
//! - No host function here panics on guest input, and none fails except on a full
//!   resource table (below): overlong log messages are truncated, unknown config names
//!   are `none`.
//! - The guest's resource table holds at most [`MAX_GUEST_RESOURCES`] live entries, so
//!   host calls that create handles (`instance-network`, stdio, pollables) in a loop
//!   cannot grow host memory without bound; past it the host call fails and the guest
//!   traps.
//! - `deadline` is the current call's [`CallDeadline`]; the only host functions that wait
//!   (`wasi:io/poll`, in `host_poll.rs`) stop waiting when it passes.

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::DynOutputStream;
use wasmtime_wasi::p2::bindings::cli::{stderr, stdout};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{wit_config, wit_log, wit_types};
use super::call_deadline::CallDeadline;
use super::guest_log_budget::GuestLogBudget;
use super::guest_output::{GuestOutput, Stdio};
use super::guest_text::escape;
use super::limits::GuestLimiter;

/// Longest `log` message passed on to `tracing`; the rest is cut.
const MAX_LOG_MESSAGE: usize = 16 << 10; // 16 KiB
/// Largest `wasi:random` request served in one call (wasmtime-wasi's default is 64 MiB,
/// a needless host allocation for a guest that only seeds a hash map).
const MAX_RANDOM_BYTES: u64 = 1 << 20; // 1 MiB
/// Live resource-table entries (streams, pollables and what they wait on, networks,
/// ...) one guest instance may hold. A real guest holds a handful (an interpreter a few
/// dozen); wasmtime's default (1,000,000) would let a loop of `instance-network` calls
/// pin ~100 MB of host memory per instance.
const MAX_GUEST_RESOURCES: usize = 1 << 14; // 16,384

/// The `T` of every guest `Store<T>`.
pub(crate) struct HostState {
    module: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    config: BTreeMap<String, String>,
    pub(crate) limiter: GuestLimiter,
    pub(crate) output: GuestOutput,
    pub(crate) deadline: CallDeadline,
    /// The run's budget of guest text, which `log` messages spend too.
    log_budget: GuestLogBudget,
}

impl HostState {
    pub(crate) fn new(
        module: Arc<str>,
        config: BTreeMap<String, String>,
        limiter: GuestLimiter,
        deadline: CallDeadline,
        log_budget: GuestLogBudget,
    ) -> Self {
        // Spelled out rather than left to wasmtime-wasi's defaults, which may change.
        let wasi = WasiCtxBuilder::new()
            .max_random_size(MAX_RANDOM_BYTES)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_addr, _use| Box::pin(async { false }))
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_GUEST_RESOURCES);
        Self {
            output: GuestOutput::new(module.clone(), log_budget.clone()),
            log_budget,
            module,
            wasi,
            table,
            config,
            limiter,
            deadline,
        }
    }

    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    fn push_stdio(&mut self, stream: Stdio) -> wasmtime::Result<Resource<DynOutputStream>> {
        let handle: DynOutputStream = Box::new(self.output.stream(stream));
        Ok(self.table.push(handle)?)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl stdout::Host for HostState {
    fn get_stdout(&mut self) -> wasmtime::Result<Resource<DynOutputStream>> {
        self.push_stdio(Stdio::Stdout)
    }
}

impl stderr::Host for HostState {
    fn get_stderr(&mut self) -> wasmtime::Result<Resource<DynOutputStream>> {
        self.push_stdio(Stdio::Stderr)
    }
}

impl wit_types::Host for HostState {}

impl wit_log::Host for HostState {
    fn log(&mut self, level: wit_log::Level, message: String) {
        let message = truncate(&message, MAX_LOG_MESSAGE);
        let module = &*self.module;
        if !self.log_budget.admit(module, message.len()) {
            return;
        }
        let message = escape(message);
        match level {
            wit_log::Level::Trace => {
                tracing::trace!(target: "weir::guest", "{module} log: {message}")
            }
            wit_log::Level::Debug => {
                tracing::debug!(target: "weir::guest", "{module} log: {message}")
            }
            wit_log::Level::Info => {
                tracing::info!(target: "weir::guest", "{module} log: {message}")
            }
            wit_log::Level::Warn => {
                tracing::warn!(target: "weir::guest", "{module} log: {message}")
            }
            wit_log::Level::Error => {
                tracing::error!(target: "weir::guest", "{module} log: {message}")
            }
        }
    }
}

impl wit_config::Host for HostState {
    fn get(&mut self, name: String) -> Option<String> {
        self.config.get(&name).cloned()
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
