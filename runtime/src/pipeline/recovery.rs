//! `recover`: everything a run does before its tasks start, in order.
//!
//! 0. Worker I of N (`RunOptions::worker`): the spec becomes that worker's plan
//!    (`WorkerPlan::new`: its own state and checkpoint subdirectories, its own
//!    Kafka commit unit), or is refused (a keyed step or a non-Kafka source with N > 1).
//! 1. Lock the state dir (`state_dir_lock`): a second instance on the same state dir is
//!    refused before it can fence the first or touch its files. Then choose the layout
//!    of workers (`worker_layout`): restore this worker's own checkpoints, or rescale
//!    from the current layout's (see `cluster::layout`); workers rescale from the
//!    pipeline run as one process too, never the other way.
//! 2. Load the guests (`modules`).
//! 3. Kafka sinks: check their configuration against the spec and the broker; for
//!    exactly-once, fence every earlier instance and read the progress markers (those
//!    of this worker's layout generation).
//! 4. `--from-scratch`: delete the checkpoints and the committed file output of earlier
//!    runs (only what Weir made).
//! 5. Open checkpoint storage and choose the checkpoint c to restore: the latest
//!    complete one; with an exactly-once Kafka sink, the last one whose Kafka
//!    transaction committed (its marker), newer ones being discarded since their
//!    transactions were aborted (see `connector::kafka::sink` for why). No marker while
//!    storage holds complete checkpoints is refused, never read as "nothing committed";
//!    `--from-checkpoint N` is the operator's way to say which one. A worker whose
//!    progress topic says a rescale took it over is refused.
//!
//!    Or, instead of 5, a rescale (the layout choice, or a worker of a rescaled layout
//!    that has committed nothing of its own yet, e.g. killed before its first commit):
//!    refuse, before anything is discarded, unless every old worker has a complete
//!    checkpoint of its layout in storage (`worker_layout::incomplete_worker`); take
//!    the old layout's workers over (`connector::kafka::takeover`: fence, read each
//!    one's last committed checkpoint, hand it over, or refuse); only then discard this
//!    worker's own checkpoints (an older layout's, or uncommitted: a stray worker of
//!    the old layout's origin shares its location with that origin, which the old
//!    layout may still need) and restore what this worker now owns from the old
//!    workers' checkpoints (`rescale`).
//!
//! 6. Redo the commit of c (idempotent: the crash may have come between "complete" and
//!    "committed"), and discard whatever sinks staged for checkpoints after c.
//! 7. Remove other layouts' working directories on this machine (`stale_work_dirs`).
//!
//! What it returns (`Recovery`) is all `running::start` needs to open every operator
//! and source at its snapshot in c (or in the old workers' checkpoints) and run.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::checkpoint::commit::Committer;
use crate::checkpoint::coordinator;
use crate::checkpoint::layout_cleanup::LayoutCleanup;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::cluster::{Layout, LayoutChoice};
use crate::connector::ConnectorError;
use crate::connector::file::remove_committed;
use crate::connector::kafka::marker::{self, ResumeRefusal};
use crate::connector::kafka::preflight;
use crate::connector::kafka::takeover::{self, TakeoverContext};
use crate::connector::kafka::{KafkaCommitUnit, KafkaError};
use crate::engine::GuestModule;
use crate::pipeline::error::PipelineError;
use crate::pipeline::module_changes::{ModuleChange, module_changes};
use crate::pipeline::modules::{engine, load_modules};
use crate::pipeline::options::RunOptions;
use crate::pipeline::rescale::{self, RescaleError, RescaleFailure, RescaleRestore};
use crate::pipeline::sinks::{self, PipelineSinks};
use crate::pipeline::stale_work_dirs;
use crate::pipeline::state_dir_lock::StateDirLock;
use crate::pipeline::worker_layout;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::record::CheckpointId;
use crate::spec::{PipelineSpec, SinkSpec};
use crate::storage::{CheckpointLocation, CheckpointStorage, Fence};

