//! `weir validate MODULE.wasm`: loads a guest as `weir run` would and says what it is.
//!
//! Invariants: it goes through the same `WasmEngine::load` as `weir run`, so it applies
//! the same checks in the same order (a regular file of at most `MAX_MODULE_BYTES`,
//! checked before reading; a component; one weir world with the host's function types;
//! allowed imports only), and prints exactly one line either way: the world and hash on
//! stdout, or the refusal (via `main`) on stderr.

use std::path::PathBuf;

use crate::engine::{WasmEngine, World};

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The guest component to check.
    pub module: PathBuf,
}

pub fn execute(args: ValidateArgs) -> anyhow::Result<()> {
    let engine = WasmEngine::new(None)?;
    let module = engine.load(&args.module)?;
    let world = match module.world() {
        World::Mapper => "mapper (weir:transform/map)",
        World::Aggregator => "aggregator (weir:transform/aggregate)",
    };
    println!(
        "{}: weir guest, world {world}, sha256 {}",
        args.module.display(),
        module.sha256_hex()
    );
    Ok(())
}
