//! `weir compile-module` (hidden): the child process in which `run` and `validate`
//! compile each module, under the CPU-time and memory limits given on its command line
//! (see `engine/compile_isolation.rs`). It reads the module from stdin, exits 0 if it
//! compiled (the artifact is then in the compiled-code cache), else prints one line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::engine::{CompileLimits, compile_in_this_process};

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
}

pub fn execute(args: CompileModuleArgs) -> ExitCode {
    let limits = CompileLimits {
        cpu: Duration::from_millis(args.cpu_ms),
        memory_bytes: args.memory_bytes,
    };
    if compile_in_this_process(limits, args.cache_dir.as_deref()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