/// A pipeline recovered and ready to start: its guests loaded, its storage open, the
/// checkpoint to restore chosen and its commit redone.
pub struct Recovery {
    pub plan: WorkerPlan,
    /// Held for the whole run (released when the running pipeline is dropped).
    pub lock: StateDirLock,
    pub modules: BTreeMap<usize, Arc<GuestModule>>,
    /// Steps whose module is not the one the restored checkpoint was taken with.
    pub module_changes: Vec<ModuleChange>,
    pub kafka: Option<Arc<KafkaCommitUnit>>,
    pub storage: Arc<CheckpointStorage>,
    /// The checkpoint to restore, if any.
    pub restored: Option<CheckpointMetadata>,
    /// A rescale: what to restore from the old workers' checkpoints instead.
    pub rescaled: Option<RescaleRestore>,
    /// The id this run's checkpoints are numbered after (see
    /// `CheckpointId::numbering_base`).
    pub checkpoint_base: CheckpointId,
    /// The transactional sinks' committers, which redid the restored checkpoint's
    /// commit and commit the run's checkpoints from here on.
    pub committers: Vec<Box<dyn Committer>>,
    /// Worker 0 of a rescaled layout: the clean-up of the layouts before it.
    pub cleanup: Option<LayoutCleanup>,
}

/// Recovers `spec` (steps 1 to 6 above).
pub fn recover(spec: &PipelineSpec, options: &RunOptions) -> Result<Recovery, PipelineError> {
    let root = &spec.checkpoint.dir;
    let root_state_dir = spec.state_dir.clone();
    let mut plan = WorkerPlan::new(spec, options.worker)?;
    let lock =
        StateDirLock::acquire(&plan.spec.state_dir).map_err(|source| PipelineError::Locked {
            pipeline: plan.spec.name.clone(),
            source,
        })?;
    let choice =
        worker_layout::read_and_choose(&plan.spec.name, plan.worker, root, options.from_scratch)?;
    plan.layout = choice.stamp();
    if !plan.worker.is_single() {
        tracing::info!(pipeline = %plan.spec.name, worker = %plan.worker, layout = %plan.layout.layout(), ?choice, state_dir = %plan.spec.state_dir.display(), checkpoints = %plan.spec.checkpoint.dir, "running as one worker of several");
    }
    let modules = load_modules(&plan.spec, &engine(&plan.spec, options)?)?;
    // Before anything is deleted or written.
    let fence = Fence::default();
    let (kafka, in_use) = open_commit_unit(&plan, options, &fence)?;
    let plan = &*in_use;
    let spec = &plan.spec;
    if options.from_scratch {
        start_over(plan)?;
    }
    let storage_error = |source| PipelineError::Storage {
        pipeline: spec.name.clone(),
        source,
    };
    let storage = Arc::new(
        CheckpointStorage::open(&spec.checkpoint.dir, &spec.name)
            .map_err(storage_error)?
            .with_fence(fence),
    );
    // Read before anything is discarded: ids are never reused.
    let newest = storage
        .checkpoint_ids()
        .map_err(storage_error)?
        .into_iter()
        .max();
    let exactly_once = kafka.as_deref().filter(|unit| unit.is_exactly_once());
    let (restored, rescale_from) = restore_point(plan, &storage, exactly_once, choice, options)?;
    let changes: Vec<ModuleChange> = restored
        .iter()
        .flat_map(|m| module_changes(m, &modules))
        .collect();
    for change in &changes {
        tracing::warn!(pipeline = %spec.name, "{change}");
    }
    let rescaled = match rescale_from {
        Some(from) => Some(rescale(plan, root, &storage, exactly_once, from, options)?),
        None => None,
    };
    let restored_id = restored.as_ref().map_or(CheckpointId::NONE, |m| m.id);
    let mut committers = PipelineSinks::new(plan, kafka.as_ref()).committers();
    redo_commit(spec, &mut committers, restored.as_ref())?;
    stale_work_dirs::remove_other_layouts_in_background(root_state_dir, plan.worker);
    Ok(Recovery {
        plan: plan.clone(),
        lock,
        modules,
        module_changes: changes,
        kafka,
        storage,
        restored,
        rescaled,
        checkpoint_base: CheckpointId::numbering_base(newest, restored_id),
        committers,
        cleanup: LayoutCleanup::for_run(&spec.name, root, plan.worker, plan.layout),
    })
}

