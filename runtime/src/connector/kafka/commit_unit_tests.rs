//! In-process tests of the exactly-once commit unit with fake producers: which
//! producer carries which checkpoint's transaction, what phase one and phase two do on
//! it, and the protocol errors. No broker: the fakes log every call, and acknowledge a
//! record at once (or report it failed).

use std::sync::atomic::{AtomicBool, AtomicU64};

use rdkafka::message::Headers;
use rdkafka::{ClientConfig, TopicPartitionList};

use super::*;
use crate::cluster::KeyGroupRanges;
use crate::connector::kafka::client::QuietContext;
use crate::connector::kafka::repartition_frame::{self, FRAME_HEADER, FrameReader};
use crate::connector::kafka::repartition_watermark::{RepartitionWriter, RepartitionWriters};
use crate::connector::kafka::sink::KafkaSink;
use crate::connector::kafka::transactional_producer::UnitRecord;
use crate::dataflow::sink::Sink;
use crate::record::batch::RecordBatch;
use crate::record::message::{Barrier, Watermark};

type Log = Arc<Mutex<Vec<String>>>;

/// A producer that logs `<name> <call>` and acknowledges every record at once; with
/// `fail_deliveries`, reports every record failed instead; refuses the next
/// `queue_full` sends with librdkafka's QueueFull (a full producer queue); answers
/// its transactional calls as `refusals` says.
struct FakeProducer {
    name: &'static str,
    log: Log,
    context: DeliveryContext,
    fail_deliveries: AtomicBool,
    queue_full: AtomicU64,
    refusals: Refusals,
}

/// How a fake answers one transactional call: an error, or not before a while (a
/// call librdkafka does not return from in its bound).
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Error(RDKafkaErrorCode),
    Hang(Duration),
}

