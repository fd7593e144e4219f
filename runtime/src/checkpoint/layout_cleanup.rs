//! Removing the checkpoints of earlier layouts of workers once the current layout can
//! no longer need them (see `cluster::layout` for layouts and generations).
//!
//! Invariants:
//! - Only worker 0 of a layout of generation G > 0 (M > 1 workers) cleans up, once per
//!   run, and only when storage proves that every worker of G has committed a
//!   checkpoint of G: the newest complete checkpoint of each `worker-<I>-of-<M>/` is
//!   stamped G and names a committed checkpoint before it (`committed_before`). A
//!   worker started by a rescale begins with none committed, so it names one only
//!   after a commit in G. Until then some worker of G may still have to rescale from
//!   G's origin (killed before its first commit), so nothing is removed.
//! - Nothing is removed if any location holds a checkpoint of a generation above G:
//!   this run's layout was itself rescaled away.
//! - What goes is every layout before G: the checkpoints and shared files of each
//!   worker location of another worker count than M, and the pipeline's own
//!   checkpoints at the root (the pipeline run as one process), each with
//!   `CheckpointStorage::remove_all` (which leaves the worker locations below the
//!   root alone). Locations of M workers may still hold checkpoints of an earlier
//!   generation with M workers; each worker's own retention removes those as its new
//!   checkpoints come.
//! - Best effort, off the checkpoint path: after a commit the coordinator starts the
//!   check on a thread of its own unless one runs or it succeeded; a failure is
//!   logged and tried again after a later commit. It never fails the pipeline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::checkpoint::locations::root_locations;
use crate::cluster::{LayoutStamp, Worker};
use crate::record::CheckpointId;
use crate::storage::{CheckpointLocation, CheckpointStorage};

/// What one location of the checkpoint root holds: `worker` is `Worker::SINGLE` for
/// the root itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocationView {
    pub worker: Worker,
    /// Its newest complete checkpoint's layout and the committed checkpoint it names.
    pub newest: Option<(LayoutStamp, CheckpointId)>,
}

/// The locations whose checkpoints layout `layout` no longer needs, given what every
/// location holds; `None` while some worker of `layout` has not committed in it (see
/// the module invariants).
pub fn obsolete(layout: &LayoutStamp, locations: &[LocationView]) -> Option<Vec<Worker>> {
    if layout.generation == 0 || layout.workers < 2 {
        return None;
    }
    let newer = locations.iter().any(|l| {
        l.newest
            .is_some_and(|(s, _)| s.generation > layout.generation)
    });
    if newer {
        return None;
    }
    let committed_in_layout = |i: u32| {
        locations.iter().any(|l| {
            l.worker.count() == layout.workers
                && l.worker.index() == i
                && l.newest.is_some_and(|(stamp, committed)| {
                    stamp.layout() == layout.layout() && committed != CheckpointId::NONE
                })
        })
    };
    if !(0..layout.workers).all(committed_in_layout) {
        return None;
    }
    Some(
        locations
            .iter()
            .filter(|l| l.worker.count() != layout.workers && l.newest.is_some())
            .map(|l| l.worker)
            .collect(),
    )
}

/// Worker 0's clean-up of the layouts before its own (see the module invariants).
pub struct LayoutCleanup {
    pipeline: String,
    root: CheckpointLocation,
    layout: LayoutStamp,
    done: Arc<AtomicBool>,
    running: Option<JoinHandle<()>>,
}

impl LayoutCleanup {
    /// The clean-up for worker `worker` of pipeline `pipeline` running in `layout`, with
    /// its checkpoint root `root` (the spec's checkpoint dir, before a worker's own
    /// subdirectory); `None` for any other worker than 0 of a rescaled layout.
    pub fn for_run(
        pipeline: &str,
        root: &CheckpointLocation,
        worker: Worker,
        layout: LayoutStamp,
    ) -> Option<Self> {
        (worker.index() == 0 && layout.workers > 1 && layout.generation > 0).then(|| {
            LayoutCleanup {
                pipeline: pipeline.to_owned(),
                root: root.clone(),
                layout,
                done: Arc::default(),
                running: None,
            }
        })
    }

    /// After a commit: starts the check (and the removal) unless it succeeded already
    /// or is running.
    pub fn after_commit(&mut self) {
        if self.done.load(Ordering::SeqCst)
            || self.running.as_ref().is_some_and(|t| !t.is_finished())
        {
            return;
        }
        let (pipeline, root, layout, done) = (
            self.pipeline.clone(),
            self.root.clone(),
            self.layout,
            self.done.clone(),
        );
        let started = std::thread::Builder::new()
            .name(format!("{pipeline}-layout-cleanup"))
            .spawn(move || match clean_up(&pipeline, &root, &layout) {
                Ok(finished) => done.store(finished, Ordering::SeqCst),
                Err(e) => {
                    tracing::warn!(pipeline = %pipeline, storage = %root, error = %e, "cannot remove the checkpoints of earlier layouts; trying again after a later checkpoint")
                }
            });
        match started {
            Ok(thread) => self.running = Some(thread),
            Err(e) => {
                tracing::warn!(pipeline = %self.pipeline, error = %e, "cannot start the clean-up of earlier layouts")
            }
        }
    }
}

