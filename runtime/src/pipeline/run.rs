//! `run`: one run of a pipeline, from recovery to the final checkpoint.
//!
//! Recovery, in order (see `checkpoint`): load the guests; open checkpoint storage; take
//! the latest complete checkpoint c, if any; redo the commit of c (idempotent: the
//! crash may have come between "complete" and "committed"); discard whatever sinks
//! staged for checkpoints after c; open every operator and source at its snapshot in
//! c; then run. `--from-scratch` first deletes the checkpoints and the committed file
//! output of earlier runs.
//!
//! With an exactly-once Kafka sink, the checkpoint restored is not the latest complete
//! one but the last one whose Kafka transaction committed (its marker, read after
//! fencing every earlier instance); newer checkpoints are discarded, since their
//! transactions were aborted. See `connector::kafka::sink` for why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::checkpoint::CheckpointId;
use crate::checkpoint::coordinator::{self, Coordinator, CoordinatorConfig};
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::checkpoint::storage::CheckpointStorage;
use crate::connector::file::remove_committed;
use crate::connector::kafka::{KafkaCommitUnit, KafkaError};
use crate::engine::{GuestModule, WasmEngine, World};
use crate::metrics::progress::Progress;
use crate::metrics::{MetricsSnapshot, PipelineMetrics};
use crate::pipeline::build::{self, BuildContext};
use crate::pipeline::error::PipelineError;
use crate::spec::{PipelineSpec, SinkSpec, StepSpec};

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Delete earlier checkpoints and committed file output first.
    pub from_scratch: bool,
    /// Redraw records/s and the last checkpoint on stderr once a second.
    pub show_progress: bool,
}

#[derive(Debug, Clone)]
pub struct RunSummary {
    pub metrics: MetricsSnapshot,
    /// The final checkpoint of the run.
    pub last_checkpoint: CheckpointId,
    /// The checkpoint the run resumed from, if any.
    pub restored_from: Option<CheckpointId>,
}

/// Where compiled guests are cached: `$WEIR_CACHE_DIR`, else `~/.cache/weir/compiled`.
fn compile_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/weir/compiled"))
}

/// Loads every step's guest and checks it exports the world its step needs.
pub fn load_modules(
    spec: &PipelineSpec,
    engine: &WasmEngine,
) -> Result<BTreeMap<usize, Arc<GuestModule>>, PipelineError> {
    let mut modules = BTreeMap::new();
    for (n, step) in spec.steps.iter().enumerate() {
        let (path, kind, expected) = match step {
            StepSpec::Map(m) => (&m.module, "map", World::Mapper),
            StepSpec::Aggregate(a) => (&a.module, "aggregate", World::Aggregator),
        };
        let step_name = crate::pipeline::plan::step_id(n);
        let module = engine.load(path).map_err(|source| PipelineError::Module {
            pipeline: spec.name.clone(),
            step: step_name.clone(),
            source,
        })?;
        if module.world() != expected {
            return Err(PipelineError::WrongWorld {
                pipeline: spec.name.clone(),
                step: step_name,
                module: module.name().to_owned(),
                kind,
                actual: world_name(module.world()),
                expected: world_name(expected),
            });
        }
        modules.insert(n, Arc::new(module));
    }
    Ok(modules)
}

fn world_name(world: World) -> &'static str {
    match world {
        World::Mapper => "mapper",
        World::Aggregator => "aggregator",
    }
}

/// Deletes the pipeline's checkpoints and the committed output of its file sinks.
fn start_over(spec: &PipelineSpec) -> Result<(), PipelineError> {
    let io = |path: &std::path::Path, source| PipelineError::Io {
        pipeline: spec.name.clone(),
        path: path.to_owned(),
        source,
    };
    if spec.checkpoint.dir.exists() {
        std::fs::remove_dir_all(&spec.checkpoint.dir).map_err(|e| io(&spec.checkpoint.dir, e))?;
    }
    let connector = |source| PipelineError::Connector {
        pipeline: spec.name.clone(),
        task: "start-over".into(),
        source,
    };
    for (i, sink) in spec.sinks.iter().enumerate() {
        if let SinkSpec::File(file) = sink {
            remove_committed(&file.path, &build::sink_file_name(spec, i)).map_err(connector)?;
        }
    }
    remove_committed(&spec.dead_letter.path, &build::dead_letter_file_name(spec))
        .map_err(connector)?;
    Ok(())
}

