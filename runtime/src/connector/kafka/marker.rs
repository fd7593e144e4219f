//! The progress marker: which checkpoint's transaction was committed last.
//!
//! Invariants:
//! - Transaction T(n) carries the marker of checkpoint n in its own offset commit
//!   (`send_offsets_to_transaction`, TxnOffsetCommit), so the marker becomes visible
//!   exactly when, and only if, T(n) commits: no separate write can disagree with it.
//! - With Kafka sources (in the marker group) the committed offsets are the sources'
//!   positions at barrier n, each with metadata `weir:<pipeline>:<unit>:checkpoint=<n>`;
//!   standard lag tools (`kafka-consumer-groups --describe`) then show the pipeline's
//!   real progress. Without Kafka sources the marker is offset n on partition 0 of the
//!   progress topic `{prefix}weir-progress`, with the same metadata (nothing is ever
//!   produced to that topic: it only gives the offset commit a partition to name).
//! - Reading the marker is one OffsetFetch. Markers of other pipelines or units, or
//!   offsets committed by other tools, are ignored: the last committed checkpoint is the
//!   largest n found among ours, `CheckpointId::NONE` if none.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::checkpoint::CheckpointId;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::kafka::client::{QuietContext, retry_read};
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::source::KafkaPosition;

/// Name of the progress topic under a transactional prefix.
pub fn progress_topic(prefix: &str) -> String {
    format!("{prefix}weir-progress")
}

/// Where a pipeline's marker lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerTarget {
    pub pipeline: String,
    pub unit: String,
    /// The consumer group the offsets are committed to.
    pub group: String,
    /// Operator ids (`source-<s>`) of the Kafka sources reading in `group`, with their
    /// topic partitions.
    pub sources: Vec<String>,
    pub source_partitions: Vec<(String, i32)>,
    /// Set when there is no Kafka source in `group`.
    pub progress_topic: Option<String>,
}

impl MarkerTarget {
    /// The metadata string of checkpoint `id`.
    pub fn text(&self, id: CheckpointId) -> String {
        format!("weir:{}:{}:checkpoint={}", self.pipeline, self.unit, id.0)
    }

    /// The checkpoint id in `text`, if it is one of this pipeline and unit's markers.
    pub fn parse(&self, text: &str) -> Option<CheckpointId> {
        let prefix = format!("weir:{}:{}:checkpoint=", self.pipeline, self.unit);
        text.strip_prefix(&prefix)?.parse().ok().map(CheckpointId)
    }

    /// The offsets to commit inside T(`metadata.id`).
    pub fn offsets(&self, metadata: &CheckpointMetadata) -> Result<TopicPartitionList, KafkaError> {
        let id = metadata.id;
        let text = self.text(id);
        let mut tpl = TopicPartitionList::new();
        let bad = |reason: String| KafkaError::Client {
            what: format!("cannot build the offsets of checkpoint {id}"),
            reason,
        };
        match &self.progress_topic {
            Some(topic) => {
                let offset =
                    i64::try_from(id.0).map_err(|_| bad("checkpoint id too large".into()))?;
                tpl.add_partition_offset(topic, 0, Offset::Offset(offset))
                    .map_err(|e| bad(e.to_string()))?;
                set_metadata(&mut tpl, topic, 0, &text);
            }
            None => {
                let mut positions: BTreeMap<(String, i32), i64> = BTreeMap::new();
                for source in &self.sources {
                    for snapshot in metadata.snapshots_of(source) {
                        let position = KafkaPosition::from_value(&snapshot.state)
                            .map_err(|e| bad(e.to_string()))?;
                        for p in position.partitions {
                            positions.insert((p.topic, p.partition), p.offset);
                        }
                    }
                }
                for ((topic, partition), offset) in positions {
                    tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))
                        .map_err(|e| bad(e.to_string()))?;
                    set_metadata(&mut tpl, &topic, partition, &text);
                }
            }
        }
        if tpl.count() == 0 {
            return Err(bad("no source partition to carry the marker".into()));
        }
        Ok(tpl)
    }

    /// The partitions whose committed offsets carry the marker.
    fn partitions(&self) -> Vec<(String, i32)> {
        match &self.progress_topic {
            Some(topic) => vec![(topic.clone(), 0)],
            None => self.source_partitions.clone(),
        }
    }

    /// The last committed checkpoint, read with one OffsetFetch from `consumer` (whose
    /// `group.id` is `self.group`).
    pub fn read(
        &self,
        consumer: &BaseConsumer<QuietContext>,
        timeout: Duration,
    ) -> Result<CheckpointId, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in self.partitions() {
            tpl.add_partition(&t, p);
        }
        let committed = retry_read(timeout, || {
            consumer.committed_offsets(tpl.clone(), Duration::from_secs(5))
        })
        .map_err(|e| {
            KafkaError::client(
                format!("cannot read the committed offsets of group {}", self.group),
                &e,
            )
        })?;
        Ok(committed
            .elements()
            .iter()
            .filter(|e| matches!(e.offset(), Offset::Offset(_)))
            .filter_map(|e| self.parse(e.metadata()))
            .max()
            .unwrap_or(CheckpointId::NONE))
    }
}

fn set_metadata(tpl: &mut TopicPartitionList, topic: &str, partition: i32, text: &str) {
    if let Some(mut e) = tpl.find_partition(topic, partition) {
        e.set_metadata(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_ignore_strangers() {
        let target = MarkerTarget {
            pipeline: "wc".into(),
            unit: "0".into(),
            group: "weir.wc".into(),
            sources: vec![],
            source_partitions: vec![],
            progress_topic: Some(progress_topic("weir.")),
        };
        assert_eq!(target.text(CheckpointId(17)), "weir:wc:0:checkpoint=17");
        assert_eq!(
            target.parse("weir:wc:0:checkpoint=17"),
            Some(CheckpointId(17))
        );
        assert_eq!(target.parse("weir:wc2:0:checkpoint=17"), None);
        assert_eq!(target.parse("weir:wc:1:checkpoint=17"), None);
        assert_eq!(target.parse(""), None);
        assert_eq!(progress_topic("weir."), "weir.weir-progress");
    }
}
