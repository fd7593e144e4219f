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
//!   subtask, or after a trap) does no linking and no compilation.
//! - `sha256` is the hex SHA-256 of the exact bytes loaded: the module's identity for
//!   uploads and logs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex};

use super::aggregator_instance::AggregatorInstance;
use super::bindings::aggregator::AggregatorPre;
use super::bindings::mapper::MapperPre;
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
    pre: Pre,
    /// Keeps deadlines firing while this module or its instances live.
    ticker: Arc<EpochTicker>,
}

impl fmt::Debug for GuestModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestModule")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("world", &self.world())
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

impl GuestModule {
    pub(crate) fn load(engine: &WasmEngine, name: &str, bytes: &[u8]) -> Result<Self, EngineError> {
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
        let component = engine.compile(name, bytes)?;
        Self::from_component(engine, name, sha256_hex(bytes), &component)
    }

    /// Compiles a component from WAT text, skipping the binary-header check.
    #[cfg(test)]
    pub(crate) fn from_wat(
        engine: &WasmEngine,
        name: &str,
        wat: &str,
    ) -> Result<Self, EngineError> {
        let component = engine.compile(name, wat.as_bytes())?;
        Self::from_component(engine, name, sha256_hex(wat.as_bytes()), &component)
    }

    fn from_component(
        engine: &WasmEngine,
        name: &str,
        sha256: String,
        component: &Component,
    ) -> Result<Self, EngineError> {
        let invalid = |reason: String| EngineError::Invalid {
            module: name.to_owned(),
            reason,
        };
        let ty = component.component_type();
        let exports: Vec<String> = ty
            .exports(engine.engine())
            .map(|(n, _)| n.to_owned())
            .collect();
        let imports: Vec<String> = ty
            .imports(engine.engine())
            .map(|(n, _)| n.to_owned())
            .collect();
        let world = world_of(ty.exports(engine.engine()).map(|(n, _)| n)).map_err(invalid)?;
        let forbidden = forbidden_imports(ty.imports(engine.engine()).map(|(n, _)| n));
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
                let pre = engine
                    .mapper_linker()
                    .instantiate_pre(component)
                    .map_err(mismatch)?;
                Pre::Mapper(MapperPre::new(pre).map_err(mismatch)?)
            }
            World::Aggregator => {
                let pre = engine
                    .aggregator_linker()
                    .instantiate_pre(component)
                    .map_err(mismatch)?;
                let fused = update_and_emit_index(component, &exports);
                Pre::Aggregator(AggregatorPre::new(pre).map_err(mismatch)?, fused)
            }
        };
        Ok(GuestModule {
            name: name.into(),
            sha256,
            exports,
            imports,
            pre,
            ticker: engine.ticker().clone(),
        })
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
        match self.pre {
            Pre::Mapper(_) => World::Mapper,
            Pre::Aggregator(..) => World::Aggregator,
        }
    }

    /// A fresh mapper instance with `config` as its step configuration.
    pub fn instantiate_mapper(
        &self,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<MapperInstance, EngineError> {
        match &self.pre {
            Pre::Mapper(pre) => MapperInstance::instantiate(
                self.name.clone(),
                self.ticker.clone(),
                pre,
                limits,
                config,
            ),
            Pre::Aggregator(..) => Err(self.wrong_world(World::Mapper)),
        }
    }

    /// A fresh aggregator instance with `config` as its step configuration.
    pub fn instantiate_aggregator(
        &self,
        limits: &GuestLimits,
        config: BTreeMap<String, String>,
    ) -> Result<AggregatorInstance, EngineError> {
        match &self.pre {
            Pre::Aggregator(pre, fused) => AggregatorInstance::instantiate(
                self.name.clone(),
                self.ticker.clone(),
                pre,
                fused.as_ref(),
                limits,
                config,
            ),
            Pre::Mapper(_) => Err(self.wrong_world(World::Aggregator)),
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

/// Checks that the world's exported functions have the host's types. The bindings'
/// `*Pre::new` only looks the exports up by name; wasmtime checks their types when an
/// instance is created. This runs that same check (`ComponentFunc::typecheck`, what
/// `get_typed_func` calls) on the component's type, without instantiating anything.
fn check_export_types(
    engine: &WasmEngine,
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
        .exports(engine.engine())
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
            instance.get_export(engine.engine(), name).map(|e| e.ty)
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
            .exports(engine.engine())
            .find(|(name, _)| unversioned(name) == UPDATE_AND_EMIT_EXPORT)
    {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            wasmtime::bail!("export {export} is not an instance");
        };
        let Some(ComponentItem::ComponentFunc(func)) = instance
            .get_export(engine.engine(), UPDATE_AND_EMIT_FUNCTION)
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

fn sha256_hex(bytes: &[u8]) -> String {
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
