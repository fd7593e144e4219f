//! `GuestModule`: a compiled, checked guest component, ready to instantiate.
//!
//! Invariants:
//! - A `GuestModule` exists only for a WebAssembly *component* (not a core module) that
//!   exports exactly one weir world, whose every import is allowed by `import_policy`
//!   (weir's own and WASI 0.2, nothing foreign), and whose world's types match this
//!   host's (the typed `MapperPre`/`AggregatorPre` was built) including the type of
//!   every exported function (`map`, or `update` and `emit`, and the optional fused
//!   `update-and-emit`): checked here with the same check wasmtime's typed-function
//!   lookup runs at instantiation, so a wrong signature is refused by `weir validate`,
//!   not at the first batch. Each refusal says why in one line.
//! - It holds an `InstancePre`: imports are resolved once, so instantiating (per
//!   subtask, or after a trap) does no linking and no compilation. Where the module
//!   started on baseline code, the `InstancePre` is replaced once by the optimized
//!   one, checked the same way, by a background thread (see `code_tier.rs`); the
//!   world, exports and imports are the bytes' and never change.
//! - `sha256` is the hex SHA-256 of the exact bytes loaded: the module's identity for
//!   uploads and logs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex};

use super::aggregator_instance::AggregatorInstance;
use super::bindings::aggregator::AggregatorPre;
use super::bindings::mapper::MapperPre;
use super::code_tier::{CodeTier, InstanceTier, TierSignal};
use super::compiler::Compiler;
use super::component_imports;
use super::epoch_ticker::EpochTicker;
use super::error::EngineError;
use super::guest_text::one_line;
use super::import_policy::{
    UPDATE_AND_EMIT_EXPORT, forbidden_imports, refusal, unversioned, world_of,
};
use super::limits::GuestLimits;
use super::mapper_instance::MapperInstance;
use super::wasm_engine::{MAX_MODULE_BYTES, WasmEngine};

/// The weir world a guest implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum World {
    /// Exports `weir:transform/map`.
    Mapper,
    /// Exports `weir:transform/aggregate`.
    Aggregator,
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            World::Mapper => "mapper",
            World::Aggregator => "aggregator",
        })
    }
}

#[derive(Clone)]
enum Pre {
    Mapper(MapperPre<super::host::HostState>),
    /// With the index of the fused `update-and-emit` function, if the guest exports it.
    Aggregator(
        AggregatorPre<super::host::HostState>,
        Option<ComponentExportIndex>,
    ),
}

/// A loaded guest. Cheap to clone; instantiate it once per subtask.
#[derive(Clone)]
pub struct GuestModule {
    name: Arc<str>,
    sha256: String,
    /// The component's export and import names, in its order.
    exports: Vec<String>,
    imports: Vec<String>,
    world: World,
    /// The code new instances are made from (replaced once at most: see `code_tier.rs`).
    code: Arc<RwLock<Pre>>,
    /// The tier of `code`, raised before its lock is released; instances read it to
    /// learn they are outdated.
    tier: TierSignal,
    /// Keeps deadlines firing while this module or its instances live.
    ticker: Arc<EpochTicker>,
}

impl fmt::Debug for GuestModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestModule")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("world", &self.world())
            .field("tier", &self.tier.get())
            .finish()
    }
}

/// What the first bytes of a file say it is.
#[derive(Debug, PartialEq, Eq)]
enum Header {
    NotWasm,
    CoreModule,
    Component,
    /// Another version/layer: let wasmtime's parser explain.
    Unknown,
}

fn header(bytes: &[u8]) -> Header {
    match bytes.get(..8) {
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Header::CoreModule,
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => Header::Component,
        Some([0, b'a', b's', b'm', ..]) => Header::Unknown,
        _ => Header::NotWasm,
    }
}

