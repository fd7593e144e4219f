//! `DeliveryContext`: the context of every producer of a commit unit, which librdkafka
//! calls back with each delivery report and error event.
//!
//! Invariants: every delivery report counts its record done in the sending subtask's
//! `InFlight`, failed or not; the first failure is kept (the unit fails its checkpoint
//! with it); a fenced producer, from a report or an error event, raises the instance's
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
use crate::connector::kafka::error_class::is_fenced;
use crate::connector::kafka::in_flight::InFlight;
use crate::storage::Fence;

/// Records the first failed delivery of a producer, and whether it was fenced; counts
/// every delivery report against the sending subtask's `InFlight`.
#[derive(Default)]
pub struct DeliveryContext {
    failure: Mutex<Option<String>>,
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

    /// Whether a report or an error event said this producer was fenced.
    pub(crate) fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    pub(crate) fn set_fenced(&self) {
        self.fenced.store(true, Ordering::SeqCst);
        self.fence.raise(self.fenced_reason.clone());
    }
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
            }
        }
        in_flight.done();
    }
}
