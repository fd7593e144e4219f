//! The Kafka half of a rescale: a new worker takes the old layout's workers over
//! (`take_over`) and learns, for each, the last checkpoint whose transaction committed.
//!
//! For each old worker J of N (generation g), in the order 0, 1, ..., N - 1:
//! 1. Fence it: initialise both of its transactional ids (`{prefix}{pipeline}.{J}-of-{N}.{0|1}`,
//!    see `KafkaNames`). A still-running old worker can no longer commit (its next
//!    transactional call fails as fenced and it stops), and a transaction it left open
//!    is aborted now rather than at its timeout, so `read_committed` readers of the
//!    repartition topic and of its progress topic are not held back by it. No new
//!    worker shares an old worker's ids (units carry N), so this never fences a worker
//!    of the new layout.
//! 2. Read its newest marker of generation g on its progress topic (read_committed: its
//!    transactions are all settled now). That is its last committed checkpoint c_J,
//!    whose metadata's state and positions are exactly what its transactions
//!    committed: its output up to T(c_J), the repartition records it wrote up to
//!    T(c_J), its source and repartition offsets at c_J.
//! 3. Hand it over: append the hand-over record (the marker of c_J with
//!    `:rescaled-to=<M>`, see `marker`) to its progress topic, in a transaction of its
//!    own (fencing) producer. Committed under the epoch this worker holds, it is the
//!    old worker's newest record from then on: the old worker, started again, refuses
//!    to restore its own checkpoint, and the other new workers of the same rescale
//!    read c_J from it. If the old worker (or another new worker taking it over at the
//!    same moment) initialised its ids in between, this commit fails as fenced and
//!    nothing is handed over; the taker tries again from step 1 after a random pause
//!    (`TAKEOVER_ATTEMPTS`), and then finds the other's hand-over or writes its own.
//!
//! Invariants:
//! - c_J is read after J is fenced and is the hand-over record's checkpoint, so no
//!   transaction of J can commit after c_J was read: the cut every new worker restores
//!   from is the same, and final.
//! - Every new worker of the rescale takes over every old worker (not only those it
//!   restores from): the first to start fences a stray old worker at once, and
//!   fencing is idempotent.
//! - One rescale wins: a worker handed over to another number of workers is refused
//!   (`TakeoverError::HandedOver`). Taking over in index order makes old worker 0 the
//!   lock: a rescale that finds it handed over to another M stops before touching the
//!   others, so two rescales started at once (by mistake) cannot split the old
//!   workers between them.
//! - An old worker with no committed checkpoint of its generation is refused
//!   (`NothingCommitted`), never read as "nothing to restore": a layout made by a
//!   rescale whose worker never committed still holds its units only in its origin's
//!   checkpoints, and guessing would lose or repeat them.
//! - Savepoint or crash: c_J is the last committed checkpoint whether J stopped on
//!   SIGTERM (its final checkpoint) or died; each old worker is exactly-once on its
//!   own, so the union of their last committed checkpoints is a consistent cut of the
//!   whole pipeline (see `pipeline::rescale`).

use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use crate::cluster::{Layout, Worker};
use crate::connector::kafka::client::{self, Endpoint, QuietContext, client_config};
use crate::connector::kafka::config::KafkaSinkConfig;
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::error_class::is_fenced;
use crate::connector::kafka::marker::{MarkerTarget, PROGRESS_TOPIC_CONFIG};
use crate::connector::kafka::names::KafkaNames;
use crate::record::CheckpointId;
use crate::watchdog::{self, Watch};

/// Bound on each transactional call on an old worker's ids: initialising them may have
/// to wait until the broker aborted the transaction the old worker left open.
const TAKEOVER_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Attempts at taking one old worker over while other new workers race for it (each
/// new worker's initialisation fences the others' producers): with jittered pauses
/// that grow with each attempt, a handful is plenty.
const TAKEOVER_ATTEMPTS: u32 = 10;

/// Range of the random pause before another attempt, in ms (times the attempt number).
const TAKEOVER_PAUSE_MS: std::ops::Range<u64> = 50..400;

/// An old worker, taken over, and its last committed checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandedOver {
    pub old: Worker,
    pub checkpoint: CheckpointId,
}

