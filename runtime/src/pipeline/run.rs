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
//! transactions were aborted. See `connector::kafka::sink` for why. No marker while
//! storage holds complete checkpoints is refused, never read as "nothing committed";
//! `--from-checkpoint N` is the operator's way to say which one.
//!
//! Loading the guests loads each distinct module file (by canonical path) once, however
//! many steps name it; the spec bounds the steps (`spec::pipeline::MAX_STEPS`).
//!
//! Before any of this, the run locks its state dir (`state_dir_lock`): a second
//! instance on the same state dir is refused before it can fence the first or touch
//! its files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use crate::checkpoint::coordinator::{self, Coordinator, CoordinatorConfig, RunEnd};
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::file::remove_committed;
use crate::connector::kafka::marker::{self, ResumeRefusal};
use crate::connector::kafka::{KafkaCommitUnit, KafkaError};
use crate::engine::{CompileIsolation, CompileLimits, GuestModule, WasmEngine, World};
use crate::metrics::progress::Progress;
use crate::metrics::{MetricsSnapshot, PipelineMetrics};
use crate::pipeline::build::{self, BuildContext};
use crate::pipeline::error::PipelineError;
use crate::pipeline::state_dir_lock::StateDirLock;
use crate::record::CheckpointId;
use crate::spec::{PipelineSpec, SinkSpec, StepSpec};
use crate::storage::CheckpointStorage;
use crate::storage::Fence;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Delete earlier checkpoints and committed file output first.
    pub from_scratch: bool,
    /// Resume from this complete checkpoint, whatever the progress markers say, and
    /// discard newer ones.
    pub from_checkpoint: Option<CheckpointId>,
    /// Redraw records/s and the last checkpoint on stderr once a second.
    pub show_progress: bool,
    /// Set non-zero (to the signal's number) to stop the run after one more checkpoint.
    pub stop: Arc<AtomicUsize>,
    /// The `weir` binary, to compile each module in a child process under the spec's
    /// `compile_cpu` and `compile_memory`; `None` compiles in this process, unbounded.
    pub compile_program: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct RunSummary {
    pub metrics: MetricsSnapshot,
    /// How the run ended, and its last checkpoint: the one the next run resumes from.
    pub end: RunEnd,
    /// The checkpoint the run resumed from, if any.
    pub restored_from: Option<CheckpointId>,
}

