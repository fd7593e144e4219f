//! `KafkaCommitUnit`: the producers one running pipeline (a commit unit) shares between
//! all its Kafka sink subtasks and its `KafkaCommitter`. The protocol and its
//! invariants are stated once, at the top of `sink.rs`; this file implements them.
//!
//! Thread use: sink subtasks call `send_batch` from their task threads; the coordinator
//! thread calls `pre_commit` and `commit`. Every librdkafka call here blocks (bounded by
//! a timeout) on the calling OS thread; none runs on an async executor. Delivery reports
//! are served by each `ThreadedProducer`'s own polling thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use crate::checkpoint::CheckpointId;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::error::ConnectorError;
use crate::connector::kafka::client::{
    self, QuietContext, client_config, log_quietly, topic_partitions,
};
use crate::connector::kafka::config::{DeliveryGuarantee, KafkaSinkConfig, default_group};
use crate::connector::kafka::error::{KafkaError, is_fenced, reason};
use crate::connector::kafka::marker::{MarkerTarget, progress_topic};
use crate::connector::kafka::preflight;
use crate::dataflow::batch::RecordBatch;
use crate::pipeline::plan;
use crate::spec::{PipelineSpec, SourceConfig};

/// The commit unit of a pipeline run on one machine (`weir run`). Workers of a scaled-out
/// pipeline will each be a unit of their own.
pub const LOCAL_UNIT: &str = "0";
/// Bound on one transactional call (init, send offsets, commit) and on a flush: the
/// coordinator may have to wait out a previous instance's transaction being aborted.
const TRANSACTION_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Wait between two attempts to enqueue a record while librdkafka's queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(1);
/// Producer batching delay: small, so a checkpoint's flush is quick.
const LINGER_MS: &str = "5";

/// Records the first failed delivery of a producer, and whether it was fenced.
#[derive(Default)]
pub struct DeliveryContext {
    failure: Mutex<Option<String>>,
    fenced: AtomicBool,
}

impl DeliveryContext {
    fn failure(&self) -> MutexGuard<'_, Option<String>> {
        self.failure.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_quietly(level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        if is_fenced(&error) {
            self.fenced.store(true, Ordering::SeqCst);
        }
        tracing::debug!(%error, reason, "librdkafka producer error event");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            if is_fenced(error) {
                self.fenced.store(true, Ordering::SeqCst);
            }
            let mut failure = self.failure();
            if failure.is_none() {
                *failure = Some(format!("topic {}: {}", message.topic(), reason(error)));
            }
        }
    }
}

type KafkaProducer = ThreadedProducer<DeliveryContext>;

/// One producer and the transaction it has open.
struct Slot {
    /// The transactional id (or a description for the at-least-once producer).
    id: String,
    producer: KafkaProducer,
    /// The checkpoint whose transaction is open on this producer, if any.
    open: Mutex<Option<CheckpointId>>,
}

impl Slot {
    fn open(&self) -> MutexGuard<'_, Option<CheckpointId>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// One `Mode` per pipeline run: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Mode {
    ExactlyOnce {
        /// Producer `n mod 2` carries T(n).
        slots: [Slot; 2],
        marker: MarkerTarget,
        /// Gives `send_offsets_to_transaction` the group metadata; never subscribes.
        group_consumer: BaseConsumer<QuietContext>,
        /// The last checkpoint whose transaction committed.
        committed: Mutex<CheckpointId>,
    },
    AtLeastOnce {
        slot: Slot,
    },
}

/// The shared producers of a pipeline's Kafka sinks.
pub struct KafkaCommitUnit {
    pipeline: String,
    bootstrap: String,
    transaction_timeout: Duration,
    mode: Mode,
}

impl std::fmt::Debug for KafkaCommitUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCommitUnit")
            .field("pipeline", &self.pipeline)
            .field("bootstrap", &self.bootstrap)
            .field("exactly_once", &self.is_exactly_once())
            .finish()
    }
}