/// Why an old worker could not be taken over.
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    #[error(
        "old worker {old} ({layout}) has no committed checkpoint to hand over: start all {workers} old workers until each has committed a checkpoint (a SIGTERM stop commits a final one), then rescale"
    )]
    NothingCommitted {
        old: Worker,
        layout: Layout,
        workers: u32,
    },
    #[error(
        "old worker {old} ({layout}) was already handed over to a rescale to {to} workers: run {to} workers (a rescale, once begun, is finished by the layout that began it; rescale again from there)"
    )]
    HandedOver {
        old: Worker,
        layout: Layout,
        to: u32,
    },
    #[error("old layout {layout}: {source}")]
    BadLayout {
        layout: Layout,
        #[source]
        source: crate::cluster::WorkerParseError,
    },
    #[error("taking old worker {old} over: {source}")]
    Kafka {
        old: Worker,
        #[source]
        source: Box<KafkaError>,
    },
}

/// What a rescale needs of the pipeline's Kafka sinks.
pub struct TakeoverContext<'a> {
    pub pipeline: &'a str,
    /// The sinks' shared settings (`preflight::shared_settings`).
    pub sink: &'a KafkaSinkConfig,
    pub endpoint: &'a Endpoint,
}

/// Takes every worker of `from` over for a rescale to `to_workers` workers, in index
/// order (see the module docs); their last committed checkpoints, by index.
pub fn take_over(
    cx: &TakeoverContext<'_>,
    from: Layout,
    to_workers: u32,
) -> Result<Vec<HandedOver>, TakeoverError> {
    (0..from.workers)
        .map(|j| {
            let old = Worker::new(j, from.workers).map_err(|source| TakeoverError::BadLayout {
                layout: from,
                source,
            })?;
            take_over_one(cx, from, old, to_workers)
        })
        .collect()
}

