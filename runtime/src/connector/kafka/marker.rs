//! The progress marker: which checkpoint's transaction was committed last, and by whom.
//!
//! Invariants:
//! - Transaction T(n) carries the marker of checkpoint n twice, both inside T(n), so both
//!   become visible exactly when, and only if, T(n) commits:
//!   1. a record on partition 0 of the pipeline's own progress topic
//!      `{prefix}{pipeline}.progress` (compacted: the latest marker is never deleted,
//!      however long the pipeline is stopped), key `weir:<pipeline>:<unit>`, value the
//!      marker text `weir:<pipeline>:<unit>:checkpoint=<n>`;
//!   2. the transaction's offset commit (`send_offsets_to_transaction`) in the marker
//!      group: the Kafka sources' positions at barrier n (standard lag tools then show
//!      the real progress), or, without Kafka sources, an offset on the progress topic;
//!      each offset carries the marker text as its metadata.
//! - How the two agree: they are written by the same transactions, so when both are
//!   there they name the same checkpoint. The group's copy can be lost or rolled back
//!   (offsets expire after `offsets.retention.minutes` once the pipeline stops, a tool
//!   resets or deletes them, another pipeline overwrites them); the topic's copy
//!   survives all of those. So the topic's copy counts, and the group's is the
//!   fallback for a progress topic that was deleted. `--from-scratch` commits a marker
//!   of checkpoint 0 to the topic (nothing committed yet), since the new incarnation
//!   numbers its checkpoints from 1 again.
//! - A marker names its pipeline, unit and layout generation:
//!   `weir:<pipeline>:<unit>:checkpoint=<n>[:generation=<g>]` (the generation is left
//!   out when 0, so a pipeline that never rescaled writes what it always wrote). A
//!   worker counts as its own only a marker of its pipeline, unit and generation: the
//!   same unit in another generation (3 -> 2 -> 3 reuses `0-of-3`) is another worker's
//!   history. A weir marker of another pipeline in the group means the group is
//!   shared: refused at start, since the other pipeline's commits overwrite ours.
//!   Offsets without a weir marker (another tool's) are ignored.
//! - A rescale hands a worker over with one more record on its progress topic, written
//!   inside a transaction of the worker's own transactional id after fencing it (see
//!   `takeover`): its last committed marker with `:rescaled-to=<M>` appended. It is
//!   the worker's newest record from then on, so the worker, started again, learns it
//!   was handed over (and to how many workers) instead of restoring its own
//!   checkpoint, and the other new workers read its last committed checkpoint there.
//! - "No marker found" is never read as "nothing committed" while checkpoint storage
//!   holds complete checkpoints: recovery refuses to guess and says what it found
//!   (`resume_point`). The only topic that holds the marker record is the pipeline's
//!   own, so reading it with read_committed after fencing our producers never stalls
//!   behind another pipeline's open transaction.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::kafka::client::{
    Endpoint, QuietContext, client_config, committed_offsets, retry_read,
};
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::error_class::{ErrorClass, classify};
use crate::connector::kafka::position::KafkaPosition;
use crate::record::CheckpointId;

/// Topic configuration of a progress topic: compaction keeps the latest marker forever.
pub const PROGRESS_TOPIC_CONFIG: [(&str, &str); 2] =
    [("cleanup.policy", "compact"), ("segment.ms", "3600000")];

/// Markers read back from the tail of the progress topic at a time, then twice as many.
const TOPIC_TAIL: i64 = 64;

/// A marker text, parsed:
/// `weir:<pipeline>:<unit>:checkpoint=<n>[:generation=<g>][:rescaled-to=<M>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub pipeline: String,
    pub unit: String,
    pub checkpoint: CheckpointId,
    /// The layout generation of the worker that wrote it (0 when the text names none).
    pub generation: u64,
    /// A hand-over record: the worker was taken over by a rescale to this many workers,
    /// `checkpoint` being its last committed one.
    pub rescaled_to: Option<u32>,
}