/// Where compiled guests are cached: `$WEIR_CACHE_DIR`, else `~/.cache/weir/compiled`.
pub fn compile_cache_dir() -> Option<PathBuf> {
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
    // One compiled copy per distinct file (keyed by canonical path): steps naming the
    // same module, under whatever spelling, share it.
    let mut loaded: BTreeMap<std::path::PathBuf, Arc<GuestModule>> = BTreeMap::new();
    for (n, step) in spec.steps.iter().enumerate() {
        let (path, kind, expected) = match step {
            StepSpec::Map(m) => (&m.module, "map", World::Mapper),
            StepSpec::Aggregate(a) => (&a.module, "aggregate", World::Aggregator),
        };
        let step_name = crate::record::ids::step_id(n);
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        let module = match loaded.get(&canonical) {
            Some(module) => Arc::clone(module),
            None => {
                let module = engine.load(path).map_err(|source| PipelineError::Module {
                    pipeline: spec.name.clone(),
                    step: step_name.clone(),
                    source,
                })?;
                let module = Arc::new(module);
                loaded.insert(canonical, Arc::clone(&module));
                module
            }
        };
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
        modules.insert(n, module);
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
    CheckpointStorage::remove_all(&spec.checkpoint.dir).map_err(|source| {
        PipelineError::Storage {
            pipeline: spec.name.clone(),
            source,
        }
    })?;
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
    let metadata = read_metadata(spec, storage, id)?;
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

/// Exactly-once Kafka recovery: the checkpoint whose transaction committed last (the
/// unit's markers), or the operator's `--from-checkpoint`; every newer checkpoint is
/// discarded (their transactions were aborted when the unit initialised its
/// producers), so that it is the latest complete one. `None` when nothing committed
/// yet and storage is empty.
fn committed_checkpoint(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    unit: &KafkaCommitUnit,
    from_checkpoint: Option<CheckpointId>,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    let storage_error = |source| PipelineError::Storage {
        pipeline: spec.name.clone(),
        source,
    };
    let kafka_error = |e: KafkaError| PipelineError::Connector {
        pipeline: spec.name.clone(),
        task: "recovery".into(),
        source: e.into(),
    };
    let complete = storage.complete_checkpoints().map_err(storage_error)?;
    let found = unit.found_markers().cloned().unwrap_or_default();
    let target = unit.marker_target();
    // Only needed (and read) when neither a marker nor the operator decides.
    let ever_committed = found.last_committed().is_some()
        || from_checkpoint.is_some()
        || ever_committed(spec, storage, &complete)?;
    let resume = match marker::resume_point(&found, &complete, ever_committed, from_checkpoint) {
        Ok(resume) => resume,
        Err(ResumeRefusal::NotComplete { wanted }) => {
            return Err(no_such_checkpoint(spec, wanted, &complete));
        }
        Err(ResumeRefusal::MarkerMissing) => {
            return Err(kafka_error(KafkaError::MarkerMissing {
                pipeline: spec.name.clone(),
                group: target.map(|t| t.group.clone()).unwrap_or_default(),
                topic: target.map(|t| t.progress_topic.clone()).unwrap_or_default(),
                storage: spec.checkpoint.dir.display().to_string(),
                checkpoints: list(&complete),
            }));
        }
    };
    let committed = resume.unwrap_or(CheckpointId::NONE);
    if committed != CheckpointId::NONE && !complete.contains(&committed) {
        return Err(kafka_error(KafkaError::MarkerWithoutCheckpoint {
            pipeline: spec.name.clone(),
            group: target.map(|t| t.group.clone()).unwrap_or_default(),
            marker: committed,
            storage: spec.checkpoint.dir.display().to_string(),
        }));
    }
    discard_after(
        spec,
        storage,
        committed,
        "its Kafka transaction did not commit",
    )?;
    latest_checkpoint(spec, storage)
}

/// Whether any complete checkpoint was taken after a commit (see
/// `CheckpointMetadata::committed_before`).
fn ever_committed(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    complete: &[CheckpointId],
) -> Result<bool, PipelineError> {
    for &id in complete {
        if read_metadata(spec, storage, id)?.committed_before != CheckpointId::NONE {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Complete checkpoint `id`'s metadata; unreadable metadata cannot be restored.
fn read_metadata(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    id: CheckpointId,
) -> Result<CheckpointMetadata, PipelineError> {
    CheckpointMetadata::read(storage, id).map_err(|e| PipelineError::Incompatible {
        pipeline: spec.name.clone(),
        checkpoint: id,
        reason: e.to_string(),
    })
}

/// Without an exactly-once Kafka sink: the operator's `--from-checkpoint`, with every
/// newer checkpoint discarded, or else the latest complete checkpoint.
fn chosen_checkpoint(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    from_checkpoint: Option<CheckpointId>,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    if let Some(wanted) = from_checkpoint {
        let complete = storage
            .complete_checkpoints()
            .map_err(|source| PipelineError::Storage {
                pipeline: spec.name.clone(),
                source,
            })?;
        if !complete.contains(&wanted) {
            return Err(no_such_checkpoint(spec, wanted, &complete));
        }
        discard_after(
            spec,
            storage,
            wanted,
            "--from-checkpoint names an older one",
        )?;
    }
    latest_checkpoint(spec, storage)
}

/// Discards every checkpoint (complete or not) after `keep`.
fn discard_after(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    keep: CheckpointId,
    why: &str,
) -> Result<(), PipelineError> {
    let storage_error = |source| PipelineError::Storage {
        pipeline: spec.name.clone(),
        source,
    };
    for id in storage.checkpoint_ids().map_err(storage_error)? {
        if id > keep {
            tracing::info!(pipeline = %spec.name, checkpoint = %id, kept = %keep, "discarding a checkpoint: {why}");
            storage.discard(id).map_err(storage_error)?;
        }
    }
    Ok(())
}

fn no_such_checkpoint(
    spec: &PipelineSpec,
    wanted: CheckpointId,
    complete: &[CheckpointId],
) -> PipelineError {
    PipelineError::NoSuchCheckpoint {
        pipeline: spec.name.clone(),
        wanted,
        storage: spec.checkpoint.dir.clone(),
        complete: list(complete),
    }
}

/// `3, 4, 5`, or `none`.
fn list(ids: &[CheckpointId]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `spec` until its sources are drained and the final checkpoint is committed, or
/// until `options.stop` asks it to stop after one more committed checkpoint.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunSummary, PipelineError> {
    // Held until this function returns, i.e. for the whole run.
    let _lock = StateDirLock::acquire(&spec.state_dir).map_err(|source| PipelineError::Locked {
        pipeline: spec.name.clone(),
        source,
    })?;
    let mut engine = WasmEngine::new(compile_cache_dir().as_deref()).map_err(|source| {
        PipelineError::Engine {
            pipeline: spec.name.clone(),
            source,
        }
    })?;
    if let Some(program) = &options.compile_program {
        engine = engine.with_compile_isolation(CompileIsolation {
            program: program.clone(),
            limits: CompileLimits {
                cpu: spec.limits.compile_cpu,
                memory_bytes: spec.limits.compile_memory as u64,
            },
        });
    }
    let modules = load_modules(spec, &engine)?;
    // Kafka sinks: check their configuration against the spec and the broker, before
    // anything is deleted or written; for exactly-once, fence earlier instances of this
    // pipeline and read the last committed checkpoint.
    let fence = Fence::default();
    let kafka =
        KafkaCommitUnit::open(spec, options.from_scratch, fence.clone()).map_err(|source| {
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
        CheckpointStorage::open(&spec.checkpoint.dir)
            .map_err(|source| PipelineError::Storage {
                pipeline: spec.name.clone(),
                source,
            })?
            .with_fence(fence),
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
        Some(unit) => committed_checkpoint(spec, &storage, unit, options.from_checkpoint)?,
        None => chosen_checkpoint(spec, &storage, options.from_checkpoint)?,
    };
    let restored_id = restored.as_ref().map_or(CheckpointId::NONE, |m| m.id);

    // Redo the restored checkpoint's commit, then drop what later checkpoints staged.
    let mut committers = build::committers(spec, kafka.as_ref());
    if let Some(metadata) = &restored {
        let deadline = std::time::Instant::now() + spec.checkpoint.timeout;
        coordinator::commit_all(&spec.name, &mut committers, metadata, deadline)?;
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
    let checkpoint_base = CheckpointId::numbering_base(newest, restored_id);
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
        stop: options.stop.clone(),
        metrics: metrics.clone(),
        last: checkpoint_base,
        committed: restored_id,
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
    let end = outcome?;
    Ok(RunSummary {
        metrics: metrics.snapshot(),
        end,
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn guests_dir() -> PathBuf {
        std::env::var_os("WEIR_GUESTS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_default();
                home.join(".cache/weir/guest-target/wasm32-wasip2/release")
            })
    }

    /// Issue 7 §2: steps naming one module, however spelled (`./`, a symlink), share one
    /// loaded copy; another module gets its own.
    #[test]
    fn each_distinct_module_is_loaded_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["uppercase", "filter_json"] {
            let from = guests_dir().join(format!("{name}.wasm"));
            std::fs::copy(&from, dir.path().join(format!("{name}.wasm")))
                .unwrap_or_else(|e| panic!("{}: {e}: run `make guests` first", from.display()));
        }
        std::os::unix::fs::symlink(
            dir.path().join("uppercase.wasm"),
            dir.path().join("link.wasm"),
        )
        .expect("symlink");
        let mut text = String::from(
            "name = \"p\"\n[[sources]]\ntype = \"generator\"\ncount = 1\n[[sinks]]\ntype = \"stdout\"\n",
        );
        for module in [
            "uppercase.wasm",
            "./uppercase.wasm",
            "link.wasm",
            "filter_json.wasm",
        ] {
            text.push_str(&format!(
                "[[steps]]\ntype = \"map\"\nmodule = \"{module}\"\n"
            ));
        }
        let spec = PipelineSpec::parse(&text, dir.path(), "spec.toml").expect("spec");
        let engine = WasmEngine::new(None).expect("engine");
        let modules = load_modules(&spec, &engine).expect("load");
        assert_eq!(modules.len(), 4);
        assert!(Arc::ptr_eq(&modules[&0], &modules[&1]));
        assert!(Arc::ptr_eq(&modules[&0], &modules[&2]));
        assert!(!Arc::ptr_eq(&modules[&0], &modules[&3]));
    }
}