/// The answers to the next transactional calls, in order: (`"offsets"` or `"commit"`,
/// the answer). A fault injected at the call.
type Refusals = Arc<Mutex<std::collections::VecDeque<(&'static str, Refusal)>>>;

thread_local! {
    /// The refusals of the fakes this thread makes (the calls are made on the
    /// producers' call threads, which share them).
    static REFUSALS: Refusals = Refusals::default();
}

/// Makes the next transactional calls of this thread's fakes fail with `refusals`.
fn refuse(refusals: &[(&'static str, RDKafkaErrorCode)]) {
    let answers = refusals
        .iter()
        .map(|&(call, code)| (call, Refusal::Error(code)));
    REFUSALS.with(|r| r.lock().expect("refusals").extend(answers));
}

/// Makes the next `call` of this thread's fakes return only after `hang`.
fn hang(call: &'static str, hang: Duration) {
    REFUSALS.with(|r| {
        r.lock()
            .expect("refusals")
            .push_back((call, Refusal::Hang(hang)))
    });
}

impl FakeProducer {
    fn note(&self, what: String) {
        let mut log = self.log.lock().expect("log");
        log.push(format!("{} {what}", self.name));
    }

    /// The injected refusal of `call`, if it is next; logged.
    fn refused(&self, call: &'static str) -> rdkafka::error::KafkaResult<()> {
        let next = {
            let mut r = self.refusals.lock().expect("refusals");
            (r.front().map(|(c, _)| *c) == Some(call)).then(|| r.pop_front())
        };
        match next.flatten() {
            Some((_, Refusal::Error(code))) => {
                self.note(format!("{call} refused: {code:?}"));
                Err(RdKafkaError::MessageProduction(code))
            }
            Some((_, Refusal::Hang(hang))) => {
                self.note(format!("{call} hangs"));
                std::thread::sleep(hang);
                self.note(format!("{call} returned after hanging"));
                Ok(())
            }
            None => Ok(()),
        }
    }
}

impl TransactionalProducer for FakeProducer {
    fn context(&self) -> &DeliveryContext {
        &self.context
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        None
    }

    fn init_transactions(&self, _: Duration) -> rdkafka::error::KafkaResult<()> {
        self.note("init".into());
        Ok(())
    }

    fn begin_transaction(&self) -> rdkafka::error::KafkaResult<()> {
        self.note("begin".into());
        Ok(())
    }

    fn send<'a>(&self, record: UnitRecord<'a>) -> Result<(), (RdKafkaError, UnitRecord<'a>)> {
        let full = self
            .queue_full
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if full.is_ok() {
            self.note("queue full".into());
            return Err((
                RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                record,
            ));
        }
        self.note(format!("send {}", describe(&record)));
        if self.fail_deliveries.load(Ordering::SeqCst) {
            let mut failure = self.context.failure();
            failure.get_or_insert_with(|| format!("topic {}: broker said no", record.topic));
        }
        record.delivery_opaque.done();
        Ok(())
    }

    fn flush(&self, _: Duration) -> rdkafka::error::KafkaResult<()> {
        self.note("flush".into());
        Ok(())
    }

    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        _: &rdkafka::consumer::ConsumerGroupMetadata,
        _: Duration,
    ) -> rdkafka::error::KafkaResult<()> {
        self.refused("offsets")?;
        let list: Vec<String> = offsets
            .elements()
            .iter()
            .map(|e| format!("{}-{}@{:?}", e.topic(), e.partition(), e.offset()))
            .collect();
        self.note(format!("offsets {}", list.join(",")));
        Ok(())
    }

    fn refresh_metadata(&self, _: Duration) {}

    fn commit_transaction(&self, _: Duration) -> rdkafka::error::KafkaResult<()> {
        self.refused("commit")?;
        self.note("commit".into());
        Ok(())
    }
}

/// A record the fake sends, for its log: `<topic> <value>`; a repartition frame
/// `<topic>/<partition> frame <key>,<key>,...`, a watermark marker
/// `<topic>/<partition> watermark <ms>`.
fn describe(record: &UnitRecord<'_>) -> String {
    let (topic, partition) = (record.topic, record.partition.unwrap_or(-1));
    let payload = record.payload.unwrap_or_default();
    let header = |name: &str| {
        record.headers.as_ref().and_then(|h| {
            h.iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value.map(<[u8]>::to_vec))
        })
    };
    if header(FRAME_HEADER).is_some() {
        let mut frame = FrameReader::new(payload.to_vec());
        let mut keys = Vec::new();
        while let Some((key, _, _)) = frame.next_record().expect("a frame") {
            keys.push(String::from_utf8_lossy(key).into_owned());
        }
        return format!("{topic}/{partition} frame {}", keys.join(","));
    }
    if let Some(marker) = header(WATERMARK_HEADER) {
        let marker = WatermarkMarker::decode(&marker).expect("a marker");
        return format!("{topic}/{partition} watermark {}", marker.watermark.0);
    }
    format!("{topic} {}", String::from_utf8_lossy(payload))
}

/// An exactly-once unit of pipeline `p` over fake producers `p.0` and `p.1`, the last
/// committed checkpoint `committed`; and the log of their calls.
fn unit(committed: u64) -> (KafkaCommitUnit, Log) {
    unit_failing(committed, None)
}

/// The same, with the producer named `failing` reporting every delivery failed.
fn unit_failing(committed: u64, failing: Option<&str>) -> (KafkaCommitUnit, Log) {
    unit_with(committed, failing, 0)
}

/// The same, each producer's queue refusing its first `queue_full` sends as full.
fn unit_with(committed: u64, failing: Option<&str>, queue_full: u64) -> (KafkaCommitUnit, Log) {
    unit_of(
        committed,
        (failing, queue_full),
        DeliveryGuarantee::ExactlyOnce,
    )
}

/// The same, at `delivery`: at-least-once, one producer `p.0`.
fn unit_of(
    committed: u64,
    (failing, queue_full): (Option<&str>, u64),
    delivery: DeliveryGuarantee,
) -> (KafkaCommitUnit, Log) {
    let log = Log::default();
    let fence = Fence::default();
    let slot = |name: &'static str| {
        let fake = FakeProducer {
            name,
            log: log.clone(),
            context: DeliveryContext::new(fence.clone(), format!("{name} fenced")),
            fail_deliveries: AtomicBool::new(failing == Some(name)),
            queue_full: AtomicU64::new(queue_full),
            refusals: REFUSALS.with(Arc::clone),
        };
        Slot::new(name.to_owned(), Arc::new(fake))
    };
    let mode = match delivery {
        DeliveryGuarantee::ExactlyOnce => exactly_once([slot("p.0"), slot("p.1")], committed),
        DeliveryGuarantee::AtLeastOnce => Mode::AtLeastOnce { slot: slot("p.0") },
    };
    let unit = KafkaCommitUnit {
        pipeline: "p".into(),
        bootstrap: "127.0.0.1:9".into(),
        transaction_timeout: Duration::from_secs(3600),
        checkpoint_timeout: Duration::from_secs(3600),
        abandoned: AtomicBool::new(false),
        close_detached: AtomicBool::new(false),
        mode,
        fence,
        purger: None,
        repartition_partitions: None,
    };
    (unit, log)
}