impl KafkaCommitUnit {
    /// Checks the pipeline's Kafka sink configuration against the spec and the broker,
    /// then opens the unit: for exactly-once, both transactional producers are
    /// initialised (fencing any other instance and aborting what it left open) and the
    /// last committed marker is read. `None` when the pipeline has no Kafka sink.
    /// `from_scratch`: ignore the marker (the checkpoints were deleted).
    pub fn open(
        spec: &PipelineSpec,
        from_scratch: bool,
    ) -> Result<Option<Arc<Self>>, ConnectorError> {
        let sinks = preflight::kafka_sinks(spec);
        let Some(sink) = preflight::shared_settings(&sinks)? else {
            return Ok(None);
        };
        preflight::check_transaction_timeout(
            sink,
            spec.checkpoint.interval,
            spec.checkpoint.timeout,
        )?;
        let bootstrap = sink.bootstrap()?;
        let timeout = sink.connect_timeout;
        let admin = client::admin(&bootstrap, timeout)?;
        if sink.delivery == DeliveryGuarantee::ExactlyOnce {
            let max = client::broker_transaction_max_timeout_ms(&admin, &bootstrap, timeout)?;
            preflight::check_broker_max(sink, max)?;
        }
        for (_, s) in &sinks {
            topic_partitions(admin.inner(), &bootstrap, &s.topic, timeout)?;
        }
        let mode = match sink.delivery {
            DeliveryGuarantee::AtLeastOnce => {
                let mut config = producer_config(sink, &bootstrap);
                config.set("enable.idempotence", "true");
                let slot = new_slot(
                    format!("the at-least-once producer of {}", spec.name),
                    &config,
                )?;
                Mode::AtLeastOnce { slot }
            }
            DeliveryGuarantee::ExactlyOnce => {
                let marker = marker_target(spec, sink, &bootstrap)?;
                let marker = match marker {
                    Some(m) => m,
                    None => {
                        let topic = progress_topic(&sink.transactional_prefix);
                        client::ensure_topic(&admin, &bootstrap, &topic, timeout)?;
                        MarkerTarget {
                            pipeline: spec.name.clone(),
                            unit: LOCAL_UNIT.into(),
                            group: format!("{}{}", sink.transactional_prefix, spec.name),
                            sources: Vec::new(),
                            source_partitions: Vec::new(),
                            progress_topic: Some(topic),
                        }
                    }
                };
                let slots = [0, 1].map(|i| {
                    let id = format!(
                        "{}{}.{LOCAL_UNIT}.{i}",
                        sink.transactional_prefix, spec.name
                    );
                    let mut config = producer_config(sink, &bootstrap);
                    config.set("transactional.id", &id).set(
                        "transaction.timeout.ms",
                        sink.transaction_timeout.as_millis().to_string(),
                    );
                    new_slot(id, &config)
                });
                let [a, b] = slots;
                let slots = [a?, b?];
                // Fence every earlier instance and abort what it left open. Both before
                // reading the marker: afterwards no one else can commit.
                for slot in &slots {
                    slot.producer
                        .init_transactions(TRANSACTION_CALL_TIMEOUT)
                        .map_err(|e| {
                            transactional_error(&spec.name, slot, "initialising transactions", &e)
                        })?;
                }
                let group_consumer: BaseConsumer<QuietContext> = client_config(&bootstrap, timeout)
                    .set("group.id", &marker.group)
                    .set("enable.auto.commit", "false")
                    .set("isolation.level", "read_committed")
                    .create_with_context(QuietContext)
                    .map_err(|e| KafkaError::client("cannot create the offsets consumer", &e))?;
                let committed = if from_scratch {
                    CheckpointId::NONE
                } else {
                    marker.read(&group_consumer, TRANSACTION_CALL_TIMEOUT)?
                };
                tracing::info!(pipeline = %spec.name, group = %marker.group, last_committed = %committed, "kafka sink: transactions initialised");
                Mode::ExactlyOnce {
                    slots,
                    marker,
                    group_consumer,
                    committed: Mutex::new(committed),
                }
            }
        };
        Ok(Some(Arc::new(KafkaCommitUnit {
            pipeline: spec.name.clone(),
            bootstrap,
            transaction_timeout: sink.transaction_timeout,
            mode,
        })))
    }

    pub fn is_exactly_once(&self) -> bool {
        matches!(self.mode, Mode::ExactlyOnce { .. })
    }

    /// The last checkpoint whose transaction committed (`NONE` if none, and always for
    /// at-least-once delivery).
    pub fn last_committed(&self) -> CheckpointId {
        match &self.mode {
            Mode::ExactlyOnce { committed, .. } => {
                *committed.lock().unwrap_or_else(|e| e.into_inner())
            }
            Mode::AtLeastOnce { .. } => CheckpointId::NONE,
        }
    }

