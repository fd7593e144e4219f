//! Layouts: how many workers a pipeline runs as, and which of its successive layouts
//! that is (`Layout`); what every checkpoint records of the layout that took it
//! (`LayoutStamp`); and the choice a starting worker makes from what checkpoint
//! storage holds (`choose`): restore its own checkpoints, or rescale from the layout
//! before.
//!
//! Generations: the first layout a pipeline runs as is generation 0. A rescale from
//! generation g (N workers) starts generation g + 1 (M != N workers), whose stamp
//! names g as its origin (`rescaled_from`). Generations only go up, so the newest
//! complete checkpoint with the highest generation in storage names the current
//! layout, even when a layout's worker count comes back (3 -> 2 -> 3: the second 3 is
//! generation 2, and the `worker-*-of-3/` checkpoints of generation 0 are stale).
//!
//! Invariants of `choose` (for worker I of M > 1; one process, 0/1, never rescales; it
//! is observed as a location of its own, the pipeline's root, of a 1-worker layout,
//! so workers rescale from it like from any layout):
//! - Nothing in storage: this worker starts in generation 0 (`Own`, nothing to restore).
//! - The latest generation G has M workers and this worker's location holds a
//!   checkpoint of G: `Own` (the usual recovery of its own checkpoints).
//! - G has M workers but this worker has no checkpoint of G: it is one of G's workers
//!   that has not checkpointed yet (or lost its only uncommitted checkpoints), so it
//!   rescales from G's origin into G, as G's other workers did; with G = 0 there is no
//!   origin and it simply starts (`Own`).
//! - G has another number of workers: rescale from G into G + 1.
//! - Never guessed: a location whose checkpoint names another worker count than its
//!   directory, two locations of one generation that disagree on its worker count or
//!   origin, or a generation above 0 without an origin are refused (`LayoutRefusal`).
//!
//! Whether the layout rescaled from is complete enough to hand over (every old worker
//! committed a checkpoint of its generation, none handed over to another layout) is
//! Kafka's to say (`connector::kafka::takeover`); storage only refuses early, before a
//! rescaling worker discards anything, a layout one of whose workers has no complete
//! checkpoint of its generation at all (`pipeline::worker_layout::incomplete_worker`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cluster::Worker;

/// A layout of a pipeline's workers: `workers` workers, the pipeline's
/// `generation`-th layout (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Layout {
    pub workers: u32,
    pub generation: u64,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} workers (layout generation {})",
            self.workers, self.generation
        )
    }
}

/// What a checkpoint records of the layout of the worker that took it: the layout,
/// and for a layout made by a rescale, the layout it was rescaled from. Checkpoints
/// written before layouts existed have none: their directory's worker count, at
/// generation 0 (`LayoutStamp::first`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutStamp {
    pub workers: u32,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescaled_from: Option<Layout>,
}

impl LayoutStamp {
    /// A pipeline's first layout: `workers` workers, generation 0, no origin.
    pub fn first(workers: u32) -> LayoutStamp {
        LayoutStamp {
            workers,
            generation: 0,
            rescaled_from: None,
        }
    }

    /// The layout part of the stamp.
    pub fn layout(&self) -> Layout {
        Layout {
            workers: self.workers,
            generation: self.generation,
        }
    }
}

impl Default for LayoutStamp {
    fn default() -> Self {
        LayoutStamp::first(1)
    }
}

/// One worker location (`worker-I-of-N/`) of checkpoint storage that holds a complete
/// checkpoint, and the stamp of its newest one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedLocation {
    pub worker: Worker,
    pub newest: LayoutStamp,
}

/// What a starting worker does (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutChoice {
    /// Restore this worker's own checkpoints (none: start empty), as a worker of the
    /// stamped layout. A worker of a rescaled layout (`rescaled_from` set) that finds
    /// nothing committed of its own rescales from the origin instead.
    Own(LayoutStamp),
    /// Restore what this worker owns from the last committed checkpoints of `from`'s
    /// workers, and run as `into`.
    Rescale { from: Layout, into: LayoutStamp },
}

impl LayoutChoice {
    /// The stamp of the layout this worker runs as.
    pub fn stamp(&self) -> LayoutStamp {
        match self {
            LayoutChoice::Own(stamp) => *stamp,
            LayoutChoice::Rescale { into, .. } => *into,
        }
    }
}

