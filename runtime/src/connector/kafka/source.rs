//! `KafkaSource`: one subtask's reader of the partitions of one or more Kafka topics.
//!
//! Invariants:
//! - Assignment, not subscription: the partitions of the configured topics are first
//!   split among the pipeline's workers (`cluster::assignment`; worker 0/1 owns them
//!   all; a repartition topic's partitions go to the owners of their key-group ranges, see
//!   `repartition`), then each of the worker's partitions belongs to the subtask
//!   `assignment::owner` names, which adding partitions or topics never changes for an
//!   existing partition. No consumer group rebalancing ever moves a partition;
//!   the group is only where offsets are committed (by the sink, inside its
//!   transactions) and read (`start = "committed"`).
//! - Restore from the whole checkpoint: a restored subtask looks its partitions up in
//!   the positions of every subtask of the source (merged), so a partition's position
//!   never depends on which subtask owned it. Across workers of one layout it does
//!   (each worker's checkpoint holds its own partitions): a worker of N > 1 refuses a
//!   partition its checkpoint does not list but another worker committed an offset
//!   for. A worker started by a rescale restores from the positions of every old
//!   worker's checkpoint (`pipeline::rescale`), so there a partition keeps its position
//!   whichever old worker read it. Otherwise a partition in no snapshot was added
//!   after the checkpoint and starts at its earliest offset: it holds only newer
//!   records. A restored offset that retention already deleted continues at the
//!   earliest offset, with a warning and the records skipped counted; in a
//!   repartition topic, which only Weir purges and never past a retained checkpoint
//!   (`repartition_purge`), it is refused instead: those records exist nowhere else.
//! - `isolation.level = read_committed`, auto-commit off: the source sees only committed
//!   input and never commits anything itself; its progress lives in checkpoints.
//! - The position `{"v": 1, "partitions": [{"topic": t, "partition": p, "offset": o}, ...]}`
//!   (a `KafkaPosition`) lists every assigned partition with the offset of the next
//!   record to read. It is exact after every returned record: reopening at it (an
//!   `assign` at those offsets) continues with the next record. Offsets are resolved
//!   to numbers when the source opens (earliest / latest / committed), so a position
//!   never says "latest".
//! - Event time: each record's Kafka timestamp, its key the Kafka key (empty if none).
//!   The event-time frontier is the minimum over the assigned, unfinished partitions of
//!   the largest timestamp read from each, so the watermark never passes a partition
//!   that is behind; a partition that has not produced a record yet holds it at the
//!   start. The largest timestamp is part of the partition's position, so a restored
//!   partition with nothing new to read holds the watermark where it held it before,
//!   not at the start. A subtask with no partition does not hold anything back.
//!   A windowed step's repartition partition's event time is its writers' watermark
//!   markers instead (`repartition_watermark`): several workers' records interleave
//!   there, so its largest timestamp would pass a lagging writer. Markers are skipped,
//!   not returned, and what they said is part of the partition's position. A
//!   repartition record's event time is its `weir.event_time` header where it has one
//!   (an event time at or below zero, see `repartition`).
//! - Bounded mode: the end of each partition is its last stable offset when the source
//!   opens. A partition is done when the next offset reaches it, or when librdkafka
//!   reports end-of-partition (the offsets left below the end were transaction markers
//!   or aborted records, which a read_committed consumer never returns: the next record
//!   offset alone would never reach the end). Records at or past the end are never
//!   returned. When every partition is done the source is drained.
//! - Each partition is read from its own librdkafka queue (`split_partition_queue`), so
//!   end-of-partition is unambiguous across topics. The queues together hold at most
//!   the source's `buffer_bytes` (split evenly; see `config`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::cluster::Worker;
use crate::connector::error::ConnectorError;
use crate::connector::kafka::assignment;
use crate::connector::kafka::client::{
    self, Endpoint, QuietContext, authenticate, client_config, source_topic_partitions,
};
use crate::connector::kafka::config::{KafkaSourceConfig, StartOffset};
use crate::connector::kafka::error::{KafkaError, reason};
use crate::connector::kafka::error_class::{ErrorClass, classify};
use crate::connector::kafka::marker::Marker;
use crate::connector::kafka::position::{KafkaPosition, MergedPositions, PartitionPosition};
use crate::connector::kafka::repartition::{self, EVENT_TIME_HEADER, EventTime, RepartitionRead};
use crate::connector::kafka::repartition_frame::{FRAME_HEADER, FRAME_VERSION, FrameReader};
use crate::connector::kafka::repartition_watermark::{
    PartitionWatermarks, WATERMARK_HEADER, WatermarkMarker,
};
use crate::connector::kafka::source_context::{STATS_INTERVAL_MS, SourceContext};
use crate::connector::pacer::Pacer;
use crate::dataflow::source::{Source, SourceError, SourcePoll};
use crate::record::SourcePosition;
use crate::record::batch::{BatchLimit, RecordBatch};

