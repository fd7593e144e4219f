//! `start`: a recovered pipeline's tasks and checkpoint coordinator, running on their
//! own threads, behind a handle (`RunningPipeline`) that can ask them to stop and wait
//! for the end. The CLI waits on it; a hosting supervisor can hold many.
//!
//! Invariants:
//! - Every task is built at its snapshot in the restored checkpoint (see `build`), and
//!   the coordinator numbers checkpoints after `Recovery::checkpoint_base`, the one
//!   place the current checkpoint id comes from.
//! - `wait` returns only after every task thread and the coordinator have ended, and
//!   the state dir stays locked until then.
//! - A stop request (`stop`, or the `RunOptions::stop` flag) ends the run after one
//!   more committed checkpoint.
//! - A failed run winds down within the checkpoint timeout (every wait of a task is
//!   bounded by it, and ends at once when the run is abandoned); that is watched
//!   (`watchdog`), so a thread stuck past it cannot keep the failure unreported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::checkpoint::coordinator::{Coordinator, CoordinatorConfig, CoordinatorError, RunEnd};
use crate::dataflow::task::{SourceTask, StageTask};
use crate::dataflow::task_context::TaskContext;
use crate::dataflow::task_panic;
use crate::engine::{GuestLogBudget, GuestModule};
use crate::metrics::PipelineMetrics;
use crate::metrics::progress::Progress;
use crate::metrics::status_file::StatusFile;
use crate::pipeline::build::{self, BuildContext};
use crate::pipeline::error::PipelineError;
use crate::pipeline::module_changes::module_hashes;
use crate::pipeline::options::{RunOptions, RunSummary};
use crate::pipeline::recovery::Recovery;
use crate::pipeline::state_dir_lock::StateDirLock;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::record::CheckpointId;
use crate::watchdog;

/// A pipeline whose tasks and coordinator are running.
pub struct RunningPipeline {
    pipeline: String,
    /// Bounds the wind-down of a failed run.
    checkpoint_timeout: std::time::Duration,
    /// The coordinator's outcome, or its panic's message.
    coordinator: JoinHandle<Result<Result<RunEnd, CoordinatorError>, String>>,
    tasks: Vec<JoinHandle<()>>,
    stop: Arc<AtomicUsize>,
    metrics: Arc<PipelineMetrics>,
    progress: Option<Progress>,
    status_file: Option<StatusFile>,
    restored_from: Option<CheckpointId>,
    _lock: StateDirLock,
}

/// Builds `recovery`'s tasks at their snapshots and starts them and the coordinator.
pub fn start(recovery: Recovery, options: &RunOptions) -> Result<RunningPipeline, PipelineError> {
    let Recovery {
        plan,
        lock,
        modules,
        module_changes,
        kafka,
        storage,
        restored,
        rescaled,
        checkpoint_base,
        committers,
        cleanup,
    } = recovery;
    let spec = &plan.spec;
    let metrics = options.metrics.clone();
    let cancel = Arc::new(AtomicBool::new(false));
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let context = TaskContext {
        pipeline: spec.name.clone(),
        task: String::new(),
        events: events_tx,
        cancel: cancel.clone(),
        metrics: metrics.clone(),
    };
    let built = build::build(&BuildContext {
        plan: &plan,
        modules: &modules,
        module_changes: &module_changes,
        storage: storage.clone(),
        restored: restored.as_ref(),
        rescaled: rescaled.as_ref(),
        checkpoint_base,
        guest_log: GuestLogBudget::new(
            spec.limits.guest_log_rate,
            context.metrics.guest_log_dropped_lines.clone(),
        ),
        context,
        kafka,
    })?;
    let tasks: BTreeSet<String> = built.task_names().into_iter().collect();
    let coordinator = Coordinator {
        config: coordinator_config(&plan, &modules),
        storage,
        events: events_rx,
        sources: built.barriers,
        tasks,
        committers,
        cancel,
        stop: options.stop.clone(),
        metrics: metrics.clone(),
        last: checkpoint_base,
        committed: restored.as_ref().map_or(CheckpointId::NONE, |m| m.id),
        cleanup,
    };
    let threads = spawn_tasks(&spec.name, built.source_tasks, built.stage_tasks)?;
    let coordinator = spawn(
        &spec.name,
        format!("{}-coordinator", spec.name),
        move || task_panic::catch(|| coordinator.run()),
    )?;
    metrics
        .started_unix_ms
        .store(crate::metrics::unix_ms(), Ordering::Relaxed);
    let watchers = watchers(options, &metrics);
    Ok(RunningPipeline {
        pipeline: spec.name.clone(),
        checkpoint_timeout: spec.checkpoint.timeout,
        coordinator,
        tasks: threads,
        stop: options.stop.clone(),
        progress: watchers.0,
        status_file: watchers.1,
        metrics,
        restored_from: restored.map(|m| m.id),
        _lock: lock,
    })
}

