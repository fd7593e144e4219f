//! Purging repartition topics: after each checkpoint, a worker deletes (Kafka's
//! DeleteRecords) the records of its repartition partitions (of every keyed step's
//! topic, in one request) that none of its retained
//! checkpoints can read again, so the topic stays about one checkpoint interval of
//! input long instead of growing with the input (Kafka Streams purges its repartition
//! topics the same way).
//!
//! Invariants:
//! - Only the reader purges, and only its own partitions: partition `r` is read by the
//!   owner of key-group range `r` alone (`repartition::partitions_of`), and its
//!   positions are in that worker's checkpoints only.
//! - Never past what a restore could need: a partition's purge offset is the smallest
//!   next offset over every retained checkpoint of this worker's layout
//!   (`purge_offsets`). A recovery restores one of them (the last committed one is
//!   always retained, `retention::MIN_RETAINED`), `--from-checkpoint` can name only
//!   those, and a rescale reads each old owner's last committed checkpoint, which that
//!   owner retained while it purged. Checkpoints of another layout left in the same
//!   location (an older generation with the same worker count) are ignored: no start
//!   restores them (`cluster::layout::choose`). A partition that some retained
//!   checkpoint of the layout does not list is left alone.
//! - Exactly-once reads are unaffected: a `read_committed` reader's position never
//!   passes the partition's last stable offset, so nothing at or after it (the records
//!   of a transaction still open among them) is ever deleted.
//! - Off the checkpoint path and best effort: the coordinator hands the offsets to the
//!   purger's thread and goes on; the thread sends one DeleteRecords for the newest
//!   request (older pending ones are dropped), for the partitions that advanced since
//!   its last success. A failure (the principal lacks the Delete ACL, the broker is
//!   down) is logged and retried after the next checkpoint; it never fails the
//!   pipeline: the topic then just keeps what it holds.
//! - A restore whose repartition offset was deleted anyway (a retention someone set on
//!   the topic) is refused by the source (`KafkaError::RepartitionRecordsDeleted`),
//!   never skipped.

use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::{Offset, TopicPartitionList};

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::cluster::{LayoutStamp, Worker};
use crate::connector::kafka::client::{self, QuietContext};
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::position::KafkaPosition;
use crate::connector::kafka::repartition::Repartition;
use crate::record::ids;

/// The offset below which each of `topic`'s partitions may be purged, given the
/// retained checkpoints `kept` of worker `worker` running in `layout`: for every
/// partition that each of `kept`'s checkpoints of that layout lists in the positions
/// of source `source`, the smallest next offset they list (see the module
/// invariants). Empty when no retained checkpoint is of the layout.
pub fn purge_offsets(
    kept: &[CheckpointMetadata],
    source: &str,
    topic: &str,
    worker: Worker,
    layout: &LayoutStamp,
) -> BTreeMap<i32, i64> {
    let mut smallest: Option<BTreeMap<i32, i64>> = None;
    for metadata in kept {
        if metadata.layout_of(worker).layout() != layout.layout() {
            continue;
        }
        let positions: Vec<_> = metadata
            .snapshots_of(source)
            .into_iter()
            .map(|snapshot| &snapshot.state)
            .collect();
        // A position that does not parse purges nothing (it would not restore either;
        // the restore says why).
        let Ok(merged) = KafkaPosition::merged(&positions) else {
            return BTreeMap::new();
        };
        let listed: BTreeMap<i32, i64> = merged
            .into_iter()
            .filter(|((t, _), _)| t == topic)
            .map(|((_, partition), offset)| (partition, offset))
            .collect();
        smallest = Some(match smallest {
            None => listed,
            // Only partitions every checkpoint lists, at the smallest offset.
            Some(before) => before
                .into_iter()
                .filter_map(|(p, offset)| listed.get(&p).map(|&o| (p, offset.min(o))))
                .collect(),
        });
    }
    smallest.unwrap_or_default()
}

/// Purge offsets of several topics: (topic, partition) -> offset.
type TopicOffsets = BTreeMap<(String, i32), i64>;

/// A worker's purger of its repartition partitions: a thread of its own with an admin
/// client, fed after each checkpoint (see the module invariants).
pub struct RepartitionPurger {
    /// Each exchange's repartition source operator id (whose positions say what was
    /// read) and topic.
    exchanges: Vec<(String, String)>,
    worker: Worker,
    layout: LayoutStamp,
    requests: Option<Sender<TopicOffsets>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RepartitionPurger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepartitionPurger")
            .field("exchanges", &self.exchanges)
            .field("worker", &self.worker)
            .finish()
    }
}