impl Marker {
    pub fn parse(text: &str) -> Option<Marker> {
        let rest = text.strip_prefix("weir:")?;
        let (pipeline, rest) = rest.split_once(':')?;
        let (unit, rest) = rest.split_once(":checkpoint=")?;
        if pipeline.is_empty() || unit.is_empty() {
            return None;
        }
        let mut fields = rest.split(':');
        let checkpoint = CheckpointId(fields.next()?.parse().ok()?);
        let mut generation = 0;
        let mut rescaled_to = None;
        let mut field = fields.next();
        if let Some(g) = field.and_then(|f| f.strip_prefix("generation=")) {
            generation = g.parse().ok()?;
            field = fields.next();
        }
        if let Some(m) = field.and_then(|f| f.strip_prefix("rescaled-to=")) {
            rescaled_to = Some(m.parse().ok()?);
            field = fields.next();
        }
        if field.is_some() {
            return None;
        }
        Some(Marker {
            pipeline: pipeline.to_owned(),
            unit: unit.to_owned(),
            checkpoint,
            generation,
            rescaled_to,
        })
    }
}

/// What recovery found of a pipeline's markers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoundMarkers {
    /// Our newest marker in the group's committed offsets.
    pub group: Option<CheckpointId>,
    /// Our newest marker record in the progress topic.
    pub topic: Option<CheckpointId>,
    /// The pipeline whose weir marker sits in the group instead of ours, if any.
    pub foreign: Option<String>,
    /// The progress topic's newest record is a hand-over: a rescale to this many
    /// workers took this worker over (`topic` is its last committed checkpoint).
    pub rescaled_to: Option<u32>,
}

impl FoundMarkers {
    /// The last committed checkpoint: the topic's copy, else the group's (see the module
    /// docs). `Some(NONE)`: the marker says nothing was committed since a start over.
    pub fn last_committed(&self) -> Option<CheckpointId> {
        self.topic.or(self.group)
    }
}

/// Where a pipeline's marker lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerTarget {
    pub pipeline: String,
    pub unit: String,
    /// The layout generation of the worker (see the module docs).
    pub generation: u64,
    /// The consumer group the offsets are committed to.
    pub group: String,
    /// Operator ids (`source-<s>`) of the Kafka sources reading in `group`, with their
    /// topic partitions; empty: the offset goes to the progress topic.
    pub sources: Vec<String>,
    pub source_partitions: Vec<(String, i32)>,
    /// The pipeline's own progress topic (one partition).
    pub progress_topic: String,
}

impl MarkerTarget {
    /// The marker text of checkpoint `id`.
    pub fn text(&self, id: CheckpointId) -> String {
        let text = format!("weir:{}:{}:checkpoint={}", self.pipeline, self.unit, id.0);
        match self.generation {
            0 => text,
            g => format!("{text}:generation={g}"),
        }
    }

    /// The hand-over record of a worker whose last committed checkpoint is `id`,
    /// taken over by a rescale to `workers` workers (see the module docs).
    pub fn rescaled_text(&self, id: CheckpointId, workers: u32) -> String {
        format!("{}:rescaled-to={workers}", self.text(id))
    }

    /// The key of the marker records in the progress topic.
    pub fn record_key(&self) -> String {
        format!("weir:{}:{}", self.pipeline, self.unit)
    }

    /// `text` parsed, if it is a marker of this pipeline, unit and generation.
    pub fn parse(&self, text: &str) -> Option<Marker> {
        Marker::parse(text).filter(|m| self.is_own(m))
    }

    /// Whether `marker` is this pipeline, unit and generation's.
    fn is_own(&self, marker: &Marker) -> bool {
        marker.pipeline == self.pipeline
            && marker.unit == self.unit
            && marker.generation == self.generation
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
        let mut positions: BTreeMap<(String, i32), i64> = BTreeMap::new();
        if self.sources.is_empty() {
            // Only a carrier for the metadata: the offset itself means nothing.
            let offset = i64::try_from(id.0).map_err(|_| bad("checkpoint id too large".into()))?;
            positions.insert((self.progress_topic.clone(), 0), offset);
        }
        for source in &self.sources {
            for snapshot in metadata.snapshots_of(source) {
                let position =
                    KafkaPosition::from_value(&snapshot.state).map_err(|e| bad(e.to_string()))?;
                for p in position.partitions {
                    positions.insert((p.topic, p.partition), p.offset);
                }
            }
        }
        for ((topic, partition), offset) in positions {
            tpl.add_partition_offset(&topic, partition, Offset::Offset(offset))
                .map_err(|e| bad(e.to_string()))?;
            if let Some(mut e) = tpl.find_partition(&topic, partition) {
                e.set_metadata(&text);
            }
        }
        if tpl.count() == 0 {
            return Err(bad("no source partition to carry the marker".into()));
        }
        Ok(tpl)
    }

