//! `KafkaCommitUnit`: the producers one running pipeline (a commit unit) shares between
//! all its Kafka sink subtasks and its `KafkaCommitter`. The protocol and its
//! invariants are stated once, at the top of `sink.rs`; this file implements them.
//!
//! Thread use: sink subtasks call `send_batch` from their task threads; the coordinator
//! thread calls `pre_commit` and `commit`. Every librdkafka call here blocks (bounded by
//! a timeout) on the calling OS thread, none on an async executor; the checkpoint's
//! transactional calls (adding the offsets, committing) are made on the producer's
//! `CallThread`, which the coordinator waits for, bounded, and leaves behind when
//! librdkafka keeps no bound (`call_thread`). Delivery reports are served by each
//! `ThreadedProducer`'s own polling thread.
//!
//! Liveness: every wait on the broker has a bound and is watched (`watchdog`) while it
//! lasts. The coordinator's calls get the checkpoint's deadline; a sink subtask's waits
//! (acknowledgements before the next checkpoint's records, a full queue) get the
//! checkpoint timeout, and end at once when the run is abandoned (`abandon`). A wait
//! that runs out fails with `KafkaError::BrokerStalled`, naming the call and the broker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ThreadedProducer};

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::error::ConnectorError;
use crate::connector::kafka::call_thread::{self, Call, CallThread};
use crate::connector::kafka::client::{
    self, Endpoint, QuietContext, client_config, topic_partitions,
};
use crate::connector::kafka::config::{DeliveryGuarantee, KafkaSinkConfig};
use crate::connector::kafka::delivery_context::DeliveryContext;
use crate::connector::kafka::error::{KafkaError, reason};
use crate::connector::kafka::error_class::{
    ErrorClass, classify, classify_code, is_fenced, is_timeout,
};
use crate::connector::kafka::in_flight::InFlight;
use crate::connector::kafka::marker::{FoundMarkers, MarkerTarget, PROGRESS_TOPIC_CONFIG};
use crate::connector::kafka::names::KafkaNames;
use crate::connector::kafka::preflight;
use crate::connector::kafka::repartition;
use crate::connector::kafka::repartition_frame::{FRAME_HEADER, FRAME_VERSION};
use crate::connector::kafka::repartition_purge::RepartitionPurger;
use crate::connector::kafka::repartition_watermark::{WATERMARK_HEADER, WatermarkMarker};
use crate::connector::kafka::transactional_producer::TransactionalProducer;
use crate::connector::kafka::unit_plan::UnitPlan;
use crate::fault::{self, FaultPoint};
use crate::record::CheckpointId;
use crate::record::batch::RecordBatch;
use crate::record::ids;
use crate::storage::Fence;
use crate::watchdog::{self, RunningDeadline, Watch};

/// The commit unit of a pipeline run as one process (worker 0/1). Worker I of N > 1 is
/// unit `<I>-of-<N>` (`Worker::unit`).
pub const LOCAL_UNIT: &str = "0";
/// Bound on `init_transactions` and on reading the markers at start: the coordinator may
/// have to wait out a previous instance's transaction being aborted. (A checkpoint's
/// flush and commit are bounded by the checkpoint's own deadline instead.)
const TRANSACTION_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on one attempt of a checkpoint's transactional call (see `retrying`): longer
/// than a healthy call takes under load, shorter than the checkpoint timeout, so that
/// an attempt stuck on a dead coordinator leaves time for more.
const TRANSACTION_ATTEMPT: Duration = Duration::from_secs(10);
/// Pause before a retriable transactional call is made again.
const TRANSACTION_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Wait between two attempts to enqueue a record while librdkafka's queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(1);
/// How often a sink subtask waiting for acknowledgements looks whether the run was
/// abandoned.
const ABANDON_POLL: Duration = Duration::from_millis(50);

type KafkaProducer = ThreadedProducer<DeliveryContext>;

/// The transaction a producer has open.
#[derive(Debug, Clone, Copy)]
struct OpenTransaction {
    checkpoint: CheckpointId,
    since: Instant,
}

/// One producer and the transaction it has open.
struct Slot {
    /// The transactional id (or a description for the at-least-once producer).
    id: String,
    /// The thread of the producer's checkpoint-time calls, started at the first.
    calls: OnceLock<CallThread>,
    /// rdkafka's producer in a run; a fake in the in-process tests. `None` only once
    /// the unit is being dropped (see `KafkaCommitUnit`'s `Drop`).
    producer: Option<Arc<dyn TransactionalProducer>>,
    open: Mutex<Option<OpenTransaction>>,
}

impl Slot {
    fn new(id: String, producer: Arc<dyn TransactionalProducer>) -> Slot {
        Slot {
            id,
            calls: OnceLock::new(),
            producer: Some(producer),
            open: Mutex::new(None),
        }
    }

    fn producer(&self) -> &dyn TransactionalProducer {
        self.producer
            .as_deref()
            .expect("a slot's producer is taken only when its unit is dropped")
    }

    /// The producer's call thread, started now if this is its first call.
    fn calls(&self) -> Result<&CallThread, KafkaError> {
        if let Some(calls) = self.calls.get() {
            return Ok(calls);
        }
        let producer = self
            .producer
            .clone()
            .expect("a slot's producer is taken only when its unit is dropped");
        let started =
            CallThread::spawn("weir-kafka-call", producer).map_err(|e| KafkaError::Client {
                what: format!("producer {}: cannot start its call thread", self.id),
                reason: e.to_string(),
            })?;
        Ok(self.calls.get_or_init(|| started))
    }

