//! One classification of librdkafka's errors for every Kafka caller: the commit unit's
//! transactional producers, the source's consumer and the recovery and preflight reads.
//!
//! It follows rust-rdkafka's own: a transactional API call returns an `RDKafkaError`
//! that says whether it is fatal, requires the transaction to be aborted, or may be
//! retried; every other error carries only a code, classified here by one list each.
//!
//! Invariants:
//! - `Fenced` is decided by one list of codes ([`FENCED`]), whether the code comes with
//!   an error, a delivery report, an error event or the client's fatal error: the broker
//!   no longer accepts this producer's epoch (another instance took the transactional id,
//!   or the broker aborted a transaction that outlived its timeout).
//! - `Retriable` is a request that may succeed unchanged a little later (a group
//!   coordinator still loading or moving, a partition leader elected anew, a lost
//!   connection, a request timeout: a broker's failover); callers retry it only within
//!   their own deadline.
//! - `Denied` is decided by one list of codes ([`DENIED`]): the broker refused this
//!   client's credentials or its principal lacks an ACL. Never retried, whatever the
//!   call (librdkafka itself would retry some forever): the pipeline fails at once with
//!   one line naming what was refused, since the same request can only be refused again.
//! - A timeout ([`TIMED_OUT`]: no answer within the call's bound) is told apart by
//!   [`is_timeout`], whatever its class: the broker may be stalled, and the caller says
//!   so with the broker's address (`KafkaError::BrokerStalled`).
//! - `Fatal` means the client is unusable; `Abortable`, that the open transaction must be
//!   aborted. Neither is retried: the pipeline fails and recovers from its last
//!   committed checkpoint.

use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};

/// Codes meaning that this producer's epoch is over.
pub const FENCED: [RDKafkaErrorCode; 4] = [
    RDKafkaErrorCode::Fenced,
    RDKafkaErrorCode::ProducerFenced,
    RDKafkaErrorCode::InvalidProducerEpoch,
    RDKafkaErrorCode::TransactionCoordinatorFenced,
];

/// Codes meaning the broker refused the client's credentials or an ACL is missing.
pub const DENIED: [RDKafkaErrorCode; 6] = [
    RDKafkaErrorCode::TopicAuthorizationFailed,
    RDKafkaErrorCode::GroupAuthorizationFailed,
    RDKafkaErrorCode::ClusterAuthorizationFailed,
    RDKafkaErrorCode::TransactionalIdAuthorizationFailed,
    RDKafkaErrorCode::SaslAuthenticationFailed,
    RDKafkaErrorCode::Authentication,
];

/// Codes of requests that may succeed if sent again a little later: what a broker's
/// failover looks like to a client (a coordinator or a partition leader moving, a
/// connection lost, too few in-sync replicas for a while) and a request timing out.
/// Kafka's protocol marks each of these retriable.
const RETRIABLE: [RDKafkaErrorCode; 18] = [
    RDKafkaErrorCode::NotCoordinator,
    RDKafkaErrorCode::CoordinatorLoadInProgress,
    RDKafkaErrorCode::CoordinatorNotAvailable,
    RDKafkaErrorCode::OperationTimedOut,
    RDKafkaErrorCode::RequestTimedOut,
    RDKafkaErrorCode::LeaderNotAvailable,
    RDKafkaErrorCode::NotLeaderForPartition,
    RDKafkaErrorCode::PreferredLeaderNotAvailable,
    RDKafkaErrorCode::FencedLeaderEpoch,
    RDKafkaErrorCode::UnknownLeaderEpoch,
    RDKafkaErrorCode::BrokerNotAvailable,
    RDKafkaErrorCode::NotController,
    RDKafkaErrorCode::NetworkException,
    RDKafkaErrorCode::BrokerTransportFailure,
    RDKafkaErrorCode::AllBrokersDown,
    RDKafkaErrorCode::NotEnoughReplicas,
    RDKafkaErrorCode::NotEnoughReplicasAfterAppend,
    RDKafkaErrorCode::ConcurrentTransactions,
];

/// Codes meaning that a call's bound passed without an answer.
pub const TIMED_OUT: [RDKafkaErrorCode; 4] = [
    RDKafkaErrorCode::OperationTimedOut,
    RDKafkaErrorCode::RequestTimedOut,
    RDKafkaErrorCode::MessageTimedOut,
    RDKafkaErrorCode::TimedOutQueue,
];

/// What an error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// This producer's epoch is over: stop, another instance (or nobody) owns the output.
    Fenced,
    /// The broker refused the credentials or the principal lacks an ACL: stop.
    Denied,
    /// The client cannot be used any more.
    Fatal,
    /// The open transaction must be aborted; the client lives.
    Abortable,
    /// The same request may succeed a little later.
    Retriable,
    /// Anything else: reported, not retried.
    Failed,
}

