//! Which layout of workers checkpoint storage says is current, and what a starting
//! worker does about it (`read_and_choose`): the I/O half of `cluster::layout`, for a local
//! checkpoint dir and an `s3://` prefix alike.
//!
//! Invariants:
//! - A rescale from a layout whose workers have not all checkpointed in it is refused
//!   before anything is discarded (`incomplete_worker`): its units may still be only
//!   in the layout before it, whose locations a worker of a third layout would share.
//! - Storage is read, never written: each worker location (`worker-<I>-of-<N>/` below
//!   the spec's checkpoint dir) is listed, and the metadata of its newest complete
//!   checkpoint gives its layout stamp (`LayoutStamp::first` for checkpoints written
//!   before stamps existed). `cluster::layout::choose` decides from those alone.
//! - One process (0/1) is a layout of one worker whose location is the dir itself, so
//!   workers started over its complete checkpoints rescale from it (1 -> N, as from
//!   any layout: the process is taken over and its last committed checkpoint split
//!   between the workers). The way back is refused with one line: 0/1 over workers'
//!   complete checkpoints (N -> 1 would have to drain the repartition topic, which a
//!   process with an in-process shuffle does not read).
//! - `--from-scratch` starts one worker's own checkpoints over within the current
//!   layout; over complete checkpoints of another number of workers (the process's
//!   included) it is refused: they would stay the newer layout, and the next start
//!   would rescale from them.

use crate::checkpoint::locations::{LocationsError, root_locations};
use crate::cluster::Worker;
use crate::cluster::layout::{self, Layout, LayoutChoice, LayoutStamp, ObservedLocation};
use crate::pipeline::error::PipelineError;
use crate::record::CheckpointId;
use crate::storage::CheckpointLocation;

/// One worker location of a checkpoint dir.
#[derive(Debug, Clone)]
pub struct WorkerLocation {
    /// `worker-<I>-of-<N>`.
    pub name: String,
    pub worker: Worker,
    pub location: CheckpointLocation,
    /// Its newest complete checkpoint and that checkpoint's layout stamp, if any.
    pub newest: Option<(CheckpointId, LayoutStamp)>,
}

/// The worker locations below `root` (the spec's checkpoint dir, before a worker's own
/// subdirectory is added), by name: each with its newest complete checkpoint.
pub fn worker_locations(
    pipeline: &str,
    root: &CheckpointLocation,
) -> Result<Vec<WorkerLocation>, PipelineError> {
    Ok(read_root(pipeline, root)?.1)
}

/// One listing of `root`: the layout of the newest complete checkpoint it holds itself
/// (the pipeline's as one process), if any, and its worker locations.
fn read_root(
    pipeline: &str,
    root: &CheckpointLocation,
) -> Result<(Option<LayoutStamp>, Vec<WorkerLocation>), PipelineError> {
    let all = root_locations(root).map_err(|e| match e {
        LocationsError::List(source) => PipelineError::Storage {
            pipeline: pipeline.to_owned(),
            source,
        },
        unreadable => PipelineError::Layout {
            pipeline: pipeline.to_owned(),
            storage: root.to_string(),
            reason: unreadable.to_string(),
        },
    })?;
    let mut process = None;
    let mut workers = Vec::new();
    for l in all {
        if l.worker.is_single() {
            process = l.newest_layout();
            continue;
        }
        workers.push(WorkerLocation {
            newest: l.newest.as_ref().map(|m| (m.id, m.layout_of(l.worker))),
            name: l.name,
            worker: l.worker,
            location: l.location,
        });
    }
    Ok((process, workers))
}

