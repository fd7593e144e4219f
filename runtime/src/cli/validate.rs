//! `weir validate MODULE.wasm`: loads a guest as `weir run` would and says what it is.
//!
//! Invariants: it goes through the same `WasmEngine::load` as `weir run`, so it applies
//! the same checks in the same order (a regular file of at most `MAX_MODULE_BYTES`,
//! checked before reading; a component; one weir world with the host's function types;
//! allowed imports only; compiled in a child process under CPU and memory limits), and
//! prints exactly one line either way: the world and hash on
//! stdout, or the refusal (via `main`) on stderr.

use std::path::PathBuf;
use std::time::Duration;

use crate::engine::{CompileLimits, World};
use crate::field::{checks, units};

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The guest component to check.
    pub module: PathBuf,
    /// CPU time compiling it may take, as `[limits] compile_cpu` in a spec.
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = compile_cpu)]
    pub compile_cpu: Duration,
    /// Memory compiling it may take, as `[limits] compile_memory` in a spec.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = compile_memory)]
    pub compile_memory: usize,
}

fn compile_cpu(text: &str) -> Result<Duration, String> {
    checks::check_compile_cpu(units::parse_duration(text)?)
}

fn compile_memory(text: &str) -> Result<usize, String> {
    checks::check_compile_memory(units::parse_size(text)?)
}

pub fn execute(args: ValidateArgs) -> anyhow::Result<()> {
    // The same cache as `weir run`: a module validated is compiled for the next run.
    let engine = super::guest_engine(
        false,
        CompileLimits {
            cpu: args.compile_cpu,
            memory_bytes: args.compile_memory as u64,
        },
    )?;
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