/// Refuses, from the bytes alone and before any compile (or the cache) sees them, what
/// is too large, not WebAssembly, a core module, or importing what weir does not link
/// (imports are checked again after compiling).
fn refuse_before_compiling(name: &str, bytes: &[u8]) -> Result<(), EngineError> {
    let invalid = |reason: &str| EngineError::Invalid {
        module: name.to_owned(),
        reason: reason.to_owned(),
    };
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(invalid(&format!(
            "is {} bytes; a module may be at most {MAX_MODULE_BYTES} bytes (64 MiB)",
            bytes.len()
        )));
    }
    match header(bytes) {
        Header::NotWasm => {
            return Err(invalid(
                "is not a WebAssembly binary (it does not start with \\0asm)",
            ));
        }
        Header::CoreModule => {
            return Err(invalid(
                "is a core WebAssembly module, not a component; build with --target wasm32-wasip2",
            ));
        }
        Header::Component | Header::Unknown => {}
    }
    // Refused before a compile (and the cache) ever sees it; checked again after.
    let imports = component_imports::top_level_imports(bytes).unwrap_or_default();
    let forbidden = forbidden_imports(imports.iter().map(String::as_str));
    if !forbidden.is_empty() {
        return Err(invalid(&refusal(&forbidden)));
    }
    Ok(())
}

impl GuestModule {
    pub(crate) fn load(engine: &WasmEngine, name: &str, bytes: &[u8]) -> Result<Self, EngineError> {
        refuse_before_compiling(name, bytes)?;
        let sha256 = sha256_hex(bytes);
        if let Some(baseline) = engine.baseline_for(bytes.len(), &sha256) {
            match baseline.compile(name, bytes, &sha256) {
                Ok(component) => {
                    let module = Self::from_component(engine, baseline, name, sha256, &component)?;
                    module.tier_up_in_background(engine.optimized().clone(), bytes.to_vec());
                    return Ok(module);
                }
                // A proposal Winch lacks (tail calls, say), or bytes no compiler takes:
                // the optimized compile below says which.
                Err(e) => tracing::debug!(module = name, "no baseline code: {e}"),
            }
        }
        Self::compile_checked(engine, engine.optimized(), name, &sha256, bytes)
    }

    fn compile_checked(
        engine: &WasmEngine,
        compiler: &Compiler,
        name: &str,
        sha256: &str,
        bytes: &[u8],
    ) -> Result<Self, EngineError> {
        let component = compiler.compile(name, bytes, sha256)?;
        Self::from_component(engine, compiler, name, sha256.to_owned(), &component)
    }

    /// Compiles a component from WAT text, skipping the binary-header check.
    #[cfg(test)]
    pub(crate) fn from_wat(
        engine: &WasmEngine,
        name: &str,
        wat: &str,
    ) -> Result<Self, EngineError> {
        let sha256 = sha256_hex(wat.as_bytes());
        Self::compile_checked(engine, engine.optimized(), name, &sha256, wat.as_bytes())
    }

    fn from_component(
        engine: &WasmEngine,
        compiler: &Compiler,
        name: &str,
        sha256: String,
        component: &Component,
    ) -> Result<Self, EngineError> {
        let checked = Checked::check(compiler, name, component)?;
        Ok(GuestModule {
            name: name.into(),
            sha256,
            exports: checked.exports,
            imports: checked.imports,
            world: checked.world,
            code: Arc::new(RwLock::new(checked.pre)),
            tier: TierSignal::new(compiler.tier()),
            ticker: engine.ticker().clone(),
        })
    }

    /// Compiles optimized code on a thread of its own and, once it is checked, makes it
    /// the code of new instances (see `code_tier.rs`).
    fn tier_up_in_background(&self, optimizer: Compiler, bytes: Vec<u8>) {
        let module = self.clone();
        tracing::info!(
            module = %self.name,
            "starting on baseline code (winch) while optimized code (cranelift) compiles"
        );
        let spawned = std::thread::Builder::new()
            .name("weir-tier-up".into())
            .spawn(move || module.tier_up(&optimizer, &bytes));
        if let Err(e) = spawned {
            tracing::warn!(module = %self.name, "cannot start the optimized compile, staying on baseline code: {e}");
        }
    }