impl Drop for LayoutCleanup {
    fn drop(&mut self) {
        if let Some(thread) = self.running.take() {
            let _ = thread.join();
        }
    }
}

/// Reads every location of `root` and removes what `obsolete` names; `Ok(true)` once
/// done, `Ok(false)` while `layout` still needs them.
fn clean_up(
    pipeline: &str,
    root: &CheckpointLocation,
    layout: &LayoutStamp,
) -> Result<bool, String> {
    let all = root_locations(root).map_err(|e| e.to_string())?;
    let views: Vec<LocationView> = all
        .iter()
        .map(|l| LocationView {
            worker: l.worker,
            newest: l
                .newest
                .as_ref()
                .map(|m| (m.layout_of(l.worker), m.committed_before)),
        })
        .collect();
    let Some(obsolete) = obsolete(layout, &views) else {
        return Ok(false);
    };
    for l in all.iter().filter(|l| obsolete.contains(&l.worker)) {
        CheckpointStorage::remove_all(l.location.clone(), pipeline).map_err(|e| e.to_string())?;
        tracing::info!(pipeline = %pipeline, storage = %l.location, layout = %layout.layout(), "removed the checkpoints of an earlier layout: every worker of this one has committed");
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Layout;

    fn w(i: u32, n: u32) -> Worker {
        Worker::new(i, n).expect("worker")
    }

    fn stamp(workers: u32, generation: u64, from: Option<(u32, u64)>) -> LayoutStamp {
        LayoutStamp {
            workers,
            generation,
            rescaled_from: from.map(|(workers, generation)| Layout {
                workers,
                generation,
            }),
        }
    }

    fn at(worker: Worker, newest: Option<(LayoutStamp, u64)>) -> LocationView {
        LocationView {
            worker,
            newest: newest.map(|(s, committed)| (s, CheckpointId(committed))),
        }
    }

    /// Catches: removing a layout that a worker of the new one may still rescale from
    /// (one worker's newest checkpoint uncommitted, or of the old generation still, or
    /// missing), removing anything when the new layout was itself rescaled away, or
    /// removing the new layout's own locations.
    #[test]
    fn earlier_layouts_go_only_once_every_worker_of_the_new_one_committed() {
        let g1 = stamp(3, 1, Some((2, 0)));
        let old = stamp(2, 0, None);
        let all_committed = vec![
            at(Worker::SINGLE, None),
            at(w(0, 2), Some((old, 4))),
            at(w(1, 2), Some((old, 4))),
            at(w(0, 3), Some((g1, 7))),
            at(w(1, 3), Some((g1, 6))),
            at(w(2, 3), Some((g1, 9))),
        ];
        assert_eq!(obsolete(&g1, &all_committed), Some(vec![w(0, 2), w(1, 2)]));

        // Worker 2's newest checkpoint is complete but nothing of g1 is committed yet.
        let mut uncommitted = all_committed.clone();
        uncommitted[5] = at(w(2, 3), Some((g1, 0)));
        assert_eq!(obsolete(&g1, &uncommitted), None);
        // Worker 1 has not checkpointed in g1 at all (no location, or an old one).
        assert_eq!(obsolete(&g1, &all_committed[..5]), None);
        let mut stale = all_committed.clone();
        stale[4] = at(w(1, 3), Some((stamp(3, 0, None), 5)));
        assert_eq!(obsolete(&g1, &stale), None);
        // A later layout exists: this one was rescaled away.
        let mut newer = all_committed.clone();
        newer.push(at(w(0, 4), Some((stamp(4, 2, Some((3, 1))), 0))));
        assert_eq!(obsolete(&g1, &newer), None);
        // Generation 0 has nothing before it.
        assert_eq!(obsolete(&old, &all_committed), None);
    }

    /// Catches: the pipeline's own checkpoints as one process (the root) kept after
    /// a rescale from it, or an empty location listed.
    #[test]
    fn the_process_checkpoints_go_after_a_rescale_from_one_process() {
        let g1 = stamp(2, 1, Some((1, 0)));
        let locations = [
            at(Worker::SINGLE, Some((LayoutStamp::first(1), 12))),
            at(w(0, 3), None),
            at(w(0, 2), Some((g1, 14))),
            at(w(1, 2), Some((g1, 3))),
        ];
        assert_eq!(obsolete(&g1, &locations), Some(vec![Worker::SINGLE]));
    }
}
