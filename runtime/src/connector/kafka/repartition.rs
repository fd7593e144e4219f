//! The repartition topic: how a keyed step's records cross from the worker that read
//! them to the worker that owns their key group (Kafka Streams' model).
//!
//! Invariants:
//! - Only worker I of N > 1 has one (`pipeline::WorkerPlan::new` adds it); a pipeline
//!   in one process (0/1) shuffles in process exactly as before.
//! - One topic per pipeline and keyed step, `KafkaNames::repartition_topic`, shared by
//!   every worker. Its R partitions are key-group ranges (`cluster::key_group_ranges`,
//!   R = the spec's `repartition_partitions`, at most the K key groups): partition `r`
//!   holds the key groups `g` with `g * R / K == r`, and workers own whole ranges
//!   (`cluster::assignment`), so every partition has exactly one reader and a rescale
//!   hands partitions over whole. R = K is one key group per partition (the layout
//!   before ranges existed). Fewer partitions make each transaction cheaper (it adds,
//!   and ends with a marker in, every partition it wrote); more let more workers share
//!   the step (a worker beyond R owns no key groups). R, like K, is fixed for the
//!   life of a pipeline: every checkpoint records it, and
//!   `field::checks::MAX_REPARTITION_PARTITIONS` caps it.
//! - Weir creates the topic at start if it is missing (`ensure_topic`). An existing
//!   topic with another partition count is refused with one line (its key groups would
//!   land on the wrong partitions) when the spec sets `repartition_partitions`; without
//!   it, the worker adopts the topic's count (`RepartitionPartitions::Default`), so a
//!   topic made before key-group ranges (one partition per key group) keeps working.
//!   Retention is unlimited (`retention.ms = -1`, `retention.bytes = -1`,
//!   `cleanup.policy = delete`): a record is never deleted
//!   before its owner read it, however long that worker is down. The owner purges
//!   what none of its retained checkpoints can read again (`repartition_purge`, Kafka
//!   Streams' DeleteRecords), so the topic does not grow with the input.
//! - Writing: upstream of the exchange, every record (key, value, event time) goes to
//!   the partition of its key group's range (`partition_of_key`, the same
//!   `dataflow::partition::key_group` as the in-process shuffle), packed with the other
//!   records of its writer subtask and partition into frames (`repartition_frame`: one
//!   Kafka record holds thousands, and none spans two checkpoints), through the
//!   worker's own transactional producers (`KafkaCommitUnit`), so repartition records,
//!   output records and the source offsets commit or abort together in T(n). A record
//!   of its own, as a Weir before frames wrote it (its event time the Kafka timestamp,
//!   or at or below zero in header `weir.event_time`, `EventTime`), is still read.
//! - Reading: the owner of range `r` reads partition `r` (`partitions_of`) as one
//!   more Kafka source, `read_committed`, from the earliest offset the first time,
//!   else from its checkpoint; those offsets ride in its own T(n)'s offset commit like
//!   any source's. Each worker is exactly-once on its own, and Kafka joins them: no
//!   global barrier.
//! - Order: a key's records from one upstream sink subtask reach its partition in the
//!   order that subtask wrote them (see `sink`'s "Order"), and the owning worker reads a
//!   partition in offset order.

use std::time::Duration;

use rdkafka::admin::AdminClient;

use crate::cluster::{KeyGroupRanges, Worker, assignment};
use crate::connector::kafka::client::{self, QuietContext, topic_partitions};
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::repartition_watermark::RepartitionWriters;
use crate::dataflow::partition::key_group;

/// Partitions of a repartition topic unless the spec says (`repartition_partitions`),
/// capped at the key groups: enough for 32 workers to share a keyed step, few enough
/// that a transaction at a short checkpoint interval stays cheap (with 128, a 200 ms
/// interval took twice as long as with 16; see docs/src/operations/workers.md).
pub const DEFAULT_REPARTITION_PARTITIONS: usize = 32;

/// The operator id of the repartition writer in the tasks upstream of the exchange.
pub const REPARTITION_SINK_ID: &str = "repartition";

/// Topic configuration of a repartition topic: never delete what a worker has not read.
pub const REPARTITION_TOPIC_CONFIG: [(&str, &str); 3] = [
    ("cleanup.policy", "delete"),
    ("retention.ms", "-1"),
    ("retention.bytes", "-1"),
];

/// A worker's keyed exchange through Kafka: what `pipeline::WorkerPlan::new` adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repartition {
    /// The keyed step (index into `spec.steps`) whose input crosses the topic.
    pub step: usize,
    /// The stage that step starts (`pipeline::plan::stages`, >= 1): the topic is the
    /// boundary between stage `stage - 1` and it.
    pub stage: usize,
    /// Its stable id in names: the step's name, else `step-<n>`.
    pub step_id: String,
    /// `KafkaNames::repartition_topic(step_id)`.
    pub topic: String,
    /// The pipeline's key groups (`max_parallelism`) cut into the topic's partitions.
    pub key_groups: KeyGroupRanges,
    /// The source (index into `spec.sources`) reading the worker's partitions back.
    pub source: usize,
}