    fn open(&self) -> MutexGuard<'_, Option<OpenTransaction>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open_checkpoint(&self) -> Option<CheckpointId> {
        self.open().map(|t| t.checkpoint)
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
        /// What recovery found of the markers when the unit opened.
        found: FoundMarkers,
        /// Counts the marker records (never waited on).
        marker_records: Arc<InFlight>,
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
    /// Bounds each wait of a sink subtask on the broker (see the module doc).
    checkpoint_timeout: Duration,
    /// Set by `abandon`: the run ends, every wait of a sink subtask ends now.
    abandoned: AtomicBool,
    /// Set by `abandon` when the run failed: close the producers without waiting.
    close_detached: AtomicBool,
    mode: Mode,
    fence: Fence,
    /// Worker I of N > 1 with keyed steps: purges what it read of its repartition
    /// partitions (of every keyed step's topic) once no retained checkpoint needs it.
    purger: Option<RepartitionPurger>,
    /// See `repartition_partitions`.
    repartition_partitions: Option<u16>,
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
    /// markers are read. `None` when the pipeline has no Kafka sink. `from_scratch`:
    /// ignore the markers (the checkpoints were deleted). `fence` is raised as soon as
    /// the unit learns that another instance owns the pipeline.
    pub fn open(
        plan: &UnitPlan<'_>,
        from_scratch: bool,
        fence: Fence,
    ) -> Result<Option<Arc<Self>>, ConnectorError> {
        let sinks = &plan.sinks;
        let Some(sink) = preflight::shared_settings(sinks)? else {
            return Ok(None);
        };
        preflight::check_transaction_timeout(
            sink,
            plan.checkpoint_interval,
            plan.checkpoint_timeout,
        )?;
        let endpoint = sink.endpoint()?;
        let timeout = sink.connect_timeout;
        client::authenticate(&endpoint, timeout)?;
        let bootstrap = endpoint.bootstrap.clone();
        let admin = client::admin(&endpoint, timeout)?;
        check_on_broker(sinks, sink, (&admin, &bootstrap), timeout)?;
        // Before the marker target lists the sources' partitions: the repartition
        // sources read these topics, cut into the partition count in use.
        let repartition_partitions = repartition::ensure_topics(
            &admin,
            &bootstrap,
            &plan.repartitions,
            plan.repartition_partitions,
            timeout,
        )?;
        let plan = &*plan.with_repartition_partitions(repartition_partitions);
        let mode = open_mode(plan, sink, (&endpoint, &admin), from_scratch, &fence)?;
        // The admin client's last use here: the purger keeps it.
        let purger = (!plan.repartitions.is_empty())
            .then(|| {
                RepartitionPurger::start(
                    &plan.pipeline,
                    plan.worker,
                    plan.layout,
                    &plan.repartitions,
                    admin,
                    timeout,
                )
            })
            .transpose()?;
        Ok(Some(Arc::new(KafkaCommitUnit {
            pipeline: plan.pipeline.clone(),
            bootstrap,
            transaction_timeout: sink.transaction_timeout,
            checkpoint_timeout: plan.checkpoint_timeout,
            abandoned: AtomicBool::new(false),
            close_detached: AtomicBool::new(false),
            mode,
            fence,
            purger,
            repartition_partitions,
        })))
    }

    /// The partition count of the worker's repartition topics (`None` without them):
    /// the spec's, or an existing topic's the spec's default gave way to (see
    /// `repartition::ensure_topic`); the worker runs with it
    /// (`pipeline::WorkerPlan::with_repartition_partitions`).
    pub fn repartition_partitions(&self) -> Option<u16> {
        self.repartition_partitions
    }

    /// After checkpoint garbage collection: `kept` are the checkpoints a later run may
    /// still restore (see `repartition_purge`).
    pub fn retained(&self, kept: &[CheckpointMetadata]) {
        if let Some(purger) = &self.purger {
            purger.retained(kept);
        }
    }

    pub fn is_exactly_once(&self) -> bool {
        matches!(self.mode, Mode::ExactlyOnce { .. })
    }

    /// What recovery found of the markers (exactly-once only; `None` otherwise).
    pub fn found_markers(&self) -> Option<&FoundMarkers> {
        match &self.mode {
            Mode::ExactlyOnce { found, .. } => Some(found),
            Mode::AtLeastOnce { .. } => None,
        }
    }

    /// Where the markers live (exactly-once only).
    pub fn marker_target(&self) -> Option<&MarkerTarget> {
        match &self.mode {
            Mode::ExactlyOnce { marker, .. } => Some(marker),
            Mode::AtLeastOnce { .. } => None,
        }
    }

    /// The run ends without committing anything more (it failed, or stopped after its
    /// last checkpoint): every wait of a sink subtask on the broker ends now. A failed
    /// run's producers are closed without waiting for the broker (see `Drop`); a
    /// stopped run's close as usual.
    pub fn abandon(&self, failed: bool) {
        self.close_detached.store(failed, Ordering::SeqCst);
        self.abandoned.store(true, Ordering::SeqCst);
    }

    fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// Watches a call of this unit on the broker that must be over by `bound`.
    fn watch(&self, call: &str, bound: Instant) -> Watch {
        watchdog::watch(
            &self.pipeline,
            format!("{call} (Kafka at {})", self.bootstrap),
            bound,
        )
    }

