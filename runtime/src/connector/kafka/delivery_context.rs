//! `DeliveryContext`: the context of every producer of a commit unit, which librdkafka
//! calls back with each delivery report and error event.
//!
//! Invariants: every delivery report counts its record done in the sending subtask's
//! `InFlight`, failed or not; the first failure is kept (the unit fails its checkpoint
//! with it), and whether it was transient: a record purged from the queue (librdkafka
//! purges a transaction it must abort, as a broker's failover can make it) or refused
//! retriably, which a restart from the last committed checkpoint rides through; a
//! fenced producer, from a report or an error event, raises the instance's
//! `Fence` at once, so no checkpoint storage write of a fenced instance follows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};

use crate::connector::kafka::client::log_quietly;
use crate::connector::kafka::error::reason;
use crate::connector::kafka::error_class::{ErrorClass, classify_code, is_fenced};
use crate::connector::kafka::in_flight::InFlight;
use crate::storage::Fence;

/// Records the first failed delivery of a producer, and whether it was fenced; counts
/// every delivery report against the sending subtask's `InFlight`.
#[derive(Default)]
pub struct DeliveryContext {
    failure: Mutex<Option<String>>,
    /// Whether `failure` was transient (see the module doc).
    transient: AtomicBool,
    fenced: AtomicBool,
    /// Raised with `fenced`: stops every checkpoint storage write of this instance.
    fence: Fence,
    /// What fencing means for this producer, as the fence's reason.
    fenced_reason: String,
}

impl DeliveryContext {
    pub(crate) fn new(fence: Fence, fenced_reason: String) -> Self {
        DeliveryContext {
            fence,
            fenced_reason,
            ..DeliveryContext::default()
        }
    }

    pub(crate) fn failure(&self) -> MutexGuard<'_, Option<String>> {
        self.failure.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the first failed delivery was transient (see the module doc).
    pub(crate) fn failure_is_transient(&self) -> bool {
        self.transient.load(Ordering::SeqCst)
    }

    /// Whether a report or an error event said this producer was fenced.
    pub(crate) fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    pub(crate) fn set_fenced(&self) {
        self.fenced.store(true, Ordering::SeqCst);
        self.fence.raise(self.fenced_reason.clone());
    }
}

/// A delivery failure that a restart rides through: the record was purged (its
/// transaction is being aborted) or refused retriably (a broker failing over).
fn is_transient(error: &RdKafkaError) -> bool {
    use rdkafka::error::RDKafkaErrorCode::{PurgeInflight, PurgeQueue};
    let code = error.rdkafka_error_code();
    matches!(code, Some(PurgeQueue | PurgeInflight))
        || code.is_some_and(|c| classify_code(c) == ErrorClass::Retriable)
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_quietly(level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        if is_fenced(&error) {
            self.set_fenced();
        }
        tracing::debug!(%error, reason, "librdkafka producer error event");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Arc<InFlight>;

    fn delivery(&self, result: &DeliveryResult<'_>, in_flight: Arc<InFlight>) {
        if let Err((error, message)) = result {
            if is_fenced(error) {
                self.set_fenced();
            }
            let mut failure = self.failure();
            if failure.is_none() {
                *failure = Some(format!("topic {}: {}", message.topic(), reason(error)));
                self.transient.store(is_transient(error), Ordering::SeqCst);
            }
        }
        in_flight.done();
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::RDKafkaErrorCode::{
        InvalidProducerEpoch, MessageSizeTooLarge, NotEnoughReplicas, NotLeaderForPartition,
        PurgeInflight, PurgeQueue, TopicAuthorizationFailed,
    };

    use super::*;

    /// Issue 51: a record purged because librdkafka aborts its transaction (seen: a
    /// node killed, `PurgeQueue` at the next pre-commit, and the run failed for good)
    /// or refused retriably is a failure a restart rides through; a refusal, a record
    /// too large or a fencing is not.
    #[test]
    fn purged_and_retriably_refused_records_are_transient_failures() {
        let transient = |code| is_transient(&RdKafkaError::MessageProduction(code));
        for code in [
            PurgeQueue,
            PurgeInflight,
            NotEnoughReplicas,
            NotLeaderForPartition,
        ] {
            assert!(transient(code), "{code:?}");
        }
        for code in [
            MessageSizeTooLarge,
            TopicAuthorizationFailed,
            InvalidProducerEpoch,
        ] {
            assert!(!transient(code), "{code:?}");
        }
    }
}
