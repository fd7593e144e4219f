//! The `weir` command line: one file per subcommand, each with an `execute` function.

pub mod checkpoints;
pub mod run;
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
    /// List a pipeline's checkpoints: id, time, size, files added.
    Checkpoints(checkpoints::CheckpointsArgs),
}

impl Command {
    /// Runs the subcommand; the exit code it asks for (`run` stopped by a signal
    /// exits 128 + its number).
    pub fn execute(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Run(args) => run::execute(args),
            Command::Validate(args) => validate::execute(args).map(|()| ExitCode::SUCCESS),
            Command::Checkpoints(args) => checkpoints::execute(args).map(|()| ExitCode::SUCCESS),
        }
    }
}
