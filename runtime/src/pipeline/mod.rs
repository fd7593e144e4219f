//! Running a pipeline: the physical plan, task construction, recovery and the run loop.
pub mod build;
pub mod error;
pub mod plan;
pub mod run;
pub mod state_dir_lock;

pub use error::PipelineError;
pub use run::{RunOptions, RunSummary, compile_cache_dir, run};