struct PartitionState {
    topic: String,
    partition: i32,
    /// Offset of the next record to return; while a frame is open, the frame's.
    next: i64,
    /// Bounded mode: the end offset captured at open.
    end: Option<i64>,
    done: bool,
    /// Largest event time read from this partition.
    max_timestamp: Option<i64>,
    /// A repartition partition: its records are frames, and those with a watermark
    /// header markers (see `repartition_frame`, `repartition_watermark`).
    repartition: bool,
    /// A windowed step's repartition partition: its writers' watermarks, from their
    /// markers, its event time instead of `max_timestamp`.
    writers: Option<PartitionWatermarks>,
    /// The frame at `next`, read up to the middle (a poll's room ran out in it).
    frame: Option<FrameReader>,
    /// Restored inside a frame: how many records of the frame at `next` were read
    /// before (0 once that frame is open).
    frame_skip: u32,
}

impl PartitionState {
    /// Reads at most `room` records from this partition (its open frame first, then
    /// `queue`, its librdkafka queue) into `out`, stopping at the bounded end, an empty
    /// queue, end-of-partition or a full batch; returns how many it read.
    fn read(
        &mut self,
        (consumer, queue): (&BaseConsumer<SourceContext>, &PartitionQueue<SourceContext>),
        out: &mut RecordBatch,
        limit: BatchLimit,
        room: usize,
    ) -> Result<usize, ConnectorError> {
        let mut read = 0usize;
        while read < room && !self.done && !limit.is_full(out) {
            if self.frame.is_some() {
                read += self.read_frame(out, limit, room - read)?;
                continue;
            }
            let Some(result) = queue.poll(Duration::ZERO) else {
                break;
            };
            match result {
                Ok(m) => read += self.take(&m, out)?,
                Err(RdKafkaError::PartitionEOF(_)) => {
                    self.reached_eof(consumer);
                    break;
                }
                Err(e) => {
                    return Err(KafkaSource::fail(
                        format!("cannot read {}-{}", self.topic, self.partition),
                        &e,
                    ));
                }
            }
        }
        Ok(read)
    }

    /// Takes message `m`: returns it as a record (1), or opens it as a frame, observes
    /// it as a marker or finds it past the bounded end (0).
    fn take(
        &mut self,
        m: &BorrowedMessage<'_>,
        out: &mut RecordBatch,
    ) -> Result<usize, ConnectorError> {
        let offset = m.offset();
        if let Some(end) = self.end.filter(|&end| offset >= end) {
            // Past the bounded end: not ours to return.
            self.next = end;
            self.done = true;
            return Ok(0);
        }
        let mut ts = m.timestamp().to_millis().unwrap_or(0);
        let header = if self.repartition {
            repartition_headers(m)
        } else {
            RepartitionHeader::None
        };
        if self.frame_skip > 0
            && !(matches!(header, RepartitionHeader::Frame(_)) && offset == self.next)
        {
            return Err(self.frame_error(offset, format!(
                "the checkpoint resumes after record {} of a frame at offset {}, but the record there is not that frame",
                self.frame_skip, self.next
            )));
        }
        match header {
            RepartitionHeader::Frame(Ok(())) => {
                self.open_frame(offset, m.payload().unwrap_or(&[]))?;
                return Ok(0);
            }
            RepartitionHeader::Frame(Err(version)) => {
                return Err(self.frame_error(offset, format!(
                    "a frame of format {version:?}, but this weir reads format {:?} (written by a newer weir? run the same version on every worker)",
                    String::from_utf8_lossy(FRAME_VERSION)
                )));
            }
            RepartitionHeader::Marker(marker) => {
                // A writer's watermark, not a record (see the module docs).
                if let (Some(writers), Some(marker)) = (&mut self.writers, marker) {
                    writers.observe(marker);
                }
                self.next = offset + 1;
                return Ok(0);
            }
            RepartitionHeader::EventTime(t) => ts = t,
            RepartitionHeader::None => {}
        }
        out.push(m.key().unwrap_or(&[]), m.payload().unwrap_or(&[]), ts);
        self.max_timestamp = Some(self.max_timestamp.map_or(ts, |t| t.max(ts)));
        self.passed(offset);
        Ok(1)
    }