/// What reports a run's metrics as it goes, if the options ask for it: the progress
/// line and the status file.
fn watchers(
    options: &RunOptions,
    metrics: &Arc<PipelineMetrics>,
) -> (Option<Progress>, Option<StatusFile>) {
    let progress = options
        .show_progress
        .then(|| Progress::start(metrics.clone()));
    let status_file = options
        .status_file
        .clone()
        .map(|path| StatusFile::start(metrics.clone(), path));
    (progress, status_file)
}

/// The coordinator's settings, from the plan of the worker it runs and its modules.
fn coordinator_config(
    plan: &WorkerPlan,
    modules: &BTreeMap<usize, Arc<GuestModule>>,
) -> CoordinatorConfig {
    let spec = &plan.spec;
    CoordinatorConfig {
        pipeline: spec.name.clone(),
        interval: spec.checkpoint.interval,
        timeout: spec.checkpoint.timeout,
        retain: spec.checkpoint.retain,
        parallelism: spec.parallelism,
        max_parallelism: spec.max_parallelism as u16,
        layout: plan.layout,
        repartition_partitions: plan.repartitions.first().map(|r| r.key_groups.count()),
        modules: module_hashes(modules),
    }
}

/// A thread per task, named after it.
fn spawn_tasks(
    pipeline: &str,
    source_tasks: Vec<SourceTask>,
    stage_tasks: Vec<StageTask>,
) -> Result<Vec<JoinHandle<()>>, PipelineError> {
    let mut threads = Vec::with_capacity(source_tasks.len() + stage_tasks.len());
    for task in source_tasks {
        let name = task.ctx.task.clone();
        threads.push(spawn(pipeline, name, move || task.run())?);
    }
    for task in stage_tasks {
        let name = task.ctx.task.clone();
        threads.push(spawn(pipeline, name, move || task.run())?);
    }
    Ok(threads)
}

impl RunningPipeline {
    /// Asks the run to stop after one more committed checkpoint; `signal` is reported
    /// back in `RunEnd::Stopped` (a signal number, or any non-zero reason).
    pub fn stop(&self, signal: usize) {
        self.stop.store(signal.max(1), Ordering::SeqCst);
    }

    /// Waits for the coordinator and every task to end.
    pub fn wait(self) -> Result<RunSummary, PipelineError> {
        // `catch` leaves nothing for `join` to report.
        let outcome = self
            .coordinator
            .join()
            .unwrap_or_else(|_| Err("the coordinator thread panicked".to_owned()));
        let failure = match &outcome {
            Ok(Ok(_)) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(panic) => Some(panic.clone()),
        };
        let _winding_down = failure.map(|failure| {
            watchdog::watch(
                &self.pipeline,
                format!("the wind-down of the run after: {failure}"),
                Instant::now() + self.checkpoint_timeout,
            )
        });
        for task in self.tasks {
            // A task that panicked is a bug; its failure is already in `outcome` or the
            // pipeline finished without it.
            let _ = task.join();
        }
        drop(self.progress);
        drop(self.status_file);
        let end = outcome.map_err(|message| PipelineError::CoordinatorPanicked {
            pipeline: self.pipeline.clone(),
            message,
        })??;
        Ok(RunSummary {
            metrics: self.metrics.snapshot(),
            end,
            restored_from: self.restored_from,
        })
    }
}

fn spawn<T: Send + 'static>(
    pipeline: &str,
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, PipelineError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|source| PipelineError::Io {
            pipeline: pipeline.to_owned(),
            path: PathBuf::from("<thread>"),
            source,
        })
}
