//! `WasmEngine`: the one wasmtime `Engine` of the process, its linkers, compiled-code
//! cache and epoch ticker; the entry point for loading guests.
//!
//! Invariants:
//! - One `Engine`: component model on, epoch interruption on (every store traps when
//!   its deadline passes, see `guest_store.rs`), no `unsafe` anywhere: compiled artifacts
//!   are reused through wasmtime's own `cache` feature (keyed by the module's hash and
//!   wasmtime's version and configuration), never through `Component::deserialize`.
//! - The two linkers are built once here and shared by every module loaded.
//! - A `GuestModule` only exists for bytes that passed every load check (see
//!   `guest_module.rs`); loading never instantiates guest code.
//! - A module file is checked before it is read: it must be a regular file (a FIFO,
//!   a device or a directory is refused without opening it, so `/dev/zero` or a pipe
//!   never blocks or streams) of at most [`MAX_MODULE_BYTES`], and no more than that is
//!   ever read (a file growing meanwhile is refused too). `weir validate` and `weir run`
//!   go through the same [`WasmEngine::load`], so they share the limit.
//! - With a [`CompileIsolation`], a module is first compiled in a child process under
//!   CPU-time and memory limits (see `compile_isolation.rs`); only one that compiled
//!   there is compiled here.
//! - Compilation errors are one line (wasmparser's multi-line messages are joined), and
//!   wasmtime's own log lines while compiling (warnings about unparseable custom
//!   sections) are not shown: they are about guest bytes, and would be extra lines.
//! - The epoch ticker is shared (`Arc`) by the engine, every `GuestModule` and every
//!   instance: it stops and joins when the last of them is dropped, so a live instance
//!   always has a working deadline whatever the drop order.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::component::{Component, Linker};
use wasmtime::{Cache, CacheConfig, Config, Engine};

use super::compile_isolation::CompileIsolation;
use super::epoch_ticker::EpochTicker;
use super::error::EngineError;
use super::guest_module::GuestModule;
use super::guest_text::one_line;
use super::host::HostState;
use super::linker::{aggregator_linker, mapper_linker};

/// Largest module file accepted, checked before reading it. Real guests are a few
/// MiB at most (the examples are under 1 MiB); compiling is the expensive part, and a
/// bound keeps a wrong path (a disk image, `/dev/zero`) from being read into memory.
pub const MAX_MODULE_BYTES: u64 = 64 << 20; // 64 MiB

/// The process-wide WebAssembly engine.
pub struct WasmEngine {
    engine: Engine,
    mapper_linker: Linker<HostState>,
    aggregator_linker: Linker<HostState>,
    cache: Option<Cache>,
    cache_dir: Option<PathBuf>,
    /// Compile each module in a limited child process first (see `compile_isolation.rs`).
    isolation: Option<CompileIsolation>,
    ticker: Arc<EpochTicker>,
}

impl fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WasmEngine")
            .field("cache_dir", &self.cache.as_ref().map(|c| c.directory()))
            .finish_non_exhaustive()
    }
}

impl WasmEngine {
    /// Creates the engine. With `cache_dir`, compiled components are cached on disk there
    /// (created if missing) and reused by later runs with the same wasmtime build.
    pub fn new(cache_dir: Option<&Path>) -> Result<WasmEngine, EngineError> {
        let mut config = Config::new();
        config.wasm_component_model(true).epoch_interruption(true);
        let cache = cache_dir.map(open_cache).transpose()?;
        config.cache(cache.clone());
        let engine = Engine::new(&config).map_err(|e| setup("wasmtime configuration", e))?;
        let mapper_linker = mapper_linker(&engine).map_err(|e| setup("linking world mapper", e))?;
        let aggregator_linker =
            aggregator_linker(&engine).map_err(|e| setup("linking world aggregator", e))?;
        let ticker = EpochTicker::start(engine.clone()).map_err(|e| {
            EngineError::Setup(format!("cannot start the epoch ticker thread: {e}"))
        })?;
        Ok(WasmEngine {
            engine,
            mapper_linker,
            aggregator_linker,
            cache,
            cache_dir: cache_dir.map(Path::to_path_buf),
            isolation: None,
            ticker: Arc::new(ticker),
        })
    }

