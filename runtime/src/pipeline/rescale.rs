//! `restore`: what a worker started by a rescale restores (`RescaleRestore`), from the
//! last committed checkpoints of the old layout's workers (`connector::kafka::takeover`
//! found them and took their workers over).
//!
//! Why that is a correct state for the new layout, after a savepoint or after a crash
//! alike: each old worker J is exactly-once on its own, and its last committed
//! checkpoint c_J agrees with everything its transactions committed: its output, the
//! repartition records it wrote and its source and repartition offsets up to T(c_J),
//! nothing after. So every input record is, at the cut made of all c_J, in exactly one
//! of these places: (a) before its source partition's offset in the c_J of the worker
//! that read it, and then in the repartition topic (committed with that offset), where
//! (a1) it is before its key group's repartition offset in the c_J of the group's
//! owner, and counted in that owner's state, or (a2) after it, and read again by the
//! group's new owner from that offset; or (b) after its source offset, and read again
//! by the partition's new owner. Nothing is counted twice or lost, and per key the
//! order is kept (a key group lies in one partition, read in offset order). A SIGTERM stop
//! (savepoint) only makes c_J the worker's final checkpoint; a SIGKILLed worker's last
//! committed checkpoint is as good, its uncommitted work having been aborted when it
//! was fenced.
//!
//! Invariants of what is restored (for new worker I of M, old layout of N workers):
//! - Key-group state: each key group the new worker owns comes from the snapshot of
//!   the old subtask that held it in the checkpoint of its old owner, the one
//!   `cluster::rescale_plan` names; each new subtask gets exactly its key groups
//!   (`dataflow::partition::subtask_of`), from as many old snapshots as held them.
//!   Old and new subtasks are each computed with their own layout's parallelism (the
//!   old checkpoint's, the spec's), so a rescale may change `parallelism` too.
//! - Offsets: a source partition's position comes from the one old checkpoint that
//!   lists it (the worker that read it: the plan's provider while the partition count
//!   did not change); two old checkpoints listing one partition are refused. The
//!   repartition topic's partition `r` is listed by the old owner of key-group range
//!   `r` (workers own whole ranges, on both sides the same ones). The new
//!   worker's sources take the positions of their own partitions (`KafkaSource`); a
//!   partition no old checkpoint lists is new input.
//! - The old checkpoints are only read: their storage is opened read-only and stays as
//!   it is (a new worker killed before its first commit rescales again from it).
//! - Each old checkpoint is checked before anything is restored from it: complete,
//!   this pipeline's, taken by the old layout (workers and generation), with the
//!   spec's key groups (`max_parallelism`, fixed for the life of a pipeline) and, when
//!   it read a repartition topic, the spec's `repartition_partitions` (also fixed:
//!   `repartition_partitions_changed`).
//! - Output the old workers' file sinks and dead letters staged for c_J is committed
//!   (idempotent, as a restart of J would do, with J's parallelism), and what they
//!   staged after c_J is dropped: the new workers produce it again. New worker `J mod M` does this for old
//!   worker J, so that two new workers never rename the same staged file at once.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use crate::checkpoint::coordinator::{self, CoordinatorError};
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::cluster::rescale_plan::{self, intersect};
use crate::cluster::{KeyGroupRanges, Layout, Worker};
use crate::connector::kafka::KafkaPosition;
use crate::connector::kafka::takeover::HandedOver;
use crate::dataflow::operators::aggregate::RescaledState;
use crate::dataflow::partition::subtask_key_groups;
use crate::pipeline::plan;
use crate::pipeline::sinks::PipelineSinks;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::record::{CheckpointId, SourcePosition, ids};
use crate::spec::{PipelineSpec, StepSpec};
use crate::storage::{CheckpointLocation, CheckpointStorage, StorageError};

/// A rescale that could not restore the new worker.
#[derive(Debug, thiserror::Error)]
#[error("pipeline {pipeline}, worker {worker}: rescaling from {from}: {failure}")]
pub struct RescaleError {
    pub pipeline: String,
    pub worker: Worker,
    pub from: Layout,
    pub failure: Box<RescaleFailure>,
}

