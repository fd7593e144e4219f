//! The rescale plan: for new worker I of M, after the pipeline ran as N workers, which
//! old worker's checkpoint provides each source partition's offset and each key
//! group's state (`plan`). Pure: a function of (I, M, N, partitions, key-group ranges).
//!
//! Invariants (proved for N, M in 1..=6 by the tests below):
//! - What is provided is exactly the new worker's share (`assignment::share`): every
//!   partition and key group it owns is provided once, by exactly one old worker, and
//!   nothing else is.
//! - The provider of a unit is the old worker that owned it (`assignment::assign` with
//!   N): the only one whose checkpoint holds its position or its state.
//! - Over the M new workers, every unit is restored exactly once: the new shares
//!   partition the units, and each unit comes from its one old owner.
//! - A repartition topic's partition `r` is key-group range `r` (see
//!   `connector::kafka::repartition`), owned whole: its offset comes from the provider
//!   of the range's key groups, the worker whose checkpoint holds both their state and
//!   how far it read the partition. The ranges are the same on both sides (R is fixed
//!   for the life of the pipeline; `pipeline::rescale` refuses an old checkpoint of
//!   another R).
//!
//! The plan is computed over the partitions the old checkpoints list: a partition that
//! none lists has no offset to restore and is new input (its earliest offset).

use std::ops::Range;

use crate::cluster::assignment::{WorkerAssignment, assign};
use crate::cluster::{KeyGroupRanges, Worker, WorkerParseError};

/// What one old worker provides to the new worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provision<P> {
    pub old: Worker,
    /// Partitions whose offsets come from its checkpoint, sorted.
    pub partitions: Vec<P>,
    /// Key groups whose state comes from its checkpoint: ascending, non-adjacent ranges.
    pub key_groups: Vec<Range<u16>>,
}

impl<P> Provision<P> {
    /// Whether it provides nothing.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty() && self.key_groups.is_empty()
    }
}

/// The plan of new worker `worker` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescalePlan<P> {
    pub worker: Worker,
    /// Element `j`: what old worker `j` of `from_workers` provides (maybe nothing).
    pub provisions: Vec<Provision<P>>,
    /// The new worker's own share: the union of the provisions.
    pub share: WorkerAssignment<P>,
}

impl<P: Ord + Clone> RescalePlan<P> {
    /// The old worker providing partition `p`, if the new worker owns it.
    pub fn provider_of_partition(&self, p: &P) -> Option<Worker> {
        self.provisions
            .iter()
            .find(|pr| pr.partitions.binary_search(p).is_ok())
            .map(|pr| pr.old)
    }

    /// The old worker providing key group `group`, if the new worker owns it.
    pub fn provider_of_key_group(&self, group: u16) -> Option<Worker> {
        self.provisions
            .iter()
            .find(|pr| pr.key_groups.iter().any(|r| r.contains(&group)))
            .map(|pr| pr.old)
    }
}