    /// The consumer group carrying the marker (exactly-once only).
    pub fn marker_group(&self) -> Option<&str> {
        match &self.mode {
            Mode::ExactlyOnce { marker, .. } => Some(&marker.group),
            Mode::AtLeastOnce { .. } => None,
        }
    }

    fn slot(&self, checkpoint: CheckpointId) -> &Slot {
        match &self.mode {
            Mode::ExactlyOnce { slots, .. } => &slots[(checkpoint.0 % 2) as usize],
            Mode::AtLeastOnce { slot } => slot,
        }
    }

    fn error(&self, slot: &Slot, what: &str, e: &RdKafkaError) -> KafkaError {
        transactional_error(&self.pipeline, slot, what, e)
    }

    /// Fails if the slot's producer already reported a failed delivery or was fenced.
    fn check_deliveries(&self, slot: &Slot, checkpoint: CheckpointId) -> Result<(), KafkaError> {
        let context = slot.producer.context();
        if context.fenced.load(Ordering::SeqCst) || fatal_fenced(slot) {
            return Err(KafkaError::Fenced {
                pipeline: self.pipeline.clone(),
                transactional_id: slot.id.clone(),
                what: format!("writing checkpoint {checkpoint}"),
            });
        }
        if let Some(reason) = context.failure().clone() {
            return Err(KafkaError::Delivery { checkpoint, reason });
        }
        Ok(())
    }

    /// Begins T(`checkpoint`) on its producer unless it is already open.
    fn ensure_open(&self, slot: &Slot, checkpoint: CheckpointId) -> Result<(), KafkaError> {
        if !self.is_exactly_once() {
            return Ok(());
        }
        let mut open = slot.open();
        match *open {
            Some(c) if c == checkpoint => Ok(()),
            Some(c) => Err(KafkaError::Protocol {
                transactional_id: slot.id.clone(),
                reason: format!(
                    "transaction of checkpoint {c} still open when checkpoint {checkpoint} needs it"
                ),
            }),
            None => {
                slot.producer.begin_transaction().map_err(|e| {
                    self.error(
                        slot,
                        &format!("beginning the transaction of checkpoint {checkpoint}"),
                        &e,
                    )
                })?;
                *open = Some(checkpoint);
                Ok(())
            }
        }
    }

