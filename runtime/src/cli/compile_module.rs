//! `weir compile-module` (hidden): the child process in which `run` and `validate`
//! compile each module, under the CPU-time and memory limits given on its command line
//! (see `engine/compile_isolation.rs`). It reads the module from stdin, exits 0 if it
//! compiled (the artifact is then in the compiled-code cache), else prints one line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::io::Read;

use crate::engine::{CompileLimits, EngineError, MAX_MODULE_BYTES, WasmEngine, lower_limits};

#[derive(Debug, clap::Args)]
pub struct CompileModuleArgs {
    /// CPU time limit, in milliseconds (applied in whole seconds).
    #[arg(long)]
    pub cpu_ms: u64,
    /// Address-space limit, in bytes.
    #[arg(long)]
    pub memory_bytes: u64,
    /// The compiled-code cache to compile into.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// The pid of the process that started this one: this one dies with it.
    #[arg(long)]
    pub parent: Option<i32>,
}

pub fn execute(args: CompileModuleArgs) -> ExitCode {
    let limits = CompileLimits {
        cpu: Duration::from_millis(args.cpu_ms),
        memory_bytes: args.memory_bytes,
    };
    let bonded = args
        .parent
        .map_or(Ok(()), crate::child_process::die_with_parent);
    match bonded.and_then(|()| compile(limits, args.cache_dir.as_deref())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            // The parent reads this one line as the reason for the refusal.
            eprintln!("{}", reason.replace(['\n', '\r'], " "));
            ExitCode::FAILURE
        }
    }
}

/// Lowers this process's limits, reads the module from stdin and compiles it (into the
/// cache, if any); the reason on failure.
fn compile(limits: CompileLimits, cache_dir: Option<&std::path::Path>) -> Result<(), String> {
    lower_limits(limits).map_err(|e| format!("cannot limit the compiler process: {e}"))?;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(MAX_MODULE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the module: {e}"))?;
    let engine = WasmEngine::new(cache_dir).map_err(|e| e.to_string())?;
    match engine.compile("module", &bytes) {
        Ok(_) => Ok(()),
        Err(EngineError::Invalid { reason, .. }) => Err(reason),
        Err(e) => Err(e.to_string()),
    }
}