/// The latest complete checkpoint, checked against the spec.
fn latest_checkpoint(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    let storage_error = |source| PipelineError::Storage {
        pipeline: spec.name.clone(),
        source,
    };
    let Some(id) = storage.latest_complete().map_err(storage_error)? else {
        return Ok(None);
    };
    let metadata =
        CheckpointMetadata::read(storage, id).map_err(|e| PipelineError::Incompatible {
            pipeline: spec.name.clone(),
            checkpoint: id,
            reason: e.to_string(),
        })?;
    let incompatible = |reason: String| PipelineError::Incompatible {
        pipeline: spec.name.clone(),
        checkpoint: id,
        reason,
    };
    if metadata.parallelism != spec.parallelism {
        return Err(incompatible(format!(
            "it was taken with parallelism {}, the spec says {}; rescaling is not supported yet: \
             set parallelism = {} or run with --from-scratch",
            metadata.parallelism, spec.parallelism, metadata.parallelism
        )));
    }
    if usize::from(metadata.max_parallelism) != spec.max_parallelism {
        return Err(incompatible(format!(
            "it was taken with max_parallelism {}, the spec says {}; key groups are fixed for the life of a \
             pipeline: set max_parallelism = {} or run with --from-scratch",
            metadata.max_parallelism, spec.max_parallelism, metadata.max_parallelism
        )));
    }
    Ok(Some(metadata))
}

/// Exactly-once Kafka recovery: the checkpoint whose transaction committed last
/// (`unit`'s marker), after discarding every newer checkpoint (their transactions were
/// aborted when the unit initialised its producers), so that it is the latest complete
/// one. `None` when nothing committed yet.
fn committed_checkpoint(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    unit: &KafkaCommitUnit,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    let storage_error = |source| PipelineError::Storage {
        pipeline: spec.name.clone(),
        source,
    };
    let committed = unit.last_committed();
    for id in storage.checkpoint_ids().map_err(storage_error)? {
        if id > committed {
            tracing::info!(pipeline = %spec.name, checkpoint = %id, last_committed = %committed, "discarding a checkpoint whose Kafka transaction did not commit");
            storage.discard(id).map_err(storage_error)?;
        }
    }
    if committed != CheckpointId::NONE && !storage.is_complete(committed).map_err(storage_error)? {
        return Err(PipelineError::Connector {
            pipeline: spec.name.clone(),
            task: "recovery".into(),
            source: KafkaError::MarkerWithoutCheckpoint {
                pipeline: spec.name.clone(),
                group: unit.marker_group().unwrap_or_default().to_owned(),
                marker: committed,
                storage: spec.checkpoint.dir.display().to_string(),
            }
            .into(),
        });
    }
    latest_checkpoint(spec, storage)
}

/// The id this run's checkpoints are numbered after: one past every checkpoint id found
/// in storage at start (`newest`, read before recovery discards anything) and past the
/// restored one. A restarted run never reuses an id, and leaves one unused: a fenced
/// instance of the same pipeline may still be finishing the checkpoint after its last
/// (its transaction will fail to commit, but its files land in storage under that id).
fn checkpoint_base(newest: Option<CheckpointId>, restored: CheckpointId) -> CheckpointId {
    match newest {
        None => restored,
        Some(newest) => newest.max(restored).next(),
    }
}