    /// Sends `batch` to `topic` as part of checkpoint `checkpoint`'s output (inside
    /// T(checkpoint) for exactly-once), blocking while librdkafka's queue is full.
    pub fn send_batch(
        &self,
        checkpoint: CheckpointId,
        topic: &str,
        batch: &RecordBatch,
    ) -> Result<(), KafkaError> {
        let slot = self.slot(checkpoint);
        self.check_deliveries(slot, checkpoint)?;
        self.ensure_open(slot, checkpoint)?;
        for i in 0..batch.len() {
            let r = batch.get(i);
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).payload(r.value);
            if !r.key.is_empty() {
                record = record.key(r.key);
            }
            if r.timestamp >= 0 {
                record = record.timestamp(r.timestamp);
            }
            let deadline = Instant::now() + self.transaction_timeout;
            loop {
                match slot.producer.send(record) {
                    Ok(()) => break,
                    Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                        if Instant::now() < deadline =>
                    {
                        record = back;
                        std::thread::sleep(QUEUE_FULL_BACKOFF);
                    }
                    Err((e, _)) => {
                        return Err(self.error(slot, &format!("sending to topic {topic}"), &e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Phase one for checkpoint `id`: every sink subtask has passed barrier `id`, so all
    /// of T(id)'s records are queued on producer `id mod 2`; flush them and check that
    /// every one was acknowledged.
    pub fn pre_commit(&self, id: CheckpointId) -> Result<(), KafkaError> {
        let slot = self.slot(id);
        let open = *slot.open();
        if self.is_exactly_once() && open != Some(id) {
            // No output in this checkpoint: nothing to flush.
            return self.check_deliveries(slot, id);
        }
        slot.producer
            .flush(TRANSACTION_CALL_TIMEOUT)
            .map_err(|e| self.error(slot, &format!("flushing checkpoint {id}"), &e))?;
        self.check_deliveries(slot, id)
    }

    /// Phase two for the complete checkpoint `metadata.id` = n: record the marker inside
    /// T(n) and commit it. A checkpoint at or before the last committed one is already
    /// committed (the redo on recovery): nothing to do. Never retries: a failure fails
    /// the pipeline, whose recovery aborts T(n) and restores the last committed checkpoint.
    pub fn commit(&self, metadata: &CheckpointMetadata) -> Result<(), KafkaError> {
        let Mode::ExactlyOnce {
            marker,
            group_consumer,
            committed,
            ..
        } = &self.mode
        else {
            return Ok(());
        };
        let id = metadata.id;
        if id <= *committed.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(());
        }
        let slot = self.slot(id);
        self.check_deliveries(slot, id)?;
        // A checkpoint without output still commits its marker (and source offsets).
        self.ensure_open(slot, id)?;
        let offsets = marker.offsets(metadata)?;
        let group = group_consumer
            .group_metadata()
            .ok_or_else(|| KafkaError::Client {
                what: format!("cannot commit checkpoint {id}"),
                reason: format!("no consumer group metadata for group {}", marker.group),
            })?;
        slot.producer
            .send_offsets_to_transaction(&offsets, &group, TRANSACTION_CALL_TIMEOUT)
            .map_err(|e| {
                self.error(
                    slot,
                    &format!("adding the offsets of checkpoint {id} to its transaction"),
                    &e,
                )
            })?;
        slot.producer
            .commit_transaction(TRANSACTION_CALL_TIMEOUT)
            .map_err(|e| {
                self.error(
                    slot,
                    &format!("committing the transaction of checkpoint {id}"),
                    &e,
                )
            })?;
        *slot.open() = None;
        *committed.lock().unwrap_or_else(|e| e.into_inner()) = id;
        Ok(())
    }
}

fn producer_config(sink: &KafkaSinkConfig, bootstrap: &str) -> ClientConfig {
    let mut config = client_config(bootstrap, sink.connect_timeout);
    config
        .set("linger.ms", LINGER_MS)
        // A record not delivered within the transaction's lifetime fails the checkpoint.
        .set(
            "message.timeout.ms",
            sink.transaction_timeout.as_millis().to_string(),
        );
    config
}

fn new_slot(id: String, config: &ClientConfig) -> Result<Slot, KafkaError> {
    let producer: KafkaProducer = config
        .create_with_context(DeliveryContext::default())
        .map_err(|e| KafkaError::client(format!("cannot create producer {id}"), &e))?;
    Ok(Slot {
        id,
        producer,
        open: Mutex::new(None),
    })
}

fn fatal_fenced(slot: &Slot) -> bool {
    slot.producer
        .client()
        .fatal_error()
        .is_some_and(|(code, _)| {
            matches!(
                code,
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            )
        })
}

fn transactional_error(pipeline: &str, slot: &Slot, what: &str, e: &RdKafkaError) -> KafkaError {
    if is_fenced(e) || fatal_fenced(slot) {
        return KafkaError::Fenced {
            pipeline: pipeline.to_owned(),
            transactional_id: slot.id.clone(),
            what: what.to_owned(),
        };
    }
    KafkaError::client(format!("producer {}: {what}", slot.id), e)
}

/// The marker carried by the Kafka sources' offsets, if the pipeline has Kafka sources
/// on the sink's cluster: those in the group of the first such source.
fn marker_target(
    spec: &PipelineSpec,
    sink: &KafkaSinkConfig,
    bootstrap: &str,
) -> Result<Option<MarkerTarget>, KafkaError> {
    let mut target: Option<MarkerTarget> = None;
    for (s, source) in spec.sources.iter().enumerate() {
        let SourceConfig::Kafka(c) = &source.config else {
            continue;
        };
        if c.bootstrap()? != bootstrap {
            continue;
        }
        let group = c.group.clone().unwrap_or_else(|| default_group(&spec.name));
        let t = target.get_or_insert_with(|| MarkerTarget {
            pipeline: spec.name.clone(),
            unit: LOCAL_UNIT.into(),
            group: group.clone(),
            sources: Vec::new(),
            source_partitions: Vec::new(),
            progress_topic: None,
        });
        if t.group != group {
            continue;
        }
        t.sources.push(plan::source_id(s));
        let probe: BaseConsumer<QuietContext> = client_config(bootstrap, c.connect_timeout)
            .create_with_context(QuietContext)
            .map_err(|e| KafkaError::client("cannot create a metadata client", &e))?;
        for topic in c.topic_names() {
            for p in topic_partitions(probe.client(), bootstrap, &topic, c.connect_timeout)? {
                t.source_partitions.push((topic.clone(), p));
            }
        }
    }
    let _ = sink;
    Ok(target)
}