    /// Opens the frame at `offset`, skipping what a restored position says was read.
    fn open_frame(&mut self, offset: i64, value: &[u8]) -> Result<(), ConnectorError> {
        let mut frame = FrameReader::new(value.to_vec());
        frame
            .skip(self.frame_skip)
            .map_err(|e| self.frame_error(offset, e.to_string()))?;
        self.frame_skip = 0;
        // Offsets between `next` and here were transaction markers.
        self.next = offset;
        if frame.is_finished() {
            self.passed(offset);
        } else {
            self.frame = Some(frame);
        }
        Ok(())
    }

    /// Reads at most `room` records of the open frame into `out`; closes it at its end.
    fn read_frame(
        &mut self,
        out: &mut RecordBatch,
        limit: BatchLimit,
        room: usize,
    ) -> Result<usize, ConnectorError> {
        let Some(frame) = &mut self.frame else {
            return Ok(0);
        };
        let mut read = 0usize;
        while read < room && !limit.is_full(out) {
            match frame.next_record() {
                Ok(Some((key, value, ts))) => {
                    out.push(key, value, ts);
                    self.max_timestamp = Some(self.max_timestamp.map_or(ts, |t| t.max(ts)));
                    read += 1;
                }
                Ok(None) => {}
                Err(e) => {
                    let reason = e.to_string();
                    return Err(self.frame_error(self.next, reason));
                }
            }
            if frame.is_finished() {
                self.frame = None;
                self.passed(self.next);
                break;
            }
        }
        Ok(read)
    }

    /// The record (or frame) at `offset` is all returned.
    fn passed(&mut self, offset: i64) {
        self.next = offset + 1;
        if self.end.is_some_and(|end| self.next >= end) {
            self.done = true;
        }
    }

    /// The consumer reached the partition's current end. Its position has moved past
    /// transaction markers, which carry no record, so it is the true next offset; never
    /// jump to `end` on the event alone: an EOF seen before the end would skip input.
    /// (Never while a frame is open: its queue is not polled then.)
    fn reached_eof(&mut self, consumer: &BaseConsumer<SourceContext>) {
        if let Some(position) = consumer_position(consumer, &self.topic, self.partition) {
            self.next = self.next.max(position);
        }
        if self.end.is_some_and(|end| self.next >= end) {
            self.done = true;
        }
    }

    fn frame_error(&self, offset: i64, reason: String) -> ConnectorError {
        KafkaError::RepartitionFrame {
            topic: self.topic.clone(),
            partition: self.partition,
            offset,
            reason,
        }
        .into()
    }
}

/// What a repartition record's headers say about it.
enum RepartitionHeader {
    /// A frame of records (`repartition_frame`); `Err`: of a format this weir does not
    /// read (its version, as text), never to be taken for a record of its own.
    Frame(Result<(), String>),
    /// A writer's watermark marker, not a record; `None`: one this weir cannot decode
    /// (a newer weir's), skipped all the same.
    Marker(Option<WatermarkMarker>),
    /// A record of its own (written before frames) whose event time its Kafka
    /// timestamp could not carry.
    EventTime(i64),
    /// A record of its own (written before frames) whose event time is its Kafka
    /// timestamp.
    None,
}

fn repartition_headers(m: &BorrowedMessage<'_>) -> RepartitionHeader {
    let Some(headers) = m.headers() else {
        return RepartitionHeader::None;
    };
    for h in headers.iter() {
        if h.key == FRAME_HEADER {
            let version = h.value.unwrap_or_default();
            return RepartitionHeader::Frame(if version == FRAME_VERSION {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(version).into_owned())
            });
        }
        if h.key == WATERMARK_HEADER {
            return RepartitionHeader::Marker(h.value.and_then(WatermarkMarker::decode));
        }
        if h.key == EVENT_TIME_HEADER
            && let Some(t) = h.value.and_then(EventTime::decode)
        {
            return RepartitionHeader::EventTime(t);
        }
    }
    RepartitionHeader::None
}

