//! Which worker of N owns which source partition and which key groups: one
//! deterministic function, `assign(N, partitions, key_group_ranges)`.
//!
//! Key groups are owned in whole key-group ranges (`KeyGroupRanges`: R ranges of K key
//! groups, the partitions of the repartition topic, so each partition has one owner).
//! The definition is recursive in N, over units in a canonical order (partitions
//! sorted, key-group ranges by number), each kind of unit split on its own:
//! - N = 1: worker 0 owns every unit.
//! - N > 1: start from the assignment for N - 1; the new worker N - 1 takes units one
//!   at a time from the most loaded worker (the lowest index among equals), always
//!   that worker's highest unit, until no worker holds more than one unit above it.
//!
//! Invariants (each proved for N = 1..16 by the tests below):
//! - Every unit is owned by exactly one worker, and the result depends only on N, the
//!   set of partitions (not the order it is given in) and the key-group ranges.
//! - Balanced: any two workers' counts of partitions differ by at most one, and so do
//!   their counts of key-group ranges (with one key group per range, of key groups).
//! - Minimal movement: from N to N + 1 the only units that change owner are those the
//!   new worker N takes (it must take its share from someone); from N to N - 1 only the
//!   units of the removed worker N - 1 move (they go back to whoever gave them).
//! - Few runs of key groups: a worker gives away the top of its highest run, so worker
//!   0 always owns one run `[0, k)` and every worker's key groups come in at most as
//!   many runs as it had donors (`min(N - 1, its share)`).
//! - R = K (one key group per range) is the assignment of key groups before ranges
//!   existed, group for group.
//! - Within a worker, its partitions are spread over its source subtasks by
//!   `connector::kafka::assignment::owner`, as for a single process.
//!
//! Not an invariant: adding partitions to a source topic changes the partition count,
//! and with N > 1 that can move an existing partition to another worker (the tests
//! show by how much). A worker's checkpoint holds only its own partitions' positions,
//! so a moved partition would restart at its earliest offset on its new owner: the
//! Kafka source refuses it instead (it finds the other worker's marker on the
//! partition's committed offset, see `connector::kafka::source`). A rescale, which
//! restores positions from every old worker's checkpoint (`pipeline::rescale`), is the
//! one place partitions change owner; do not add partitions to the source topics of a
//! pipeline run as N > 1 workers.

use std::ops::Range;

use crate::cluster::{KeyGroupRanges, Worker};

/// What one worker owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerAssignment<P> {
    /// Its source partitions, in canonical (sorted) order.
    pub partitions: Vec<P>,
    /// Its key groups, as ascending, non-adjacent ranges.
    pub key_groups: Vec<Range<u16>>,
    /// Its key-group ranges (of the `KeyGroupRanges` it was assigned from), ascending:
    /// the repartition topic's partitions it reads.
    pub key_group_ranges: Vec<u16>,
}

impl<P> WorkerAssignment<P> {
    /// How many key groups it owns.
    pub fn key_group_count(&self) -> usize {
        self.key_groups.iter().map(|r| r.len()).sum()
    }
}

/// The assignment of `partitions` (any order, duplicates ignored) and of the key
/// groups, in whole `key_groups` ranges, to `workers` workers: element `w` is worker
/// `w`'s share. An empty vector for zero workers.
pub fn assign<P: Ord + Clone>(
    workers: u32,
    partitions: &[P],
    key_groups: KeyGroupRanges,
) -> Vec<WorkerAssignment<P>> {
    let mut sorted = partitions.to_vec();
    sorted.sort();
    sorted.dedup();
    let partition_split = split(workers, sorted.len());
    let range_split = split(workers, usize::from(key_groups.count()));
    partition_split
        .into_iter()
        .zip(range_split)
        .map(|(parts, owned)| {
            // Units of a split are below its unit count, R: a u16.
            let owned: Vec<u16> = owned.into_iter().map(|r| r as u16).collect();
            WorkerAssignment {
                partitions: parts.into_iter().map(|i| sorted[i].clone()).collect(),
                key_groups: runs(owned.iter().map(|&r| key_groups.groups(r))),
                key_group_ranges: owned,
            }
        })
        .collect()
}

/// `worker`'s share of `assign(worker.count(), partitions, key_groups)`.
pub fn share<P: Ord + Clone>(
    worker: Worker,
    partitions: &[P],
    key_groups: KeyGroupRanges,
) -> WorkerAssignment<P> {
    assign(worker.count(), partitions, key_groups).swap_remove(worker.index() as usize)
}

/// `worker`'s source partitions: its share of `partitions` (any order), sorted.
pub fn partitions_of<P: Ord + Clone>(worker: Worker, partitions: &[P]) -> Vec<P> {
    share(worker, partitions, KeyGroupRanges::one_per_group(0)).partitions
}

/// `worker`'s key-group ranges of `key_groups`, ascending.
pub fn key_group_ranges_of(worker: Worker, key_groups: KeyGroupRanges) -> Vec<u16> {
    share::<u16>(worker, &[], key_groups).key_group_ranges
}

/// The recursive split of units `0..units` among `workers` (see the module docs):
/// element `w` holds worker `w`'s units, ascending.
fn split(workers: u32, units: usize) -> Vec<Vec<usize>> {
    if workers == 0 {
        return Vec::new();
    }
    let mut owned: Vec<Vec<usize>> = vec![(0..units).collect()];
    for _ in 1..workers {
        let mut taken = Vec::new();
        // The most loaded worker (the lowest index among equals) gives its highest
        // unit (units are kept ascending: the last) while it holds more than one unit
        // above the new worker.
        while let Some((donor, load)) = most_loaded(&owned)
            && load > taken.len() + 1
        {
            if let Some(unit) = owned[donor].pop() {
                taken.push(unit);
            }
        }
        taken.sort_unstable();
        owned.push(taken);
    }
    owned
}

/// The worker holding the most units and how many, the lowest index among equals.
fn most_loaded(owned: &[Vec<usize>]) -> Option<(usize, usize)> {
    owned
        .iter()
        .enumerate()
        .fold(None, |best, (w, units)| match best {
            Some((_, most)) if most >= units.len() => best,
            _ => Some((w, units.len())),
        })
}

/// Ascending, disjoint ranges as ascending, non-adjacent ones (touching ones joined).
fn runs(ranges: impl Iterator<Item = Range<u16>>) -> Vec<Range<u16>> {
    let mut out: Vec<Range<u16>> = Vec::new();
    for r in ranges.filter(|r| !r.is_empty()) {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
#[path = "assignment_tests.rs"]
mod tests;