    /// The partitions whose committed offsets carry the marker.
    fn partitions(&self) -> Vec<(String, i32)> {
        if self.sources.is_empty() {
            vec![(self.progress_topic.clone(), 0)]
        } else {
            self.source_partitions.clone()
        }
    }

    /// The group's copy of the marker, and any other pipeline's marker in the group:
    /// one OffsetFetch from `consumer` (whose `group.id` is `self.group`).
    pub fn read_group(
        &self,
        consumer: &BaseConsumer<QuietContext>,
        timeout: Duration,
    ) -> Result<(Option<CheckpointId>, Option<String>), KafkaError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in self.partitions() {
            tpl.add_partition(&t, p);
        }
        let committed = committed_offsets(consumer, &tpl, timeout).map_err(|e| {
            KafkaError::client(
                format!("cannot read the committed offsets of group {}", self.group),
                &e,
            )
        })?;
        let mut ours = None;
        let mut foreign = None;
        for e in committed.elements() {
            if !matches!(e.offset(), Offset::Offset(_)) {
                continue;
            }
            match Marker::parse(e.metadata()) {
                Some(m) if self.is_own(&m) && m.rescaled_to.is_none() => {
                    ours = ours.max(Some(m.checkpoint));
                }
                Some(m) if m.pipeline != self.pipeline => foreign = Some(m.pipeline),
                _ => {}
            }
        }
        Ok((ours, foreign))
    }

    /// The topic's copy of the marker: the last committed marker record (or hand-over
    /// record) of this unit and generation on partition 0 of the progress topic, read
    /// with read_committed from the tail backwards (a window of `TOPIC_TAIL` offsets,
    /// doubled until one or the start is found). Call after the unit's producers were
    /// initialised: none of its transactions is open, so the last stable offset is the
    /// log end. Retriable errors (a broker failing over: its leader moving, a lost
    /// connection) are waited out until `timeout`, as librdkafka reconnects on its own.
    pub fn read_topic(
        &self,
        endpoint: &Endpoint,
        timeout: Duration,
    ) -> Result<Option<Marker>, KafkaError> {
        let topic = &self.progress_topic;
        let what = || format!("cannot read the progress topic {topic}");
        let consumer: BaseConsumer<QuietContext> = client_config(endpoint, timeout)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .create_with_context(QuietContext)
            .map_err(|e| KafkaError::client(what(), &e))?;
        let deadline = Instant::now() + timeout;
        let (low, high) = retry_read(timeout, || {
            let left = deadline.saturating_duration_since(Instant::now());
            consumer.fetch_watermarks(topic, 0, left.max(Duration::from_millis(1)))
        })
        .map_err(|e| KafkaError::client(what(), &e))?;
        let mut window = TOPIC_TAIL;
        let mut start = high;
        while start > low {
            start = (high - window).max(low);
            if let Some(found) = self.read_from(&consumer, start, high, deadline)? {
                return Ok(Some(found));
            }
            window = window.saturating_mul(2);
        }
        Ok(None)
    }

    /// The newest (last written) marker in `[start, end)` of the progress topic.
    fn read_from(
        &self,
        consumer: &BaseConsumer<QuietContext>,
        start: i64,
        end: i64,
        deadline: Instant,
    ) -> Result<Option<Marker>, KafkaError> {
        let topic = &self.progress_topic;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(start))
            .and_then(|()| consumer.assign(&tpl))
            .map_err(|e| {
                KafkaError::client(format!("cannot read the progress topic {topic}"), &e)
            })?;
        let mut newest = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(KafkaError::Client {
                    what: format!("cannot read the progress topic {topic}"),
                    reason: format!("offsets {start}..{end} not read in time"),
                });
            }
            match consumer.poll(left.min(Duration::from_millis(100))) {
                None => {}
                Some(Ok(m)) => {
                    let text = m.payload().and_then(|p| std::str::from_utf8(p).ok());
                    // Newest by offset, not the largest id: after `--from-scratch` the
                    // ids start again from 1 below the old incarnation's markers.
                    if let Some(marker) = text.and_then(|t| self.parse(t)) {
                        newest = Some(marker);
                    }
                    if m.offset() + 1 >= end {
                        return Ok(newest);
                    }
                }
                // At the last stable offset: aborted records and transaction markers
                // below `end` carry no record.
                Some(Err(RdKafkaError::PartitionEOF(_))) => return Ok(newest),
                Some(Err(e)) if classify(&e) == ErrorClass::Retriable => {
                    tracing::debug!(error = %e, "kafka: reading the progress topic: a retriable error, reading on");
                }
                Some(Err(e)) => {
                    return Err(KafkaError::client(
                        format!("cannot read the progress topic {topic}"),
                        &e,
                    ));
                }
            }
        }
    }
}