    fn tier_up(&self, optimizer: &Compiler, bytes: &[u8]) {
        let started = Instant::now();
        let checked = optimizer
            .compile(&self.name, bytes, &self.sha256)
            .and_then(|component| Checked::check(optimizer, &self.name, &component));
        match checked {
            Ok(checked) => {
                let mut code = self.code.write().unwrap_or_else(PoisonError::into_inner);
                *code = checked.pre;
                self.tier.raise(optimizer.tier());
                drop(code);
                tracing::info!(
                    module = %self.name,
                    seconds = started.elapsed().as_secs_f64(),
                    "optimized code ready: instances move to it at their next batch"
                );
            }
            Err(e) => tracing::warn!(
                module = %self.name,
                "no optimized code, staying on baseline code (slower): {e}"
            ),
        }
    }

    /// The tier new instances get now.
    pub fn tier(&self) -> CodeTier {
        self.tier.get()
    }

    /// The code a new instance is made from, and the tier it tells the instance (read
    /// under the code's lock, so the two agree).
    fn current(&self) -> (Pre, InstanceTier) {
        let code = self.code.read().unwrap_or_else(PoisonError::into_inner);
        (
            code.clone(),
            InstanceTier::new(self.tier.get(), self.tier.clone()),
        )
    }

    /// The name given at load (the file name for [`WasmEngine::load`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hex SHA-256 of the component's bytes.
    pub fn sha256_hex(&self) -> &str {
        &self.sha256
    }

    /// The component's exports (interface or function names), in its order.
    pub fn exports(&self) -> &[String] {
        &self.exports
    }

    /// The component's imports, in its order.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    pub fn world(&self) -> World {
        self.world
    }

    /// A fresh mapper instance with `config` as its step configuration.
    pub fn instantiate_mapper(
        &self,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<MapperInstance, EngineError> {
        match self.current() {
            (Pre::Mapper(pre), tier) => MapperInstance::instantiate(
                self.name.clone(),
                self.ticker.clone(),
                tier,
                &pre,
                limits,
                config,
            ),
            (Pre::Aggregator(..), _) => Err(self.wrong_world(World::Mapper)),
        }
    }

    /// A fresh aggregator instance with `config` as its step configuration.
    pub fn instantiate_aggregator(
        &self,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<AggregatorInstance, EngineError> {
        match self.current() {
            (Pre::Aggregator(pre, fused), tier) => AggregatorInstance::instantiate(
                self.name.clone(),
                self.ticker.clone(),
                tier,
                &pre,
                fused.as_ref(),
                limits,
                config,
            ),
            (Pre::Mapper(_), _) => Err(self.wrong_world(World::Aggregator)),
        }
    }

    fn wrong_world(&self, wanted: World) -> EngineError {
        EngineError::Invalid {
            module: self.name.to_string(),
            reason: format!(
                "implements world {}, but this step needs world {wanted}",
                self.world()
            ),
        }
    }
}

/// What a compiled component was checked to be, with its linked `InstancePre`.
struct Checked {
    exports: Vec<String>,
    imports: Vec<String>,
    world: World,
    pre: Pre,
}

impl Checked {
    /// Checks `component` (one weir world, allowed imports, the host's types) and links it
    /// with `compiler`'s linker of its world.
    fn check(
        compiler: &Compiler,
        name: &str,
        component: &Component,
    ) -> Result<Checked, EngineError> {
        let invalid = |reason: String| EngineError::Invalid {
            module: name.to_owned(),
            reason,
        };
        let engine = compiler.engine();
        let ty = component.component_type();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_owned()).collect();
        let world = world_of(ty.exports(engine).map(|(n, _)| n)).map_err(invalid)?;
        let forbidden = forbidden_imports(ty.imports(engine).map(|(n, _)| n));
        if !forbidden.is_empty() {
            return Err(invalid(refusal(&forbidden)));
        }
        let mismatch = |e: wasmtime::Error| {
            invalid(format!(
                "does not match this host's weir:transform world {world}: {}",
                one_line(&format!("{e:#}"))
            ))
        };
        check_export_types(engine, &ty, world).map_err(mismatch)?;
        let pre = match world {
            World::Mapper => {
                let pre = compiler
                    .mapper_linker()
                    .instantiate_pre(component)
                    .map_err(mismatch)?;
                Pre::Mapper(MapperPre::new(pre).map_err(mismatch)?)
            }
            World::Aggregator => {
                let pre = compiler
                    .aggregator_linker()
                    .instantiate_pre(component)
                    .map_err(mismatch)?;
                let fused = update_and_emit_index(component, &exports);
                Pre::Aggregator(AggregatorPre::new(pre).map_err(mismatch)?, fused)
            }
        };
        Ok(Checked {
            exports,
            imports,
            world,
            pre,
        })
    }
}