/// What went wrong in a rescale (see `RescaleError` for the context).
#[derive(Debug, thiserror::Error)]
pub enum RescaleFailure {
    #[error(transparent)]
    Takeover(#[from] crate::connector::kafka::takeover::TakeoverError),
    #[error(
        "rescaling needs an exactly-once Kafka sink: its transactions say which checkpoint of each old worker was committed"
    )]
    NeedsExactlyOnce,
    #[error(
        "--from-checkpoint names one of this worker's own checkpoints, but this start is a rescale, which restores the old workers' last committed ones: leave it out"
    )]
    FromCheckpoint,
    #[error(
        "this worker's progress topic says it committed checkpoint {committed} in this layout, but its checkpoint location holds no checkpoint of this layout: restore that location"
    )]
    LostOwnCheckpoints { committed: CheckpointId },
    #[error(
        "old worker {old} has no complete checkpoint of its layout in checkpoint storage, so it has committed nothing to hand over: start all {workers} workers of that layout until each has committed a checkpoint (a SIGTERM stop commits a final one), then rescale; nothing was discarded"
    )]
    OldWorkerIncomplete { old: Worker, workers: u32 },
    #[error("old worker {old}: checkpoint storage {storage}: {source}")]
    Storage {
        old: Worker,
        storage: String,
        #[source]
        source: StorageError,
    },
    #[error(
        "old worker {old}: its last committed checkpoint is {checkpoint}, but {storage} holds no complete checkpoint {checkpoint}: restore that location"
    )]
    MissingCheckpoint {
        old: Worker,
        checkpoint: CheckpointId,
        storage: String,
    },
    #[error("old worker {old}: checkpoint {checkpoint} in {storage} cannot be restored: {reason}")]
    Incompatible {
        old: Worker,
        checkpoint: CheckpointId,
        storage: String,
        reason: String,
    },
    #[error(
        "partition {topic}-{partition} of {operator} is listed in the checkpoints of both old worker {first} and old worker {second}: which one read it cannot be told"
    )]
    DuplicatePartition {
        operator: String,
        topic: String,
        partition: i32,
        first: Worker,
        second: Worker,
    },
    #[error(
        "old worker {old}: checkpoint {checkpoint} has no snapshot of {operator} in task {task}"
    )]
    MissingState {
        old: Worker,
        checkpoint: CheckpointId,
        task: String,
        operator: String,
    },
    #[error("old worker {old}: {source}")]
    Positions {
        old: Worker,
        #[source]
        source: Box<crate::connector::ConnectorError>,
    },
    #[error("old worker {old}: redoing the commit of its file output: {source}")]
    Commit {
        old: Worker,
        #[source]
        source: Box<CoordinatorError>,
    },
    #[error("the rescale plan: {0}")]
    Plan(#[from] crate::cluster::WorkerParseError),
}

/// One old worker's last committed checkpoint, as restored from.
#[derive(Debug)]
pub struct OldCheckpoint {
    pub worker: Worker,
    pub storage: Arc<CheckpointStorage>,
    pub metadata: CheckpointMetadata,
}

/// Key groups of one old subtask's snapshot for one new task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSlice {
    /// Index into `RescaleRestore::old`.
    pub old: usize,
    /// The old task whose snapshot holds them.
    pub task: String,
    pub key_groups: Vec<Range<u16>>,
}

/// What a worker started by a rescale restores (see the module docs).
#[derive(Debug)]
pub struct RescaleRestore {
    pub from: Layout,
    pub old: Vec<OldCheckpoint>,
    /// Source operator id -> every old subtask's position of it.
    positions: BTreeMap<String, Vec<SourcePosition>>,
    /// (new task, operator id) -> where its key groups come from.
    states: BTreeMap<(String, String), Vec<StateSlice>>,
}

impl RescaleRestore {
    /// Every old position of source `operator` (each partition listed once): what the
    /// new worker's subtasks of that source restore their partitions from.
    pub fn positions_of(&self, operator: &str) -> Vec<&SourcePosition> {
        self.positions
            .get(operator)
            .map(|p| p.iter().collect())
            .unwrap_or_default()
    }

