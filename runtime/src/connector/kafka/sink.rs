//! `KafkaSink`: the exactly-once (or at-least-once) Kafka sink, one subtask per sink
//! task. Records go to the pipeline's shared `KafkaCommitUnit`; `KafkaCommitter` drives
//! its two-phase commit from the checkpoint coordinator.
//!
//! # Why the transaction is the commit point
//!
//! librdkafka cannot resume a transaction another process opened (Flink resumes them
//! by reflection into the Java client; Arroyo does not recover them at all). A
//! transaction open at a crash is therefore lost, and the only safe recovery is to
//! abort it and replay its input. Weir makes that the protocol: the Kafka transaction of
//! checkpoint n is the commit point of checkpoint n, and recovery restores exactly the
//! last checkpoint whose transaction committed.
//!
//! # The protocol
//!
//! - A running pipeline is a commit unit with two transactional producers,
//!   `transactional.id = {transactional_prefix}{pipeline}.{unit}.0` and `...1`
//!   (`unit` is `0` for `weir run`). Every Kafka sink of the pipeline, on every topic and
//!   in every subtask, writes through these two producers, so the output of a
//!   checkpoint to all topics commits or aborts as one.
//! - Checkpoint n's output is what the sink subtasks receive after barrier n - 1 and
//!   before barrier n. It goes to producer `n mod 2`, inside transaction T(n), which
//!   the first record of checkpoint n begins (lazily; with no output, the commit
//!   begins it to carry the marker). Two producers are needed because a subtask that
//!   has passed barrier n already writes checkpoint n + 1 while others still write n;
//!   two suffice because checkpoint n + 1 is triggered only after T(n) committed, so no
//!   record of n + 2 exists before T(n) is finished and producer `n mod 2` is free.
//! - Order: a sink subtask sends nothing of checkpoint n + 1 until the broker has
//!   acknowledged every record it sent for n (`InFlight`). The two producers batch and
//!   retry independently; without this wait a record of n + 1 could land in a
//!   partition before an older record of n, and a key's updates would go backwards.
//! - Pre-commit (coordinator, after every task acknowledged barrier n, before n's
//!   metadata is written): flush producer `n mod 2` and check every record of T(n) was
//!   acknowledged by the broker. The records are then durable in the log, and
//!   invisible to `read_committed` consumers.
//! - Commit (coordinator, after n's metadata is durable, i.e. checkpoint n is
//!   complete): add the progress marker to T(n), as a record on the pipeline's
//!   compacted progress topic and with `send_offsets_to_transaction` (the Kafka
//!   sources' positions at barrier n, or an offset on the progress topic, with
//!   `weir:<pipeline>:<unit>:checkpoint=n` as metadata; see `marker`), then
//!   `commit_transaction`. The records of n and the marker n become visible together,
//!   atomically. Only then is checkpoint n + 1 triggered. Other sinks (files) commit
//!   after the Kafka commit, idempotently. The checkpoint timeout bounds the whole
//!   round, flush and commit included.
//! - A failed flush, delivery, offset commit or commit fails the pipeline: it is never
//!   retried in place (a transaction in an unknown state cannot be reasoned about) and
//!   never panics. Recovery sorts it out.
//!
//! # Recovery, and why it is exactly-once
//!
//! 1. Initialise both producers (`init_transactions`). The broker bumps their epochs,
//!    which fences any other instance still running with these ids (a zombie: its next
//!    transactional call fails with a fencing error, and it stops with a message
//!    saying so), and aborts whatever transactions they left open (or completes a
//!    commit that was already decided).
//! 2. Only then read the last committed marker c: the progress topic's copy (the tail
//!    of a one-partition topic), else the group's (one OffsetFetch). After
//!    step 1 no one else can commit, so c is final: T(c) committed and no T(m) with
//!    m > c ever will. A group holding another pipeline's marker is refused before
//!    step 1; no marker at all while storage holds complete checkpoints is refused
//!    too (`marker::resume_point`): the operator chooses `--from-checkpoint N` or
//!    `--from-scratch`.
//! 3. Restore checkpoint c exactly (not the latest complete checkpoint, which may be
//!    c + 1 if the crash fell between "complete" and "committed") and discard every
//!    newer checkpoint: their transactions were aborted. Checkpoint c is always still
//!    stored: the two newest complete checkpoints are always retained, and c is one of
//!    them. Redo the file sinks' commit of c; their staged output of newer checkpoints
//!    is discarded.
//! 4. Resume: sources continue from their positions in c, operators from their state in
//!    c, and the first records written belong to checkpoint c + 1.
//!
//! Every output record of checkpoint k is in T(k) and only there. T(k) is committed at
//! most once (a transaction commits once) and, if it committed, k <= c, so the state
//! and source positions the run resumes from already include k's effects and k's input
//! is not replayed. If T(k) did not commit (k > c) it was aborted in step 1 and k's
//! input is replayed from c. So a `read_committed` consumer sees each output record of
//! each checkpoint exactly once, whatever the guests compute on replay: an aborted
//! checkpoint's output is discarded whole.
//!
//! Timeouts: `transaction.timeout.ms` must exceed checkpoint interval + 2 x checkpoint
//! timeout + restart budget (T(n) can open as soon as n - 1 is triggered; see
//! `preflight`), else the broker may abort T(n) under a live pipeline, and
//! not exceed the broker's `transaction.max.timeout.ms`; both are checked at start. While
//! a crashed pipeline is down, its open transaction holds back the last stable offset
//! of the partitions it wrote, so `read_committed` readers of those partitions stall
//! until the restart fences it (or the timeout aborts it).
//!
//! A repartition topic (`repartition`, worker I of N > 1) is written by a `KafkaSink`
//! too (`KafkaSink::repartition`: each record to its key group's partition, packed into
//! frames, `repartition_frame`), so its records are in T(n) with the output and the
//! source offsets, and the owner of the key group, reading it read_committed, sees them
//! exactly when T(n) commits. At barrier n the sink sends every frame it holds, so none
//! spans two checkpoints. For a windowed step, at a barrier n after its task's
//! watermark advanced, it then states that watermark in every partition of the topic,
//! inside T(n) after its records (`repartition_watermark`): event time crosses the
//! topic with the records. At-least-once, where records are visible as soon as they
//! are written, it sends its frames at the end of every batch instead of holding them.
//!
//! `delivery = "at-least-once"` uses one idempotent, non-transactional producer flushed
//! at pre-commit: nothing is lost, a replay after a crash may duplicate.