/// Steps 1 to 3 of the module docs for old worker `old`, again (after a jittered
/// pause) while another new worker of the same rescale, taking the same old worker over
/// at the same moment, fences this one's producers before its hand-over commits: the
/// next attempt then finds the other's hand-over, or writes its own.
fn take_over_one(
    cx: &TakeoverContext<'_>,
    from: Layout,
    old: Worker,
    to_workers: u32,
) -> Result<HandedOver, TakeoverError> {
    let mut attempt = 1;
    loop {
        match attempt_take_over(cx, from, old, to_workers) {
            Err(TakeoverError::Kafka { source, .. })
                if matches!(*source, KafkaError::Fenced { .. }) && attempt < TAKEOVER_ATTEMPTS =>
            {
                let pause = rand::random_range(TAKEOVER_PAUSE_MS.clone()) * u64::from(attempt);
                tracing::info!(pipeline = %cx.pipeline, %old, attempt, pause_ms = pause, "rescale: another new worker is taking the same old worker over; trying again");
                std::thread::sleep(Duration::from_millis(pause));
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// One attempt of `take_over_one`.
fn attempt_take_over(
    cx: &TakeoverContext<'_>,
    from: Layout,
    old: Worker,
    to_workers: u32,
) -> Result<HandedOver, TakeoverError> {
    let kafka = |source| TakeoverError::Kafka {
        old,
        source: Box::new(source),
    };
    let names = KafkaNames::new(&cx.sink.transactional_prefix, cx.pipeline).for_worker(old);
    let marker = MarkerTarget {
        pipeline: cx.pipeline.to_owned(),
        unit: names.unit(),
        generation: from.generation,
        group: names.group(),
        sources: Vec::new(),
        source_partitions: Vec::new(),
        progress_topic: names.progress_topic(),
    };
    let timeout = cx.sink.connect_timeout;
    let admin = client::admin(cx.endpoint, timeout).map_err(kafka)?;
    client::ensure_topic(
        &admin,
        &cx.endpoint.bootstrap,
        ("progress", &marker.progress_topic),
        1,
        &PROGRESS_TOPIC_CONFIG,
        timeout,
    )
    .map_err(kafka)?;
    let producers = fence(cx, &names).map_err(kafka)?;
    let newest = marker
        .read_topic(cx.endpoint, TAKEOVER_CALL_TIMEOUT)
        .map_err(kafka)?;
    let nothing = || TakeoverError::NothingCommitted {
        old,
        layout: from,
        workers: from.workers,
    };
    let newest = newest
        .filter(|m| m.checkpoint != CheckpointId::NONE)
        .ok_or_else(nothing)?;
    match newest.rescaled_to {
        Some(to) if to == to_workers => {}
        Some(to) => {
            return Err(TakeoverError::HandedOver {
                old,
                layout: from,
                to,
            });
        }
        None => {
            let (id, producer) = &producers[0];
            hand_over(cx, producer, id, &marker, newest.checkpoint, to_workers).map_err(kafka)?;
        }
    }
    tracing::info!(pipeline = %cx.pipeline, %old, checkpoint = %newest.checkpoint, to_workers, "rescale: old worker taken over");
    Ok(HandedOver {
        old,
        checkpoint: newest.checkpoint,
    })
}

/// Step 1 of the module docs: both of the old worker's transactional ids initialised
/// by producers of this worker, which it keeps to write the hand-over record.
fn fence(
    cx: &TakeoverContext<'_>,
    names: &KafkaNames,
) -> Result<[(String, ThreadedProducer<QuietContext>); 2], KafkaError> {
    let [first, second] = [0, 1].map(|slot| fencing_producer(cx, &names.transactional_id(slot)));
    let producers = [first?, second?];
    for (id, producer) in &producers {
        let _watch = watch_call(cx, &format!("fencing producer {id}"));
        producer
            .init_transactions(TAKEOVER_CALL_TIMEOUT)
            .map_err(|e| {
                if is_fenced(&e) {
                    KafkaError::Fenced {
                        pipeline: cx.pipeline.to_owned(),
                        transactional_id: id.clone(),
                        what: "fencing the old worker".to_owned(),
                    }
                } else {
                    KafkaError::client(format!("fencing producer {id}"), &e)
                }
            })?;
    }
    Ok(producers)
}

/// Watches a take-over call on the broker (bounded by `TAKEOVER_CALL_TIMEOUT`).
fn watch_call(cx: &TakeoverContext<'_>, call: &str) -> Watch {
    watchdog::watch(
        cx.pipeline,
        format!("{call} (Kafka at {})", cx.endpoint.bootstrap),
        Instant::now() + TAKEOVER_CALL_TIMEOUT,
    )
}

/// A producer with transactional id `id`, to fence it and write the hand-over record.
fn fencing_producer(
    cx: &TakeoverContext<'_>,
    id: &str,
) -> Result<(String, ThreadedProducer<QuietContext>), KafkaError> {
    let producer = client_config(cx.endpoint, cx.sink.connect_timeout)
        .set("transactional.id", id)
        .set(
            "transaction.timeout.ms",
            cx.sink.transaction_timeout.as_millis().to_string(),
        )
        .create_with_context(QuietContext)
        .map_err(|e| KafkaError::client(format!("cannot create producer {id}"), &e))?;
    Ok((id.to_owned(), producer))
}

/// Commits the hand-over record of `checkpoint` to the old worker's progress topic, in
/// a transaction of `producer` (its fencing producer `id`).
fn hand_over(
    cx: &TakeoverContext<'_>,
    producer: &ThreadedProducer<QuietContext>,
    id: &str,
    marker: &MarkerTarget,
    checkpoint: CheckpointId,
    to_workers: u32,
) -> Result<(), KafkaError> {
    let what = "writing the hand-over record";
    let fail = |e: &rdkafka::error::KafkaError| {
        if is_fenced(e) {
            KafkaError::Fenced {
                pipeline: cx.pipeline.to_owned(),
                transactional_id: id.to_owned(),
                what: what.to_owned(),
            }
        } else {
            KafkaError::client(format!("producer {id}: {what}"), e)
        }
    };
    producer.begin_transaction().map_err(|e| fail(&e))?;
    let key = marker.record_key();
    let text = marker.rescaled_text(checkpoint, to_workers);
    let record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&marker.progress_topic)
        .partition(0)
        .key(key.as_bytes())
        .payload(text.as_bytes());
    producer.send(record).map_err(|(e, _)| fail(&e))?;
    let _watch = watch_call(cx, &format!("producer {id}: {what}"));
    producer
        .commit_transaction(TAKEOVER_CALL_TIMEOUT)
        .map_err(|e| fail(&e))
}
