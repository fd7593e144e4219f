//! `run`: one run of a pipeline, from recovery to the final checkpoint: `recover` (see
//! `recovery.rs`), `start` (see `running.rs`), then wait for the end.

use crate::pipeline::error::PipelineError;
use crate::pipeline::options::{RunOptions, RunSummary};
use crate::pipeline::recovery::recover;
use crate::pipeline::running::start;
use crate::spec::PipelineSpec;

/// Runs `spec` until its sources are drained and the final checkpoint is committed, or
/// until `options.stop` asks it to stop after one more committed checkpoint.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunSummary, PipelineError> {
    start(recover(spec, options)?, options)?.wait()
}
