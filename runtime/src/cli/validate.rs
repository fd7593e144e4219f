//! `weir validate MODULE.wasm`: loads a guest as `weir run` would and says what it is.

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