/// Step 3 (see the module docs): the Kafka commit unit, if the spec has a Kafka sink,
/// and the plan with the repartition topics' partition count in use: the spec's default
/// gives way to an existing topic's count.
fn open_commit_unit<'a>(
    plan: &'a WorkerPlan,
    options: &RunOptions,
    fence: &Fence,
) -> Result<(Option<Arc<KafkaCommitUnit>>, Cow<'a, WorkerPlan>), PipelineError> {
    let spec = &plan.spec;
    let kafka = KafkaCommitUnit::open(
        &plan.commit_unit_plan(),
        options.from_scratch,
        fence.clone(),
    )
    .map_err(|source| PipelineError::connector(&spec.name, "kafka-sink", source))?;
    let in_use = plan.with_repartition_partitions(
        kafka
            .as_ref()
            .and_then(|unit| unit.repartition_partitions()),
    );
    if let Cow::Owned(adopted) = &in_use {
        tracing::info!(pipeline = %spec.name, worker = %plan.worker,
            partitions = adopted.spec.repartition_partitions,
            "the repartition topics exist with another partition count than the default: using theirs (repartition_partitions is not set)");
    }
    Ok((kafka, in_use))
}

/// Step 5 or 5' (see the module docs): the checkpoint of its own this worker restores,
/// or the layout it rescales from instead.
fn restore_point(
    plan: &WorkerPlan,
    storage: &CheckpointStorage,
    exactly_once: Option<&KafkaCommitUnit>,
    choice: LayoutChoice,
    options: &RunOptions,
) -> Result<(Option<CheckpointMetadata>, Option<Layout>), PipelineError> {
    Ok(match (choice, exactly_once) {
        (LayoutChoice::Rescale { from, .. }, _) => (None, Some(from)),
        (LayoutChoice::Own(stamp), Some(unit)) => {
            refuse_handed_over(plan, unit)?;
            let restored = committed_checkpoint(plan, storage, unit, options.from_checkpoint)?;
            // A worker of a rescaled layout that committed nothing of its own yet (not
            // even the "nothing" of a start over) holds its units in the origin's
            // checkpoints still: it rescales, as when it first started.
            let nothing_of_its_own = unit
                .found_markers()
                .is_none_or(|found| found.last_committed().is_none());
            match stamp.rescaled_from {
                Some(from) if restored.is_none() && nothing_of_its_own => (None, Some(from)),
                _ => (restored, None),
            }
        }
        (LayoutChoice::Own(_), None) => (
            chosen_checkpoint(plan, storage, options.from_checkpoint)?,
            None,
        ),
    })
}

/// Refuses a worker its progress topic says was handed over to a rescale: its own
/// checkpoints are no longer the pipeline's state.
fn refuse_handed_over(plan: &WorkerPlan, unit: &KafkaCommitUnit) -> Result<(), PipelineError> {
    if let Some(to) = unit.found_markers().and_then(|f| f.rescaled_to) {
        return Err(PipelineError::HandedOver {
            pipeline: plan.spec.name.clone(),
            worker: plan.worker,
            generation: plan.layout.generation,
            to,
        });
    }
    Ok(())
}

