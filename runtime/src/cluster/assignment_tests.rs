//! The invariants of `assign`, proved for N = 1..16 over several unit counts.

use std::collections::BTreeMap;

use super::*;

/// One key group per range: key groups are assigned one by one.
fn one(key_groups: u16) -> KeyGroupRanges {
    KeyGroupRanges::one_per_group(key_groups)
}

const MAX_N: u32 = 16;

/// Partition counts and key-group counts the properties are checked over.
const PARTITION_COUNTS: [usize; 8] = [0, 1, 3, 6, 7, 16, 24, 61];
const KEY_GROUPS: [u16; 5] = [1, 7, 16, 128, 1000];

fn partitions(count: usize) -> Vec<(String, i32)> {
    // Two topics, so the canonical order is by (topic, partition).
    (0..count)
        .map(|i| {
            let topic = if i % 2 == 0 { "clicks" } else { "views" };
            (topic.to_owned(), (i / 2) as i32)
        })
        .collect()
}

/// Owner of every partition and of every key group.
fn owners(
    a: &[WorkerAssignment<(String, i32)>],
) -> (BTreeMap<(String, i32), usize>, BTreeMap<u16, usize>) {
    let mut parts = BTreeMap::new();
    let mut groups = BTreeMap::new();
    for (w, share) in a.iter().enumerate() {
        for p in &share.partitions {
            assert!(parts.insert(p.clone(), w).is_none(), "{p:?} owned twice");
        }
        for r in &share.key_groups {
            for g in r.clone() {
                assert!(groups.insert(g, w).is_none(), "key group {g} owned twice");
            }
        }
    }
    (parts, groups)
}

fn spread(counts: impl Iterator<Item = usize>) -> (usize, usize) {
    counts.fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)))
}

#[test]
fn every_unit_is_owned_exactly_once_and_the_shares_are_balanced() {
    for n in 1..=MAX_N {
        for count in PARTITION_COUNTS {
            for groups in KEY_GROUPS {
                let p = partitions(count);
                let a = assign(n, &p, one(groups));
                assert_eq!(a.len(), n as usize);
                let (parts, gs) = owners(&a);
                assert_eq!(parts.len(), count, "n={n}: every partition owned");
                assert_eq!(
                    gs.len(),
                    usize::from(groups),
                    "n={n}: every key group owned"
                );
                assert_eq!(
                    gs.keys().copied().collect::<Vec<_>>(),
                    (0..groups).collect::<Vec<_>>()
                );
                let (lo, hi) = spread(a.iter().map(|s| s.partitions.len()));
                assert!(hi - lo <= 1, "n={n} partitions={count}: {lo}..{hi}");
                let (lo, hi) = spread(a.iter().map(|s| s.key_group_count()));
                assert!(hi - lo <= 1, "n={n} key groups={groups}: {lo}..{hi}");
            }
        }
    }
}

