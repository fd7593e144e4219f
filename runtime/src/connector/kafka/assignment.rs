//! Which source subtask reads which Kafka partition.
//!
//! Invariants:
//! - The owner of a partition is a function of (topic, partition, parallelism) alone:
//!   topic `t` starts at subtask `h(t) mod P` (a fixed FNV-1a hash of its name, the
//!   same in every build and process) and its partitions are dealt out round-robin from
//!   there (Flink's `KafkaTopicPartitionAssigner` does the same). Adding a partition to
//!   a topic, or adding a topic, moves no existing partition; each topic is spread
//!   evenly over the subtasks on its own.
//! - Correctness never rests on the assignment: a restored run takes every partition's
//!   position from the whole checkpoint (every subtask's snapshot), so a partition that
//!   moved to another subtask continues exactly where it stopped. Stability only avoids
//!   needless moves.

/// The subtask (of `parallelism`) that reads `partition` of `topic`.
pub fn owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let p = parallelism.max(1) as u64;
    let start = fnv1a(topic.as_bytes()) % p;
    // Partition ids are never negative; treat a bogus one as 0 rather than panic.
    let partition = u64::try_from(partition).unwrap_or(0);
    ((start + partition % p) % p) as usize
}

/// 64-bit FNV-1a: stable across Rust versions and processes, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, i32)], p: usize) -> Vec<(String, i32, usize)> {
        let mut out = Vec::new();
        for (topic, partitions) in topics {
            for partition in 0..*partitions {
                out.push((topic.to_string(), partition, owner(topic, partition, p)));
            }
        }
        out
    }

    #[test]
    fn adding_a_partition_or_a_topic_moves_no_existing_partition() {
        let before = assignment(&[("in1", 3), ("in2", 3)], 2);
        let after = assignment(&[("in1", 4), ("in2", 3), ("a-new-topic", 5)], 2);
        for (topic, partition, subtask) in &before {
            let now = after
                .iter()
                .find(|(t, p, _)| t == topic && p == partition)
                .map(|(_, _, s)| *s);
            assert_eq!(now, Some(*subtask), "{topic}-{partition} moved");
        }
    }

    #[test]
    fn each_topic_is_spread_evenly() {
        for p in 1..=7 {
            for partitions in [1, 3, 8, 13] {
                let mut per_subtask = vec![0usize; p];
                for (_, _, s) in assignment(&[("clicks", partitions)], p) {
                    per_subtask[s] += 1;
                }
                let (min, max) = (
                    per_subtask.iter().min().copied().unwrap_or(0),
                    per_subtask.iter().max().copied().unwrap_or(0),
                );
                assert!(
                    max - min <= 1,
                    "p={p} partitions={partitions}: {per_subtask:?}"
                );
            }
        }
    }

    #[test]
    fn the_hash_is_fixed() {
        // Changing it would move partitions between subtasks across an upgrade.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert!(owner("t", 0, 1) == 0 && owner("t", -1, 3) < 3);
    }
}