    /// Waits until the broker has acknowledged every record counted in `in_flight`
    /// (a sink subtask's records of the checkpoint before `checkpoint`, sent to
    /// `topic`): see "Order" in `sink.rs`. Bounded by the checkpoint timeout; ends
    /// early if the run is abandoned.
    pub fn await_acknowledged(
        &self,
        checkpoint: CheckpointId,
        topic: &str,
        in_flight: &InFlight,
    ) -> Result<(), KafkaError> {
        if in_flight.count() == 0 {
            return Ok(());
        }
        let bound = Instant::now() + self.checkpoint_timeout;
        let call = format!(
            "waiting for the acknowledgement of the records sent to {topic} before checkpoint {checkpoint}"
        );
        let _watch = self.watch(&call, bound);
        loop {
            if in_flight.wait_drained(remaining(bound).min(ABANDON_POLL)) {
                return Ok(());
            }
            if self.abandoned() {
                return Err(self.abandoned_error(call));
            }
            if Instant::now() >= bound {
                return Err(self.stalled(
                    format!("{call} ({} records)", in_flight.count()),
                    self.checkpoint_timeout,
                ));
            }
        }
    }

    fn stalled(&self, call: String, waited: Duration) -> KafkaError {
        KafkaError::BrokerStalled {
            call,
            bootstrap: self.bootstrap.clone(),
            waited,
        }
    }

    fn abandoned_error(&self, what: String) -> KafkaError {
        KafkaError::Abandoned {
            what,
            bootstrap: self.bootstrap.clone(),
        }
    }

    /// The error of a call (`call`, begun at `started`) on `slot`'s producer: a
    /// timeout says that the broker did not answer.
    fn call_error(
        &self,
        slot: &Slot,
        call: &str,
        e: &RdKafkaError,
        started: Instant,
    ) -> KafkaError {
        let error = self.error(slot, call, e);
        if is_timeout(e) && matches!(error, KafkaError::Client { .. }) {
            return self.stalled(format!("producer {}: {call}", slot.id), started.elapsed());
        }
        error
    }