impl RepartitionPurger {
    /// Starts the purger of `exchanges`' topics for worker `worker` of pipeline
    /// `pipeline`, running in `layout`, with `admin` (bounded by `timeout`).
    pub fn start(
        pipeline: &str,
        worker: Worker,
        layout: LayoutStamp,
        exchanges: &[Repartition],
        admin: AdminClient<QuietContext>,
        timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let (requests, pending) = crossbeam_channel::unbounded();
        let purge = Purge {
            admin,
            timeout,
            purged: BTreeMap::new(),
            failing: false,
        };
        let thread = std::thread::Builder::new()
            .name(format!("{pipeline}-repartition-purge"))
            .spawn(move || purge.run(&pending))
            .map_err(|e| KafkaError::Client {
                what: format!("cannot start the purger of the repartition topics of {pipeline}"),
                reason: e.to_string(),
            })?;
        Ok(RepartitionPurger {
            exchanges: exchanges
                .iter()
                .map(|exchange| (ids::source_id(exchange.source), exchange.topic.clone()))
                .collect(),
            worker,
            layout,
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// Asks for the purge that the retained checkpoints `kept` allow; returns at once.
    pub fn retained(&self, kept: &[CheckpointMetadata]) {
        let mut offsets = TopicOffsets::new();
        for (source, topic) in &self.exchanges {
            let of_topic = purge_offsets(kept, source, topic, self.worker, &self.layout);
            offsets.extend(of_topic.into_iter().map(|(p, o)| ((topic.clone(), p), o)));
        }
        if let (false, Some(requests)) = (offsets.is_empty(), &self.requests) {
            // The thread ends only when this sender is dropped.
            let _ = requests.send(offsets);
        }
    }
}

impl Drop for RepartitionPurger {
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            // A DeleteRecords in flight ends within its timeout.
            let _ = thread.join();
        }
    }
}

/// The purger thread's side.
struct Purge {
    admin: AdminClient<QuietContext>,
    timeout: Duration,
    /// Each partition's offset as of the last successful purge.
    purged: TopicOffsets,
    /// The last attempt failed (its failure was logged at warn; the next are not).
    failing: bool,
}

impl Purge {
    fn run(mut self, pending: &Receiver<TopicOffsets>) {
        while let Ok(mut offsets) = pending.recv() {
            while let Ok(newer) = pending.try_recv() {
                offsets = newer;
            }
            offsets.retain(|p, offset| self.purged.get(p).is_none_or(|done| *offset > *done));
            if !offsets.is_empty() {
                self.purge(&offsets);
            }
        }
    }

