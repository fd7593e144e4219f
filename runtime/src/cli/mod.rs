//! The `weir` command line: one file per subcommand, each with an `execute` function.

pub mod build_guest;
pub mod checkpoints;
pub mod compile_module;
pub mod module;
pub mod new_project;
pub mod pipeline;
pub mod reset_kafka;
pub mod run;
mod rust_guest_flags;
pub mod serve;
pub mod server_client;
pub mod table;
pub mod test_module;
pub mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Weir: stream processing with WebAssembly transforms and exactly-once output.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pipeline, resuming from its latest checkpoint.
    Run(run::RunArgs),
    /// Check that a .wasm file is a weir guest component and print the world it targets.
    Validate(validate::ValidateArgs),
    /// Run a guest over sample records and print what it emits: no spec, no state.
    Test(test_module::TestArgs),
    /// Start a guest project (Rust, Python or JavaScript; a map or an aggregate).
    New(new_project::NewArgs),
    /// Build the guest project in DIR into DIR/NAME.wasm and check it.
    Build(build_guest::BuildArgs),
    /// Run the multi-tenant hosting server (HTTP API, supervised pipelines).
    Serve(serve::ServeArgs),
    /// Manage your modules on a weir server: push, ls, rm.
    Module(module::ModuleArgs),
    /// Manage your pipelines on a weir server: create, ls, start, stop, status,
    /// savepoint, upgrade, rm.
    Pipeline(pipeline::PipelineArgs),
    /// List a pipeline's checkpoints: id, time, size, files added.
    Checkpoints(checkpoints::CheckpointsArgs),
    /// Delete what a stopped pipeline keeps on Kafka (its consumer groups, progress and
    /// repartition topics), so its name can start from nothing.
    #[command(name = "reset-kafka")]
    ResetKafka(reset_kafka::ResetKafkaArgs),
    /// Internal: compile one module from stdin under CPU and memory limits (the child
    /// process `run` and `validate` start for every module).
    #[command(name = "compile-module", hide = true)]
    CompileModule(compile_module::CompileModuleArgs),
}

impl Command {
    /// Runs the subcommand; the exit code it asks for (`run` stopped by a signal
    /// exits 128 + its number).
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Run(args) => run::execute(args),
            Command::Validate(args) => validate::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Test(args) => test_module::execute(args).map(|()| ExitCode::SUCCESS),
            Command::New(args) => new_project::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Build(args) => build_guest::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Serve(args) => serve::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Module(args) => module::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Pipeline(args) => pipeline::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Checkpoints(args) => checkpoints::execute(args).map(|()| ExitCode::SUCCESS),
            Command::ResetKafka(args) => reset_kafka::execute(args).map(|()| ExitCode::SUCCESS),
            Command::CompileModule(args) => Ok(compile_module::execute(args)),
        }
    }
}

/// This `weir` executable, which compiles modules in child processes of its own.
fn this_program() -> anyhow::Result<std::path::PathBuf> {
    std::env::current_exe().map_err(|e| anyhow::anyhow!("cannot find the weir executable: {e}"))
}

/// The engine the guest commands (`validate`, `build`, `test`) load with: `weir run`'s
/// compiled-code cache (so what they compile a run finds), compiles in a child process
/// under `limits`, and tiered code if `tiered` (see `engine::code_tier`).
fn guest_engine(
    tiered: bool,
    limits: crate::engine::CompileLimits,
) -> anyhow::Result<crate::engine::WasmEngine> {
    use crate::engine::{CompileIsolation, WasmEngine};
    let cache = crate::pipeline::compile_cache_dir();
    let engine = if tiered {
        WasmEngine::tiered(cache.as_deref())?
    } else {
        WasmEngine::new(cache.as_deref())?
    };
    Ok(engine.with_compile_isolation(CompileIsolation {
        program: this_program()?,
        limits,
    }))
}

/// An error on one line: the error and its causes, outermost first, without a cause
/// whose text the one before it already holds (thiserror messages often embed their
/// source). What `weir: error:` prints.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut out: Vec<String> = Vec::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if out.last().is_some_and(|prev| prev.contains(&cause)) {
            continue;
        }
        out.push(cause);
    }
    out.join(": ")
}
