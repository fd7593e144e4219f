//! `Compiler`: one wasmtime `Engine` (one code generator: a [`CodeTier`]), its two
//! linkers, and how a module's bytes become a `Component` with it.
//!
//! Invariants:
//! - Every tier's engine has the same configuration but for its code generator:
//!   component model on, epoch interruption on (every store traps when its deadline
//!   passes, see `guest_store.rs`), the same compiled-code cache. Artifacts are reused
//!   through wasmtime's own cache (its key covers the code generator), never through
//!   `Component::deserialize`: no `unsafe` anywhere.
//! - A store, linker and `InstancePre` belong to one engine: a module's code, its
//!   linkers and its instances always come from the same `Compiler`.
//! - With a [`CompileIsolation`], an optimized compile first runs in a child process
//!   under CPU-time and memory limits (see `compile_isolation.rs`); only a module that
//!   compiled there is compiled here. A baseline compile is one linear pass over the
//!   module (bounded by `MAX_MODULE_BYTES`) and runs here directly.
//! - After an optimized compile into a cache, the cache's marker for the bytes is
//!   written (`CompiledCache::mark_optimized`).
//! - Compilation errors are one line (wasmparser's multi-line messages are joined), and
//!   wasmtime's own log lines while compiling (warnings about unparseable custom
//!   sections) are not shown: they are about guest bytes, and would be extra lines.

use wasmtime::component::{Component, Linker};
use wasmtime::{Cache, Config, Engine, Strategy};

use super::code_tier::CodeTier;
use super::compile_isolation::CompileIsolation;
use super::compiled_cache::CompiledCache;
use super::error::EngineError;
use super::guest_text::one_line;
use super::host::HostState;
use super::linker::{aggregator_linker, mapper_linker};

/// One code generator and what goes with it. Cheap to clone (wasmtime's handles).
#[derive(Clone)]
pub(crate) struct Compiler {
    tier: CodeTier,
    engine: Engine,
    mapper_linker: Linker<HostState>,
    aggregator_linker: Linker<HostState>,
    cache: Option<CompiledCache>,
    isolation: Option<CompileIsolation>,
}

impl Compiler {
    /// A compiler of `tier`, sharing `wasmtime_cache` (the directory of `cache`).
    pub(crate) fn new(
        tier: CodeTier,
        cache: Option<&CompiledCache>,
        wasmtime_cache: Option<&Cache>,
    ) -> Result<Compiler, EngineError> {
        let mut config = Config::new();
        config.wasm_component_model(true).epoch_interruption(true);
        if tier == CodeTier::Baseline {
            config.strategy(Strategy::Winch);
        }
        config.cache(wasmtime_cache.cloned());
        let engine = Engine::new(&config).map_err(|e| setup("wasmtime configuration", e))?;
        let mapper_linker = mapper_linker(&engine).map_err(|e| setup("linking world mapper", e))?;
        let aggregator_linker =
            aggregator_linker(&engine).map_err(|e| setup("linking world aggregator", e))?;
        Ok(Compiler {
            tier,
            engine,
            mapper_linker,
            aggregator_linker,
            cache: cache.cloned(),
            isolation: None,
        })
    }

    /// From now on, compiles each module in a child process under `isolation`'s limits
    /// first (optimized compiles only, see the invariants).
    pub(crate) fn isolate(&mut self, isolation: CompileIsolation) {
        self.isolation = Some(isolation);
    }

    pub(crate) fn tier(&self) -> CodeTier {
        self.tier
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

    pub(crate) fn cache(&self) -> Option<&CompiledCache> {
        self.cache.as_ref()
    }

    /// Compiles a component from bytes or text (tests build small components from WAT);
    /// `sha256` names the bytes for the cache's marker.
    pub(crate) fn compile(
        &self,
        name: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<Component, EngineError> {
        let optimized = self.tier == CodeTier::Optimized;
        if optimized && let Some(isolation) = &self.isolation {
            isolation.check(name, bytes, self.cache.as_ref().map(CompiledCache::root))?;
        }
        // wasmtime logs (through `log`) warnings about the guest's custom sections while
        // translating, on this thread: keep them off the user's terminal.
        let compiled = tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
            Component::new(&self.engine, bytes)
        });
        let component = compiled.map_err(|e| EngineError::Invalid {
            module: name.to_owned(),
            reason: format!(
                "is not a valid WebAssembly component: {}",
                one_line(&format!("{e:#}"))
            ),
        })?;
        if optimized && let Some(cache) = &self.cache {
            cache.mark_optimized(sha256);
        }
        Ok(component)
    }
}

pub(crate) fn setup(what: &str, e: wasmtime::Error) -> EngineError {
    EngineError::Setup(format!("{what}: {e:#}"))
}