    /// One DeleteRecords below `offsets`.
    fn purge(&mut self, offsets: &TopicOffsets) {
        let mut list = TopicPartitionList::new();
        for ((topic, partition), &offset) in offsets {
            // An offset is never negative here: it came from a reader's position.
            let _ = list.add_partition_offset(topic, *partition, Offset::Offset(offset));
        }
        let options = AdminOptions::new()
            .request_timeout(Some(self.timeout))
            .operation_timeout(Some(self.timeout));
        let result = client::block_on(self.admin.delete_records(&list, &options), self.timeout)
            .unwrap_or_else(|| Err(rdkafka::error::KafkaError::Canceled));
        let failure = match result {
            Err(e) => Some(e.to_string()),
            Ok(done) => {
                let mut failures = Vec::new();
                for element in done.elements() {
                    let key = (element.topic().to_owned(), element.partition());
                    match (element.error(), offsets.get(&key)) {
                        (Ok(()), Some(&offset)) => {
                            self.purged.insert(key, offset);
                        }
                        (Ok(()), None) => {}
                        (Err(e), _) => {
                            failures.push(format!("{} partition {}: {e}", key.0, key.1));
                        }
                    }
                }
                (!failures.is_empty()).then(|| failures.join("; "))
            }
        };
        match failure {
            None => {
                self.failing = false;
                tracing::debug!(?offsets, "repartition topics purged");
            }
            Some(reason) if !self.failing => {
                self.failing = true;
                tracing::warn!(%reason,
                    "cannot purge the repartition topics of what this worker read (DeleteRecords; does the principal have the Delete ACL on them?): they keep those records until a later purge succeeds");
            }
            Some(reason) => {
                tracing::debug!(%reason, "repartition topic purge failed again");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::connector::kafka::client::Endpoint;
    use crate::connector::kafka::position::PartitionPosition;
    use crate::record::OperatorSnapshot;

    const SOURCE: &str = "source-1";
    const TOPIC: &str = "p-count-repartition";

    fn worker() -> Worker {
        Worker::new(0, 2).expect("worker")
    }

    /// A checkpoint of `layout` whose repartition source's subtasks list `subtasks`
    /// (each a list of (topic, partition, next offset)).
    fn checkpoint(
        id: u64,
        layout: Option<LayoutStamp>,
        subtasks: &[&[(&str, i32, i64)]],
    ) -> CheckpointMetadata {
        let mut tasks = BTreeMap::new();
        for (i, partitions) in subtasks.iter().enumerate() {
            let position = KafkaPosition {
                partitions: partitions
                    .iter()
                    .map(|&(topic, partition, offset)| PartitionPosition {
                        topic: topic.to_owned(),
                        partition,
                        offset,
                        max_timestamp: None,
                        writers: None,
                        frame_read: 0,
                    })
                    .collect(),
            };
            tasks.insert(
                format!("{SOURCE}.{i}"),
                BTreeMap::from([(
                    SOURCE.to_owned(),
                    OperatorSnapshot::new(position.to_value()),
                )]),
            );
        }
        CheckpointMetadata {
            parallelism: subtasks.len(),
            max_parallelism: 4,
            layout,
            tasks,
            ..CheckpointMetadata::empty_for_test("p", id)
        }
    }

    fn generation(generation: u64) -> LayoutStamp {
        LayoutStamp {
            generation,
            ..LayoutStamp::first(2)
        }
    }

    /// Catches: a purge that cannot reach the broker (or is refused by it) failing,
    /// blocking or panicking the worker instead of giving up until the next request;
    /// or recording the partitions as purged.
    #[test]
    fn a_failed_purge_is_given_up_until_the_next_checkpoint_and_never_fails_the_worker() {
        let timeout = Duration::from_millis(300);
        let endpoint = Endpoint::plaintext("127.0.0.1:9");
        let mut purge = Purge {
            admin: client::admin(&endpoint, timeout).expect("admin"),
            timeout,
            purged: BTreeMap::new(),
            failing: false,
        };
        purge.purge(&BTreeMap::from([((TOPIC.to_owned(), 0), 10)]));
        assert!(purge.failing);
        assert!(purge.purged.is_empty(), "nothing was purged");

        let exchange = Repartition {
            step: 1,
            stage: 1,
            step_id: "count".into(),
            topic: TOPIC.into(),
            key_groups: crate::cluster::KeyGroupRanges::one_per_group(4),
            source: 1,
        };
        let admin = client::admin(&endpoint, timeout).expect("admin");
        let purger =
            RepartitionPurger::start("p", worker(), generation(1), &[exchange], admin, timeout)
                .expect("the purger starts without a broker");
        let kept = [checkpoint(3, Some(generation(1)), &[&[(TOPIC, 0, 10)]])];
        let asked = std::time::Instant::now();
        purger.retained(&kept);
        purger.retained(&kept);
        assert!(asked.elapsed() < timeout, "retained returns at once");
        drop(purger);
    }

    /// Catches: purging to the newest checkpoint's offsets (an older retained one,
    /// restored by `--from-checkpoint` or by recovery, would find its records gone), or
    /// to an offset only one subtask's position gives.
    #[test]
    fn the_purge_offset_is_the_smallest_over_the_retained_checkpoints() {
        let kept = [
            checkpoint(
                3,
                Some(generation(1)),
                &[&[(TOPIC, 0, 10), (TOPIC, 1, 7)], &[(TOPIC, 2, 0)]],
            ),
            checkpoint(
                4,
                Some(generation(1)),
                &[&[(TOPIC, 0, 25), (TOPIC, 1, 30)], &[(TOPIC, 2, 4)]],
            ),
        ];
        assert_eq!(
            purge_offsets(&kept, SOURCE, TOPIC, worker(), &generation(1)),
            BTreeMap::from([(0, 10), (1, 7), (2, 0)])
        );
    }

    /// Catches: purging by a stale checkpoint of another generation left in the same
    /// location (its partitions may now be another worker's), by another topic's or
    /// another source's positions, or a partition some retained checkpoint does not
    /// list.
    #[test]
    fn only_this_layouts_checkpoints_and_partitions_each_of_them_lists_count() {
        let kept = [
            // Generation 0, same worker count: stale, restored by no start.
            checkpoint(9, Some(generation(0)), &[&[(TOPIC, 0, 1), (TOPIC, 3, 1)]]),
            checkpoint(
                2,
                Some(generation(1)),
                &[&[(TOPIC, 0, 50), ("input", 0, 5)]],
            ),
            checkpoint(3, Some(generation(1)), &[&[(TOPIC, 0, 60), (TOPIC, 1, 8)]]),
        ];
        assert_eq!(
            purge_offsets(&kept, SOURCE, TOPIC, worker(), &generation(1)),
            BTreeMap::from([(0, 50)])
        );
        assert!(purge_offsets(&kept, "source-0", TOPIC, worker(), &generation(1)).is_empty());
        assert!(purge_offsets(&kept, SOURCE, TOPIC, worker(), &generation(2)).is_empty());
        // A checkpoint written before layout stamps reads as its location's first.
        let unstamped = [checkpoint(1, None, &[&[(TOPIC, 0, 5)]])];
        assert_eq!(
            purge_offsets(&unstamped, SOURCE, TOPIC, worker(), &generation(0)),
            BTreeMap::from([(0, 5)])
        );
        assert!(purge_offsets(&[], SOURCE, TOPIC, worker(), &generation(0)).is_empty());
    }
}
