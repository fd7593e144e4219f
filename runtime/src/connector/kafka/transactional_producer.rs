//! `TransactionalProducer`: the calls the commit unit makes on one of its producers,
//! as a seam, so that the unit's slot alternation and two-phase commit can be tested in
//! process with a fake producer (see `commit_unit_tests.rs`), while a run always uses
//! rdkafka's `ThreadedProducer`.
//!
//! Invariants: each method is the rdkafka call of the same name, except that `flush`
//! (and the flush that opens `commit_transaction`) returns as soon as the producer's
//! queue is empty (see `flush_drained` below); a record handed over by `send` gets
//! exactly one delivery report, which counts it done in its `InFlight`; a record `send`
//! refuses is handed back and gets none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::TopicPartitionList;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError as RdKafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use crate::connector::kafka::delivery_context::DeliveryContext;
use crate::connector::kafka::in_flight::InFlight;

/// A record as the commit unit sends it: its delivery report counts it in `InFlight`.
pub type UnitRecord<'a> = BaseRecord<'a, [u8], [u8], Arc<InFlight>>;

pub trait TransactionalProducer: Send + Sync {
    /// Where delivery reports and error events are recorded.
    fn context(&self) -> &DeliveryContext;
    /// The client's fatal error, if it has one.
    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)>;
    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()>;
    fn begin_transaction(&self) -> KafkaResult<()>;
    #[allow(clippy::result_large_err)]
    fn send<'a>(&self, record: UnitRecord<'a>) -> Result<(), (RdKafkaError, UnitRecord<'a>)>;
    fn flush(&self, timeout: Duration) -> KafkaResult<()>;
    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()>;
    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()>;
    /// Asks the cluster for its metadata now (bounded by `timeout`), which makes the
    /// client connect to brokers that came back: see `KafkaCommitUnit::retrying`.
    fn refresh_metadata(&self, timeout: Duration);
}

impl TransactionalProducer for ThreadedProducer<DeliveryContext> {
    fn context(&self) -> &DeliveryContext {
        Producer::context(self)
    }

    fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.client().fatal_error()
    }

    fn init_transactions(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::init_transactions(self, timeout)
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        Producer::begin_transaction(self)
    }

    fn send<'a>(&self, record: UnitRecord<'a>) -> Result<(), (RdKafkaError, UnitRecord<'a>)> {
        ThreadedProducer::send(self, record)
    }

    fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        flush_drained(|| Producer::flush(self, Duration::ZERO), timeout)
    }

    fn send_offsets_to_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> KafkaResult<()> {
        Producer::send_offsets_to_transaction(self, offsets, group, timeout)
    }

    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        // rdkafka's commit flushes first, in the 100 ms steps `flush_drained` avoids;
        // with the queue already empty its flush returns at once.
        let deadline = Instant::now() + timeout;
        TransactionalProducer::flush(self, timeout)?;
        let left = deadline.saturating_duration_since(Instant::now());
        Producer::commit_transaction(self, left.max(Duration::from_millis(1)))
    }

    fn refresh_metadata(&self, timeout: Duration) {
        if let Err(e) = self.client().fetch_metadata(None, timeout) {
            tracing::debug!(error = %e, "kafka: refreshing a producer's metadata");
        }
    }
}

/// How often [`flush_drained`] looks at the queue again.
const FLUSH_POLL: Duration = Duration::from_millis(1);

/// Flushes by calling `try_flush` (librdkafka's flush with a zero timeout: it sends
/// lingering batches at once and says whether the queue is empty) every [`FLUSH_POLL`]
/// until it succeeds, or fails with a timeout after `timeout`.
///
/// Why not rdkafka's `flush(timeout)`: it waits by polling the producer's event queue in
/// steps of up to 100 ms, and each step lasts its whole length (its poll loop returns at
/// the deadline, not at an event). A `ThreadedProducer`'s own thread serves that queue,
/// so every flush with a record still in flight took 100 ms, twice per checkpoint (the
/// pre-commit's flush and the commit's): 200 ms of every checkpoint cycle, which is
/// exactly-once latency (docs/src/benchmarks.md).
fn flush_drained(
    mut try_flush: impl FnMut() -> KafkaResult<()>,
    timeout: Duration,
) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match try_flush() {
            Err(RdKafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                if Instant::now() < deadline =>
            {
                std::thread::sleep(FLUSH_POLL);
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed_out() -> KafkaResult<()> {
        Err(RdKafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
    }

    #[test]
    fn flush_returns_once_the_queue_is_empty() {
        let mut left = 3;
        let result = flush_drained(
            || {
                left -= 1;
                if left == 0 { Ok(()) } else { timed_out() }
            },
            Duration::from_secs(60),
        );
        assert!(result.is_ok());
        assert_eq!(left, 0, "asked until the queue was empty, and no more");
    }

    #[test]
    fn flush_times_out_and_passes_other_errors_through() {
        let mut calls = 0;
        let result = flush_drained(
            || {
                calls += 1;
                timed_out()
            },
            Duration::ZERO,
        );
        assert!(
            matches!(
                result,
                Err(RdKafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
            ),
            "{result:?}"
        );
        assert_eq!(calls, 1);
        let fatal = flush_drained(
            || Err(RdKafkaError::Flush(RDKafkaErrorCode::Fatal)),
            Duration::from_secs(60),
        );
        assert!(
            matches!(fatal, Err(RdKafkaError::Flush(RDKafkaErrorCode::Fatal))),
            "{fatal:?}"
        );
    }
}