/// Why storage does not say which layout is current.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutRefusal {
    #[error(
        "{location}'s newest checkpoint was taken by a layout of {stamped} workers, not {expected}: the directory was renamed or copied from elsewhere"
    )]
    StampMismatch {
        location: String,
        stamped: u32,
        expected: u32,
    },
    #[error(
        "the checkpoints of layout generation {generation} disagree about it ({first}: {first_stamp}; {second}: {second_stamp}): checkpoint locations were copied between pipelines or by hand"
    )]
    Inconsistent {
        generation: u64,
        first: String,
        first_stamp: String,
        second: String,
        second_stamp: String,
    },
    #[error(
        "layout generation {generation} ({workers} workers) does not say which layout it was rescaled from"
    )]
    NoOrigin { generation: u64, workers: u32 },
}

/// The choice of worker `me` (I of M > 1) from the worker locations of checkpoint
/// storage that hold a complete checkpoint (see the module docs).
pub fn choose(me: Worker, observed: &[ObservedLocation]) -> Result<LayoutChoice, LayoutRefusal> {
    let name = |w: Worker| w.dir_name().unwrap_or_else(|| "the pipeline's root".into());
    for o in observed {
        if o.newest.workers != o.worker.count() {
            return Err(LayoutRefusal::StampMismatch {
                location: name(o.worker),
                stamped: o.newest.workers,
                expected: o.worker.count(),
            });
        }
    }
    let Some(generation) = observed.iter().map(|o| o.newest.generation).max() else {
        return Ok(LayoutChoice::Own(LayoutStamp::first(me.count())));
    };
    let mut latest = observed
        .iter()
        .filter(|o| o.newest.generation == generation);
    // `generation` is some location's, so `latest` is not empty.
    let Some(first) = latest.next() else {
        return Ok(LayoutChoice::Own(LayoutStamp::first(me.count())));
    };
    let describe = |s: &LayoutStamp| match s.rescaled_from {
        Some(from) => format!("{} workers, rescaled from {from}", s.workers),
        None => format!("{} workers", s.workers),
    };
    for other in latest {
        if other.newest != first.newest {
            return Err(LayoutRefusal::Inconsistent {
                generation,
                first: name(first.worker),
                first_stamp: describe(&first.newest),
                second: name(other.worker),
                second_stamp: describe(&other.newest),
            });
        }
    }
    let current = first.newest;
    if current.workers != me.count() {
        let from = current.layout();
        return Ok(LayoutChoice::Rescale {
            from,
            into: LayoutStamp {
                workers: me.count(),
                generation: generation + 1,
                rescaled_from: Some(from),
            },
        });
    }
    let own = observed
        .iter()
        .any(|o| o.worker == me && o.newest.generation == generation);
    if own || generation == 0 {
        return Ok(LayoutChoice::Own(current));
    }
    let from = current.rescaled_from.ok_or(LayoutRefusal::NoOrigin {
        generation,
        workers: current.workers,
    })?;
    Ok(LayoutChoice::Rescale {
        from,
        into: current,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(i: u32, n: u32) -> Worker {
        Worker::new(i, n).expect("worker")
    }

    fn at(
        worker: Worker,
        workers: u32,
        generation: u64,
        from: Option<(u32, u64)>,
    ) -> ObservedLocation {
        ObservedLocation {
            worker,
            newest: LayoutStamp {
                workers,
                generation,
                rescaled_from: from.map(|(workers, generation)| Layout {
                    workers,
                    generation,
                }),
            },
        }
    }

    fn layout(workers: u32, generation: u64) -> Layout {
        Layout {
            workers,
            generation,
        }
    }

    /// Layout `workers` x `generation`, rescaled from `from`.
    fn stamp(workers: u32, generation: u64, from: Layout) -> LayoutStamp {
        LayoutStamp {
            workers,
            generation,
            rescaled_from: Some(from),
        }
    }

    fn rescale(from: Layout, into: LayoutStamp) -> Result<LayoutChoice, LayoutRefusal> {
        Ok(LayoutChoice::Rescale { from, into })
    }

    /// The layouts of 3 -> 2 -> 4 -> 3 as storage holds them along the way.
    #[test]
    fn the_latest_generation_decides_own_recovery_or_a_rescale() {
        let g0 = |i| at(w(i, 3), 3, 0, None);
        // Nothing yet: a first start.
        assert_eq!(
            choose(w(1, 3), &[]),
            Ok(LayoutChoice::Own(LayoutStamp::first(3)))
        );
        // Worker 2 of the first layout has not checkpointed yet: it simply starts.
        assert_eq!(
            choose(w(2, 3), &[g0(0), g0(1)]),
            Ok(LayoutChoice::Own(LayoutStamp::first(3)))
        );
        // 3 -> 2: the first new worker rescales from generation 0 into 1.
        let (from_0, into_1) = (layout(3, 0), stamp(2, 1, layout(3, 0)));
        let old = [g0(0), g0(1), g0(2)];
        assert_eq!(choose(w(0, 2), &old), rescale(from_0, into_1));
        // Once worker 0 of 2 checkpointed, worker 1 of 2 still rescales from 0 into 1,
        // and worker 0 of 2 restores its own.
        let mut g1 = old.to_vec();
        g1.push(at(w(0, 2), 2, 1, Some((3, 0))));
        assert_eq!(choose(w(1, 2), &g1), rescale(from_0, into_1));
        assert_eq!(choose(w(0, 2), &g1), Ok(LayoutChoice::Own(into_1)));
        // The old layout started again: a rescale from the current one (2 -> 3).
        let from_1 = layout(2, 1);
        assert_eq!(choose(w(1, 3), &g1), rescale(from_1, stamp(3, 2, from_1)));
        // 2 -> 4, then 4 -> 3 over the stale checkpoints of generation 0.
        g1.push(at(w(1, 2), 2, 1, Some((3, 0))));
        let mut g2 = g1.clone();
        for i in 0..4 {
            g2.push(at(w(i, 4), 4, 2, Some((2, 1))));
        }
        let (from_2, into_3) = (layout(4, 2), stamp(3, 3, layout(4, 2)));
        for i in 0..3 {
            assert_eq!(
                choose(w(i, 3), &g2),
                rescale(from_2, into_3),
                "worker {i}/3 over stale generation-0 checkpoints"
            );
        }
        // Worker 1 of 3 checkpointed in generation 3 (its location's newest): its own;
        // worker 0 of 3, whose location still holds only generation 0, rescales.
        let mut g3 = g2.clone();
        g3.retain(|o| o.worker != w(1, 3));
        g3.push(at(w(1, 3), 3, 3, Some((4, 2))));
        assert_eq!(choose(w(1, 3), &g3), Ok(LayoutChoice::Own(into_3)));
        assert_eq!(choose(w(0, 3), &g3), rescale(from_2, into_3));
    }

    #[test]
    fn storage_that_contradicts_itself_is_refused() {
        let mismatch = choose(w(0, 2), &[at(w(0, 3), 2, 0, None)]);
        assert_eq!(
            mismatch.expect_err("renamed").to_string(),
            "worker-0-of-3's newest checkpoint was taken by a layout of 2 workers, not 3: the directory was renamed or copied from elsewhere"
        );
        let split = choose(
            w(0, 2),
            &[
                at(w(0, 3), 3, 1, Some((2, 0))),
                at(w(1, 3), 3, 1, Some((4, 0))),
            ],
        );
        assert!(
            matches!(
                split,
                Err(LayoutRefusal::Inconsistent { generation: 1, .. })
            ),
            "{split:?}"
        );
        let orphan = choose(w(1, 3), &[at(w(0, 3), 3, 4, None)]);
        assert_eq!(
            orphan,
            Err(LayoutRefusal::NoOrigin {
                generation: 4,
                workers: 3
            })
        );
    }

    #[test]
    fn stamps_written_before_layouts_existed_read_as_generation_0() {
        let stamp: LayoutStamp =
            serde_json::from_str(r#"{"workers": 3, "generation": 0}"#).expect("parse");
        assert_eq!(stamp, LayoutStamp::first(3));
        let json = serde_json::to_string(&LayoutStamp::first(2)).expect("json");
        assert_eq!(json, r#"{"workers":2,"generation":0}"#);
    }
}
