//! The two `Linker`s (one per weir world), built once per `WasmEngine`.
//!
//! Invariants:
//! - A linker defines weir's own imports (`types`, `log`, `config`) and exactly the WASI
//!   interfaces in [`super::import_policy::ALLOWED_IMPORTS`], each added on its own with
//!   wasmtime-wasi's per-interface `add_to_linker` (sync p2 bindings). Filesystem,
//!   sockets and http are never linked, so even a component that slipped past the load
//!   check could not be instantiated against them.
//! - `wasi:io/poll` is served by `HostState` (`host_poll.rs`), not by wasmtime-wasi's
//!   table-only implementation: every wait is cut off at the call's deadline.
//! - `wasi:cli/stdout` and `wasi:cli/stderr` are served by `HostState` (guest output goes
//!   to `tracing`), not by wasmtime-wasi's `WasiCtx` streams.
//! - Keep this list and `ALLOWED_IMPORTS` in step: the unit test `allowlist_is_linked`
//!   instantiates nothing but checks every allowed interface resolves in both linkers.

use wasmtime::Engine;
use wasmtime::component::{HasData, HasSelf, Linker, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::p2::bindings::{cli, clocks, random, sync};
use wasmtime_wasi::random::{WasiRandom, WasiRandomView};

use super::bindings::{aggregator::Aggregator, mapper::Mapper};
use super::host::HostState;

/// The linker for components exporting `weir:transform/map`.
pub(crate) fn mapper_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    Mapper::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
    add_sandboxed_wasi(&mut linker)?;
    Ok(linker)
}

/// The linker for components exporting `weir:transform/aggregate`.
pub(crate) fn aggregator_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    Aggregator::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
    add_sandboxed_wasi(&mut linker)?;
    Ok(linker)
}

/// `wasi:io` host traits are implemented on the resource table itself.
struct HasIo;

impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

/// The WASI subset Rust's std needs, and nothing more (see `import_policy.rs`).
fn add_sandboxed_wasi(l: &mut Linker<HostState>) -> wasmtime::Result<()> {
    type T = HostState;

    sync::io::error::add_to_linker::<T, HasIo>(l, T::table)?;
    sync::io::poll::add_to_linker::<T, HasSelf<T>>(l, |s| s)?;
    sync::io::streams::add_to_linker::<T, HasIo>(l, T::table)?;

    clocks::wall_clock::add_to_linker::<T, WasiClocks>(l, <T as WasiClocksView>::clocks)?;
    clocks::monotonic_clock::add_to_linker::<T, WasiClocks>(l, <T as WasiClocksView>::clocks)?;

    random::random::add_to_linker::<T, WasiRandom>(l, <T as WasiRandomView>::random)?;
    random::insecure::add_to_linker::<T, WasiRandom>(l, <T as WasiRandomView>::random)?;
    random::insecure_seed::add_to_linker::<T, WasiRandom>(l, <T as WasiRandomView>::random)?;

    let cli_view = <T as WasiCliView>::cli;
    cli::exit::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::environment::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::stdin::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::stdout::add_to_linker::<T, HasSelf<T>>(l, |s| s)?;
    cli::stderr::add_to_linker::<T, HasSelf<T>>(l, |s| s)?;
    cli::terminal_input::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::terminal_output::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::terminal_stdin::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::terminal_stdout::add_to_linker::<T, WasiCli>(l, cli_view)?;
    cli::terminal_stderr::add_to_linker::<T, WasiCli>(l, cli_view)?;
    Ok(())
}