    /// Makes the transactional call `attempt(bound)` on `slot`'s call thread, watched,
    /// until it succeeds, fails other than retriably, or `deadline` passes. librdkafka
    /// marks a transaction coordinator that is moving (not available, loading, not the
    /// coordinator) and a call that timed out as retriable, and resumes the same call
    /// when it is made again; each attempt is bounded by [`TRANSACTION_ATTEMPT`], so
    /// that one sent to a broker that died is made again once the cluster elected a
    /// new coordinator, not only at the deadline. An attempt that librdkafka does not
    /// return from is left behind (`call_thread`): the run fails, transiently.
    fn retrying(
        &self,
        slot: &Slot,
        call: &str,
        deadline: Instant,
        attempt: impl Fn(Duration) -> Call,
    ) -> Result<(), KafkaError> {
        let (_watch, started) = (self.watch(call, deadline), Instant::now());
        let (mut deadline, mut retries) = (deadline, 0u32);
        loop {
            let bound = remaining(deadline).min(TRANSACTION_ATTEMPT);
            let returned = slot
                .calls()?
                .make(bound, attempt(bound))
                .map_err(|left| self.left_behind(slot, call, left))?;
            if !returned.paused.is_zero() {
                // The process was stopped while the call waited: its time is not the
                // broker's, and the deadline gets it back (a retriable answer made in
                // the pause, a timeout among them, is made again).
                deadline += returned.paused;
                tracing::info!(pipeline = %self.pipeline, producer = %slot.id, call, paused = ?returned.paused,
                    "kafka: the process was stopped during a transactional call: its deadline moves by the pause");
            }
            let e = match returned.result {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let class = classify(&e);
            if class != ErrorClass::Retriable
                || Instant::now() + TRANSACTION_RETRY_PAUSE >= deadline
            {
                return Err(self.final_error(slot, call, (&e, class), started));
            }
            retries += 1;
            tracing::warn!(pipeline = %self.pipeline, producer = %slot.id, call, retries, error = %e,
                "kafka: a retriable error (a broker failing over?): making the call again");
            let mut running = RunningDeadline::new(deadline);
            running.sleep(TRANSACTION_RETRY_PAUSE);
            deadline = running.at();
        }
    }

    /// The error that ends `retrying`: a fencing or a timeout as `call_error` says; else
    /// an abortable error means the coordinator moved (transient), and a retriable one
    /// still failing at the deadline, a cluster that did not recover in the bound (a
    /// stall: transient, the run restarts from its last committed checkpoint).
    fn final_error(
        &self,
        slot: &Slot,
        call: &str,
        (e, class): (&RdKafkaError, ErrorClass),
        started: Instant,
    ) -> KafkaError {
        let error = self.call_error(slot, call, e, started);
        if !matches!(error, KafkaError::Client { .. }) {
            return error;
        }
        match class {
            ErrorClass::Abortable => KafkaError::TransactionAborted {
                transactional_id: slot.id.clone(),
                call: call.to_owned(),
                reason: reason(e),
            },
            ErrorClass::Retriable => self.stalled(
                format!("producer {}: {call} (last: {})", slot.id, reason(e)),
                started.elapsed(),
            ),
            _ => error,
        }
    }

    /// The error of a call that librdkafka did not return from in its bound.
    fn left_behind(&self, slot: &Slot, call: &str, left: call_thread::LeftBehind) -> KafkaError {
        tracing::warn!(pipeline = %self.pipeline, producer = %slot.id, call, waited = ?left.waited,
            "kafka: librdkafka did not return from a transactional call past its bound: leaving it behind");
        self.stalled(
            format!(
                "producer {}: {call} (not returned {} s past its bound: left behind)",
                slot.id,
                call_thread::GRACE.as_secs_f64()
            ),
            left.waited,
        )
    }

    fn slot(&self, checkpoint: CheckpointId) -> &Slot {
        match &self.mode {
            Mode::ExactlyOnce { slots, .. } => &slots[(checkpoint.0 % 2) as usize],
            Mode::AtLeastOnce { slot } => slot,
        }
    }

    fn error(&self, slot: &Slot, what: &str, e: &RdKafkaError) -> KafkaError {
        transactional_error(
            &self.pipeline,
            slot,
            what,
            e,
            self.transaction_timeout,
            &self.fence,
        )
    }

    /// Fails if the slot's producer already reported a failed delivery or was fenced.
    fn check_deliveries(&self, slot: &Slot, checkpoint: CheckpointId) -> Result<(), KafkaError> {
        let context = slot.producer().context();
        if context.fenced() || fatal_fenced(slot) {
            return Err(fenced_error(
                &self.pipeline,
                slot,
                &format!("writing checkpoint {checkpoint}"),
                self.transaction_timeout,
                &self.fence,
            ));
        }
        if let Some(reason) = context.failure().clone() {
            // Records time out locally after `transaction_timeout` (message.timeout.ms):
            // a stopped process finds its transaction aborted this way first.
            if let Some(timed_out) = self.timed_out(slot, &format!("delivering records ({reason})"))
            {
                return Err(timed_out);
            }
            let transient = context.failure_is_transient();
            return Err(KafkaError::Delivery {
                checkpoint,
                reason,
                transient,
            });
        }
        Ok(())
    }

    /// `TransactionTimedOut` if the slot's open transaction outlived the timeout (the
    /// broker has aborted it); raises the fence, since this instance is done.
    fn timed_out(&self, slot: &Slot, what: &str) -> Option<KafkaError> {
        let error = timed_out_error(slot, what, self.transaction_timeout)?;
        self.fence.raise(error.to_string());
        Some(error)
    }

    /// Begins T(`checkpoint`) on its producer unless it is already open.
    fn ensure_open(&self, slot: &Slot, checkpoint: CheckpointId) -> Result<(), KafkaError> {
        if !self.is_exactly_once() {
            return Ok(());
        }
        let mut open = slot.open();
        match *open {
            Some(t) if t.checkpoint == checkpoint => Ok(()),
            Some(t) => Err(KafkaError::Protocol {
                transactional_id: slot.id.clone(),
                reason: format!(
                    "transaction of checkpoint {} still open when checkpoint {checkpoint} needs it",
                    t.checkpoint
                ),
            }),
            None => {
                let since = Instant::now();
                if let Err(e) = slot.producer().begin_transaction() {
                    // `error` looks at the open transaction: release the lock first.
                    drop(open);
                    return Err(self.error(
                        slot,
                        &format!("beginning the transaction of checkpoint {checkpoint}"),
                        &e,
                    ));
                }
                *open = Some(OpenTransaction { checkpoint, since });
                Ok(())
            }
        }
    }

    /// Sends `batch` to `topic` as part of checkpoint `checkpoint`'s output (inside
    /// T(checkpoint) for exactly-once), blocking while librdkafka's queue is full; the
    /// producer's partitioner picks each record's partition. Every record is counted in
    /// `in_flight` until the broker acknowledges it.
    pub fn send_batch(
        &self,
        checkpoint: CheckpointId,
        topic: &str,
        batch: &RecordBatch,
        in_flight: &Arc<InFlight>,
    ) -> Result<(), KafkaError> {
        let slot = self.slot(checkpoint);
        self.check_deliveries(slot, checkpoint)?;
        self.ensure_open(slot, checkpoint)?;
        for i in 0..batch.len() {
            let r = batch.get(i);
            let mut record: BaseRecord<'_, [u8], [u8], Arc<InFlight>> =
                BaseRecord::with_opaque_to(topic, in_flight.clone()).payload(r.value);
            if !r.key.is_empty() {
                record = record.key(r.key);
            }
            if r.timestamp >= 0 {
                record = record.timestamp(r.timestamp);
            }
            in_flight.add(1);
            self.send_record(slot, record, topic)?;
        }
        Ok(())
    }

    /// Sends `frame` (`repartition_frame`) to `partition` of repartition topic `topic`
    /// as part of checkpoint `checkpoint`'s output, as `send_batch` sends a record.
    pub fn send_frame(
        &self,
        checkpoint: CheckpointId,
        (topic, partition): (&str, i32),
        frame: &[u8],
        in_flight: &Arc<InFlight>,
    ) -> Result<(), KafkaError> {
        let slot = self.slot(checkpoint);
        self.check_deliveries(slot, checkpoint)?;
        self.ensure_open(slot, checkpoint)?;
        let headers = OwnedHeaders::new_with_capacity(1).insert(Header {
            key: FRAME_HEADER,
            value: Some(FRAME_VERSION),
        });
        let record: BaseRecord<'_, [u8], [u8], Arc<InFlight>> =
            BaseRecord::with_opaque_to(topic, in_flight.clone())
                .partition(partition)
                .payload(frame)
                .headers(headers);
        in_flight.add(1);
        self.send_record(slot, record, topic)
    }

    /// Writes `marker` to every partition of repartition topic `topic` (`partitions`
    /// of them) as part of checkpoint `checkpoint`'s output: a record with no key or
    /// value and the marker in its `repartition_watermark::WATERMARK_HEADER`.
    pub fn send_watermark(
        &self,
        checkpoint: CheckpointId,
        (topic, partitions): (&str, u16),
        marker: &WatermarkMarker,
        in_flight: &Arc<InFlight>,
    ) -> Result<(), KafkaError> {
        let slot = self.slot(checkpoint);
        self.check_deliveries(slot, checkpoint)?;
        self.ensure_open(slot, checkpoint)?;
        let value = marker.encode();
        for partition in 0..partitions {
            let headers = OwnedHeaders::new_with_capacity(1).insert(Header {
                key: WATERMARK_HEADER,
                value: Some(value.as_slice()),
            });
            let record: BaseRecord<'_, [u8], [u8], Arc<InFlight>> =
                BaseRecord::with_opaque_to(topic, in_flight.clone())
                    .partition(i32::from(partition))
                    .headers(headers);
            in_flight.add(1);
            self.send_record(slot, record, topic)?;
        }
        Ok(())
    }

    /// Hands one record to librdkafka, waiting while its queue is full: at most the
    /// checkpoint timeout, and not once the run is abandoned.
    fn send_record(
        &self,
        slot: &Slot,
        mut record: BaseRecord<'_, [u8], [u8], Arc<InFlight>>,
        topic: &str,
    ) -> Result<(), KafkaError> {
        // Set at the first refusal: a full queue is the exception.
        let mut full: Option<(Instant, Watch)> = None;
        loop {
            let (error, back) = match slot.producer().send(record) {
                Ok(()) => return Ok(()),
                Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    let call = || format!("sending to topic {topic} (librdkafka's queue is full)");
                    let (since, _) = full.get_or_insert_with(|| {
                        let since = Instant::now();
                        (since, self.watch(&call(), since + self.checkpoint_timeout))
                    });
                    if self.abandoned() {
                        (self.abandoned_error(call()), back)
                    } else if since.elapsed() >= self.checkpoint_timeout {
                        (self.stalled(call(), self.checkpoint_timeout), back)
                    } else {
                        record = back;
                        std::thread::sleep(QUEUE_FULL_BACKOFF);
                        continue;
                    }
                }
                Err((e, back)) => (
                    self.error(slot, &format!("sending to topic {topic}"), &e),
                    back,
                ),
            };
            // Never handed over: no delivery report will count it.
            back.delivery_opaque.done();
            return Err(error);
        }
    }