/// The consumer's position in `topic`-`partition`, if it has a numeric one.
fn consumer_position(
    consumer: &BaseConsumer<SourceContext>,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    consumer.position().ok().and_then(|list| {
        list.find_partition(topic, partition)
            .and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
    })
}

/// One subtask of a Kafka source.
pub struct KafkaSource {
    consumer: Arc<BaseConsumer<SourceContext>>,
    partitions: Vec<PartitionState>,
    /// Each partition's librdkafka queue (`partitions[i]`'s is `queues[i]`).
    queues: Vec<PartitionQueue<SourceContext>>,
    bounded: bool,
    /// Records lost to retention between the checkpoint and this open.
    skipped: u64,
    /// Round-robin start, so one busy partition does not starve the others.
    next_queue: usize,
    pacer: Pacer,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .partitions
            .iter()
            .map(|p| format!("{}-{}@{}", p.topic, p.partition, p.next))
            .collect();
        f.debug_struct("KafkaSource")
            .field("partitions", &parts)
            .finish()
    }
}

impl KafkaSource {
    /// Subtask `subtask` of `parallelism` of worker `worker`, in consumer group `group`,
    /// resuming from a checkpoint if `restored` holds the source's positions in it (every
    /// subtask's); `repartition` when it reads a repartition topic back. Fails (bounded by
    /// `connect_timeout`) if the broker cannot be reached or a topic does not exist.
    pub fn open(
        (config, repartition): (&KafkaSourceConfig, Option<RepartitionRead>),
        group: &str,
        worker: Worker,
        subtask: usize,
        parallelism: usize,
        restored: Option<&[&SourcePosition]>,
    ) -> Result<Self, ConnectorError> {
        let endpoint = config.endpoint()?;
        let timeout = config.connect_timeout;
        authenticate(&endpoint, timeout)?;
        let bootstrap = endpoint.bootstrap.clone();
        // The partitions first: the consumer's queues are sized by how many it reads.
        let mine = owned_partitions(
            &endpoint,
            (config, repartition),
            worker,
            subtask,
            parallelism,
        )?;
        let consumer = Arc::new(create_consumer(config, group, &endpoint, mine.len())?);
        let restored = restored.map(KafkaPosition::merged_positions).transpose()?;
        // The group's coordinator may be moving (a broker failing over).
        let coordinator_timeout = config.failover_bound();
        if let Some(positions) = &restored
            && !worker.is_single()
        {
            refuse_moved_partitions(&consumer, &mine, positions, worker, coordinator_timeout)?;
        }
        let committed =
            if restored.is_none() && config.start == StartOffset::Committed && !mine.is_empty() {
                committed_offsets(&consumer, &mine, &bootstrap, coordinator_timeout)?
            } else {
                BTreeMap::new()
            };

        let mut opener = PartitionOpener {
            consumer: &consumer,
            config,
            repartition,
            bootstrap: &bootstrap,
            restored,
            committed,
            skipped: 0,
        };
        let mut partitions = Vec::with_capacity(mine.len());
        let mut queues = Vec::with_capacity(mine.len());
        let mut assigned = TopicPartitionList::new();
        for (topic, partition) in mine {
            let (state, queue) = opener.open(topic, partition, &mut assigned)?;
            partitions.push(state);
            queues.push(queue);
        }
        let skipped = opener.skipped;
        consumer
            .assign(&assigned)
            .map_err(|e| KafkaError::client("cannot assign the source partitions", &e))?;
        Ok(KafkaSource {
            consumer,
            partitions,
            queues,
            skipped,
            bounded: config.bounded,
            next_queue: 0,
            pacer: Pacer::new(config.rate, parallelism),
        })
    }

    fn fail(what: String, error: &RdKafkaError) -> ConnectorError {
        KafkaError::client(what, error).into()
    }