    /// Where new task `task`'s `operator` takes its key groups from (empty: it owns
    /// none, or none held state).
    pub fn state_of(&self, task: &str, operator: &str) -> Vec<RescaledState<'_>> {
        let Some(slices) = self.states.get(&(task.to_owned(), operator.to_owned())) else {
            return Vec::new();
        };
        slices
            .iter()
            .filter_map(|slice| {
                let old = self.old.get(slice.old)?;
                Some(RescaledState {
                    storage: &old.storage,
                    snapshot: old.metadata.snapshot(&slice.task, operator)?,
                    key_groups: slice.key_groups.clone(),
                })
            })
            .collect()
    }
}

/// What new worker `plan.worker` restores after `from`'s workers were handed over
/// (`handed`, by index) from `root` (the spec's checkpoint dir, before a worker's own
/// subdirectory is added); also redoes the old file sinks' commits.
pub fn restore(
    plan: &WorkerPlan,
    root: &CheckpointLocation,
    from: Layout,
    handed: &[HandedOver],
) -> Result<RescaleRestore, RescaleError> {
    let spec = &plan.spec;
    let fail = |failure| RescaleError {
        pipeline: spec.name.clone(),
        worker: plan.worker,
        from,
        failure: Box::new(failure),
    };
    let old = handed
        .iter()
        .map(|h| old_checkpoint(plan, root, from, h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    let positions = merged_positions(spec, &old).map_err(fail)?;
    let states = state_slices(plan, from, &old).map_err(fail)?;
    // One new worker per old one, so that two never rename the same staged file.
    for o in old
        .iter()
        .filter(|o| o.worker.index() % plan.worker.count() == plan.worker.index())
    {
        redo_old_commit(plan, o).map_err(fail)?;
    }
    let slices: usize = states.values().map(Vec::len).sum();
    tracing::info!(pipeline = %spec.name, worker = %plan.worker, %from, old_checkpoints = ?old.iter().map(|o| (o.worker.to_string(), o.metadata.id.0)).collect::<Vec<_>>(), state_slices = slices, "rescale: restoring from the old workers' last committed checkpoints");
    Ok(RescaleRestore {
        from,
        old,
        positions,
        states,
    })
}

/// Old worker `h.old`'s checkpoint `h.checkpoint`, read and checked.
fn old_checkpoint(
    plan: &WorkerPlan,
    root: &CheckpointLocation,
    from: Layout,
    h: &HandedOver,
) -> Result<OldCheckpoint, RescaleFailure> {
    let old = h.old;
    let location = match old.dir_name() {
        Some(name) => root.child(&name),
        None => root.clone(),
    };
    let storage_error = |source| RescaleFailure::Storage {
        old,
        storage: location.to_string(),
        source,
    };
    let storage = CheckpointStorage::open_read_only(&location).map_err(storage_error)?;
    if !storage.is_complete(h.checkpoint).map_err(storage_error)? {
        return Err(RescaleFailure::MissingCheckpoint {
            old,
            checkpoint: h.checkpoint,
            storage: location.to_string(),
        });
    }
    let incompatible = |reason: String| RescaleFailure::Incompatible {
        old,
        checkpoint: h.checkpoint,
        storage: location.to_string(),
        reason,
    };
    let metadata = CheckpointMetadata::read(&storage, h.checkpoint)
        .map_err(|e| incompatible(e.to_string()))?;
    let spec = &plan.spec;
    let stamp = metadata.layout_of(old);
    if metadata.pipeline != spec.name {
        return Err(incompatible(format!(
            "it is pipeline {:?}'s, not {:?}'s",
            metadata.pipeline, spec.name
        )));
    }
    if stamp.layout() != from {
        return Err(incompatible(format!(
            "it was taken by a layout of {}, not {from}",
            stamp.layout()
        )));
    }
    if usize::from(metadata.max_parallelism) != spec.max_parallelism {
        return Err(incompatible(format!(
            "it was taken with max_parallelism {}, the spec says {}; key groups are fixed for the life of a pipeline: set max_parallelism = {}",
            metadata.max_parallelism, spec.max_parallelism, metadata.max_parallelism
        )));
    }
    if let Some(reason) = repartition_partitions_changed(&metadata, plan) {
        return Err(incompatible(reason));
    }
    Ok(OldCheckpoint {
        worker: old,
        storage: Arc::new(storage),
        metadata,
    })
}

/// Every Kafka source's positions over the old checkpoints, each partition from the
/// one checkpoint that lists it.
fn merged_positions(
    spec: &PipelineSpec,
    old: &[OldCheckpoint],
) -> Result<BTreeMap<String, Vec<SourcePosition>>, RescaleFailure> {
    let mut positions = BTreeMap::new();
    for s in 0..spec.sources.len() {
        let operator = ids::source_id(s);
        let mut listed_by: BTreeMap<(String, i32), Worker> = BTreeMap::new();
        let mut all = Vec::new();
        for o in old {
            for snapshot in o.metadata.snapshots_of(&operator) {
                let position = KafkaPosition::from_value(&snapshot.state).map_err(|source| {
                    RescaleFailure::Positions {
                        old: o.worker,
                        source: Box::new(source),
                    }
                })?;
                for p in &position.partitions {
                    let key = (p.topic.clone(), p.partition);
                    match listed_by.get(&key) {
                        Some(&first) if first != o.worker => {
                            return Err(RescaleFailure::DuplicatePartition {
                                operator,
                                topic: p.topic.clone(),
                                partition: p.partition,
                                first,
                                second: o.worker,
                            });
                        }
                        _ => {
                            listed_by.insert(key, o.worker);
                        }
                    }
                }
                all.push(snapshot.state.clone());
            }
        }
        positions.insert(operator, all);
    }
    Ok(positions)
}

/// Why `plan` cannot restore `metadata` when the repartition topics it read had another
/// number of partitions: workers own whole partitions' key-group ranges, so the
/// number is fixed for the life of a pipeline, like the key groups. `None` when they
/// agree, or when the checkpoint read no repartition topic (one process).
pub fn repartition_partitions_changed(
    metadata: &CheckpointMetadata,
    plan: &WorkerPlan,
) -> Option<String> {
    // Every topic has the same count: the first one the checkpoint read says it.
    let (ours, theirs) = plan.repartitions.iter().find_map(|exchange| {
        let theirs = metadata.repartition_partitions_of(&ids::source_id(exchange.source))?;
        Some((exchange.key_groups.count(), theirs))
    })?;
    (theirs != ours).then(|| {
        format!(
            "it was taken with repartition_partitions {theirs}, the spec says {ours}; each is a \
             range of key groups a worker owns whole, fixed for the life of a pipeline: set \
             repartition_partitions = {theirs}"
        )
    })
}

/// For every new task of a keyed stage, the old snapshots its key groups come from.
fn state_slices(
    worker_plan: &WorkerPlan,
    from: Layout,
    old: &[OldCheckpoint],
) -> Result<BTreeMap<(String, String), Vec<StateSlice>>, RescaleFailure> {
    let spec = &worker_plan.spec;
    let key_groups = u16::try_from(spec.max_parallelism).unwrap_or(u16::MAX);
    // A keyed worker owns whole ranges (its repartition topic's partitions; the old
    // workers' were the same, `old_checkpoint` checked); without an exchange a worker
    // holds no keyed state.
    let ranges = worker_plan
        .repartitions
        .first()
        .map_or(KeyGroupRanges::one_per_group(key_groups), |r| r.key_groups);
    let plan = rescale_plan::plan::<i32>(worker_plan.worker, from.workers, &[], ranges)?;
    let mut states = BTreeMap::new();
    for stage in plan::stages(spec).into_iter().skip(1) {
        let Some(&first) = stage.steps.first() else {
            continue;
        };
        if !matches!(spec.steps[first], StepSpec::Aggregate(_)) {
            continue;
        }
        let operator = ids::step_id(first);
        for j in 0..spec.parallelism {
            let task = ids::stage_task(stage.index, j);
            let mine = [subtask_key_groups(j, spec.parallelism, key_groups)];
            let mut slices = Vec::new();
            for provision in &plan.provisions {
                let wanted = intersect(&provision.key_groups, &mine);
                if wanted.is_empty() {
                    continue;
                }
                let index = provision.old.index() as usize;
                let Some(o) = old.get(index).filter(|o| o.worker == provision.old) else {
                    continue;
                };
                let old_parallelism = o.metadata.parallelism;
                for k in 0..old_parallelism {
                    let held = [subtask_key_groups(k, old_parallelism, key_groups)];
                    let from_this = intersect(&wanted, &held);
                    if from_this.is_empty() {
                        continue;
                    }
                    let old_task = ids::stage_task(stage.index, k);
                    if o.metadata.snapshot(&old_task, &operator).is_none() {
                        return Err(RescaleFailure::MissingState {
                            old: o.worker,
                            checkpoint: o.metadata.id,
                            task: old_task,
                            operator,
                        });
                    }
                    slices.push(StateSlice {
                        old: index,
                        task: old_task,
                        key_groups: from_this,
                    });
                }
            }
            states.insert((task, operator.clone()), slices);
        }
    }
    Ok(states)
}

/// Commits what old worker `o`'s file sinks staged for its last committed checkpoint
/// (idempotent), and drops what they staged after it.
fn redo_old_commit(plan: &WorkerPlan, o: &OldCheckpoint) -> Result<(), RescaleFailure> {
    let spec = &plan.spec;
    let mut old_plan = plan.clone();
    old_plan.worker = o.worker;
    // Its sinks staged files per subtask of its own parallelism.
    old_plan.spec.parallelism = o.metadata.parallelism;
    old_plan.layout = o.metadata.layout_of(o.worker);
    // Without the Kafka unit: only file sinks and dead letters, whose names are the
    // old worker's; its Kafka transaction committed (its marker says so).
    let mut committers = PipelineSinks::new(&old_plan, None).committers();
    let commit_error = |source| RescaleFailure::Commit {
        old: o.worker,
        source: Box::new(source),
    };
    let deadline = std::time::Instant::now() + spec.checkpoint.timeout;
    coordinator::commit_all(&spec.name, &mut committers, &o.metadata, deadline)
        .map_err(commit_error)?;
    for committer in &mut committers {
        committer
            .discard_uncommitted(o.metadata.id)
            .map_err(|source| {
                commit_error(CoordinatorError::Commit {
                    pipeline: spec.name.clone(),
                    checkpoint: o.metadata.id,
                    phase: "discard",
                    operator: committer.operator_id().to_owned(),
                    source,
                })
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::record::OperatorSnapshot;

    /// Worker `worker`'s plan of the keyed spec (map, then aggregate `step-1`):
    /// parallelism 2, 32 key groups.
    fn keyed_plan(dir: &std::path::Path, worker: Worker) -> WorkerPlan {
        std::fs::write(dir.join("m.wasm"), b"\0asm").expect("module");
        let text = "name = \"p\"\nparallelism = 2\nmax_parallelism = 32\n\
            [[sources]]\ntype = \"kafka\"\ntopic = \"in\"\nbootstrap = \"127.0.0.1:1\"\n\
            [[steps]]\ntype = \"map\"\nmodule = \"m.wasm\"\n\
            [[steps]]\ntype = \"aggregate\"\nname = \"count\"\nmodule = \"m.wasm\"\n\
            [[sinks]]\ntype = \"kafka\"\ntopic = \"out\"\nbootstrap = \"127.0.0.1:1\"\n";
        let spec = PipelineSpec::parse(text, dir, "spec.toml").expect("spec");
        WorkerPlan::new(&spec, worker).expect("worker")
    }

    /// Catches: restoring a checkpoint whose workers owned other key-group ranges (its
    /// repartition topic had another partition count: the plan would take a range's
    /// state from a worker that never read it), or refusing one that read no topic.
    #[test]
    fn a_checkpoint_of_another_repartition_partition_count_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plan = keyed_plan(dir.path(), Worker::new(0, 2).expect("0/2"));
        let exchange = plan.repartitions[0].clone();
        assert_eq!(
            exchange.key_groups.count(),
            32,
            "the default, capped at 32 key groups"
        );
        let mut metadata = old_checkpoint(dir.path(), Worker::new(0, 3).expect("0/3")).metadata;
        assert_eq!(
            repartition_partitions_changed(&metadata, &plan),
            None,
            "no topic read"
        );
        let read = BTreeMap::from([(
            ids::source_id(exchange.source),
            OperatorSnapshot::new(serde_json::json!({})),
        )]);
        metadata
            .tasks
            .insert(ids::source_task(exchange.source, 0), read);
        // Written before ranges: one partition per key group, as this spec has.
        assert_eq!(repartition_partitions_changed(&metadata, &plan), None);
        metadata.repartition_partitions = Some(8);
        assert_eq!(
            repartition_partitions_changed(&metadata, &plan).as_deref(),
            Some(
                "it was taken with repartition_partitions 8, the spec says 32; each is a range of key groups a worker owns whole, fixed for the life of a pipeline: set repartition_partitions = 8"
            )
        );
        metadata.repartition_partitions = Some(32);
        assert_eq!(repartition_partitions_changed(&metadata, &plan), None);
    }

    /// Old worker `old`'s checkpoint: both stage-1 subtasks snapshot `step-1`.
    fn old_checkpoint(dir: &std::path::Path, old: Worker) -> OldCheckpoint {
        let mut metadata = CheckpointMetadata::empty_for_test("p", 5);
        metadata.parallelism = 2;
        metadata.max_parallelism = 32;
        for j in 0..2 {
            let ops = BTreeMap::from([(
                "step-1".to_owned(),
                OperatorSnapshot::new(serde_json::json!({})),
            )]);
            metadata.tasks.insert(ids::stage_task(1, j), ops);
        }
        OldCheckpoint {
            worker: old,
            storage: Arc::new(
                CheckpointStorage::open(dir.join(format!("old-{}", old.index())), "p")
                    .expect("storage"),
            ),
            metadata,
        }
    }

    /// Catches: positions of one old worker dropped, or a partition two old checkpoints
    /// list (which one read it cannot be told) restored from either.
    #[test]
    fn every_old_position_is_restored_and_a_partition_listed_twice_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = |i, n| Worker::new(i, n).expect("worker");
        let with_positions = |old: Worker, partitions: &[i32]| {
            let mut o = old_checkpoint(dir.path(), old);
            let position = KafkaPosition {
                partitions: partitions
                    .iter()
                    .map(|&p| crate::connector::kafka::PartitionPosition {
                        topic: "in".into(),
                        partition: p,
                        offset: 10 + i64::from(p),
                        max_timestamp: None,
                        writers: None,
                        frame_read: 0,
                    })
                    .collect(),
            };
            let ops = BTreeMap::from([(
                ids::source_id(0),
                OperatorSnapshot::new(position.to_value()),
            )]);
            o.metadata.tasks.insert(ids::source_task(0, 0), ops);
            o
        };
        let spec = keyed_plan(dir.path(), w(0, 2)).spec;
        let old = [
            with_positions(w(0, 2), &[0, 1]),
            with_positions(w(1, 2), &[2]),
        ];
        let merged = merged_positions(&spec, &old).expect("merge");
        let restored =
            KafkaPosition::merged(&merged[&ids::source_id(0)].iter().collect::<Vec<_>>())
                .expect("positions");
        assert_eq!(
            restored.into_iter().collect::<Vec<_>>(),
            [
                (("in".to_owned(), 0), 10),
                (("in".to_owned(), 1), 11),
                (("in".to_owned(), 2), 12)
            ]
        );
        let twice = [
            with_positions(w(0, 2), &[0, 1]),
            with_positions(w(1, 2), &[1]),
        ];
        let refused = merged_positions(&spec, &twice).expect_err("listed twice");
        assert_eq!(
            refused.to_string(),
            "partition in-1 of source-0 is listed in the checkpoints of both old worker 0/2 and old worker 1/2: which one read it cannot be told"
        );
    }

    /// Catches: a new subtask given key groups of the other subtask of its worker, or of
    /// another worker, a key group taken from an old subtask that never held it, or one
    /// left out (3 -> 2 and 2 -> 4 workers, parallelism 2, 32 key groups).
    #[test]
    fn each_new_subtask_takes_its_key_groups_from_the_old_subtasks_that_held_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = |i, n| Worker::new(i, n).expect("worker");
        let slices_of = |me: Worker, from: u32| {
            let old: Vec<OldCheckpoint> = (0..from)
                .map(|j| old_checkpoint(dir.path(), w(j, from)))
                .collect();
            let from = Layout {
                workers: from,
                generation: 0,
            };
            let states = state_slices(&keyed_plan(dir.path(), me), from, &old).expect("slices");
            states
                .into_iter()
                .map(|((task, op), slices)| {
                    let described: Vec<String> = slices
                        .iter()
                        .map(|s| format!("{}:{} {:?}", s.old, s.task, s.key_groups))
                        .collect();
                    format!("{task}.{op} <- {}", described.join(", "))
                })
                .collect::<Vec<_>>()
        };
        // 3 -> 2: worker 0/3 held 0..11, worker 2/3 11..16 and 27..32 (old subtask 0
        // of each worker holds groups 0..16, subtask 1 16..32).
        assert_eq!(
            slices_of(w(0, 2), 3),
            [
                "stage1-0.step-1 <- 0:stage1-0 [0..11], 2:stage1-0 [11..16]",
                "stage1-1.step-1 <- "
            ]
        );
        assert_eq!(
            slices_of(w(1, 2), 3),
            [
                "stage1-0.step-1 <- ",
                "stage1-1.step-1 <- 1:stage1-1 [16..27], 2:stage1-1 [27..32]"
            ]
        );
        // 2 -> 4: worker 2 of 4 owns 11..16 (worker 0/2's, on its subtask 0) and
        // 27..30 (worker 1/2's, on its subtask 1), and keeps them on the same subtasks.
        assert_eq!(
            slices_of(w(2, 4), 2),
            [
                "stage1-0.step-1 <- 0:stage1-0 [11..16]",
                "stage1-1.step-1 <- 1:stage1-1 [27..30]"
            ]
        );
    }

    /// Catches: a rescale that also changes `parallelism` reading the old subtasks with
    /// the new parallelism (key groups taken from subtasks that never held them, or
    /// left out) (1 worker of parallelism 2 -> 2 workers of parallelism 3, 32 key
    /// groups).
    #[test]
    fn a_rescale_may_change_the_parallelism_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = |i, n| Worker::new(i, n).expect("worker");
        let old = [old_checkpoint(dir.path(), Worker::SINGLE)];
        let from = Layout {
            workers: 1,
            generation: 0,
        };
        let described = |me: Worker| {
            let mut plan = keyed_plan(dir.path(), me);
            plan.spec.parallelism = 3;
            let states = state_slices(&plan, from, &old).expect("slices");
            states
                .into_iter()
                .map(|((task, _), slices)| {
                    let described: Vec<String> = slices
                        .iter()
                        .map(|s| format!("{} {:?}", s.task, s.key_groups))
                        .collect();
                    format!("{task} <- {}", described.join(", "))
                })
                .collect::<Vec<_>>()
        };
        // Worker 0/2 owns 0..16, worker 1/2 16..32; new subtask j of 3 takes
        // ceil(32j/3)..ceil(32(j+1)/3) = 0..11, 11..22, 22..32 of that; old subtask 0
        // of 2 held 0..16, subtask 1 16..32.
        assert_eq!(
            described(w(0, 2)),
            [
                "stage1-0 <- stage1-0 [0..11]",
                "stage1-1 <- stage1-0 [11..16]",
                "stage1-2 <- "
            ]
        );
        assert_eq!(
            described(w(1, 2)),
            [
                "stage1-0 <- ",
                "stage1-1 <- stage1-1 [16..22]",
                "stage1-2 <- stage1-1 [22..32]"
            ]
        );
    }
}