/// Step 5' (see the module docs): this worker's own checkpoints discarded, the old
/// workers of `from` taken over, and what this worker owns restored from theirs.
fn rescale(
    plan: &WorkerPlan,
    root: &CheckpointLocation,
    storage: &CheckpointStorage,
    unit: Option<&KafkaCommitUnit>,
    from: Layout,
    options: &RunOptions,
) -> Result<RescaleRestore, PipelineError> {
    let spec = &plan.spec;
    let fail = |failure| {
        PipelineError::Rescale(Box::new(RescaleError {
            pipeline: spec.name.clone(),
            worker: plan.worker,
            from,
            failure: Box::new(failure),
        }))
    };
    if options.from_checkpoint.is_some() {
        return Err(fail(RescaleFailure::FromCheckpoint));
    }
    let Some(unit) = unit else {
        return Err(fail(RescaleFailure::NeedsExactlyOnce));
    };
    if let Some(committed) = unit
        .found_markers()
        .and_then(|f| f.last_committed())
        .filter(|&c| c != CheckpointId::NONE)
    {
        return Err(fail(RescaleFailure::LostOwnCheckpoints { committed }));
    }
    // Every check that can refuse comes before this worker's own checkpoints go: its
    // location may be one the old layout's origin still needs (a stray worker of that
    // origin started during its rescale).
    if let Some(old) = worker_layout::incomplete_worker(&spec.name, root, from)? {
        return Err(fail(RescaleFailure::OldWorkerIncomplete {
            old,
            workers: from.workers,
        }));
    }
    let sinks = spec.kafka_sink_ids();
    let sink = preflight::shared_settings(&sinks)
        .ok()
        .flatten()
        .ok_or_else(|| fail(RescaleFailure::NeedsExactlyOnce))?;
    let endpoint = sink
        .endpoint()
        .map_err(|e| PipelineError::connector(&spec.name, "rescale", e))?;
    let cx = TakeoverContext {
        pipeline: &spec.name,
        sink,
        endpoint: &endpoint,
    };
    let handed = takeover::take_over(&cx, from, plan.worker.count()).map_err(|e| fail(e.into()))?;
    discard_after(
        spec,
        storage,
        CheckpointId::NONE,
        "this worker restores from the old layout's checkpoints (a rescale)",
    )?;
    rescale::restore(plan, root, from, &handed).map_err(|e| PipelineError::Rescale(Box::new(e)))
}

/// Redoes the restored checkpoint's commit, then drops what later checkpoints staged.
fn redo_commit(
    spec: &PipelineSpec,
    committers: &mut [Box<dyn Committer>],
    restored: Option<&CheckpointMetadata>,
) -> Result<(), PipelineError> {
    if let Some(metadata) = restored {
        let deadline = std::time::Instant::now() + spec.checkpoint.timeout;
        coordinator::commit_all(&spec.name, committers, metadata, deadline)?;
    }
    let restored_id = restored.map_or(CheckpointId::NONE, |m| m.id);
    for committer in committers {
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
    Ok(())
}

/// Deletes the pipeline's checkpoints and the committed output of its file sinks.
fn start_over(plan: &WorkerPlan) -> Result<(), PipelineError> {
    let spec = &plan.spec;
    CheckpointStorage::remove_all(&spec.checkpoint.dir, &spec.name).map_err(|source| {
        PipelineError::Storage {
            pipeline: spec.name.clone(),
            source,
        }
    })?;
    let connector =
        |source: ConnectorError| PipelineError::connector(&spec.name, "start-over", source);
    for (i, sink) in spec.sinks.iter().enumerate() {
        if let SinkSpec::File(file) = sink {
            remove_committed(&file.path, &sinks::sink_file_name(plan, i)).map_err(connector)?;
        }
    }
    remove_committed(&spec.dead_letter.path, &sinks::dead_letter_file_name(plan))
        .map_err(connector)?;
    Ok(())
}

/// The latest complete checkpoint, checked against the spec.
fn latest_checkpoint(
    plan: &WorkerPlan,
    storage: &CheckpointStorage,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    let spec = &plan.spec;
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
            "it was taken with parallelism {}, the spec says {}; a restart keeps the parallelism \
             (only a rescale to another number of workers may change it): set parallelism = {} or \
             run with --from-scratch",
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
    if let Some(reason) = rescale::repartition_partitions_changed(&metadata, plan) {
        return Err(incompatible(reason));
    }
    Ok(Some(metadata))
}

/// Exactly-once Kafka recovery: the checkpoint whose transaction committed last (the
/// unit's markers), or the operator's `--from-checkpoint`; every newer checkpoint is
/// discarded (their transactions were aborted when the unit initialised its
/// producers), so that it is the latest complete one. `None` when nothing committed
/// yet and storage is empty.
fn committed_checkpoint(
    plan: &WorkerPlan,
    storage: &CheckpointStorage,
    unit: &KafkaCommitUnit,
    from_checkpoint: Option<CheckpointId>,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    let spec = &plan.spec;
    let storage_error = |source| PipelineError::Storage {
        pipeline: spec.name.clone(),
        source,
    };
    let kafka_error = |e: KafkaError| PipelineError::connector(&spec.name, "recovery", e);
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
                storage: spec.checkpoint.dir.to_string(),
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
            storage: spec.checkpoint.dir.to_string(),
        }));
    }
    discard_after(
        spec,
        storage,
        committed,
        "its Kafka transaction did not commit",
    )?;
    latest_checkpoint(plan, storage)
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