    /// Serves the main queue: client-level errors and events. Only a fatal error fails
    /// the source.
    fn serve_main_queue(&self) -> Result<(), SourceError> {
        if let Some(Err(e)) = self.consumer.poll(Duration::ZERO) {
            match e {
                RdKafkaError::PartitionEOF(_) => {}
                // librdkafka recovers from the others itself (a broker down, a rebalance
                // of the coordinator); a fatal one leaves the consumer unusable, and a
                // refused login or ACL (which librdkafka retries forever) never heals.
                e if matches!(classify(&e), ErrorClass::Fatal | ErrorClass::Denied) => {
                    return Err(Self::fail("the consumer failed".to_owned(), &e).into());
                }
                // A broker going away (a failover, a rolling restart): librdkafka
                // reconnects and follows the new leaders itself.
                e if classify(&e) == ErrorClass::Retriable => {
                    tracing::debug!(error = %e, "kafka source: consumer error, retried by librdkafka");
                }
                e => tracing::warn!(error = %e, "kafka source: consumer error"),
            }
        }
        Ok(())
    }
}

/// The read-committed consumer of one subtask, in group `group` (see the module docs),
/// its queues sized from `buffer_bytes` for `partitions` partitions.
fn create_consumer(
    config: &KafkaSourceConfig,
    group: &str,
    endpoint: &Endpoint,
    partitions: usize,
) -> Result<BaseConsumer<SourceContext>, KafkaError> {
    let mut client = client_config(endpoint, config.connect_timeout);
    for (key, value) in config.consumer_settings(partitions) {
        client.set(key, value);
    }
    client
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set(
            "enable.partition.eof",
            if config.bounded { "true" } else { "false" },
        )
        // A restored offset already deleted by retention: continue at the earliest.
        .set("auto.offset.reset", "earliest")
        // The partitions' high watermarks, for the lag (see `source_context`).
        .set("statistics.interval.ms", STATS_INTERVAL_MS);
    client
        .create_with_context(SourceContext::default())
        .map_err(|e| {
            KafkaError::client(
                format!("cannot create a Kafka consumer for {}", endpoint.bootstrap),
                &e,
            )
        })
}

/// The partitions of the configured topics that `cluster::assignment` gives to
/// `worker` (for a repartition topic: those of its key groups, see `repartition`) and,
/// of those, `assignment::owner` to `subtask`, sorted; read with a metadata client of
/// its own (dropped on return).
fn owned_partitions(
    endpoint: &Endpoint,
    (config, repartition): (&KafkaSourceConfig, Option<RepartitionRead>),
    worker: Worker,
    subtask: usize,
    parallelism: usize,
) -> Result<Vec<(String, i32)>, ConnectorError> {
    let probe: BaseConsumer<QuietContext> = client_config(endpoint, config.connect_timeout)
        .create_with_context(QuietContext)
        .map_err(|e| KafkaError::client("cannot create a metadata client", &e))?;
    let bootstrap = endpoint.bootstrap.as_str();
    let mut all = Vec::new();
    for topic in config.topic_names() {
        let timeouts = (config.connect_timeout, config.failover_timeout);
        for p in source_topic_partitions(probe.client(), bootstrap, &topic, timeouts)? {
            all.push((topic.clone(), p));
        }
    }
    let mut mine: Vec<(String, i32)> =
        repartition::worker_partitions(worker, repartition.map(|r| r.key_groups), &all)
            .into_iter()
            .filter(|(topic, p)| assignment::owner(topic, *p, parallelism) == subtask)
            .collect();
    mine.sort();
    Ok(mine)
}

/// Worker I of N > 1 resuming from its checkpoint: a partition it owns that the
/// checkpoint does not list is new (read from its earliest offset), unless another
/// worker of the pipeline committed an offset for it: then the partition count changed
/// and the assignment moved the partition here from that worker, whose checkpoint holds
/// its position. Refused rather than read again from the start.
fn refuse_moved_partitions(
    consumer: &BaseConsumer<SourceContext>,
    mine: &[(String, i32)],
    restored: &MergedPositions,
    worker: Worker,
    timeout: Duration,
) -> Result<(), KafkaError> {
    let mut unknown = TopicPartitionList::new();
    for (topic, partition) in mine {
        if !restored.contains_key(&(topic.clone(), *partition)) {
            unknown.add_partition(topic, *partition);
        }
    }
    if unknown.count() == 0 {
        return Ok(());
    }
    let committed = client::committed_offsets(consumer, &unknown, timeout).map_err(|e| {
        KafkaError::client("cannot read the committed offsets of new partitions", &e)
    })?;
    for e in committed.elements() {
        if !matches!(e.offset(), Offset::Offset(_)) {
            continue;
        }
        if let Some(marker) = Marker::parse(e.metadata())
            && marker.unit != worker.unit()
        {
            return Err(KafkaError::PartitionMoved {
                topic: e.topic().to_owned(),
                partition: e.partition(),
                worker,
                from: Worker::parse_unit(&marker.unit).map_or(marker.unit, |w| w.to_string()),
            });
        }
    }
    Ok(())
}

