//! `KafkaPosition`: where a Kafka source subtask is, as a checkpoint stores it and a
//! worker's restore, a rescale and the repartition purge read it.
//!
//! Invariants: the position `{"v": 1, "partitions": [{"topic": t, "partition": p,
//! "offset": o, ...}, ...]}` lists every partition the subtask was assigned with the
//! offset of the next record to read (see `source` for when it is exact), and in a
//! repartition topic how many records of the frame there were read; merged over the
//! subtasks of a source, a partition is listed once, and should two subtasks ever list
//! it, the larger position wins (its records reached the checkpoint).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde::{Deserialize, Serialize};

use crate::connector::error::ConnectorError;
use crate::connector::kafka::repartition_watermark::PartitionWatermarks;
use crate::record::SourcePosition;
use crate::record::snapshot::{self, SnapshotState};

/// One partition's next offset, as stored in checkpoints and committed to the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionPosition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The largest event time read before `offset` (`None`: no record yet, or a
    /// position written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timestamp: Option<i64>,
    /// A repartition partition of a windowed step: its writers' watermarks, as of the
    /// markers before `offset` (`repartition_watermark`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writers: Option<PartitionWatermarks>,
    /// A repartition partition read up to the middle of a frame (`repartition_frame`):
    /// how many of the records of the frame at `offset` were read (0: none, which is
    /// also every position written before frames).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frame_read: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A Kafka source subtask's position (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaPosition {
    pub partitions: Vec<PartitionPosition>,
}

/// Every partition's position over the positions of all subtasks of a source
/// (`KafkaPosition::merged_positions`).
pub type MergedPositions = BTreeMap<(String, i32), PartitionPosition>;

/// What a checkpoint's snapshots name a Kafka position as, in errors.
pub(crate) const POSITION: &str = "kafka source position";

impl SnapshotState for KafkaPosition {
    const VERSION: u32 = 1;
}

impl KafkaPosition {
    pub fn from_value(value: &SourcePosition) -> Result<Self, ConnectorError> {
        Ok(snapshot::decode(POSITION, value)?)
    }

    /// The position as stored in a checkpoint.
    pub fn to_value(&self) -> SourcePosition {
        // A struct of strings and integers always encodes.
        snapshot::encode(POSITION, self).unwrap_or(serde_json::Value::Null)
    }

    /// Every partition's next offset over the positions of all subtasks of a source. A
    /// partition is listed by the one subtask that read it; should two ever list it,
    /// the larger offset is the one whose records reached the checkpoint.
    pub fn merged(
        positions: &[&SourcePosition],
    ) -> Result<BTreeMap<(String, i32), i64>, ConnectorError> {
        Ok(Self::merged_positions(positions)?
            .into_iter()
            .map(|(key, p)| (key, p.offset))
            .collect())
    }