/// The exactly-once mode of pipeline `p` over `slots`, `committed` the last committed
/// checkpoint.
fn exactly_once(slots: [Slot; 2], committed: u64) -> Mode {
    let group_consumer: BaseConsumer<QuietContext> = ClientConfig::new()
        .set("bootstrap.servers", "127.0.0.1:9")
        .set("group.id", "weir.p")
        .create_with_context(QuietContext)
        .expect("an offline consumer");
    Mode::ExactlyOnce {
        slots,
        marker: MarkerTarget {
            pipeline: "p".into(),
            unit: LOCAL_UNIT.into(),
            generation: 0,
            group: "weir.p".into(),
            sources: Vec::new(),
            source_partitions: Vec::new(),
            progress_topic: "weir.p.progress".into(),
        },
        group_consumer,
        committed: Mutex::new(CheckpointId(committed)),
        found: FoundMarkers::default(),
        marker_records: Arc::new(InFlight::default()),
    }
}

fn batch(values: &[&str]) -> RecordBatch {
    let mut b = RecordBatch::default();
    for v in values {
        b.push(b"", v.as_bytes(), 0);
    }
    b
}

fn metadata(id: u64) -> CheckpointMetadata {
    CheckpointMetadata::empty_for_test("p", id)
}

fn take(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().expect("log"))
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// T(n) is on producer n mod 2: T(n+1)'s records go to the other producer while T(n)
/// is pre-committed and committed, and T(n+2) reopens the first one after T(n)
/// committed. Phase one flushes T(n)'s producer; phase two sends the marker record and
/// the offsets into T(n), then commits it.
#[test]
fn transactions_alternate_between_the_two_producers() {
    let (unit, log) = unit(0);
    let in_flight = Arc::new(InFlight::default());
    unit.send_batch(CheckpointId(1), "out", &batch(&["a"]), &in_flight)
        .expect("send 1");
    unit.send_batch(CheckpointId(2), "out", &batch(&["b"]), &in_flight)
        .expect("send 2");
    unit.pre_commit(CheckpointId(1), far())
        .expect("pre-commit 1");
    unit.commit(&metadata(1), far()).expect("commit 1");
    unit.send_batch(CheckpointId(3), "out", &batch(&["c"]), &in_flight)
        .expect("send 3");
    unit.pre_commit(CheckpointId(2), far())
        .expect("pre-commit 2");
    unit.commit(&metadata(2), far()).expect("commit 2");
    assert_eq!(
        take(&log),
        [
            "p.1 begin",
            "p.1 send out a",
            "p.0 begin",
            "p.0 send out b",
            "p.1 flush",
            "p.1 send weir.p.progress weir:p:0:checkpoint=1",
            "p.1 offsets weir.p.progress-0@Offset(1)",
            "p.1 commit",
            "p.1 begin",
            "p.1 send out c",
            "p.0 flush",
            "p.0 send weir.p.progress weir:p:0:checkpoint=2",
            "p.0 offsets weir.p.progress-0@Offset(2)",
            "p.0 commit",
        ]
    );
    assert_eq!(in_flight.count(), 0);
}

/// A checkpoint without output flushes nothing but still commits its marker, in a
/// transaction begun for it.
#[test]
fn a_checkpoint_without_output_still_commits_its_marker() {
    let (unit, log) = unit(4);
    unit.pre_commit(CheckpointId(5), far()).expect("pre-commit");
    unit.commit(&metadata(5), far()).expect("commit");
    assert_eq!(
        take(&log),
        [
            "p.1 begin",
            "p.1 send weir.p.progress weir:p:0:checkpoint=5",
            "p.1 offsets weir.p.progress-0@Offset(5)",
            "p.1 commit",
        ]
    );
}