/// Cuts the key groups of every exchange in `repartitions` into `partitions` ranges
/// (the count their topics have): the new ranges, for the sources that read the topics
/// back, or `None` when there is no exchange or its ranges are that many already.
pub fn adopt_partitions(
    repartitions: &mut [Repartition],
    partitions: u16,
) -> Option<KeyGroupRanges> {
    let current = repartitions.first()?.key_groups;
    if current.count() == partitions {
        return None;
    }
    let key_groups = KeyGroupRanges::new(current.key_groups(), partitions);
    for exchange in repartitions.iter_mut() {
        exchange.key_groups = key_groups;
    }
    Some(key_groups)
}

/// What a source that reads a repartition topic back is told besides its config (the
/// spec cannot say it: the worker's plan derives it): the key-group ranges the topic's
/// partitions are, so a worker reads the partitions of its own ranges, and the topic's
/// writers in the current layout when their watermark markers are its event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepartitionRead {
    pub key_groups: KeyGroupRanges,
    pub writers: Option<RepartitionWriters>,
}

/// The partitions of `all` (a source's topics) that `worker` reads: those of its
/// key-group ranges for a source reading a repartition topic (`partitions_of`), else
/// its share (`cluster::assignment::partitions_of`); sorted.
pub fn worker_partitions(
    worker: Worker,
    repartition: Option<KeyGroupRanges>,
    all: &[(String, i32)],
) -> Vec<(String, i32)> {
    let mut mine = match repartition {
        Some(key_groups) => {
            let owned = partitions_of(worker, key_groups);
            all.iter()
                .filter(|(_, p)| owned.binary_search(p).is_ok())
                .cloned()
                .collect()
        }
        None => assignment::partitions_of(worker, all),
    };
    mine.sort();
    mine
}

/// The header of a repartition record of its own (written before frames) whose event
/// time is at or below zero: the event time, 8 bytes big-endian.
pub const EVENT_TIME_HEADER: &str = "weir.event_time";

/// How the event time of a record of its own crossed the repartition topic before
/// frames (see the module docs).
pub struct EventTime;

impl EventTime {
    /// `None` for a value of another length (not one a weir wrote).
    pub fn decode(value: &[u8]) -> Option<i64> {
        Some(i64::from_be_bytes(value.try_into().ok()?))
    }
}

/// The partition a record with `key` goes to: its key group's range.
pub fn partition_of_key(key: &[u8], key_groups: KeyGroupRanges) -> i32 {
    i32::from(key_groups.range_of(key_group(key, key_groups.key_groups())))
}

/// The repartition partitions `worker` reads: its key-group ranges, sorted.
pub fn partitions_of(worker: Worker, key_groups: KeyGroupRanges) -> Vec<i32> {
    assignment::key_group_ranges_of(worker, key_groups)
        .into_iter()
        .map(i32::from)
        .collect()
}

/// Creates `topic` with `partitions` partitions and `REPARTITION_TOPIC_CONFIG` unless
/// it exists; refuses an existing one with another partition count.
pub fn ensure_topic(
    admin: &AdminClient<QuietContext>,
    bootstrap: &str,
    topic: &str,
    partitions: RepartitionPartitions,
    timeout: Duration,
) -> Result<u16, KafkaError> {
    let expected = partitions.count();
    client::ensure_topic(
        admin,
        bootstrap,
        ("repartition", topic),
        i32::from(expected),
        &REPARTITION_TOPIC_CONFIG,
        timeout,
    )?;
    // Created by us or by another worker just before: either way, check what is there.
    let found = topic_partitions(admin.inner(), bootstrap, topic, timeout)?.len();
    partitions
        .in_use(found)
        .ok_or_else(|| KafkaError::RepartitionPartitions {
            topic: topic.to_owned(),
            found,
            expected: i32::from(expected),
        })
}

/// `ensure_topic` for every exchange, in order, each asked for the count the ones
/// before it use (so all have one count, which a later checkpoint records): the
/// partition count in use, `None` without exchanges.
pub fn ensure_topics(
    admin: &AdminClient<QuietContext>,
    bootstrap: &str,
    exchanges: &[Repartition],
    mut partitions: RepartitionPartitions,
    timeout: Duration,
) -> Result<Option<u16>, KafkaError> {
    let mut in_use = None;
    for exchange in exchanges {
        let count = ensure_topic(admin, bootstrap, &exchange.topic, partitions, timeout)?;
        in_use = Some(count);
        partitions = RepartitionPartitions::Set(count);
    }
    Ok(in_use)
}

