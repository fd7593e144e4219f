//! Key-group ranges: a pipeline's K key groups cut into R contiguous ranges. The same
//! cut serves twice: a keyed step's R subtasks (`dataflow::partition`), and across
//! workers the R partitions of a repartition topic, the units workers own
//! (`cluster::assignment`) and hand over on a rescale.
//!
//! Invariants (proved below for K up to 1,000):
//! - Range `r` of R holds the key groups `g` with `g * R / K == r` (Flink's key-group
//!   ranges): contiguous, ascending with `r`, together every key group exactly once,
//!   sizes `floor(K / R)` or `ceil(K / R)`, none empty while R <= K.
//! - R = K is one key group per range, range `g` being key group `g`: the repartition
//!   layout before ranges existed, so its topics and checkpoints keep their meaning.
//! - For a repartition topic R is fixed for the life of a pipeline, like K: the topic
//!   has R partitions and every worker's checkpoint records R.

use std::ops::Range;

/// The range of `ranges` over `key_groups` key groups that holds `group`.
pub fn range_of(group: u16, ranges: usize, key_groups: u16) -> usize {
    usize::from(group) * ranges / usize::from(key_groups)
}

/// The key groups range `range` of `ranges` holds: those `g` with
/// `range_of(g) == range`.
pub fn groups_of(range: usize, ranges: usize, key_groups: u16) -> Range<u16> {
    let k = usize::from(key_groups);
    let r = ranges.max(1);
    // The smallest g with g * r / k >= range is ceil(range * k / r).
    let first = |range: usize| u16::try_from((range * k).div_ceil(r)).unwrap_or(key_groups);
    first(range)..first(range + 1)
}

/// K key groups cut into R ranges, 1 <= R <= K (0 ranges of 0 key groups: nothing to
/// own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroupRanges {
    key_groups: u16,
    ranges: u16,
}

impl KeyGroupRanges {
    /// `key_groups` cut into `ranges`, brought into `1..=key_groups` (the spec refuses
    /// any other count before it gets here).
    pub const fn new(key_groups: u16, ranges: u16) -> Self {
        let ranges = if ranges > key_groups {
            key_groups
        } else if ranges == 0 && key_groups > 0 {
            1
        } else {
            ranges
        };
        KeyGroupRanges { key_groups, ranges }
    }

    /// One key group per range.
    pub const fn one_per_group(key_groups: u16) -> Self {
        KeyGroupRanges::new(key_groups, key_groups)
    }

    /// K.
    pub fn key_groups(&self) -> u16 {
        self.key_groups
    }

    /// R.
    pub fn count(&self) -> u16 {
        self.ranges
    }

    /// The range holding key group `group`.
    pub fn range_of(&self, group: u16) -> u16 {
        // Below R, which is a u16.
        range_of(group, usize::from(self.ranges), self.key_groups) as u16
    }

    /// The key groups of range `range`.
    pub fn groups(&self, range: u16) -> Range<u16> {
        groups_of(
            usize::from(range),
            usize::from(self.ranges),
            self.key_groups,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a key group in two ranges or in none (a subtask or worker restoring
    /// state its shuffle never sends it, or losing it), or ranges that are not
    /// contiguous and ascending.
    #[test]
    fn groups_of_is_exactly_the_groups_range_of_maps_there() {
        for key_groups in [1u16, 7, 32, 128, 1000] {
            for ranges in 1..=key_groups.min(40) {
                let cut = KeyGroupRanges::new(key_groups, ranges);
                let mut next = 0;
                for r in 0..ranges {
                    let groups = cut.groups(r);
                    assert_eq!(groups.start, next, "K={key_groups} R={ranges} r={r}");
                    let size = groups.len();
                    let k = usize::from(key_groups);
                    let rr = usize::from(ranges);
                    assert!(size == k / rr || size == k.div_ceil(rr), "sizes: {size}");
                    for g in groups.clone() {
                        assert_eq!(cut.range_of(g), r, "K={key_groups} R={ranges} g={g}");
                    }
                    next = groups.end;
                }
                assert_eq!(next, key_groups, "every key group in a range");
            }
        }
    }

    #[test]
    fn one_range_per_group_is_the_identity_and_counts_are_clamped() {
        let identity = KeyGroupRanges::one_per_group(128);
        for g in 0..128 {
            assert_eq!(identity.range_of(g), g);
            assert_eq!(identity.groups(g), g..g + 1);
        }
        assert_eq!(KeyGroupRanges::new(16, 64).count(), 16);
        assert_eq!(KeyGroupRanges::new(16, 0).count(), 1);
        assert_eq!(KeyGroupRanges::new(0, 4).count(), 0);
        // Pinned: the cut decides which partition a key's records go to.
        let cut = KeyGroupRanges::new(128, 32);
        assert_eq!((cut.groups(0), cut.groups(31)), (0..4, 124..128));
        let uneven = KeyGroupRanges::new(10, 4);
        let sizes: Vec<usize> = (0..4).map(|r| uneven.groups(r).len()).collect();
        assert_eq!(sizes, [3, 2, 3, 2]);
    }
}