/// Issue 51: a broker's failover answers a checkpoint's transactional calls with
/// retriable errors (the transaction coordinator moving, a request timing out); each
/// call is made again until it succeeds, and the checkpoint commits. Fails if the unit
/// gives up at the first error (as it did: one broker's kill failed the pipeline).
#[test]
fn retriable_errors_of_the_transactional_calls_are_retried_until_they_succeed() {
    let (unit, log) = unit(4);
    refuse(&[
        ("offsets", RDKafkaErrorCode::CoordinatorNotAvailable),
        ("offsets", RDKafkaErrorCode::NotCoordinator),
        ("commit", RDKafkaErrorCode::RequestTimedOut),
        ("commit", RDKafkaErrorCode::BrokerTransportFailure),
    ]);
    unit.pre_commit(CheckpointId(5), far()).expect("pre-commit");
    unit.commit(&metadata(5), far()).expect("commit");
    assert_eq!(
        take(&log),
        [
            "p.1 begin",
            "p.1 send weir.p.progress weir:p:0:checkpoint=5",
            "p.1 offsets refused: CoordinatorNotAvailable",
            "p.1 offsets refused: NotCoordinator",
            "p.1 offsets weir.p.progress-0@Offset(5)",
            "p.1 commit refused: RequestTimedOut",
            "p.1 commit refused: BrokerTransportFailure",
            "p.1 commit",
        ]
    );
}

/// A fencing is never retried, and a retriable error that lasts past the checkpoint's
/// deadline fails the commit at the deadline, not later, as a stalled cluster (the run
/// restarts in its process: two nodes of three down past the deadline end there).
#[test]
fn fenced_calls_and_errors_outlasting_the_deadline_are_not_retried() {
    let (fenced_unit, log) = unit(4);
    refuse(&[("commit", RDKafkaErrorCode::InvalidProducerEpoch)]);
    fenced_unit
        .pre_commit(CheckpointId(5), far())
        .expect("pre-commit");
    let fenced = fenced_unit.commit(&metadata(5), far()).expect_err("fenced");
    assert!(matches!(fenced, KafkaError::Fenced { .. }), "{fenced:?}");
    assert_eq!(
        take(&log).last().map(String::as_str),
        Some("p.1 commit refused: InvalidProducerEpoch")
    );

    let (lasting, log) = unit(4);
    refuse(&[("offsets", RDKafkaErrorCode::CoordinatorNotAvailable); 1000]);
    let started = Instant::now();
    let deadline = started + Duration::from_millis(700);
    lasting
        .pre_commit(CheckpointId(5), deadline)
        .expect("pre-commit");
    let failed = lasting
        .commit(&metadata(5), deadline)
        .expect_err("past the deadline");
    REFUSALS.with(|r| r.lock().expect("refusals").clear());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        failed
            .to_string()
            .contains("adding the offsets of checkpoint 5"),
        "{failed}"
    );
    assert!(
        matches!(failed, KafkaError::BrokerStalled { .. }) && failed.is_transient(),
        "{failed:?}"
    );
    let attempts = take(&log)
        .iter()
        .filter(|l| l.contains("offsets refused"))
        .count();
    assert!((2..1000).contains(&attempts), "{attempts} attempts");
}