    /// From now on, compiles every module in a child process under `isolation`'s limits
    /// before compiling it here (a cache hit when the engine has a cache).
    pub fn with_compile_isolation(mut self, isolation: CompileIsolation) -> WasmEngine {
        self.isolation = Some(isolation);
        self
    }

    /// Loads, compiles (or fetches from the cache) and checks the component at `path`.
    /// The module is named by its file name.
    pub fn load(&self, path: &Path) -> Result<GuestModule, EngineError> {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let bytes = read_module_file(path, &name)?;
        self.load_bytes(&name, &bytes)
    }

    /// Same as [`WasmEngine::load`] for bytes already in memory (e.g. an upload).
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<GuestModule, EngineError> {
        GuestModule::load(self, name, bytes)
    }

    /// (hits, misses) of the on-disk compiled-code cache, if one is configured.
    pub fn cache_stats(&self) -> Option<(usize, usize)> {
        self.cache
            .as_ref()
            .map(|c| (c.cache_hits(), c.cache_misses()))
    }

    pub(crate) fn ticker(&self) -> &Arc<EpochTicker> {
        &self.ticker
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn mapper_linker(&self) -> &Linker<HostState> {
        &self.mapper_linker
    }

    pub(crate) fn aggregator_linker(&self) -> &Linker<HostState> {
        &self.aggregator_linker
    }

    /// Compiles a component from bytes or text (tests build small components from WAT).
    pub(crate) fn compile(&self, name: &str, bytes: &[u8]) -> Result<Component, EngineError> {
        if let Some(isolation) = &self.isolation {
            isolation.check(name, bytes, self.cache_dir.as_deref())?;
        }
        // wasmtime logs (through `log`) warnings about the guest's custom sections while
        // translating, on this thread: keep them off the user's terminal.
        let compiled = tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
            Component::new(&self.engine, bytes)
        });
        compiled.map_err(|e| EngineError::Invalid {
            module: name.to_owned(),
            reason: format!(
                "is not a valid WebAssembly component: {}",
                one_line(&format!("{e:#}"))
            ),
        })
    }
}

/// The bytes of the module file at `path`, if it is a regular file of at most
/// [`MAX_MODULE_BYTES`]; checked before opening and again on the opened file.
fn read_module_file(path: &Path, name: &str) -> Result<Vec<u8>, EngineError> {
    let io = |source| EngineError::Io {
        module: name.to_owned(),
        source,
    };
    let check = |meta: &std::fs::Metadata| -> Result<u64, EngineError> {
        let invalid = |reason: String| EngineError::Invalid {
            module: name.to_owned(),
            reason,
        };
        let ty = meta.file_type();
        if !ty.is_file() {
            let kind = if ty.is_dir() {
                "a directory"
            } else {
                "not a regular file (a FIFO, socket or device)"
            };
            return Err(invalid(format!("is {kind}; a module must be a .wasm file")));
        }
        if meta.len() > MAX_MODULE_BYTES {
            return Err(invalid(format!(
                "is {} bytes; a module may be at most {MAX_MODULE_BYTES} bytes (64 MiB)",
                meta.len()
            )));
        }
        Ok(meta.len())
    };
    // `metadata` follows symlinks and never opens the file: a FIFO is refused here
    // rather than blocking in `open`.
    check(&std::fs::metadata(path).map_err(io)?)?;
    let file = std::fs::File::open(path).map_err(io)?;
    let len = check(&file.metadata().map_err(io)?)?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_MODULE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(EngineError::Invalid {
            module: name.to_owned(),
            reason: format!(
                "grew past {MAX_MODULE_BYTES} bytes (64 MiB) while being read; a module may be at most that"
            ),
        });
    }
    Ok(bytes)
}

fn open_cache(dir: &Path) -> Result<Cache, EngineError> {
    // wasmtime requires an absolute cache directory.
    let dir: PathBuf = std::path::absolute(dir)
        .map_err(|e| EngineError::Setup(format!("cache directory {}: {e}", dir.display())))?;
    let mut cache_config = CacheConfig::new();
    cache_config.with_directory(&dir);
    Cache::new(cache_config)
        .map_err(|e| setup(&format!("compiled-code cache in {}", dir.display()), e))
}

fn setup(what: &str, e: wasmtime::Error) -> EngineError {
    EngineError::Setup(format!("{what}: {e:#}"))
}
