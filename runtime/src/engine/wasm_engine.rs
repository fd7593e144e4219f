//! `WasmEngine`: the process's wasmtime engines (one per code tier), their linkers,
//! compiled-code cache and epoch ticker; the entry point for loading guests.
//!
//! Invariants:
//! - One optimized `Compiler` (Cranelift) always; a baseline one (Winch) only when the
//!   engine is [`WasmEngine::tiered`] (see `code_tier.rs` for when a module starts on
//!   it). Both share the compiled-code cache and the epoch ticker, which advances both
//!   engines' epochs.
//! - A `GuestModule` only exists for bytes that passed every load check (see
//!   `guest_module.rs`); loading never instantiates guest code.
//! - A module file is checked before it is read: it must be a regular file (a FIFO,
//!   a device or a directory is refused without opening it, so `/dev/zero` or a pipe
//!   never blocks or streams) of at most [`MAX_MODULE_BYTES`], and no more than that is
//!   ever read (a file growing meanwhile is refused too). `weir validate` and `weir run`
//!   go through the same [`WasmEngine::load`], so they share the limit.
//! - The epoch ticker is shared (`Arc`) by the engine, every `GuestModule` and every
//!   instance: it stops and joins when the last of them is dropped, so a live instance
//!   always has a working deadline whatever the drop order.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use wasmtime::{Cache, CacheConfig};

use super::code_tier::CodeTier;
use super::compile_isolation::CompileIsolation;
use super::compiled_cache::CompiledCache;
use super::compiler::{Compiler, setup};
use super::epoch_ticker::EpochTicker;
use super::error::EngineError;
use super::guest_module::GuestModule;

/// Largest module file accepted, checked before reading it. Real guests are a few
/// MiB at most (the examples are under 1 MiB); compiling is the expensive part, and a
/// bound keeps a wrong path (a disk image, `/dev/zero`) from being read into memory.
pub const MAX_MODULE_BYTES: u64 = 64 << 20; // 64 MiB

/// The process-wide WebAssembly engine.
pub struct WasmEngine {
    optimized: Compiler,
    /// Where tiering is on: the compiler new large modules start with.
    baseline: Option<Compiler>,
    cache: Option<Cache>,
    ticker: Arc<EpochTicker>,
}

impl fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WasmEngine")
            .field("cache", &self.optimized.cache().map(CompiledCache::root))
            .field("tiered", &self.baseline.is_some())
            .finish_non_exhaustive()
    }
}

impl WasmEngine {
    /// Creates the engine. With `cache_dir`, compiled components are cached on disk there
    /// (created if missing, laid out as `compiled_cache.rs` says) and reused by later runs
    /// with the same wasmtime build. Every module is compiled optimized.
    pub fn new(cache_dir: Option<&Path>) -> Result<WasmEngine, EngineError> {
        Self::build(cache_dir, false)
    }

    /// Like [`WasmEngine::new`], but a large module not compiled before starts on
    /// baseline code and moves to optimized code when it is ready (see `code_tier.rs`).
    pub fn tiered(cache_dir: Option<&Path>) -> Result<WasmEngine, EngineError> {
        Self::build(cache_dir, true)
    }

    fn build(cache_dir: Option<&Path>, tiered: bool) -> Result<WasmEngine, EngineError> {
        let compiled_cache = cache_dir
            .map(|dir| {
                CompiledCache::at(dir).map_err(|e| {
                    EngineError::Setup(format!("cache directory {}: {e}", dir.display()))
                })
            })
            .transpose()?;
        let cache = compiled_cache.as_ref().map(open_cache).transpose()?;
        let compiler = |tier| Compiler::new(tier, compiled_cache.as_ref(), cache.as_ref());
        let optimized = compiler(CodeTier::Optimized)?;
        let baseline = tiered.then(|| compiler(CodeTier::Baseline)).transpose()?;
        let engines = std::iter::once(&optimized)
            .chain(&baseline)
            .map(|c| c.engine().clone())
            .collect();
        let ticker = EpochTicker::start(engines).map_err(|e| {
            EngineError::Setup(format!("cannot start the epoch ticker thread: {e}"))
        })?;
        Ok(WasmEngine {
            optimized,
            baseline,
            cache,
            ticker: Arc::new(ticker),
        })
    }

    /// From now on, compiles every module in a child process under `isolation`'s limits
    /// before compiling it optimized here (a cache hit when the engine has a cache).
    pub fn with_compile_isolation(mut self, isolation: CompileIsolation) -> WasmEngine {
        self.optimized.isolate(isolation);
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

    pub(crate) fn optimized(&self) -> &Compiler {
        &self.optimized
    }

    /// The compiler a module of `len` bytes with hash `sha256` starts on, where that is
    /// the baseline (see `code_tier.rs`).
    pub(crate) fn baseline_for(&self, len: usize, sha256: &str) -> Option<&Compiler> {
        let baseline = self.baseline.as_ref()?;
        let compiled_before = self
            .optimized
            .cache()
            .is_some_and(|cache| cache.has_optimized(sha256));
        (len >= super::code_tier::TIER_UP_MIN_BYTES && !compiled_before).then_some(baseline)
    }

    /// Compiles optimized code for a component from bytes or text.
    pub(crate) fn compile(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<wasmtime::component::Component, EngineError> {
        self.optimized
            .compile(name, bytes, &super::guest_module::sha256_hex(bytes))
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

fn open_cache(cache: &CompiledCache) -> Result<Cache, EngineError> {
    let dir = cache.wasmtime_dir();
    let mut cache_config = CacheConfig::new();
    cache_config.with_directory(&dir);
    Cache::new(cache_config)
        .map_err(|e| setup(&format!("compiled-code cache in {}", dir.display()), e))
}