/// Issue 51: librdkafka can leave `send_offsets_to_transaction` waiting past its bound
/// for a group coordinator that died (seen on CI: a node killed mid-commit, the call
/// still not returned 60 s later, and the watchdog ended the process). The unit stops
/// waiting at the attempt's bound + `call_thread::GRACE` and fails the commit as a
/// stalled broker (transient: the run restarts in its process); the call is left
/// behind, nothing more runs on its producer, and its thread ends when the call returns.
#[test]
fn a_call_librdkafka_does_not_return_from_is_left_behind() {
    let (unit, log) = unit(4);
    hang("offsets", Duration::from_secs(3));
    unit.pre_commit(CheckpointId(5), far()).expect("pre-commit");
    let deadline = Instant::now() + Duration::from_millis(500);
    let stalled = unit
        .commit(&metadata(5), deadline)
        .expect_err("left behind");
    assert!(
        matches!(stalled, KafkaError::BrokerStalled { .. }),
        "{stalled:?}"
    );
    assert!(stalled.is_transient());
    assert!(
        stalled
            .to_string()
            .contains("adding the offsets of checkpoint 5")
            && stalled.to_string().contains("left behind"),
        "{stalled}"
    );
    assert_eq!(
        take(&log),
        [
            "p.1 begin",
            "p.1 send weir.p.progress weir:p:0:checkpoint=5",
            "p.1 offsets hangs",
        ],
        "failed before the call returned"
    );
    let again = unit
        .commit(&metadata(5), far())
        .expect_err("refused at once");
    assert!(
        matches!(again, KafkaError::BrokerStalled { .. }),
        "{again:?}"
    );
    let returned = Instant::now() + Duration::from_secs(30);
    while !log
        .lock()
        .expect("log")
        .iter()
        .any(|l| l.contains("offsets weir.p"))
    {
        assert!(
            Instant::now() < returned,
            "the left-behind call never returned"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(unit);
    assert_eq!(
        take(&log),
        [
            "p.1 send weir.p.progress weir:p:0:checkpoint=5",
            "p.1 offsets returned after hanging",
            "p.1 offsets weir.p.progress-0@Offset(5)",
        ],
        "the call ended, and nothing ran on the producer after it (no commit)"
    );
}

/// Redoing the commit of a checkpoint at or before the last committed one (recovery)
/// touches no producer.
#[test]
fn a_committed_checkpoint_is_not_committed_again() {
    let (unit, log) = unit(7);
    unit.commit(&metadata(7), far()).expect("redo 7");
    unit.commit(&metadata(6), far()).expect("redo 6");
    assert!(take(&log).is_empty());
}

/// T(n) still open when T(n+2) needs its producer is a protocol error: the two
/// checkpoints' output would share one transaction.
#[test]
fn a_transaction_still_open_two_checkpoints_later_is_a_protocol_error() {
    let (unit, log) = unit(0);
    let in_flight = Arc::new(InFlight::default());
    unit.send_batch(CheckpointId(1), "out", &batch(&["a"]), &in_flight)
        .expect("send 1");
    let err = unit
        .send_batch(CheckpointId(3), "out", &batch(&["c"]), &in_flight)
        .expect_err("T(1) is open on p.1");
    assert_eq!(
        err.to_string(),
        "transaction protocol violated on producer p.1: transaction of checkpoint 1 still \
         open when checkpoint 3 needs it (a bug in weir; the pipeline stops and recovers \
         from its last committed checkpoint)"
    );
    assert_eq!(take(&log), ["p.1 begin", "p.1 send out a"]);
}

/// A record the broker refused fails phase one of its checkpoint, before anything is
/// committed, naming the checkpoint and the failure.
#[test]
fn a_failed_delivery_fails_the_pre_commit_of_its_checkpoint() {
    let (unit, log) = unit_failing(0, Some("p.1"));
    let in_flight = Arc::new(InFlight::default());
    unit.send_batch(CheckpointId(1), "out", &batch(&["a"]), &in_flight)
        .expect("handed over; the report comes later");
    let err = unit
        .pre_commit(CheckpointId(1), far())
        .expect_err("phase one must fail");
    assert_eq!(
        err.to_string(),
        "delivery to Kafka failed for checkpoint 1: topic out: broker said no"
    );
    let err = unit
        .commit(&metadata(1), far())
        .expect_err("nor may phase two commit it");
    assert_eq!(
        err.to_string(),
        "delivery to Kafka failed for checkpoint 1: topic out: broker said no"
    );
    assert_eq!(take(&log), ["p.1 begin", "p.1 send out a", "p.1 flush"]);
}

/// Catches: a full librdkafka queue (a small sink `buffer_bytes`) failing the
/// checkpoint or dropping the record instead of waiting for room: each refused record is
/// offered again until taken, in order, and counted in flight exactly once.
#[test]
fn a_full_queue_makes_the_sink_wait_and_loses_nothing() {
    let (unit, log) = unit_with(0, None, 3);
    let in_flight = Arc::new(InFlight::default());
    unit.send_batch(CheckpointId(1), "out", &batch(&["a", "b"]), &in_flight)
        .expect("the send waits for room, then succeeds");
    assert_eq!(
        take(&log),
        [
            "p.1 begin",
            "p.1 queue full",
            "p.1 queue full",
            "p.1 queue full",
            "p.1 send out a",
            "p.1 send out b",
        ]
    );
    // Both acknowledged by the fake: nothing left in flight, nothing counted twice.
    assert_eq!(in_flight.count(), 0);
}

/// Catches: a queue that stays full (a stalled broker) holding a sink subtask for the
/// transaction timeout (minutes, in the issue's run) instead of the checkpoint timeout:
/// the send gives up once the checkpoint timeout has passed, naming the broker, and the
/// refused record is not left counted in flight.
#[test]
fn a_queue_that_stays_full_fails_the_send_after_the_checkpoint_timeout() {
    let (mut unit, log) = unit_with(0, None, u64::MAX);
    unit.checkpoint_timeout = Duration::from_millis(30);
    let in_flight = Arc::new(InFlight::default());
    let err = unit
        .send_batch(CheckpointId(1), "out", &batch(&["a"]), &in_flight)
        .expect_err("the queue never has room");
    assert!(
        matches!(&err, KafkaError::BrokerStalled { bootstrap, waited, .. }
            if bootstrap == "127.0.0.1:9" && *waited == Duration::from_millis(30)),
        "{err}"
    );
    assert!(err.to_string().starts_with("sending to topic out"), "{err}");
    assert_eq!(in_flight.count(), 0, "the refused record is not in flight");
    assert!(
        take(&log)
            .iter()
            .all(|l| l == "p.1 begin" || l == "p.1 queue full")
    );
}

/// Catches: a sink subtask still waiting on the broker after its run failed (the
/// issue's run sat minutes in `wait_drained` after the coordinator gave up): once the
/// unit is abandoned, a wait for acknowledgements and a send into a full queue both end
/// at once, with `Abandoned`, whatever their own bound.
#[test]
fn abandoning_the_unit_ends_every_wait_of_its_sinks() {
    let (unit, _log) = unit_with(0, None, u64::MAX);
    let unit = Arc::new(unit);
    let never_acknowledged = Arc::new(InFlight::default());
    never_acknowledged.add(1);
    let (done_tx, done) = std::sync::mpsc::channel();
    let waiters: Vec<_> = [true, false]
        .into_iter()
        .map(|acknowledgements| {
            let (unit, in_flight, done_tx) =
                (unit.clone(), never_acknowledged.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let result = if acknowledgements {
                    unit.await_acknowledged(CheckpointId(2), "out", &in_flight)
                } else {
                    let fresh = Arc::new(InFlight::default());
                    unit.send_batch(CheckpointId(1), "out", &batch(&["a"]), &fresh)
                };
                let _ = done_tx.send(result);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    unit.abandon(true);
    for _ in 0..waiters.len() {
        let result = done
            .recv_timeout(Duration::from_secs(30))
            .expect("every wait ends once the unit is abandoned");
        assert!(
            matches!(result, Err(KafkaError::Abandoned { .. })),
            "{result:?}"
        );
    }
    for waiter in waiters {
        waiter.join().expect("waiter");
    }
}

/// Keys `k0`, `k1`, ... whose key groups fall in partition 0 and partition 1 of
/// `ranges`, `n` of each, alternating (a batch of them), and the frames that carry
/// them (`r/<partition> frame <keys>`).
fn keyed_batch(ranges: KeyGroupRanges, n: usize, tag: &str) -> (RecordBatch, [String; 2]) {
    let mut by_partition: [Vec<String>; 2] = Default::default();
    for i in 0.. {
        let key = format!("{tag}{i}");
        let p = repartition::partition_of_key(key.as_bytes(), ranges) as usize;
        if by_partition[p].len() < n {
            by_partition[p].push(key);
        }
        if by_partition.iter().all(|keys| keys.len() == n) {
            break;
        }
    }
    let mut batch = RecordBatch::default();
    for i in 0..n {
        for keys in &by_partition {
            batch.push(keys[i].as_bytes(), b"1", 1_000);
        }
    }
    let frames = [0, 1].map(|p| format!("r/{p} frame {}", by_partition[p].join(",")));
    (batch, frames)
}

fn repartition_sink(unit: KafkaCommitUnit, ranges: KeyGroupRanges) -> KafkaSink {
    let writer = RepartitionWriter {
        set: RepartitionWriters {
            generation: 1,
            count: 1,
        },
        index: 0,
    };
    KafkaSink::repartition("repartition", "r", ranges, Some(writer), Arc::new(unit))
}

/// Catches: a repartition frame held past its barrier (sent in the next checkpoint's
/// transaction), sent before it is full or the barrier comes (no packing), or after
/// the checkpoint's watermark marker (the reader would pass the records' event time
/// before reading them).
#[test]
fn a_repartition_writer_sends_its_frames_at_the_barrier_before_its_watermark() {
    let (unit, log) = unit(0);
    let ranges = KeyGroupRanges::new(4, 2);
    let mut sink = repartition_sink(unit, ranges);
    let (first, frames) = keyed_batch(ranges, 3, "a");
    sink.write(CheckpointId(1), &first).expect("write");
    sink.write(CheckpointId(1), &first).expect("write");
    sink.watermark(Watermark(900)).expect("watermark");
    assert_eq!(
        take(&log),
        Vec::<String>::new(),
        "held in frames until the barrier"
    );
    let barrier = |id| Barrier {
        id: CheckpointId(id),
        is_final: false,
    };
    sink.barrier(barrier(1)).expect("barrier 1");
    let both = |f: &str| format!("{f},{}", f.split(' ').next_back().unwrap_or_default());
    assert_eq!(
        take(&log),
        [
            "p.1 begin".to_owned(),
            format!("p.1 send {}", both(&frames[0])),
            format!("p.1 send {}", both(&frames[1])),
            "p.1 send r/0 watermark 900".to_owned(),
            "p.1 send r/1 watermark 900".to_owned(),
        ]
    );
    // The next checkpoint's records: on the other producer, its own frames, and no
    // marker where the watermark did not move.
    let (second, frames) = keyed_batch(ranges, 1, "b");
    sink.write(CheckpointId(2), &second).expect("write");
    sink.barrier(barrier(2)).expect("barrier 2");
    assert_eq!(
        take(&log),
        [
            "p.0 begin".to_owned(),
            format!("p.0 send {}", frames[0]),
            format!("p.0 send {}", frames[1]),
        ]
    );
}

/// Catches: at-least-once, where a record is visible as soon as it is written, a
/// repartition writer holding records back until the barrier (a checkpoint interval
/// of latency) instead of sending its frames at the end of each batch.
#[test]
fn an_at_least_once_repartition_writer_sends_its_frames_with_each_batch() {
    let (unit, log) = unit_of(0, (None, 0), DeliveryGuarantee::AtLeastOnce);
    let ranges = KeyGroupRanges::new(4, 2);
    let mut sink = repartition_sink(unit, ranges);
    let (batch, frames) = keyed_batch(ranges, 2, "a");
    sink.write(CheckpointId(1), &batch).expect("write");
    assert_eq!(
        take(&log),
        [
            format!("p.0 send {}", frames[0]),
            format!("p.0 send {}", frames[1])
        ]
    );
}

/// Catches: a frame growing past its bound while records keep coming within one
/// checkpoint (a writer's memory unbounded, a Kafka record too large): a full frame
/// goes before the barrier.
#[test]
fn a_full_frame_is_sent_without_waiting_for_the_barrier() {
    let (unit, log) = unit(0);
    let ranges = KeyGroupRanges::new(1, 1);
    let mut sink = repartition_sink(unit, ranges);
    let mut batch = RecordBatch::default();
    let value = vec![b'v'; 1_000];
    let per_frame = repartition_frame::frame_bytes(1) / 1_000;
    for i in 0..per_frame * 3 {
        batch.push(format!("k{i}").as_bytes(), &value, 1);
    }
    sink.write(CheckpointId(1), &batch).expect("write");
    let sent = take(&log);
    assert_eq!(sent[0], "p.1 begin");
    assert!(
        sent.len() > 2
            && sent[1..]
                .iter()
                .all(|s| s.starts_with("p.1 send r/0 frame")),
        "{sent:?}"
    );
}