/// Checks that the world's exported functions have the host's types. The bindings'
/// `*Pre::new` only looks the exports up by name; wasmtime checks their types when an
/// instance is created. This runs that same check (`ComponentFunc::typecheck`, what
/// `get_typed_func` calls) on the component's type, without instantiating anything.
fn check_export_types(
    engine: &wasmtime::Engine,
    ty: &wasmtime::component::types::Component,
    world: World,
) -> wasmtime::Result<()> {
    use super::bindings::aggregator::exports::weir::transform::aggregate as agg;
    use super::bindings::mapper::exports::weir::transform::r#map;
    use super::bindings::{WitUpdateAndEmitOutput, wit_types};
    use wasmtime::component::types::ComponentItem;

    let (interface, functions): (&str, &[&str]) = match world {
        World::Mapper => ("weir:transform/map", &["map"]),
        World::Aggregator => ("weir:transform/aggregate", &["update", "emit"]),
    };
    let Some((export, item)) = ty
        .exports(engine)
        .find(|(name, _)| unversioned(name) == interface)
    else {
        wasmtime::bail!("no export {interface}");
    };
    let ComponentItem::ComponentInstance(instance) = item.ty else {
        wasmtime::bail!("export {export} is not an instance");
    };
    let cx = ty.instance_type();
    for &name in functions {
        let Some(ComponentItem::ComponentFunc(func)) =
            instance.get_export(engine, name).map(|e| e.ty)
        else {
            wasmtime::bail!("export {export} has no function {name}");
        };
        let checked = match name {
            "map" => func.typecheck::<(wit_types::RecordBatch,), (map::MapOutput,)>(&cx),
            "update" => func.typecheck::<(agg::GroupBatch,), (agg::UpdateOutput,)>(&cx),
            _ => func.typecheck::<(agg::EmitBatch,), (wit_types::RecordBatch,)>(&cx),
        };
        checked
            .map_err(|e| e.context(format!("function {name} of {export} has the wrong type")))?;
    }
    if world == World::Aggregator
        && let Some((export, item)) = ty
            .exports(engine)
            .find(|(name, _)| unversioned(name) == UPDATE_AND_EMIT_EXPORT)
    {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            wasmtime::bail!("export {export} is not an instance");
        };
        let Some(ComponentItem::ComponentFunc(func)) = instance
            .get_export(engine, UPDATE_AND_EMIT_FUNCTION)
            .map(|e| e.ty)
        else {
            wasmtime::bail!("export {export} has no function {UPDATE_AND_EMIT_FUNCTION}");
        };
        func.typecheck::<(agg::GroupBatch,), (WitUpdateAndEmitOutput,)>(&cx)
            .map_err(|e| {
                e.context(format!(
                    "function {UPDATE_AND_EMIT_FUNCTION} of {export} has the wrong type"
                ))
            })?;
    }
    Ok(())
}

/// The function of the optional fused interface.
const UPDATE_AND_EMIT_FUNCTION: &str = "update-and-emit";

/// Where the guest's fused `update-and-emit` is, if it exports one (its type was
/// checked by [`check_export_types`]).
fn update_and_emit_index(
    component: &Component,
    exports: &[String],
) -> Option<ComponentExportIndex> {
    let interface = exports
        .iter()
        .find(|name| unversioned(name) == UPDATE_AND_EMIT_EXPORT)?;
    let instance = component.get_export_index(None, interface.as_str())?;
    component.get_export_index(Some(&instance), UPDATE_AND_EMIT_FUNCTION)
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        // Writing to a String cannot fail.
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tells_core_modules_from_components() {
        assert_eq!(header(b"\0asm\x01\0\0\0"), Header::CoreModule);
        assert_eq!(header(b"\0asm\x0d\0\x01\0"), Header::Component);
        assert_eq!(header(b"hello, world"), Header::NotWasm);
        assert_eq!(header(b"\0as"), Header::NotWasm);
    }
}