    /// `merged`, each partition's whole position (that of the larger offset, should two
    /// subtasks list the partition): its offset, largest timestamp and writers'
    /// watermarks.
    pub fn merged_positions(
        positions: &[&SourcePosition],
    ) -> Result<MergedPositions, ConnectorError> {
        let mut merged = MergedPositions::new();
        for value in positions {
            for p in Self::from_value(value)?.partitions {
                match merged.entry((p.topic.clone(), p.partition)) {
                    Entry::Vacant(e) => {
                        e.insert(p);
                    }
                    Entry::Occupied(mut e)
                        if (e.get().offset, e.get().frame_read) < (p.offset, p.frame_read) =>
                    {
                        e.insert(p);
                    }
                    Entry::Occupied(_) => {}
                }
            }
        }
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::kafka::repartition_watermark::WatermarkMarker;

    /// Catches: a position written before versions no longer restoring (the type denies
    /// unknown fields, so the version must be stripped before decoding), the merge over
    /// subtasks reading them wrong, or a newer weir's position misread.
    #[test]
    fn position_is_versioned() {
        let position = KafkaPosition {
            partitions: vec![
                PartitionPosition {
                    topic: "in".into(),
                    partition: 0,
                    offset: 42,
                    max_timestamp: None,
                    writers: None,
                    frame_read: 0,
                },
                PartitionPosition {
                    topic: "in".into(),
                    partition: 1,
                    offset: 7,
                    max_timestamp: None,
                    writers: None,
                    frame_read: 0,
                },
            ],
        };
        let old = serde_json::json!({"partitions": [
            {"topic": "in", "partition": 0, "offset": 42},
            {"topic": "in", "partition": 1, "offset": 7},
        ]});
        snapshot::assert_versioned(POSITION, old.clone(), &position);
        let new = position.to_value();
        let merged = KafkaPosition::merged(&[&old, &new]).expect("merge old and new");
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[&("in".to_owned(), 0)], 42);
        let newer = serde_json::json!({"v": 2, "partitions": []});
        assert_eq!(
            KafkaPosition::from_value(&newer)
                .expect_err("newer")
                .to_string(),
            "checkpoint written by a newer weir: kafka source position version 2, this weir reads up to 1"
        );
    }
    /// Catches: a partition's event time (its largest timestamp, or a repartition
    /// partition's writers' watermarks) lost on the way through a checkpoint, or taken
    /// from the subtask with the older offset (it must be that of the records and
    /// markers before the offset the partition resumes from).
    #[test]
    fn a_partition_position_keeps_its_event_time_with_its_offset() {
        use crate::connector::kafka::repartition_watermark::RepartitionWriters;
        use crate::record::message::Watermark;
        let set = RepartitionWriters {
            generation: 3,
            count: 2,
        };
        let at = |offset: i64, w: i64| {
            let mut writers = PartitionWatermarks::new(set);
            for writer in 0..2 {
                writers.observe(WatermarkMarker {
                    generation: 3,
                    writer,
                    watermark: Watermark(w),
                });
            }
            KafkaPosition {
                partitions: vec![PartitionPosition {
                    topic: "r".into(),
                    partition: 5,
                    offset,
                    max_timestamp: Some(w + 7),
                    writers: Some(writers),
                    frame_read: 0,
                }],
            }
            .to_value()
        };
        let (older, newer) = (at(10, 100), at(20, 200));
        for positions in [[&older, &newer], [&newer, &older]] {
            let merged = KafkaPosition::merged_positions(&positions).expect("merge");
            let p = &merged[&("r".to_owned(), 5)];
            assert_eq!(p.offset, 20);
            assert_eq!(p.max_timestamp, Some(207));
            assert_eq!(
                p.writers.as_ref().map(PartitionWatermarks::watermark),
                Some(Watermark(200))
            );
        }
        // A position without either is written as before, and one written before
        // either was kept restores with neither.
        let plain = KafkaPosition {
            partitions: vec![PartitionPosition {
                topic: "in".into(),
                partition: 0,
                offset: 1,
                max_timestamp: None,
                writers: None,
                frame_read: 0,
            }],
        };
        let text = plain.to_value().to_string();
        assert!(
            !text.contains("writers")
                && !text.contains("max_timestamp")
                && !text.contains("frame_read"),
            "{text}"
        );
        let old = serde_json::json!({"v": 1, "partitions": [{"topic": "in", "partition": 0, "offset": 1}]});
        assert_eq!(
            KafkaPosition::from_value(&old).expect("old position"),
            plain
        );
    }

    /// Catches: of two subtasks' positions at one frame's offset, the one that read
    /// fewer of its records restored (those after it read twice), or the frame count
    /// lost through a checkpoint.
    #[test]
    fn the_position_further_into_a_frame_wins_the_merge() {
        let at = |offset: i64, frame_read: u32| {
            KafkaPosition {
                partitions: vec![PartitionPosition {
                    topic: "r".into(),
                    partition: 1,
                    offset,
                    max_timestamp: None,
                    writers: None,
                    frame_read,
                }],
            }
            .to_value()
        };
        let cases = [((9, 40), (9, 3), (9, 40)), ((9, 40), (10, 0), (10, 0))];
        for (a, b, wins) in cases {
            let (a, b) = (at(a.0, a.1), at(b.0, b.1));
            for positions in [[&a, &b], [&b, &a]] {
                let merged = KafkaPosition::merged_positions(&positions).expect("merge");
                let p = &merged[&("r".to_owned(), 1)];
                assert_eq!((p.offset, p.frame_read), wins);
            }
        }
    }
}