/// Opens a subtask's partitions one by one: where each starts, its queue, its
/// assignment.
struct PartitionOpener<'a> {
    consumer: &'a Arc<BaseConsumer<SourceContext>>,
    config: &'a KafkaSourceConfig,
    /// Set when the source reads a repartition topic back.
    repartition: Option<RepartitionRead>,
    bootstrap: &'a str,
    /// Every partition's position in the restored checkpoint, if resuming from one.
    restored: Option<MergedPositions>,
    /// The group's committed offsets (`start = "committed"`, not resuming).
    committed: BTreeMap<(String, i32), i64>,
    /// Records lost to retention between the checkpoint and this open, so far.
    skipped: u64,
}

impl PartitionOpener<'_> {
    /// Opens `topic`-`partition` at its start offset and adds it to `assigned`: its
    /// state and its queue.
    fn open(
        &mut self,
        topic: String,
        partition: i32,
        assigned: &mut TopicPartitionList,
    ) -> Result<(PartitionState, PartitionQueue<SourceContext>), ConnectorError> {
        let (low, high) = self.watermarks(&topic, partition)?;
        let next = self.start(&topic, partition, low, high)?;
        let end = self.config.bounded.then_some(high);
        tracing::debug!(%topic, partition, low, high, next, restored = self.restored.is_some(), "kafka source partition opened");
        let queue = self
            .consumer
            .split_partition_queue(&topic, partition)
            .ok_or_else(|| KafkaError::Client {
                what: format!("cannot open a queue for {topic}-{partition}"),
                reason: "librdkafka refused".into(),
            })?;
        assigned
            .add_partition_offset(&topic, partition, Offset::Offset(next))
            .map_err(|e| KafkaError::client(format!("cannot assign {topic}-{partition}"), &e))?;
        let restored = self
            .restored
            .as_ref()
            .and_then(|m| m.get(&(topic.clone(), partition)));
        let writers = self.repartition.and_then(|r| r.writers).map(|set| {
            PartitionWatermarks::restore(set, restored.and_then(|p| p.writers.as_ref()))
        });
        // Even where retention deleted records after the restored offset: the ones
        // before it were read.
        let max_timestamp = restored.and_then(|p| p.max_timestamp);
        let state = PartitionState {
            done: end.is_some_and(|end| next >= end),
            topic,
            partition,
            next,
            end,
            max_timestamp,
            repartition: self.repartition.is_some(),
            writers,
            frame: None,
            frame_skip: restored.map_or(0, |p| p.frame_read),
        };
        Ok((state, queue))
    }

    /// The partition's (earliest, high) offsets, asked of its leader: retried while
    /// the cluster fails over (a leader that died answers nothing until its session
    /// runs out and another is elected), up to `failover_timeout`, each attempt
    /// bounded by `connect_timeout`.
    fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), KafkaError> {
        let timeout = self.config.failover_bound();
        let deadline = std::time::Instant::now() + timeout;
        client::retry_read(timeout, || {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let attempt = left
                .min(self.config.connect_timeout)
                .max(Duration::from_millis(1));
            self.consumer.fetch_watermarks(topic, partition, attempt)
        })
        .map_err(|e| KafkaError::Unreachable {
            bootstrap: self.bootstrap.to_owned(),
            timeout,
            reason: format!(
                "cannot read the offsets of {topic}-{partition}: {}",
                reason(&e)
            ),
        })
    }

    /// The offset `topic`-`partition` starts at, between `low` and `high`: its restored
    /// offset if resuming, else the configured start. A repartition partition whose
    /// restored offset was deleted is refused: its records are no one else's input.
    fn start(
        &mut self,
        topic: &str,
        partition: i32,
        low: i64,
        high: i64,
    ) -> Result<i64, KafkaError> {
        let key = (topic.to_owned(), partition);
        Ok(match &self.restored {
            // A partition added since the checkpoint: all of it is new input.
            Some(map) => match map.get(&key).map(|p| p.offset) {
                None => low,
                Some(offset) if offset < low && self.repartition.is_some() => {
                    return Err(KafkaError::RepartitionRecordsDeleted {
                        topic: topic.to_owned(),
                        partition,
                        restored: offset,
                        earliest: low,
                    });
                }
                Some(offset) if offset < low => {
                    let lost = low - offset;
                    tracing::warn!(%topic, partition, restored = offset, earliest = low, skipped = lost,
                        "kafka source: the restored offset was already deleted by the topic's retention; \
                         continuing at the earliest offset, {lost} records were never read");
                    self.skipped += lost.unsigned_abs();
                    low
                }
                Some(offset) => offset,
            },
            None => match self.config.start {
                StartOffset::Earliest => low,
                StartOffset::Latest => high,
                StartOffset::Committed => self.committed.get(&key).copied().unwrap_or(low),
            },
        })
    }
}