    /// Phase one for checkpoint `id`: every sink subtask has passed barrier `id`, so all
    /// of T(id)'s records are queued on producer `id mod 2`; flush them (by `deadline`)
    /// and check that every one was acknowledged.
    pub fn pre_commit(&self, id: CheckpointId, deadline: Instant) -> Result<(), KafkaError> {
        let slot = self.slot(id);
        if self.is_exactly_once() && slot.open_checkpoint() != Some(id) {
            // No output in this checkpoint: nothing to flush.
            return self.check_deliveries(slot, id);
        }
        let call = format!("flushing checkpoint {id}");
        let (_watch, started) = (self.watch(&call, deadline), Instant::now());
        slot.producer()
            .flush(remaining(deadline))
            .map_err(|e| self.call_error(slot, &call, &e, started))?;
        self.check_deliveries(slot, id)
    }

    /// Phase two for the complete checkpoint `metadata.id` = n: record both copies of
    /// the marker inside T(n) and commit it, by `deadline`. A checkpoint at or before
    /// the last committed one is already committed (the redo on recovery): nothing to
    /// do. A transactional call that fails retriably (the coordinator moving in a
    /// broker's failover, a request timing out) is made again until `deadline`
    /// (`retrying`); any other failure fails the pipeline, whose recovery aborts T(n)
    /// and restores the last committed checkpoint.
    pub fn commit(
        &self,
        metadata: &CheckpointMetadata,
        deadline: Instant,
    ) -> Result<(), KafkaError> {
        let Mode::ExactlyOnce {
            marker,
            group_consumer,
            committed,
            marker_records,
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
        let key = marker.record_key();
        let text = marker.text(id);
        marker_records.add(1);
        self.send_record(
            slot,
            BaseRecord::with_opaque_to(&marker.progress_topic, marker_records.clone())
                .partition(0)
                .key(key.as_bytes())
                .payload(text.as_bytes()),
            &marker.progress_topic,
        )?;
        let offsets = marker.offsets(metadata)?;
        let group = group_consumer
            .group_metadata()
            .ok_or_else(|| KafkaError::Client {
                what: format!("cannot commit checkpoint {id}"),
                reason: format!("no consumer group metadata for group {}", marker.group),
            })?;
        let call = format!("adding the offsets of checkpoint {id} to its transaction");
        if fault::fails(FaultPoint::AbortTransaction) {
            return Err(KafkaError::TransactionAborted {
                transactional_id: slot.id.clone(),
                call,
                reason: "fault injection (WEIR_FAULT=abort-transaction)".into(),
            });
        }
        let (offsets, group) = (Arc::new(offsets), Arc::new(group));
        self.retrying(slot, &call, deadline, |bound| {
            let (offsets, group) = (offsets.clone(), group.clone());
            Box::new(move |p| p.send_offsets_to_transaction(&offsets, &group, bound))
        })?;
        let call = format!("committing the transaction of checkpoint {id}");
        self.retrying(slot, &call, deadline, |bound| {
            Box::new(move |p| p.commit_transaction(bound))
        })?;
        *slot.open() = None;
        *committed.lock().unwrap_or_else(|e| e.into_inner()) = id;
        Ok(())
    }
}

impl KafkaCommitUnit {
    fn slots_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        match &mut self.mode {
            Mode::ExactlyOnce { slots, .. } => slots.iter_mut().collect::<Vec<_>>(),
            Mode::AtLeastOnce { slot } => vec![slot],
        }
        .into_iter()
    }
}

/// A failed run's producers are closed on a thread of their own, which nothing waits
/// for: closing a transactional producer may wait for its broker (seen: until a paused
/// broker answered again), and a failed run must not wait for a stalled broker to end.
/// What it left open is aborted by the next run's `init_transactions` (or by the
/// broker, after `transaction_timeout`).
impl Drop for KafkaCommitUnit {
    fn drop(&mut self) {
        if !self.close_detached.load(Ordering::SeqCst) {
            return;
        }
        let producers: Vec<_> = self.slots_mut().filter_map(|s| s.producer.take()).collect();
        let closing = std::thread::Builder::new()
            .name("weir-kafka-close".into())
            .spawn(move || drop(producers));
        if let Err(e) = closing {
            tracing::warn!("cannot close the Kafka producers on a thread of their own: {e}");
        }
    }
}