/// The plan of new worker `worker` after `from_workers` old workers, over `partitions`
/// (any order, duplicates ignored) and the key groups of `key_groups`' ranges. Refused
/// only for an impossible old worker count (0, or above `MAX_WORKERS`).
pub fn plan<P: Ord + Clone>(
    worker: Worker,
    from_workers: u32,
    partitions: &[P],
    key_groups: KeyGroupRanges,
) -> Result<RescalePlan<P>, WorkerParseError> {
    // Checks `from_workers` (the last old worker exists iff the count is valid).
    Worker::new(from_workers.saturating_sub(1), from_workers)?;
    let mut share =
        assign(worker.count(), partitions, key_groups).swap_remove(worker.index() as usize);
    share.partitions.sort();
    let old = assign(from_workers, partitions, key_groups);
    let provisions = old
        .into_iter()
        .enumerate()
        .map(|(j, owned)| -> Result<Provision<P>, WorkerParseError> {
            let mut parts: Vec<P> = owned
                .partitions
                .into_iter()
                .filter(|p| share.partitions.binary_search(p).is_ok())
                .collect();
            parts.sort();
            Ok(Provision {
                old: Worker::new(j as u32, from_workers)?,
                partitions: parts,
                key_groups: intersect(&owned.key_groups, &share.key_groups),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RescalePlan {
        worker,
        provisions,
        share,
    })
}

/// The intersection of two lists of ascending, non-adjacent ranges, as one.
pub fn intersect(a: &[Range<u16>], b: &[Range<u16>]) -> Vec<Range<u16>> {
    let mut out: Vec<Range<u16>> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let start = a[i].start.max(b[j].start);
        let end = a[i].end.min(b[j].end);
        if start < end {
            match out.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => out.push(start..end),
            }
        }
        if a[i].end <= b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    const PARTITION_COUNTS: [usize; 5] = [0, 1, 6, 7, 32];
    /// (K, R): one key group per range, and fewer ranges than key groups.
    const KEY_GROUPS: [(u16, u16); 7] = [
        (1, 1),
        (7, 7),
        (32, 32),
        (128, 128),
        (128, 32),
        (32, 5),
        (7, 3),
    ];

    fn partitions(count: usize) -> Vec<(String, i32)> {
        (0..count)
            .map(|i| {
                let topic = if i % 3 == 0 { "clicks" } else { "views" };
                (topic.to_owned(), i as i32)
            })
            .collect()
    }

    /// Catches: a unit restored twice or never (duplicated or lost counts and input),
    /// a unit taken from an old worker that never owned it (whose checkpoint holds no
    /// position or state for it), or a plan that provides more than the new share.
    #[test]
    fn every_unit_is_restored_exactly_once_from_its_old_owner() {
        for n in 1..=6u32 {
            for m in 1..=6u32 {
                for count in PARTITION_COUNTS {
                    for (k, r) in KEY_GROUPS {
                        let key_groups = KeyGroupRanges::new(k, r);
                        let all = partitions(count);
                        let old = assign(n, &all, key_groups);
                        let mut restored_parts: BTreeMap<(String, i32), u32> = BTreeMap::new();
                        let mut restored_groups: BTreeMap<u16, u32> = BTreeMap::new();
                        for i in 0..m {
                            let worker = Worker::new(i, m).expect("worker");
                            let plan = plan(worker, n, &all, key_groups).expect("plan");
                            assert_eq!(plan.provisions.len(), n as usize);
                            let mut parts = Vec::new();
                            let mut groups = Vec::new();
                            for (j, pr) in plan.provisions.iter().enumerate() {
                                assert_eq!(pr.old, Worker::new(j as u32, n).expect("old"));
                                assert!(pr.partitions.windows(2).all(|w| w[0] < w[1]));
                                for p in &pr.partitions {
                                    assert!(
                                        old[j].partitions.contains(p),
                                        "{n}->{m}: {p:?} from worker {j}, which never owned it"
                                    );
                                    assert_eq!(plan.provider_of_partition(p), Some(pr.old));
                                    *restored_parts.entry(p.clone()).or_default() += 1;
                                    parts.push(p.clone());
                                }
                                for g in pr.key_groups.iter().flat_map(|r| r.clone()) {
                                    assert!(
                                        old[j].key_groups.iter().any(|r| r.contains(&g)),
                                        "{n}->{m}: key group {g} from worker {j}, which never owned it"
                                    );
                                    assert_eq!(plan.provider_of_key_group(g), Some(pr.old));
                                    *restored_groups.entry(g).or_default() += 1;
                                    groups.push(g);
                                }
                            }
                            // Exactly the new share.
                            parts.sort();
                            groups.sort_unstable();
                            let share = assign(m, &all, key_groups).swap_remove(i as usize);
                            assert_eq!(parts, share.partitions, "{n}->{m} worker {i}");
                            let share_groups: Vec<u16> =
                                share.key_groups.iter().flat_map(|r| r.clone()).collect();
                            assert_eq!(groups, share_groups, "{n}->{m} worker {i}");
                            assert_eq!(plan.share, share);
                            // A range (a repartition partition) comes whole from one
                            // old worker, which read it and holds its key groups.
                            for &range in &share.key_group_ranges {
                                let providers: BTreeSet<_> = key_groups
                                    .groups(range)
                                    .map(|g| plan.provider_of_key_group(g))
                                    .collect();
                                assert_eq!(providers.len(), 1, "{n}->{m}: range {range}");
                            }
                        }
                        assert_eq!(restored_parts.len(), count, "{n}->{m}: every partition");
                        assert!(restored_parts.values().all(|&c| c == 1), "{n}->{m}: once");
                        assert_eq!(
                            restored_groups.len(),
                            usize::from(k),
                            "{n}->{m}: every key group"
                        );
                        assert!(restored_groups.values().all(|&c| c == 1), "{n}->{m}: once");
                    }
                }
            }
        }
    }

    /// The figures of the end-to-end test (32 key groups, 6 partitions), spelled out:
    /// from 3 to 2 workers, the removed worker 2 hands its units back to their donors.
    #[test]
    fn three_to_two_gives_the_removed_workers_units_back() {
        let all: Vec<i32> = (0..6).collect();
        let key_groups = KeyGroupRanges::one_per_group(32);
        let plan_of =
            |i| plan(Worker::new(i, 2).expect("worker"), 3, &all, key_groups).expect("plan");
        let (w0, w1) = (plan_of(0), plan_of(1));
        assert!(w0.provisions[1].is_empty() && w1.provisions[0].is_empty());
        assert_eq!(w0.provisions[0].key_groups, vec![0..11]);
        assert_eq!(w0.provisions[2].key_groups, vec![11..16]);
        assert_eq!(w1.provisions[1].key_groups, vec![16..27]);
        assert_eq!(w1.provisions[2].key_groups, vec![27..32]);
        assert_eq!(
            w0.provider_of_key_group(11),
            Some(Worker::new(2, 3).expect("2/3"))
        );
        assert_eq!(w0.provider_of_key_group(16), None);
    }

    #[test]
    fn an_impossible_old_worker_count_is_refused() {
        let me = Worker::new(0, 2).expect("worker");
        let key_groups = KeyGroupRanges::one_per_group(4);
        assert!(plan::<i32>(me, 0, &[], key_groups).is_err());
        assert!(plan::<i32>(me, 5000, &[], key_groups).is_err());
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // lists of key-group ranges
    fn ranges_intersect() {
        assert_eq!(intersect(&[0..10, 20..30], &[5..25]), vec![5..10, 20..25]);
        assert_eq!(intersect(&[0..5], &[5..9]), Vec::<Range<u16>>::new());
        assert_eq!(intersect(&[0..5, 5..9], &[0..9]), vec![0..9]);
        assert_eq!(intersect(&[], &[0..9]), Vec::<Range<u16>>::new());
    }
}