/// Why recovery cannot pick a checkpoint on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeRefusal {
    /// `--from-checkpoint N` names a checkpoint storage does not hold complete.
    NotComplete { wanted: CheckpointId },
    /// Storage holds complete checkpoints but no marker says which one committed.
    MarkerMissing,
}

/// The checkpoint an exactly-once run resumes from (`None`: nothing committed, start
/// fresh), from the markers found, the complete checkpoints in storage (ascending),
/// whether any of them was taken after a commit (`ever_committed`: their metadata's
/// `committed_before`), and the operator's `--from-checkpoint`, which overrides the
/// markers.
///
/// Complete checkpoints without a marker are what a crash before the pipeline's first
/// commit leaves (a checkpoint is complete before its transaction commits): if none of
/// them was taken after a commit, nothing was ever committed and they are discarded.
/// Otherwise a marker existed and is gone, and guessing could lose or duplicate
/// output: refuse. (The one case this cannot tell apart: the first commit succeeded,
/// the process died before the next checkpoint completed, and then both copies of the
/// marker were deleted by hand.)
pub fn resume_point(
    found: &FoundMarkers,
    complete: &[CheckpointId],
    ever_committed: bool,
    from_checkpoint: Option<CheckpointId>,
) -> Result<Option<CheckpointId>, ResumeRefusal> {
    if let Some(wanted) = from_checkpoint {
        return if complete.contains(&wanted) {
            Ok(Some(wanted))
        } else {
            Err(ResumeRefusal::NotComplete { wanted })
        };
    }
    match found.last_committed() {
        // A start over marked nothing committed: the checkpoints of the old
        // incarnation were deleted with it, any newer ones never committed.
        Some(CheckpointId::NONE) => Ok(None),
        Some(c) => Ok(Some(c)),
        None if complete.is_empty() || !ever_committed => Ok(None),
        None => Err(ResumeRefusal::MarkerMissing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> MarkerTarget {
        MarkerTarget {
            pipeline: "wc".into(),
            unit: "0".into(),
            generation: 0,
            group: "weir.wc".into(),
            sources: vec![],
            source_partitions: vec![],
            progress_topic: crate::connector::kafka::KafkaNames::new("weir.", "wc")
                .progress_topic(),
        }
    }

    #[test]
    fn markers_round_trip_and_name_their_pipeline() {
        let target = target();
        assert_eq!(target.text(CheckpointId(17)), "weir:wc:0:checkpoint=17");
        assert_eq!(target.record_key(), "weir:wc:0");
        let own = |text: &str| target.parse(text).map(|m| m.checkpoint);
        assert_eq!(own("weir:wc:0:checkpoint=17"), Some(CheckpointId(17)));
        assert_eq!(own("weir:wc2:0:checkpoint=17"), None);
        assert_eq!(own("weir:wc:1:checkpoint=17"), None);
        assert_eq!(own(""), None);
        assert_eq!(
            Marker::parse("weir:other-job:0:checkpoint=9"),
            Some(Marker {
                pipeline: "other-job".into(),
                unit: "0".into(),
                checkpoint: CheckpointId(9),
                generation: 0,
                rescaled_to: None,
            })
        );
        for junk in [
            "weir::0:checkpoint=1",
            "weir:a:checkpoint=1",
            "weir:a:0:checkpoint=x",
            "weir:a:0:checkpoint=1:generation=x",
            "weir:a:0:checkpoint=1:rescaled-to=2:generation=1",
            "weir:a:0:checkpoint=1:what=2",
            "x",
        ] {
            assert_eq!(Marker::parse(junk), None, "{junk}");
        }
        assert_eq!(target.progress_topic, "weir.wc.progress");
    }

    /// Catches: a worker of one layout generation reading another's marker as its own
    /// (3 -> 2 -> 3 reuses unit `0-of-3`), a hand-over record read as an ordinary
    /// marker, or generation 0 written differently from before layouts existed.
    #[test]
    fn markers_carry_the_generation_and_hand_overs_are_told_apart() {
        let mut g2 = target();
        g2.unit = "0-of-3".into();
        g2.generation = 2;
        let text = g2.text(CheckpointId(5));
        assert_eq!(text, "weir:wc:0-of-3:checkpoint=5:generation=2");
        assert_eq!(g2.parse(&text).map(|m| m.checkpoint), Some(CheckpointId(5)));
        assert_eq!(
            g2.parse("weir:wc:0-of-3:checkpoint=5"),
            None,
            "generation 0's"
        );
        let handed = g2.rescaled_text(CheckpointId(5), 4);
        assert_eq!(
            handed,
            "weir:wc:0-of-3:checkpoint=5:generation=2:rescaled-to=4"
        );
        let parsed = g2.parse(&handed).expect("own hand-over");
        assert_eq!(
            (parsed.checkpoint, parsed.rescaled_to),
            (CheckpointId(5), Some(4))
        );
        let mut g0 = g2.clone();
        g0.generation = 0;
        assert_eq!(
            g0.rescaled_text(CheckpointId(3), 2),
            "weir:wc:0-of-3:checkpoint=3:rescaled-to=2"
        );
        assert_eq!(g0.parse(&handed), None);
    }

    #[test]
    fn the_topics_copy_of_the_marker_wins_and_the_groups_is_the_fallback() {
        let found = |group, topic| FoundMarkers {
            group,
            topic,
            foreign: None,
            rescaled_to: None,
        };
        let c = |n| Some(CheckpointId(n));
        assert_eq!(found(None, None).last_committed(), None);
        assert_eq!(found(c(4), None).last_committed(), c(4));
        // Offsets expired or deleted: the topic still knows.
        assert_eq!(found(None, c(7)).last_committed(), c(7));
        // Offsets reset to an older marker by a tool: the topic is newer.
        assert_eq!(found(c(3), c(7)).last_committed(), c(7));
        // A start over (marker 0 in the topic) outranks the old incarnation's offsets.
        assert_eq!(found(c(57), c(0)).last_committed(), c(0));
        // The progress topic was deleted: the group still knows.
        assert_eq!(found(c(9), None).last_committed(), c(9));
    }

    #[test]
    fn a_missing_marker_with_checkpoints_is_never_read_as_nothing_committed() {
        let ids = |v: &[u64]| v.iter().copied().map(CheckpointId).collect::<Vec<_>>();
        let none = FoundMarkers::default();
        let at = |n| FoundMarkers {
            group: Some(CheckpointId(n)),
            topic: None,
            foreign: None,
            rescaled_to: None,
        };
        // A new pipeline: nothing anywhere.
        assert_eq!(resume_point(&none, &[], false, None), Ok(None));
        // Started over, killed before its first commit: the reset marker says so.
        assert_eq!(resume_point(&at(0), &ids(&[1, 2]), true, None), Ok(None));
        // Killed before its first commit: checkpoints, none taken after a commit.
        assert_eq!(resume_point(&none, &ids(&[1, 2]), false, None), Ok(None));
        // Checkpoints taken after a commit, but no marker: refuse to guess.
        assert_eq!(
            resume_point(&none, &ids(&[3, 4]), true, None),
            Err(ResumeRefusal::MarkerMissing)
        );
        // The marker decides, even when a newer checkpoint is complete.
        assert_eq!(
            resume_point(&at(3), &ids(&[3, 4]), true, None),
            Ok(Some(CheckpointId(3)))
        );
        // The operator's choice overrides, but only for a complete checkpoint.
        assert_eq!(
            resume_point(&none, &ids(&[3, 4]), true, Some(CheckpointId(4))),
            Ok(Some(CheckpointId(4)))
        );
        assert_eq!(
            resume_point(&at(3), &ids(&[3, 4]), true, Some(CheckpointId(9))),
            Err(ResumeRefusal::NotComplete {
                wanted: CheckpointId(9)
            })
        );
    }
}