/// The producers of `sink`'s delivery guarantee: one idempotent producer, or the two
/// transactional ones of an exactly-once unit (its progress topic ensured first).
fn open_mode(
    plan: &UnitPlan<'_>,
    sink: &KafkaSinkConfig,
    (endpoint, admin): (&Endpoint, &AdminClient<QuietContext>),
    from_scratch: bool,
    fence: &Fence,
) -> Result<Mode, ConnectorError> {
    let (bootstrap, timeout) = (&endpoint.bootstrap, sink.connect_timeout);
    Ok(match sink.delivery {
        DeliveryGuarantee::AtLeastOnce => {
            let mut config = producer_config(sink, endpoint);
            config.set("enable.idempotence", "true");
            let slot = new_slot(
                &plan.pipeline,
                format!("the at-least-once producer of {}", plan.pipeline),
                &config,
                fence,
            )?;
            Mode::AtLeastOnce { slot }
        }
        DeliveryGuarantee::ExactlyOnce => {
            let marker = marker_target(plan, sink, endpoint)?;
            client::ensure_topic(
                admin,
                bootstrap,
                ("progress", &marker.progress_topic),
                1,
                &PROGRESS_TOPIC_CONFIG,
                timeout,
            )?;
            open_exactly_once(plan, sink, endpoint, marker, from_scratch, fence)?
        }
    })
}

/// What the broker must allow before a unit opens: `sink`'s transaction timeout within
/// the broker's maximum (exactly-once; the broker checks it itself at
/// `init_transactions` when the principal may not read the maximum), and every sink's
/// topic in `sinks`.
fn check_on_broker(
    sinks: &[(String, &KafkaSinkConfig)],
    sink: &KafkaSinkConfig,
    (admin, bootstrap): (&AdminClient<QuietContext>, &str),
    timeout: Duration,
) -> Result<(), ConnectorError> {
    if sink.delivery == DeliveryGuarantee::ExactlyOnce {
        match client::broker_transaction_max_timeout_ms(admin, bootstrap, timeout)? {
            Some(max) => preflight::check_broker_max(sink, max)?,
            None => {
                tracing::info!(%bootstrap, "kafka sink: may not read the broker's transaction.max.timeout.ms (no DescribeConfigs on the cluster); the broker checks transaction_timeout when the producers initialise")
            }
        }
    }
    for (_, s) in sinks {
        topic_partitions(admin.inner(), bootstrap, &s.topic, timeout)?;
    }
    Ok(())
}

/// What is left until `deadline`, at least a millisecond (librdkafka reads zero as
/// "do not wait at all", which would fail a call that could still succeed at once).
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Opens the two transactional producers of an exactly-once unit: refuses a group that
/// holds another pipeline's marker (before fencing anything), fences earlier instances
/// of this pipeline, then reads both copies of the marker.
fn open_exactly_once(
    plan: &UnitPlan<'_>,
    sink: &KafkaSinkConfig,
    endpoint: &Endpoint,
    marker: MarkerTarget,
    from_scratch: bool,
    fence: &Fence,
) -> Result<Mode, KafkaError> {
    let opener = ExactlyOnceOpener {
        plan,
        sink,
        endpoint,
        marker: &marker,
        fence,
    };
    opener.refuse_shared_group()?;
    let group_consumer = opener.offsets_consumer("read_committed")?;
    let slots = opener.slots()?;
    opener.init_transactions(&slots)?;
    let found = if from_scratch {
        opener.reset_marker(&slots[0])?
    } else {
        opener.read_markers(&group_consumer)?
    };
    opener.report_markers(&found);
    let committed = found.last_committed().unwrap_or(CheckpointId::NONE);
    tracing::info!(pipeline = %plan.pipeline, group = %marker.group, last_committed = %committed, "kafka sink: transactions initialised");
    Ok(Mode::ExactlyOnce {
        slots,
        marker,
        group_consumer,
        committed: Mutex::new(committed),
        found,
        marker_records: Arc::new(InFlight::default()),
    })
}

/// The steps of `open_exactly_once`, in the order it calls them.
struct ExactlyOnceOpener<'a> {
    plan: &'a UnitPlan<'a>,
    sink: &'a KafkaSinkConfig,
    endpoint: &'a Endpoint,
    marker: &'a MarkerTarget,
    fence: &'a Fence,
}