/// The group's committed offsets of `partitions` (those with one).
fn committed_offsets(
    consumer: &BaseConsumer<SourceContext>,
    partitions: &[(String, i32)],
    bootstrap: &str,
    timeout: Duration,
) -> Result<BTreeMap<(String, i32), i64>, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in partitions {
        tpl.add_partition(t, *p);
    }
    let committed = client::committed_offsets(consumer, &tpl, timeout).map_err(|e| {
        KafkaError::client(
            format!("cannot read the committed offsets from {bootstrap}"),
            &e,
        )
    })?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some(((e.topic().to_owned(), e.partition()), o)),
            _ => None,
        })
        .collect())
}

impl Source for KafkaSource {
    fn poll(
        &mut self,
        out: &mut RecordBatch,
        limit: BatchLimit,
    ) -> Result<SourcePoll, SourceError> {
        self.serve_main_queue()?;
        let max = self.pacer.allowance(limit.records);
        if max == 0 {
            return Ok(SourcePoll::Idle);
        }
        let n = self.partitions.len();
        let mut read = 0usize;
        for i in 0..n {
            let idx = (self.next_queue + i) % n;
            let queue = (&*self.consumer, &self.queues[idx]);
            read += self.partitions[idx].read(queue, out, limit, max - read)?;
        }
        self.next_queue = (self.next_queue + 1) % n.max(1);
        self.pacer.released(read);
        if self.bounded && self.partitions.iter().all(|p| p.done) {
            return Ok(if read > 0 {
                SourcePoll::Ready
            } else {
                SourcePoll::Drained
            });
        }
        Ok(if read > 0 {
            SourcePoll::Ready
        } else {
            SourcePoll::Idle
        })
    }

    fn position(&self) -> SourcePosition {
        let position = KafkaPosition {
            partitions: self
                .partitions
                .iter()
                .map(|p| PartitionPosition {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset: p.next,
                    max_timestamp: p.max_timestamp,
                    writers: p.writers.clone(),
                    frame_read: p.frame.as_ref().map_or(p.frame_skip, FrameReader::read),
                })
                .collect(),
        };
        position.to_value()
    }

    fn skipped_at_open(&self) -> u64 {
        self.skipped
    }

    /// In offsets: in a repartition topic each is a frame of many records, so its lag
    /// says how many frames are behind, not how many records.
    fn lag(&self) -> Option<u64> {
        let context = self.consumer.context();
        let lag = self
            .partitions
            .iter()
            .filter_map(|p| {
                let high = context.high_watermark(&p.topic, p.partition)?;
                let end = p.end.map_or(high, |end| end.min(high));
                Some(u64::try_from(end - p.next).unwrap_or(0))
            })
            .sum();
        Some(lag)
    }

    fn event_time_frontier(&self) -> Option<i64> {
        if self.partitions.is_empty() {
            // Never receives anything: holds no watermark back.
            return Some(i64::MAX);
        }
        let mut frontier: Option<i64> = None;
        for p in self.partitions.iter().filter(|p| !p.done) {
            let t = match &p.writers {
                Some(writers) => writers.frontier(),
                None => p.max_timestamp.unwrap_or(i64::MIN),
            };
            frontier = Some(frontier.map_or(t, |f| f.min(t)));
        }
        // All done: the task sends the end-of-input watermark itself.
        frontier
    }
}
