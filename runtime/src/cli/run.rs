//! `weir run SPEC.toml`: runs a pipeline locally until its sources are drained.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::pipeline::{self, RunOptions};
use crate::spec::PipelineSpec;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline spec (TOML).
    pub spec: PathBuf,
    /// Discard the pipeline's checkpoints and committed file output and start over.
    #[arg(long)]
    pub from_scratch: bool,
    /// Do not show progress, even on a terminal.
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn execute(args: RunArgs) -> anyhow::Result<()> {
    let spec = PipelineSpec::load(&args.spec)?;
    let show_progress = !args.quiet && std::io::stderr().is_terminal();
    // Pipeline errors already name the pipeline, task and operator.
    let options = RunOptions {
        from_scratch: args.from_scratch,
        show_progress,
    };
    let summary = pipeline::run(&spec, &options)?;
    let m = summary.metrics;
    eprintln!(
        "weir: pipeline {} finished: {} records in, {} out, {} dead letters ({} late); last checkpoint {}{}",
        spec.name,
        m.records_in,
        m.records_out,
        m.dead_letters,
        m.late_records,
        summary.last_checkpoint,
        match summary.restored_from {
            Some(id) => format!(" (resumed from checkpoint {id})"),
            None => String::new(),
        }
    );
    Ok(())
}