impl ExactlyOnceOpener<'_> {
    /// A consumer of the marker group's committed offsets, at `isolation`; it never
    /// subscribes.
    ///
    /// read_committed makes librdkafka's OffsetFetch wait for stable offsets: right for
    /// reading the marker once our producers are initialised, but before that a crashed
    /// instance's open transaction can hold the group's offsets pending until it times
    /// out. Who owns the group is read from the committed offsets as they stand.
    fn offsets_consumer(&self, isolation: &str) -> Result<BaseConsumer<QuietContext>, KafkaError> {
        client_config(self.endpoint, self.sink.connect_timeout)
            .set("group.id", &self.marker.group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", isolation)
            .create_with_context(QuietContext)
            .map_err(|e| KafkaError::client("cannot create the offsets consumer", &e))
    }

    /// Refuses a marker group holding another pipeline's marker, before anything is
    /// fenced.
    fn refuse_shared_group(&self) -> Result<(), KafkaError> {
        let owner_probe = self.offsets_consumer("read_uncommitted")?;
        if let (_, Some(owner)) = self
            .marker
            .read_group(&owner_probe, TRANSACTION_CALL_TIMEOUT)?
        {
            return Err(KafkaError::GroupShared {
                pipeline: self.plan.pipeline.clone(),
                group: self.marker.group.clone(),
                owner,
            });
        }
        Ok(())
    }

    /// The two transactional producers, `{prefix}{pipeline}.{worker}.{0,1}`, both
    /// created before either's failure is reported.
    fn slots(&self) -> Result<[Slot; 2], KafkaError> {
        let (plan, sink) = (self.plan, self.sink);
        let slots = [0, 1].map(|i| {
            let id = KafkaNames::new(&sink.transactional_prefix, &plan.pipeline)
                .for_worker(plan.worker)
                .transactional_id(i);
            let mut config = producer_config(sink, self.endpoint);
            config.set("transactional.id", &id).set(
                "transaction.timeout.ms",
                sink.transaction_timeout.as_millis().to_string(),
            );
            new_slot(&plan.pipeline, id, &config, self.fence)
        });
        let [a, b] = slots;
        Ok([a?, b?])
    }

    /// Fences every earlier instance and aborts what it left open. Both before reading
    /// the marker: afterwards no one else can commit.
    fn init_transactions(&self, slots: &[Slot; 2]) -> Result<(), KafkaError> {
        for slot in slots {
            let _watch = watchdog::watch(
                &self.plan.pipeline,
                format!(
                    "initialising transactions of producer {} (Kafka at {})",
                    slot.id, self.endpoint.bootstrap
                ),
                Instant::now() + TRANSACTION_CALL_TIMEOUT,
            );
            slot.producer()
                .init_transactions(TRANSACTION_CALL_TIMEOUT)
                .map_err(|e| {
                    // Reached when the principal may not read the broker's maximum
                    // (see `open`): the broker refuses the timeout itself.
                    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidTransactionTimeout) {
                        return KafkaError::TransactionTimeoutRefused {
                            timeout: self.sink.transaction_timeout,
                        };
                    }
                    transactional_error(
                        &self.plan.pipeline,
                        slot,
                        "initialising transactions",
                        &e,
                        self.sink.transaction_timeout,
                        self.fence,
                    )
                })?;
        }
        Ok(())
    }

    /// `--from-scratch`: the progress topic still holds the last incarnation's marker,
    /// and the new one numbers its checkpoints from 1 again: mark the start over, so
    /// that a crash before the first commit of this incarnation is not read as "the old
    /// marker is newer than any checkpoint in storage". Nothing found.
    fn reset_marker(&self, slot: &Slot) -> Result<FoundMarkers, KafkaError> {
        reset_marker(
            &self.plan.pipeline,
            slot,
            self.marker,
            self.sink.transaction_timeout,
            self.fence,
        )?;
        Ok(FoundMarkers::default())
    }

    /// Both copies of the marker: the group's, then the progress topic's.
    fn read_markers(
        &self,
        group_consumer: &BaseConsumer<QuietContext>,
    ) -> Result<FoundMarkers, KafkaError> {
        let topic = self
            .marker
            .read_topic(self.endpoint, TRANSACTION_CALL_TIMEOUT)?;
        Ok(FoundMarkers {
            group: self
                .marker
                .read_group(group_consumer, TRANSACTION_CALL_TIMEOUT)?
                .0,
            topic: topic.as_ref().map(|m| m.checkpoint),
            foreign: None,
            rescaled_to: topic.and_then(|m| m.rescaled_to),
        })
    }

    /// Warns when the two copies of the marker disagree or the group's is missing.
    fn report_markers(&self, found: &FoundMarkers) {
        let (plan, marker) = (self.plan, self.marker);
        if found.group.is_some() && found.topic.is_some() && found.group != found.topic {
            tracing::warn!(pipeline = %plan.pipeline, group = ?found.group, topic = ?found.topic, "kafka sink: the group's marker and the progress topic's disagree (offsets reset by a tool?); the progress topic's counts");
        } else if found.group.is_none() && found.topic.is_some() {
            tracing::warn!(pipeline = %plan.pipeline, group = %marker.group, topic = %marker.progress_topic, "kafka sink: the group holds no marker (offsets expired, reset or deleted); resuming from the progress topic's, and the next commit writes the group's offsets again");
        }
    }
}

/// Commits a transaction holding only the marker of checkpoint 0 ("nothing committed")
/// on the progress topic: `--from-scratch` starts the marker over.
fn reset_marker(
    pipeline: &str,
    slot: &Slot,
    marker: &MarkerTarget,
    transaction_timeout: Duration,
    fence: &Fence,
) -> Result<(), KafkaError> {
    let what = "resetting the progress marker (--from-scratch)";
    let fail =
        |e: &RdKafkaError| transactional_error(pipeline, slot, what, e, transaction_timeout, fence);
    slot.producer().begin_transaction().map_err(|e| fail(&e))?;
    let key = marker.record_key();
    let text = marker.text(CheckpointId::NONE);
    let record: BaseRecord<'_, [u8], [u8], Arc<InFlight>> =
        BaseRecord::with_opaque_to(&marker.progress_topic, Arc::new(InFlight::default()))
            .partition(0)
            .key(key.as_bytes())
            .payload(text.as_bytes());
    slot.producer().send(record).map_err(|(e, _)| fail(&e))?;
    slot.producer()
        .commit_transaction(TRANSACTION_CALL_TIMEOUT)
        .map_err(|e| fail(&e))
}