/// The partition count a worker asks `ensure_topic` for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepartitionPartitions {
    /// The spec says `repartition_partitions`: an existing topic must have as many.
    Set(u16),
    /// The spec's default: a new topic gets `count`, an existing one keeps its own
    /// (any count from 1 to the `key_groups`), which the worker then adopts: so a
    /// pipeline whose topic was made with another default (one partition per key
    /// group, before key-group ranges) runs on unchanged.
    Default { count: u16, key_groups: u16 },
}

impl RepartitionPartitions {
    /// What a new topic gets.
    pub fn count(self) -> u16 {
        match self {
            RepartitionPartitions::Set(count) | RepartitionPartitions::Default { count, .. } => {
                count
            }
        }
    }

    /// The count a worker uses with a topic of `found` partitions, if it may.
    pub fn in_use(self, found: usize) -> Option<u16> {
        let found = u16::try_from(found).ok()?;
        match self {
            _ if found == self.count() => Some(found),
            RepartitionPartitions::Default { key_groups, .. } => {
                (1..=key_groups).contains(&found).then_some(found)
            }
            RepartitionPartitions::Set(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Catches: a set count giving way to the topic (key groups would land where
    /// their owner does not read), or a default refusing a topic made with another
    /// count (a pipeline from before key-group ranges could not start), or adopting
    /// one with more partitions than key groups (an empty range).
    #[test]
    fn a_default_count_adopts_an_existing_topics_and_a_set_one_does_not() {
        let set = RepartitionPartitions::Set(8);
        assert_eq!(
            (set.in_use(8), set.in_use(128), set.in_use(3)),
            (Some(8), None, None)
        );
        let default = RepartitionPartitions::Default {
            count: 32,
            key_groups: 128,
        };
        assert_eq!(default.count(), 32);
        assert_eq!(
            (default.in_use(32), default.in_use(128), default.in_use(3)),
            (Some(32), Some(128), Some(3))
        );
        assert_eq!((default.in_use(129), default.in_use(0)), (None, None));
    }

    /// Catches: a partition read by two workers or by none (duplicates or losses), a
    /// worker reading a partition whose key groups it does not own, a mapping that
    /// disagrees with the in-process shuffle's key groups, or one that depends on
    /// anything but the key.
    #[test]
    fn every_partition_is_read_by_exactly_one_worker_for_every_n() {
        for (k, r) in [
            (1u16, 1u16),
            (7, 7),
            (32, 32),
            (128, 128),
            (128, 32),
            (100, 7),
        ] {
            let key_groups = KeyGroupRanges::new(k, r);
            for n in 1..=8u32 {
                let mut seen = BTreeSet::new();
                for i in 0..n {
                    let worker = Worker::new(i, n).expect("worker");
                    let mine = partitions_of(worker, key_groups);
                    assert!(mine.windows(2).all(|w| w[0] < w[1]), "sorted");
                    let share = assignment::share::<i32>(worker, &[], key_groups);
                    let owned: Vec<u16> = share.key_groups.iter().flat_map(|g| g.clone()).collect();
                    let read: Vec<u16> = mine
                        .iter()
                        .flat_map(|&p| key_groups.groups(p as u16))
                        .collect();
                    assert_eq!(read, owned, "K={k} R={r} {worker}");
                    for p in mine {
                        assert!((0..i32::from(r)).contains(&p));
                        assert!(seen.insert(p), "partition {p} read twice (N = {n})");
                    }
                }
                assert_eq!(seen.len(), usize::from(r), "N = {n}");
            }
        }
    }

    /// Catches: the event time of a record written before frames misread.
    #[test]
    fn an_event_time_header_of_a_record_before_frames_is_read() {
        for t in [0, -1, -2_999, i64::MIN] {
            assert_eq!(EventTime::decode(&t.to_be_bytes()), Some(t));
        }
        assert_eq!(EventTime::decode(b"1234567"), None);
    }

    #[test]
    fn a_key_goes_to_the_partition_of_its_key_group_and_its_owner_reads_it() {
        let one_each = KeyGroupRanges::one_per_group(32);
        let ranges = KeyGroupRanges::new(32, 5);
        for key in [&b"alpha"[..], b"", b"beta", b"the"] {
            let group = key_group(key, 32);
            assert_eq!(partition_of_key(key, one_each), i32::from(group));
            let p = partition_of_key(key, ranges);
            assert!(ranges.groups(p as u16).contains(&group), "{key:?}");
            let owners: Vec<u32> = (0..3)
                .filter(|&i| partitions_of(Worker::new(i, 3).expect("worker"), ranges).contains(&p))
                .collect();
            assert_eq!(owners.len(), 1, "{key:?}");
        }
        // A single worker would read every partition (it never has a topic, but the
        // mapping is total).
        let four = KeyGroupRanges::one_per_group(4);
        assert_eq!(partitions_of(Worker::SINGLE, four), vec![0, 1, 2, 3]);
    }
}
