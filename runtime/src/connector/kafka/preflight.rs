//! Start-up checks of a pipeline's Kafka sinks, before anything is written.
//!
//! Invariants: each refusal is one line naming the numbers or names to change; the
//! checks that need no broker run first, so a spec mistake is reported even with the
//! broker down; nothing here writes to a topic (creating the empty progress topic is
//! left to the commit unit, after every check passed).

use std::time::Duration;

use crate::connector::kafka::config::{DeliveryGuarantee, KafkaSinkConfig};
use crate::connector::kafka::error::KafkaError;

/// The settings the Kafka sinks share: those of the first, after checking every other
/// sink agrees on them (they share one pair of producers and one transaction).
pub fn shared_settings<'a>(
    sinks: &[(String, &'a KafkaSinkConfig)],
) -> Result<Option<&'a KafkaSinkConfig>, KafkaError> {
    let Some((first_id, first)) = sinks.first() else {
        return Ok(None);
    };
    for (id, c) in &sinks[1..] {
        let differs: Option<&'static str> = if c.bootstrap != first.bootstrap {
            Some("bootstrap")
        } else if c.delivery != first.delivery {
            Some("delivery")
        } else if c.transactional_prefix != first.transactional_prefix {
            Some("transactional_prefix")
        } else if c.transaction_timeout != first.transaction_timeout {
            Some("transaction_timeout")
        } else if c.restart_budget != first.restart_budget {
            Some("restart_budget")
        } else if c.security != first.security {
            Some("security")
        } else if c.buffer_bytes != first.buffer_bytes {
            Some("buffer_bytes")
        } else {
            None
        };
        if let Some(field) = differs {
            return Err(KafkaError::InconsistentSinks {
                first: first_id.clone(),
                other: id.clone(),
                field,
            });
        }
    }
    Ok(Some(first))
}

/// `transaction_timeout` must outlive the worst case of a transaction's life, plus a
/// restart. T(n) opens with the first record a sink receives after barrier n - 1, which
/// can be as soon as checkpoint n - 1 is triggered; n - 1 then still has to align,
/// pre-commit and commit (the checkpoint timeout bounds that whole round, flush and
/// commit included), then the interval passes, then checkpoint n's own round (bounded
/// by the timeout again) ends with T(n)'s commit: at most interval + 2 x timeout. After
/// a crash it stays open until the restarted pipeline fences it (the restart budget). A
/// shorter timeout lets the broker abort T(n) under a live pipeline.
pub fn check_transaction_timeout(
    sink: &KafkaSinkConfig,
    interval: Duration,
    checkpoint_timeout: Duration,
) -> Result<(), KafkaError> {
    if sink.delivery != DeliveryGuarantee::ExactlyOnce {
        return Ok(());
    }
    let needed = interval + checkpoint_timeout * 2 + sink.restart_budget;
    if sink.transaction_timeout <= needed {
        return Err(KafkaError::TransactionTimeoutTooSmall {
            timeout: sink.transaction_timeout,
            interval,
            checkpoint_timeout,
            restart_budget: sink.restart_budget,
            needed_ms: needed.as_millis(),
        });
    }
    Ok(())
}

/// `transaction_timeout` must not exceed the broker's `transaction.max.timeout.ms`, or
/// `init_transactions` fails with an obscure INVALID_TRANSACTION_TIMEOUT.
pub fn check_broker_max(sink: &KafkaSinkConfig, broker_max_ms: u64) -> Result<(), KafkaError> {
    if sink.transaction_timeout.as_millis() > u128::from(broker_max_ms) {
        return Err(KafkaError::TransactionTimeoutTooLarge {
            timeout: sink.transaction_timeout,
            max_ms: broker_max_ms,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_timeout_bounds_say_what_to_change() {
        let mut sink = KafkaSinkConfig::new("out");
        sink.transaction_timeout = Duration::from_secs(10);
        let e =
            check_transaction_timeout(&sink, Duration::from_millis(500), Duration::from_secs(60))
                .expect_err("too small");
        assert_eq!(
            e.to_string(),
            "transaction_timeout 10s is too small: it must exceed checkpoint interval 500ms + 2 x checkpoint timeout 1m + \
             restart_budget 30s = 150500ms; raise transaction_timeout, or lower [checkpoint] interval/timeout or restart_budget"
        );
        sink.transaction_timeout = Duration::from_secs(20 * 60);
        assert!(
            check_transaction_timeout(&sink, Duration::from_secs(1), Duration::from_secs(60))
                .is_ok()
        );
        let e = check_broker_max(&sink, 900_000).expect_err("too large");
        assert_eq!(
            e.to_string(),
            "transaction_timeout 20m exceeds the broker's transaction.max.timeout.ms = 900000: lower \
             transaction_timeout to at most 900000ms (or raise transaction.max.timeout.ms on the broker)"
        );
        sink.delivery = DeliveryGuarantee::AtLeastOnce;
        sink.transaction_timeout = Duration::from_secs(1);
        assert!(
            check_transaction_timeout(&sink, Duration::from_secs(1), Duration::from_secs(60))
                .is_ok()
        );
    }
}
