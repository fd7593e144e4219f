//! Running a pipeline: `recover` (lock, guests, Kafka fencing, the layout of workers
//! and the checkpoint to restore, or the old workers' checkpoints after a rescale),
//! `start` (the physical plan built into tasks at their snapshots, and the
//! coordinator) and `run`, which does both and waits for the end. A run that recovered
//! removes other layouts' working directories on its machine (`stale_work_dirs`).
pub mod build;
pub mod error;
pub mod module_changes;
pub mod modules;
pub mod options;
pub mod plan;
pub mod recovery;
pub mod rescale;
pub mod reset;
pub mod run;
pub mod running;
pub mod sample_run;
pub mod sinks;
pub mod sources;
pub mod stale_work_dirs;
pub mod state_dir_lock;
pub mod worker_layout;
pub mod worker_plan;

pub use error::PipelineError;
pub use modules::compile_cache_dir;
pub use options::{RunOptions, RunSummary};
pub use recovery::{Recovery, recover};
pub use run::run;
pub use running::{RunningPipeline, start};
pub use worker_plan::{WorkerPlan, WorkerPlanError};
