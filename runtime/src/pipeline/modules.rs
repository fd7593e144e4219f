//! The run's guests: one `WasmEngine` (with the compiled-code cache and, from the CLI,
//! compilation in a limited child process), and each step's module loaded and checked.
//!
//! Invariants: each distinct module file (by canonical path) is loaded once, however
//! many steps name it (the spec bounds the steps, `spec::pipeline::MAX_STEPS`); a step
//! whose module exports the wrong world is refused before anything runs.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::{CompileIsolation, CompileLimits, GuestModule, WasmEngine, World};
use crate::pipeline::error::PipelineError;
use crate::pipeline::options::RunOptions;
use crate::spec::{PipelineSpec, StepSpec};

/// Where compiled guests are cached: `$WEIR_CACHE_DIR`, else `~/.cache/weir/compiled`.
pub fn compile_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/weir/compiled"))
}

/// Loads every step's guest and checks it exports the world its step needs.
pub fn load_modules(
    spec: &PipelineSpec,
    engine: &WasmEngine,
) -> Result<BTreeMap<usize, Arc<GuestModule>>, PipelineError> {
    let mut modules = BTreeMap::new();
    // One compiled copy per distinct file (keyed by canonical path): steps naming the
    // same module, under whatever spelling, share it.
    let mut loaded: BTreeMap<std::path::PathBuf, Arc<GuestModule>> = BTreeMap::new();
    for (n, step) in spec.steps.iter().enumerate() {
        let (path, kind, expected) = match step {
            StepSpec::Map(m) => (&m.module, "map", World::Mapper),
            StepSpec::Aggregate(a) => (&a.module, "aggregate", World::Aggregator),
        };
        let step_name = crate::record::ids::step_id(n);
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        let module = match loaded.get(&canonical) {
            Some(module) => Arc::clone(module),
            None => {
                let module = engine.load(path).map_err(|source| PipelineError::Module {
                    pipeline: spec.name.clone(),
                    step: step_name.clone(),
                    source,
                })?;
                let module = Arc::new(module);
                loaded.insert(canonical, Arc::clone(&module));
                module
            }
        };
        if module.world() != expected {
            return Err(PipelineError::WrongWorld {
                pipeline: spec.name.clone(),
                step: step_name,
                module: module.name().to_owned(),
                kind,
                actual: world_name(module.world()),
                expected: world_name(expected),
            });
        }
        modules.insert(n, module);
    }
    Ok(modules)
}

fn world_name(world: World) -> &'static str {
    match world {
        World::Mapper => "mapper",
        World::Aggregator => "aggregator",
    }
}

/// The engine of one run: the compiled-code cache, tiered code (a large module not
/// compiled before starts on baseline code, see `engine::code_tier`), and with
/// `options.compile_program`, compilation in a child process under the spec's compile
/// limits.
pub fn engine(spec: &PipelineSpec, options: &RunOptions) -> Result<WasmEngine, PipelineError> {
    let engine = WasmEngine::tiered(compile_cache_dir().as_deref()).map_err(|source| {
        PipelineError::Engine {
            pipeline: spec.name.clone(),
            source,
        }
    })?;
    Ok(match &options.compile_program {
        Some(program) => engine.with_compile_isolation(CompileIsolation {
            program: program.clone(),
            limits: CompileLimits {
                cpu: spec.limits.compile_cpu,
                memory_bytes: spec.limits.compile_memory as u64,
            },
        }),
        None => engine,
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::spec::PipelineSpec;
    use crate::test_support::guests_dir;

    /// Issue 7 §2: steps naming one module, however spelled (`./`, a symlink), share one
    /// loaded copy; another module gets its own.
    #[test]
    fn each_distinct_module_is_loaded_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["uppercase", "filter_json"] {
            let from = guests_dir().join(format!("{name}.wasm"));
            std::fs::copy(&from, dir.path().join(format!("{name}.wasm")))
                .unwrap_or_else(|e| panic!("{}: {e}: run `make guests` first", from.display()));
        }
        std::os::unix::fs::symlink(
            dir.path().join("uppercase.wasm"),
            dir.path().join("link.wasm"),
        )
        .expect("symlink");
        let mut text = String::from(
            "name = \"p\"\n[[sources]]\ntype = \"generator\"\ncount = 1\n[[sinks]]\ntype = \"stdout\"\n",
        );
        for module in [
            "uppercase.wasm",
            "./uppercase.wasm",
            "link.wasm",
            "filter_json.wasm",
        ] {
            text.push_str(&format!(
                "[[steps]]\ntype = \"map\"\nmodule = \"{module}\"\n"
            ));
        }
        let spec = PipelineSpec::parse(&text, dir.path(), "spec.toml").expect("spec");
        let engine = WasmEngine::new(None).expect("engine");
        let modules = load_modules(&spec, &engine).expect("load");
        assert_eq!(modules.len(), 4);
        assert!(Arc::ptr_eq(&modules[&0], &modules[&1]));
        assert!(Arc::ptr_eq(&modules[&0], &modules[&2]));
        assert!(!Arc::ptr_eq(&modules[&0], &modules[&3]));
    }

    /// Issue 35 item 5: a module of the wrong world for its step says which step type
    /// or world would do, in one line ("is a aggregator guest" before, no fix named).
    #[test]
    fn a_module_of_the_wrong_world_says_what_to_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let module = guests_dir().join("word_count.wasm");
        let text = format!(
            "name = \"p\"\n[[sources]]\ntype = \"generator\"\ncount = 1\n[[sinks]]\ntype = \"stdout\"\n\
             [[steps]]\ntype = \"map\"\nmodule = \"{}\"\n",
            module.display()
        );
        let spec = PipelineSpec::parse(&text, dir.path(), "spec.toml").expect("spec");
        let engine = WasmEngine::new(None).expect("engine");
        let error = load_modules(&spec, &engine).expect_err("refused");
        assert_eq!(
            error.to_string(),
            "pipeline p, step step-0: word_count.wasm is an aggregator guest, but a map step needs a mapper guest: \
             make it a `type = \"aggregate\"` step, or build the module for world mapper"
        );
    }
}