use std::sync::Arc;

use crate::cluster::KeyGroupRanges;
use crate::connector::kafka::commit_unit::KafkaCommitUnit;
use crate::connector::kafka::in_flight::InFlight;
use crate::connector::kafka::repartition_frame::FrameWriter;
use crate::connector::kafka::repartition_watermark::{RepartitionWriter, WatermarkMarker};
use crate::dataflow::operator::OperatorError;
use crate::dataflow::sink::Sink;
use crate::record::CheckpointId;
use crate::record::OperatorSnapshot;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};

/// One subtask of a Kafka sink, as a terminal operator of its chain.
#[derive(Debug)]
pub struct KafkaSink {
    id: String,
    topic: String,
    /// A repartition topic's open frames, one per partition (each record to its key
    /// group's range's partition).
    frames: Option<FrameWriter>,
    /// A repartition topic's writer this subtask is (see `repartition_watermark`).
    writer: Option<RepartitionWriter>,
    /// The last watermark the chain passed on (`Watermark::START` before the first).
    watermark: Watermark,
    /// The last watermark this writer's markers stated.
    stated: Watermark,
    unit: Arc<KafkaCommitUnit>,
    /// This subtask's records not yet acknowledged by the broker.
    in_flight: Arc<InFlight>,
    /// A barrier passed since the last record: wait for `in_flight` before sending.
    drain_before_next: bool,
}