#[test]
fn the_result_depends_only_on_n_and_the_set_of_units() {
    let p = partitions(24);
    let mut shuffled = p.clone();
    shuffled.reverse();
    shuffled.swap(3, 17);
    shuffled.push(p[5].clone()); // a duplicate changes nothing either
    for n in 1..=MAX_N {
        assert_eq!(
            assign(n, &p, one(128)),
            assign(n, &shuffled, one(128)),
            "n={n}"
        );
        assert_eq!(assign(n, &p, one(128)), assign(n, &p, one(128)), "n={n}");
        for w in 0..n {
            let worker = Worker::new(w, n).expect("worker");
            assert_eq!(
                share(worker, &shuffled, one(128)),
                assign(n, &p, one(128))[w as usize]
            );
        }
    }
    // Pinned: changing the function would move units across an upgrade.
    let a = assign(3, &partitions(6), one(128));
    let names = |s: &WorkerAssignment<(String, i32)>| {
        s.partitions
            .iter()
            .map(|(t, p)| format!("{t}-{p}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&a[0]), ["clicks-0", "clicks-1"]);
    assert_eq!(names(&a[1]), ["views-0", "views-1"]);
    assert_eq!(names(&a[2]), ["clicks-2", "views-2"]);
    assert_eq!(a[0].key_groups, vec![Range { start: 0, end: 43 }]);
    assert_eq!(
        a[1].key_groups,
        vec![Range {
            start: 64,
            end: 107
        }]
    );
    assert_eq!(a[2].key_groups, [43..64, 107..128]);
}

/// From N to N + 1, only units taken by the new worker N change owner; read backwards,
/// from N + 1 to N only the removed worker's units move.
#[test]
fn growing_or_shrinking_by_one_moves_only_the_new_or_removed_workers_units() {
    for count in PARTITION_COUNTS {
        for groups in KEY_GROUPS {
            let p = partitions(count);
            for n in 1..MAX_N {
                let (before_p, before_g) = owners(&assign(n, &p, one(groups)));
                let (after_p, after_g) = owners(&assign(n + 1, &p, one(groups)));
                let new = n as usize;
                for (unit, owner) in &before_p {
                    let now = after_p[unit];
                    assert!(
                        now == *owner || now == new,
                        "n={n}->{}: {unit:?} moved {owner}->{now}",
                        n + 1
                    );
                }
                for (g, owner) in &before_g {
                    let now = after_g[g];
                    assert!(
                        now == *owner || now == new,
                        "n={n}->{}: key group {g} moved {owner}->{now}",
                        n + 1
                    );
                }
                // Shrinking: every unit not owned by the removed worker stays put.
                for (unit, owner) in after_p.iter().filter(|(_, w)| **w != new) {
                    assert_eq!(before_p[unit], *owner, "n={}->{n}: {unit:?}", n + 1);
                }
                for (g, owner) in after_g.iter().filter(|(_, w)| **w != new) {
                    assert_eq!(before_g[g], *owner, "n={}->{n}: key group {g}", n + 1);
                }
                // And what moves is no more than balance forces: the new worker's share.
                let moved = before_g.iter().filter(|(g, w)| after_g[*g] != **w).count();
                assert_eq!(
                    moved,
                    usize::from(groups) / (n as usize + 1),
                    "n={n} groups={groups}"
                );
            }
        }
    }
}

#[test]
fn key_groups_stay_in_few_contiguous_ranges() {
    for n in 1..=MAX_N {
        let a = assign(n, &partitions(0), one(128));
        assert_eq!(a[0].key_groups.len(), 1, "n={n}: worker 0 keeps one range");
        assert_eq!(a[0].key_groups[0].start, 0);
        for (w, share) in a.iter().enumerate() {
            let donors = w.max(1);
            assert!(
                share.key_groups.len() <= donors.min(share.key_group_count().max(1)),
                "n={n} worker {w}: {:?}",
                share.key_groups
            );
            for pair in share.key_groups.windows(2) {
                assert!(
                    pair[0].end < pair[1].start,
                    "ranges ascend, never touch: {pair:?}"
                );
            }
        }
    }
    assert_eq!(
        assign(2, &partitions(0), one(128))[1].key_groups,
        vec![Range {
            start: 64,
            end: 128
        }]
    );
}

#[test]
fn fewer_units_than_workers_leaves_some_workers_without() {
    let a = assign(4, &partitions(2), one(3));
    assert_eq!(
        a.iter().map(|s| s.partitions.len()).collect::<Vec<_>>(),
        [1, 1, 0, 0]
    );
    assert_eq!(
        a.iter().map(|s| s.key_group_count()).collect::<Vec<_>>(),
        [1, 1, 1, 0]
    );
    assert!(assign(0, &partitions(2), one(3)).is_empty());
}

/// Documents (it is not an invariant) how adding partitions moves existing ones
/// between workers: see the module docs.
#[test]
fn adding_partitions_can_move_existing_ones_between_workers() {
    let topic = |count: i32| (0..count).map(|p| ("in".to_owned(), p)).collect::<Vec<_>>();
    let four = assign(2, &topic(4), one(1));
    let five = assign(2, &topic(5), one(1));
    assert_eq!(
        four[1].partitions,
        [("in".to_owned(), 2), ("in".to_owned(), 3)]
    );
    assert_eq!(five[0].partitions, topic(3), "in-2 moved to worker 0");
}

/// Catches: a repartition partition (a key-group range) split between two workers
/// (both would read it, or one would own key groups it never receives), a range left
/// unowned, unbalanced range counts, or ranges moving beyond the new worker's share.
#[test]
fn key_groups_are_owned_in_whole_ranges() {
    for (key_groups, count) in [(128u16, 32u16), (128, 16), (1000, 7), (10, 4), (32, 32)] {
        let cut = KeyGroupRanges::new(key_groups, count);
        let mut before: Option<BTreeMap<u16, usize>> = None;
        for n in 1..=MAX_N {
            let a = assign(n, &partitions(0), cut);
            let (_, groups) = owners(&a);
            assert_eq!(
                groups.len(),
                usize::from(key_groups),
                "every key group owned"
            );
            let mut range_owner = BTreeMap::new();
            for (w, share) in a.iter().enumerate() {
                assert!(share.key_group_ranges.windows(2).all(|p| p[0] < p[1]));
                for &r in &share.key_group_ranges {
                    assert!(range_owner.insert(r, w).is_none(), "range {r} owned twice");
                    for g in cut.groups(r) {
                        assert_eq!(groups[&g], w, "K={key_groups} R={count} n={n}: {g}");
                    }
                }
            }
            assert_eq!(range_owner.len(), usize::from(count), "every range owned");
            let (lo, hi) = spread(a.iter().map(|s| s.key_group_ranges.len()));
            assert!(hi - lo <= 1, "n={n} R={count}: {lo}..{hi}");
            if let Some(before) = &before {
                let moved = before.iter().filter(|(r, w)| range_owner[*r] != **w);
                assert!(moved.clone().all(|(r, _)| range_owner[r] == n as usize - 1));
                assert_eq!(moved.count(), usize::from(count) / n as usize, "n={n}");
            }
            before = Some(range_owner);
        }
    }
    // One key group per range is the key groups themselves.
    for n in 1..=MAX_N {
        for share in assign(n, &partitions(0), one(128)) {
            let groups: Vec<u16> = share.key_groups.iter().flat_map(|r| r.clone()).collect();
            assert_eq!(groups, share.key_group_ranges);
        }
    }
    // Pinned: 3 workers over 32 ranges of 128 key groups.
    let a = assign(3, &partitions(0), KeyGroupRanges::new(128, 32));
    assert_eq!(a[0].key_groups, vec![Range { start: 0, end: 44 }]);
    assert_eq!(
        a[1].key_groups,
        vec![Range {
            start: 64,
            end: 108
        }]
    );
    assert_eq!(a[2].key_groups, [44..64, 108..128]);
}
