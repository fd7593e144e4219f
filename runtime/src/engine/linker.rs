//! The two `Linker`s (one per weir world), built once per `WasmEngine`.
//!
//! Invariants:
//! - A linker defines weir's own imports (`types`, `log`, `config`) and exactly the WASI
//!   0.2 interfaces in [`super::import_policy::ALLOWED_IMPORTS`], each added on its own
//!   with wasmtime-wasi's per-interface `add_to_linker` (sync p2 bindings), so a
//!   component the load check accepts always links. `wasi:http` is not linked (weir does
//!   not depend on wasmtime-wasi-http): a component importing it is refused at load.
//! - Filesystem, sockets and environment are linked deny-by-default: they are served
//!   from the guest's `WasiCtx` (`host.rs`), which has no preopened directory (so no
//!   `descriptor` ever exists and every `wasi:filesystem/types` call has nothing to act
//!   on), no environment variable, argument or working directory, TCP, UDP and name
//!   lookup disallowed and every socket address refused. Linking grants the names, not
//!   access.
//! - `wasi:io/poll` is served by `HostState` (`host_poll.rs`), not by wasmtime-wasi's
//!   table-only implementation: every wait is cut off at the call's deadline.
//! - `wasi:cli/stdout` and `wasi:cli/stderr` are served by `HostState` (guest output goes
//!   to `tracing`, bounded), not by wasmtime-wasi's `WasiCtx` streams.
//! - Keep this list and `ALLOWED_IMPORTS` in step: the engine test
//!   `every_allowed_import_is_linked_in_both_worlds` loads a component importing every
//!   allowed interface against both linkers.

use wasmtime::Engine;
use wasmtime::component::{HasData, HasSelf, Linker, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sockets, sync};
use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};

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

/// All of WASI 0.2, deny-by-default (see `import_policy.rs` and `host.rs`).
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

    let fs_view = <T as WasiFilesystemView>::filesystem;
    filesystem::preopens::add_to_linker::<T, WasiFilesystem>(l, fs_view)?;
    sync::filesystem::types::add_to_linker::<T, WasiFilesystem>(l, fs_view)?;

    let net_view = <T as WasiSocketsView>::sockets;
    let net_options = sockets::network::LinkOptions::default();
    sockets::network::add_to_linker::<T, WasiSockets>(l, &net_options, net_view)?;
    sockets::instance_network::add_to_linker::<T, WasiSockets>(l, net_view)?;
    sockets::tcp_create_socket::add_to_linker::<T, WasiSockets>(l, net_view)?;
    sockets::ip_name_lookup::add_to_linker::<T, WasiSockets>(l, net_view)?;
    sync::sockets::tcp::add_to_linker::<T, WasiSockets>(l, net_view)?;
    sync::sockets::udp::add_to_linker::<T, WasiSockets>(l, net_view)?;
    sync::sockets::udp_create_socket::add_to_linker::<T, WasiSockets>(l, net_view)?;
    Ok(())
}