impl KafkaSink {
    /// `id`: the operator id (`sink-<n>`).
    pub fn new(
        id: impl Into<String>,
        topic: impl Into<String>,
        unit: Arc<KafkaCommitUnit>,
    ) -> Self {
        KafkaSink {
            id: id.into(),
            topic: topic.into(),
            frames: None,
            writer: None,
            watermark: Watermark::START,
            stated: Watermark::START,
            unit,
            in_flight: Arc::new(InFlight::default()),
            drain_before_next: false,
        }
    }

    /// A writer of repartition topic `topic` of partitions `key_groups` (see
    /// `repartition`): each record goes to its key group's partition, inside the same
    /// transactions as every other Kafka sink of the unit; as writer `writer` (a
    /// windowed step's), its watermark too, to every partition at a barrier after it
    /// advanced (`repartition_watermark`).
    pub fn repartition(
        id: impl Into<String>,
        topic: impl Into<String>,
        key_groups: KeyGroupRanges,
        writer: Option<RepartitionWriter>,
        unit: Arc<KafkaCommitUnit>,
    ) -> Self {
        KafkaSink {
            frames: Some(FrameWriter::new(key_groups)),
            writer,
            ..KafkaSink::new(id, topic, unit)
        }
    }
}

impl Sink for KafkaSink {
    fn id(&self) -> &str {
        &self.id
    }

    fn write(
        &mut self,
        checkpoint: CheckpointId,
        batch: &RecordBatch,
    ) -> Result<(), OperatorError> {
        if self.drain_before_next {
            // The previous checkpoint's records go first (see "Order" above).
            self.unit
                .await_acknowledged(checkpoint, &self.topic, &self.in_flight)?;
            self.drain_before_next = false;
        }
        let Some(frames) = &mut self.frames else {
            self.unit
                .send_batch(checkpoint, &self.topic, batch, &self.in_flight)?;
            return Ok(());
        };
        let (unit, topic, in_flight) = (&self.unit, &self.topic, &self.in_flight);
        let mut send = |partition, frame: &[u8]| {
            unit.send_frame(checkpoint, (topic, partition), frame, in_flight)
        };
        for r in batch.iter() {
            frames.push((r.key, r.value, r.timestamp), &mut send)?;
        }
        if !unit.is_exactly_once() {
            // Visible once written: hold nothing back (see the module docs).
            frames.flush(&mut send)?;
        }
        Ok(())
    }

    fn watermark(&mut self, watermark: Watermark) -> Result<(), OperatorError> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }

    fn barrier(&mut self, barrier: Barrier) -> Result<Option<OperatorSnapshot>, OperatorError> {
        if let Some(frames) = &mut self.frames {
            // The last of this checkpoint's records, before its watermark.
            let (unit, topic, in_flight) = (&self.unit, &self.topic, &self.in_flight);
            frames.flush(&mut |partition, frame: &[u8]| {
                unit.send_frame(barrier.id, (topic, partition), frame, in_flight)
            })?;
        }
        if let (Some(writer), Some(frames)) = (self.writer, &self.frames)
            && self.watermark > self.stated
        {
            // After this checkpoint's records, in its transaction (see
            // `repartition_watermark`).
            let marker = WatermarkMarker::of(writer, self.watermark);
            self.unit.send_watermark(
                barrier.id,
                (&self.topic, frames.partitions()),
                &marker,
                &self.in_flight,
            )?;
            self.stated = self.watermark;
        }
        // Everything sent so far belongs to T(barrier.id); what follows to the next one,
        // on the other producer. One producer (at-least-once) keeps its own order: only the switch to the other
        // transactional producer needs the wait.
        self.drain_before_next = self.unit.is_exactly_once();
        // The committer commits the transaction, not a sink snapshot: nothing to record.
        Ok(None)
    }
}