/// Runs `spec` until its sources are drained and the final checkpoint is committed.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunSummary, PipelineError> {
    let engine = WasmEngine::new(compile_cache_dir().as_deref()).map_err(|source| {
        PipelineError::Engine {
            pipeline: spec.name.clone(),
            source,
        }
    })?;
    let modules = load_modules(spec, &engine)?;
    // Kafka sinks: check their configuration against the spec and the broker, before
    // anything is deleted or written; for exactly-once, fence earlier instances of this
    // pipeline and read the last committed checkpoint.
    let kafka = KafkaCommitUnit::open(spec, options.from_scratch).map_err(|source| {
        PipelineError::Connector {
            pipeline: spec.name.clone(),
            task: "kafka-sink".into(),
            source,
        }
    })?;
    if options.from_scratch {
        start_over(spec)?;
    }
    let storage = Arc::new(
        CheckpointStorage::open(&spec.checkpoint.dir).map_err(|source| PipelineError::Storage {
            pipeline: spec.name.clone(),
            source,
        })?,
    );
    let newest = storage
        .checkpoint_ids()
        .map_err(|source| PipelineError::Storage {
            pipeline: spec.name.clone(),
            source,
        })?
        .into_iter()
        .max();
    let restored = match kafka.as_deref().filter(|unit| unit.is_exactly_once()) {
        Some(unit) => committed_checkpoint(spec, &storage, unit)?,
        None => latest_checkpoint(spec, &storage)?,
    };
    let restored_id = restored.as_ref().map_or(CheckpointId::NONE, |m| m.id);

    // Redo the restored checkpoint's commit, then drop what later checkpoints staged.
    let mut committers = build::committers(spec, kafka.as_ref());
    if let Some(metadata) = &restored {
        coordinator::commit_all(&spec.name, &mut committers, metadata)?;
    }
    for committer in &mut committers {
        committer
            .discard_uncommitted(restored_id)
            .map_err(|source| coordinator::CoordinatorError::Commit {
                pipeline: spec.name.clone(),
                checkpoint: restored_id,
                phase: "discard",
                operator: committer.operator_id().to_owned(),
                source,
            })?;
    }

    let metrics = Arc::new(PipelineMetrics::default());
    let cancel = Arc::new(AtomicBool::new(false));
    let (events_tx, events_rx) = crossbeam_channel::unbounded();
    let context = crate::dataflow::task::TaskContext {
        pipeline: spec.name.clone(),
        task: String::new(),
        events: events_tx,
        cancel: cancel.clone(),
        metrics: metrics.clone(),
    };
    let checkpoint_base = checkpoint_base(newest, restored_id);
    let built = build::build(&BuildContext {
        spec,
        modules: &modules,
        storage: storage.clone(),
        restored: restored.as_ref(),
        checkpoint_base,
        context,
        kafka,
    })?;
    let tasks: BTreeSet<String> = built.task_names().into_iter().collect();
    let coordinator = Coordinator {
        config: CoordinatorConfig {
            pipeline: spec.name.clone(),
            interval: spec.checkpoint.interval,
            timeout: spec.checkpoint.timeout,
            retain: spec.checkpoint.retain,
            parallelism: spec.parallelism,
            max_parallelism: spec.max_parallelism as u16,
        },
        storage,
        events: events_rx,
        sources: built.barriers,
        tasks,
        committers: built.committers,
        cancel,
        metrics: metrics.clone(),
        last: checkpoint_base,
    };

    let mut threads = Vec::new();
    for task in built.source_tasks {
        let name = task.ctx.task.clone();
        threads.push(spawn(name, move || task.run(), spec)?);
    }
    for task in built.stage_tasks {
        let name = task.ctx.task.clone();
        threads.push(spawn(name, move || task.run(), spec)?);
    }
    let progress = options
        .show_progress
        .then(|| Progress::start(metrics.clone()));
    let outcome = coordinator.run();
    for t in threads {
        // A task that panicked is a bug; its failure is already in `outcome` or the
        // pipeline finished without it.
        let _ = t.join();
    }
    drop(progress);
    let last_checkpoint = outcome?;
    Ok(RunSummary {
        metrics: metrics.snapshot(),
        last_checkpoint,
        restored_from: restored.map(|m| m.id),
    })
}

fn spawn(
    name: String,
    f: impl FnOnce() + Send + 'static,
    spec: &PipelineSpec,
) -> Result<std::thread::JoinHandle<()>, PipelineError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|source| PipelineError::Io {
            pipeline: spec.name.clone(),
            path: PathBuf::from("<thread>"),
            source,
        })
}