/// The first worker of layout `from` whose location in `root` holds no complete
/// checkpoint of `from`'s generation, if any. Such a worker has committed nothing in
/// that layout (a checkpoint is complete before its transaction commits), so a rescale
/// from `from` cannot take it over yet; and while it has not, the layout before `from`
/// may still be needed to hand its units over. Read only.
pub fn incomplete_worker(
    pipeline: &str,
    root: &CheckpointLocation,
    from: Layout,
) -> Result<Option<Worker>, PipelineError> {
    let (process, locations) = read_root(pipeline, root)?;
    let generation_of = |worker: Worker| {
        if worker.is_single() {
            return process.map(|stamp| stamp.generation);
        }
        locations
            .iter()
            .find(|l| l.worker == worker)
            .and_then(|l| l.newest.map(|(_, stamp)| stamp.generation))
    };
    for j in 0..from.workers {
        let worker = Worker::new(j, from.workers).map_err(|e| PipelineError::Layout {
            pipeline: pipeline.to_owned(),
            storage: root.to_string(),
            reason: e.to_string(),
        })?;
        if generation_of(worker) != Some(from.generation) {
            return Ok(Some(worker));
        }
    }
    Ok(None)
}

/// What worker `worker` of `pipeline` does at start, given what `root` holds (see
/// the module invariants and `cluster::layout`).
pub fn read_and_choose(
    pipeline: &str,
    worker: Worker,
    root: &CheckpointLocation,
    from_scratch: bool,
) -> Result<LayoutChoice, PipelineError> {
    let (process, locations) = read_root(pipeline, root)?;
    let complete = |l: &&WorkerLocation| l.newest.is_some();
    if worker.is_single() {
        let found: Vec<String> = locations
            .iter()
            .filter(complete)
            .map(|l| l.name.clone())
            .collect();
        if !found.is_empty() {
            return Err(PipelineError::OtherWorkerLayout {
                pipeline: pipeline.to_owned(),
                worker,
                storage: root.to_string(),
                found: found.join(", "),
            });
        }
        return Ok(LayoutChoice::Own(LayoutStamp::first(1)));
    }
    let mut observed: Vec<ObservedLocation> = locations
        .iter()
        .filter_map(|l| {
            l.newest.map(|(_, newest)| ObservedLocation {
                worker: l.worker,
                newest,
            })
        })
        .collect();
    if from_scratch {
        if process.is_some() {
            return Err(PipelineError::StartOverOverLayouts {
                pipeline: pipeline.to_owned(),
                worker,
                storage: root.to_string(),
                found: "the pipeline run as one process".to_owned(),
            });
        }
        return start_over_choice(pipeline, worker, root, &locations, &observed);
    }
    observed.extend(process.map(|newest| ObservedLocation {
        worker: Worker::SINGLE,
        newest,
    }));
    layout::choose(worker, &observed).map_err(|refusal| PipelineError::Layout {
        pipeline: pipeline.to_owned(),
        storage: root.to_string(),
        reason: refusal.to_string(),
    })
}