fn producer_config(sink: &KafkaSinkConfig, endpoint: &Endpoint) -> ClientConfig {
    let mut config = client_config(endpoint, sink.connect_timeout);
    // Batching and the queue bounds of this producer's share of `buffer_bytes`: a full
    // queue makes `send_record` wait (backpressure), never drops a record.
    for (key, value) in sink.producer_settings() {
        config.set(key, value);
    }
    config
        // A record not delivered within the transaction's lifetime fails the checkpoint.
        .set(
            "message.timeout.ms",
            sink.transaction_timeout.as_millis().to_string(),
        );
    config
}

/// A producer `id` of `pipeline`'s unit; a fencing it reports raises `fence`.
fn new_slot(
    pipeline: &str,
    id: String,
    config: &ClientConfig,
    fence: &Fence,
) -> Result<Slot, KafkaError> {
    let fenced_reason = KafkaError::Fenced {
        pipeline: pipeline.to_owned(),
        transactional_id: id.clone(),
        what: "writing".to_owned(),
    }
    .to_string();
    let producer: KafkaProducer = config
        .create_with_context(DeliveryContext::new(fence.clone(), fenced_reason))
        .map_err(|e| KafkaError::client(format!("cannot create producer {id}"), &e))?;
    Ok(Slot::new(id, Arc::new(producer)))
}

/// Whether the producer's fatal error (if it has one) is a fencing.
fn fatal_fenced(slot: &Slot) -> bool {
    slot.producer()
        .fatal_error()
        .is_some_and(|(code, _)| classify_code(code) == ErrorClass::Fenced)
}

fn transactional_error(
    pipeline: &str,
    slot: &Slot,
    what: &str,
    e: &RdKafkaError,
    transaction_timeout: Duration,
    fence: &Fence,
) -> KafkaError {
    // A transaction older than its timeout has been aborted by the broker, whatever
    // librdkafka says next: its records time out locally and the producer refuses
    // further sends with `__STATE` ("Erroneous state"), which is not a fencing code.
    let expired = timed_out_error(slot, what, transaction_timeout).is_some();
    if is_fenced(e) || fatal_fenced(slot) || expired {
        return fenced_error(pipeline, slot, what, transaction_timeout, fence);
    }
    KafkaError::client(format!("producer {}: {what}", slot.id), e)
}

/// The producer lost its transactional id's epoch. Either another instance initialised
/// the same id, or the broker aborted our transaction because it outlived
/// `transaction.timeout.ms` (this process was stopped or starved): the broker answers
/// both the same way, so the age of the open transaction tells them apart. Either way
/// this instance no longer owns the pipeline: raise the fence.
fn fenced_error(
    pipeline: &str,
    slot: &Slot,
    what: &str,
    transaction_timeout: Duration,
    fence: &Fence,
) -> KafkaError {
    let error =
        timed_out_error(slot, what, transaction_timeout).unwrap_or_else(|| KafkaError::Fenced {
            pipeline: pipeline.to_owned(),
            transactional_id: slot.id.clone(),
            what: what.to_owned(),
        });
    fence.raise(error.to_string());
    error
}

/// `TransactionTimedOut` if the slot's open transaction has outlived the timeout.
fn timed_out_error(slot: &Slot, what: &str, transaction_timeout: Duration) -> Option<KafkaError> {
    let open = (*slot.open())?;
    let open_for = open.since.elapsed();
    (open_for > transaction_timeout).then(|| KafkaError::TransactionTimedOut {
        transactional_id: slot.id.clone(),
        checkpoint: open.checkpoint,
        what: what.to_owned(),
        open_for,
        timeout: transaction_timeout,
    })
}

/// Where the marker goes: the group's offsets of the Kafka sources on the sink's
/// cluster (those in the group of the first such source), else an offset on the
/// worker's progress topic; the marker record always goes to the progress topic. A
/// worker of N > 1 commits (and reads back) only the offsets of the partitions it owns;
/// one that owns none of the group's partitions carries its marker like a pipeline
/// without Kafka sources.
fn marker_target(
    plan: &UnitPlan<'_>,
    sink: &KafkaSinkConfig,
    endpoint: &Endpoint,
) -> Result<MarkerTarget, KafkaError> {
    let bootstrap = endpoint.bootstrap.as_str();
    let names = KafkaNames::new(&sink.transactional_prefix, &plan.pipeline).for_worker(plan.worker);
    let mut target = MarkerTarget {
        pipeline: plan.pipeline.clone(),
        unit: names.unit(),
        generation: plan.layout.generation,
        group: names.group(),
        sources: Vec::new(),
        source_partitions: Vec::new(),
        progress_topic: names.progress_topic(),
    };
    for (s, c) in &plan.sources {
        if c.bootstrap()? != bootstrap {
            continue;
        }
        let group = c.group.clone().unwrap_or_else(|| names.group());
        if target.sources.is_empty() {
            target.group = group.clone();
        } else if target.group != group {
            continue;
        }
        target.sources.push(ids::source_id(*s));
        // The source's own credentials: those that read its topics.
        let probe: BaseConsumer<QuietContext> = client_config(&c.endpoint()?, c.connect_timeout)
            .create_with_context(QuietContext)
            .map_err(|e| KafkaError::client("cannot create a metadata client", &e))?;
        let mut all = Vec::new();
        for topic in c.topic_names() {
            let timeouts = (c.connect_timeout, c.failover_timeout);
            for p in client::source_topic_partitions(probe.client(), bootstrap, &topic, timeouts)? {
                all.push((topic.clone(), p));
            }
        }
        target
            .source_partitions
            .extend(repartition::worker_partitions(
                plan.worker,
                plan.repartition_read_by(*s),
                &all,
            ));
    }
    if target.source_partitions.is_empty() {
        target.sources.clear();
    }
    Ok(target)
}

#[cfg(test)]
#[path = "commit_unit_tests.rs"]
mod tests;