/// The class of an error returned by rust-rdkafka.
pub fn classify(error: &RdKafkaError) -> ErrorClass {
    if let RdKafkaError::Transaction(e) = error {
        let flags = TransactionalFlags {
            fatal: e.is_fatal(),
            requires_abort: e.txn_requires_abort(),
            retriable: e.is_retriable(),
        };
        return classify_transactional(e.code(), flags);
    }
    error
        .rdkafka_error_code()
        .map_or(ErrorClass::Failed, classify_code)
}

/// What librdkafka says of a transactional API call's error, beside its code.
#[derive(Debug, Clone, Copy, Default)]
struct TransactionalFlags {
    fatal: bool,
    requires_abort: bool,
    retriable: bool,
}

/// The class of a transactional call's error: librdkafka's flags, after the code's own
/// fencing and denial; a code of [`RETRIABLE`] that librdkafka did not flag is retriable
/// too (a transactional call to a coordinator that died answers "broker transport
/// failure" at once, unflagged, where the next coordinator may answer a moment later).
fn classify_transactional(code: RDKafkaErrorCode, flags: TransactionalFlags) -> ErrorClass {
    match classify_code(code) {
        ErrorClass::Fenced => ErrorClass::Fenced,
        ErrorClass::Denied => ErrorClass::Denied,
        _ if flags.fatal => ErrorClass::Fatal,
        _ if flags.requires_abort => ErrorClass::Abortable,
        class if flags.retriable || class == ErrorClass::Retriable => ErrorClass::Retriable,
        _ => ErrorClass::Failed,
    }
}

/// The class of a bare code (a delivery report's, an error event's, a fatal error's).
pub fn classify_code(code: RDKafkaErrorCode) -> ErrorClass {
    if FENCED.contains(&code) {
        ErrorClass::Fenced
    } else if DENIED.contains(&code) {
        ErrorClass::Denied
    } else if RETRIABLE.contains(&code) {
        ErrorClass::Retriable
    } else {
        ErrorClass::Failed
    }
}

/// Whether `error` means the broker refused the credentials or an ACL is missing.
pub fn is_denied(error: &RdKafkaError) -> bool {
    classify(error) == ErrorClass::Denied
}

/// Whether `error` means the call got no answer within its bound.
pub fn is_timeout(error: &RdKafkaError) -> bool {
    let code = match error {
        RdKafkaError::Transaction(e) => Some(e.code()),
        other => other.rdkafka_error_code(),
    };
    code.is_some_and(|code| TIMED_OUT.contains(&code))
}

/// Whether `error` means this producer's epoch is over.
pub fn is_fenced(error: &RdKafkaError) -> bool {
    classify(error) == ErrorClass::Fenced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified_by_one_list_each() {
        for code in FENCED {
            assert_eq!(classify_code(code), ErrorClass::Fenced, "{code:?}");
            assert!(
                is_fenced(&RdKafkaError::MessageProduction(code)),
                "{code:?}"
            );
        }
        for code in DENIED {
            assert_eq!(classify_code(code), ErrorClass::Denied, "{code:?}");
            assert!(is_denied(&RdKafkaError::MetadataFetch(code)), "{code:?}");
        }
        for code in RETRIABLE {
            assert_eq!(classify_code(code), ErrorClass::Retriable, "{code:?}");
        }
        assert_eq!(
            classify(&RdKafkaError::MessageProduction(RDKafkaErrorCode::State)),
            ErrorClass::Failed
        );
        assert_eq!(
            classify(&RdKafkaError::MetadataFetch(
                RDKafkaErrorCode::NotCoordinator
            )),
            ErrorClass::Retriable
        );
        assert_eq!(classify(&RdKafkaError::Canceled), ErrorClass::Failed);
        for code in TIMED_OUT {
            assert!(is_timeout(&RdKafkaError::Flush(code)), "{code:?}");
        }
        assert!(!is_timeout(&RdKafkaError::Flush(RDKafkaErrorCode::Fatal)));
    }

    #[test]
    fn a_transactional_call_to_a_dead_coordinator_is_retriable_though_unflagged() {
        let unflagged = TransactionalFlags::default();
        let transport = RDKafkaErrorCode::BrokerTransportFailure;
        assert_eq!(
            classify_transactional(transport, unflagged),
            ErrorClass::Retriable
        );
        assert_eq!(
            classify_transactional(RDKafkaErrorCode::State, unflagged),
            ErrorClass::Failed
        );
        let fatal = TransactionalFlags {
            fatal: true,
            ..unflagged
        };
        assert_eq!(classify_transactional(transport, fatal), ErrorClass::Fatal);
        let abort = TransactionalFlags {
            requires_abort: true,
            ..unflagged
        };
        assert_eq!(
            classify_transactional(transport, abort),
            ErrorClass::Abortable
        );
        let fenced = RDKafkaErrorCode::ProducerFenced;
        assert_eq!(classify_transactional(fenced, fatal), ErrorClass::Fenced);
    }
}