/// `--from-scratch`: this worker starts over in the current layout of its own number
/// of workers; refused over complete checkpoints of another number.
fn start_over_choice(
    pipeline: &str,
    worker: Worker,
    root: &CheckpointLocation,
    locations: &[WorkerLocation],
    observed: &[ObservedLocation],
) -> Result<LayoutChoice, PipelineError> {
    let others: Vec<String> = locations
        .iter()
        .filter(|l| l.newest.is_some() && l.worker.count() != worker.count())
        .map(|l| l.name.clone())
        .collect();
    if !others.is_empty() {
        return Err(PipelineError::StartOverOverLayouts {
            pipeline: pipeline.to_owned(),
            worker,
            storage: root.to_string(),
            found: others.join(", "),
        });
    }
    let current = observed
        .iter()
        .map(|o| o.newest)
        .max_by_key(|s| s.generation)
        .unwrap_or_else(|| LayoutStamp::first(worker.count()));
    Ok(LayoutChoice::Own(current))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cluster::Layout;
    use crate::storage::CheckpointStorage;

    const PIPELINE: &str = "p";

    fn complete(root: &Path, worker: Option<Worker>, id: u64, stamp: Option<LayoutStamp>) {
        let location = match worker.and_then(|w| w.dir_name()) {
            Some(name) => root.join(name),
            None => root.to_owned(),
        };
        let storage = CheckpointStorage::open(location, PIPELINE).expect("open");
        let mut metadata =
            crate::checkpoint::metadata::CheckpointMetadata::empty_for_test(PIPELINE, id);
        metadata.layout = stamp;
        metadata.write(&storage).expect("write");
    }

    fn w(i: u32, n: u32) -> Worker {
        Worker::new(i, n).expect("worker")
    }

    /// Catches: a layout read from the wrong checkpoint (not the newest), a stamp-less
    /// checkpoint not read as its location's first layout, and one process restoring
    /// workers' checkpoints.
    #[test]
    fn the_newest_checkpoint_of_each_location_decides() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = CheckpointLocation::Local(tmp.path().to_owned());
        assert_eq!(
            read_and_choose(PIPELINE, w(1, 3), &root, false).expect("empty"),
            LayoutChoice::Own(LayoutStamp::first(3))
        );
        // Written before stamps existed: generation 0 of their directory's N.
        for i in 0..3 {
            complete(tmp.path(), Some(w(i, 3)), 4, None);
        }
        // An incomplete checkpoint of another N does not count.
        std::fs::create_dir_all(tmp.path().join("worker-1-of-2/chk-0000000009")).expect("mkdir");
        assert_eq!(
            read_and_choose(PIPELINE, w(1, 3), &root, false).expect("same N"),
            LayoutChoice::Own(LayoutStamp::first(3))
        );
        let from = Layout {
            workers: 3,
            generation: 0,
        };
        let into = LayoutStamp {
            workers: 2,
            generation: 1,
            rescaled_from: Some(from),
        };
        assert_eq!(
            read_and_choose(PIPELINE, w(1, 2), &root, false).expect("3 -> 2"),
            LayoutChoice::Rescale { from, into }
        );
        // Worker 0 of 2 checkpointed twice; its newest checkpoint's stamp counts.
        complete(tmp.path(), Some(w(0, 2)), 1, Some(LayoutStamp::first(2)));
        complete(tmp.path(), Some(w(0, 2)), 2, Some(into));
        assert_eq!(
            read_and_choose(PIPELINE, w(0, 2), &root, false).expect("own"),
            LayoutChoice::Own(into)
        );
        assert_eq!(
            read_and_choose(PIPELINE, w(1, 2), &root, false).expect("the rest of 3 -> 2"),
            LayoutChoice::Rescale { from, into }
        );
        let listed: Vec<String> = worker_locations(PIPELINE, &root)
            .expect("list")
            .into_iter()
            .map(|l| {
                format!(
                    "{} {:?}",
                    l.name,
                    l.newest.map(|(id, s)| (id.0, s.generation))
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                "worker-0-of-2 Some((2, 1))",
                "worker-0-of-3 Some((4, 0))",
                "worker-1-of-2 None",
                "worker-1-of-3 Some((4, 0))",
                "worker-2-of-3 Some((4, 0))"
            ]
        );
        // --from-scratch over another number of workers' checkpoints: refused.
        let error = read_and_choose(PIPELINE, w(0, 2), &root, true).expect_err("start over");
        assert!(
            error
                .to_string()
                .contains("worker-0-of-3, worker-1-of-3, worker-2-of-3"),
            "{error}"
        );
        // Workers never go back to one process.
        let error = read_and_choose(PIPELINE, Worker::SINGLE, &root, false).expect_err("N -> 1");
        assert_eq!(
            error.to_string(),
            format!(
                "pipeline p, worker 0/1: checkpoint storage {} holds complete checkpoints of worker-0-of-2, worker-0-of-3, worker-1-of-3, worker-2-of-3: rescaling from workers back to one process is not supported (a keyed step's repartition topic would have to be drained first); run the pipeline as workers (--worker I/N, any N > 1), or start over on a fresh checkpoint dir",
                tmp.path().display()
            )
        );
    }

    /// Catches: a rescale from a layout one of whose workers has not checkpointed in it
    /// (its units may be only in the layout before), and an older checkpoint of another
    /// generation in that worker's location read as one of the layout's.
    #[test]
    fn a_layout_is_complete_when_each_worker_checkpointed_in_its_generation() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = CheckpointLocation::Local(tmp.path().to_owned());
        let first = Layout {
            workers: 3,
            generation: 0,
        };
        for i in 0..3 {
            complete(tmp.path(), Some(w(i, 3)), 4, None);
        }
        assert_eq!(
            incomplete_worker(PIPELINE, &root, first).expect("read"),
            None
        );
        let second = Layout {
            workers: 2,
            generation: 1,
        };
        let stamp = LayoutStamp {
            workers: 2,
            generation: 1,
            rescaled_from: Some(first),
        };
        // Only worker 1 of 2 has checkpointed in generation 1; worker 0 of 2's location
        // holds a checkpoint of an older 2-worker layout.
        complete(tmp.path(), Some(w(1, 2)), 5, Some(stamp));
        assert_eq!(
            incomplete_worker(PIPELINE, &root, second).expect("read"),
            Some(w(0, 2))
        );
        complete(tmp.path(), Some(w(0, 2)), 1, Some(LayoutStamp::first(2)));
        assert_eq!(
            incomplete_worker(PIPELINE, &root, second).expect("read"),
            Some(w(0, 2))
        );
        complete(tmp.path(), Some(w(0, 2)), 6, Some(stamp));
        assert_eq!(
            incomplete_worker(PIPELINE, &root, second).expect("read"),
            None
        );
    }

    /// Catches: workers that refuse (or ignore) a pipeline's checkpoints as one process
    /// instead of rescaling from them, a rescale from the process that does not move
    /// on once the workers checkpointed, and `--from-scratch` over the process's
    /// checkpoints (the next start would rescale from them again).
    #[test]
    fn workers_rescale_from_the_pipeline_run_as_one_process() {
        let single = tempfile::tempdir().expect("tempdir");
        let root = CheckpointLocation::Local(single.path().to_owned());
        complete(single.path(), None, 7, None);
        assert_eq!(
            read_and_choose(PIPELINE, Worker::SINGLE, &root, false).expect("own"),
            LayoutChoice::Own(LayoutStamp::first(1))
        );
        let from = Layout {
            workers: 1,
            generation: 0,
        };
        let into = LayoutStamp {
            workers: 3,
            generation: 1,
            rescaled_from: Some(from),
        };
        for i in 0..3 {
            assert_eq!(
                read_and_choose(PIPELINE, w(i, 3), &root, false).expect("1 -> 3"),
                LayoutChoice::Rescale { from, into }
            );
        }
        // Worker 1 committed in the new layout; the others still rescale into it.
        complete(single.path(), Some(w(1, 3)), 8, Some(into));
        assert_eq!(
            read_and_choose(PIPELINE, w(1, 3), &root, false).expect("own"),
            LayoutChoice::Own(into)
        );
        assert_eq!(
            read_and_choose(PIPELINE, w(2, 3), &root, false).expect("the rest of 1 -> 3"),
            LayoutChoice::Rescale { from, into }
        );
        // The process cannot come back over them.
        let error = read_and_choose(PIPELINE, Worker::SINGLE, &root, false).expect_err("3 -> 1");
        assert!(
            error.to_string().contains(
                "worker-1-of-3: rescaling from workers back to one process is not supported"
            ),
            "{error}"
        );
        let fresh = tempfile::tempdir().expect("tempdir");
        complete(fresh.path(), None, 2, None);
        let fresh_root = CheckpointLocation::Local(fresh.path().to_owned());
        let error = read_and_choose(PIPELINE, w(0, 2), &fresh_root, true).expect_err("start over");
        assert!(
            error
                .to_string()
                .contains("the pipeline run as one process"),
            "{error}"
        );
    }
}