/// Complete checkpoint `id`'s metadata; unreadable metadata, or another pipeline's,
/// cannot be restored.
fn read_metadata(
    spec: &PipelineSpec,
    storage: &CheckpointStorage,
    id: CheckpointId,
) -> Result<CheckpointMetadata, PipelineError> {
    pipelines_own_metadata(&spec.name, storage, id).map_err(|reason| PipelineError::Incompatible {
        pipeline: spec.name.clone(),
        checkpoint: id,
        reason,
    })
}

/// Complete checkpoint `id`'s metadata, refused (with the reason) unless it names
/// `pipeline`: another pipeline's checkpoint (in storage adopted from an older Weir,
/// whose marker named no pipeline) is never restored, nor read as proof of anything.
fn pipelines_own_metadata(
    pipeline: &str,
    storage: &CheckpointStorage,
    id: CheckpointId,
) -> Result<CheckpointMetadata, String> {
    let metadata = CheckpointMetadata::read(storage, id).map_err(|e| e.to_string())?;
    if metadata.pipeline != pipeline {
        return Err(format!(
            "it is pipeline {:?}'s, not {pipeline:?}'s ({}): give each pipeline its own [checkpoint] dir",
            metadata.pipeline,
            storage.location()
        ));
    }
    Ok(metadata)
}

/// Without an exactly-once Kafka sink: the operator's `--from-checkpoint`, with every
/// newer checkpoint discarded, or else the latest complete checkpoint.
fn chosen_checkpoint(
    plan: &WorkerPlan,
    storage: &CheckpointStorage,
    from_checkpoint: Option<CheckpointId>,
) -> Result<Option<CheckpointMetadata>, PipelineError> {
    let spec = &plan.spec;
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
    latest_checkpoint(plan, storage)
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
        storage: spec.checkpoint.dir.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pipeline: &str, id: u64) -> CheckpointMetadata {
        CheckpointMetadata::empty_for_test(pipeline, id)
    }

    #[test]
    fn another_pipelines_checkpoint_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = CheckpointStorage::open(dir.path().join("checkpoints"), "wc").expect("open");
        metadata("wc", 1).write(&storage).expect("write 1");
        metadata("orders", 2).write(&storage).expect("write 2");
        let ours = pipelines_own_metadata("wc", &storage, CheckpointId(1)).expect("ours");
        assert_eq!(ours.pipeline, "wc");
        let reason = pipelines_own_metadata("wc", &storage, CheckpointId(2))
            .expect_err("another pipeline's checkpoint must be refused");
        assert!(
            reason.contains("\"orders\"") && reason.contains("\"wc\""),
            "{reason}"
        );
    }
}
