//! `KafkaError`: why the Kafka connector refused to start or failed, in one line that
//! says what to change. Wrapped by `ConnectorError::Kafka`.
//!
//! Invariant: librdkafka's own error is part of the line (`reason`), never a separate
//! `source()`, so the CLI's one-line cause chain does not repeat it.

use std::time::Duration;

use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};

use crate::connector::kafka::error_class::{ErrorClass, classify_code, is_denied};
use crate::record::CheckpointId;

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error(
        "{what}: no Kafka bootstrap servers: set `bootstrap = \"host:port\"` in the spec or the KAFKA_BOOTSTRAP environment variable"
    )]
    NoBootstrap { what: &'static str },

    #[error(
        "cannot reach Kafka at {bootstrap} within {}: {reason}: check `bootstrap` (or KAFKA_BOOTSTRAP) and that the broker is running",
        humantime::format_duration(*.timeout)
    )]
    Unreachable {
        bootstrap: String,
        timeout: Duration,
        reason: String,
    },

    #[error(
        "partition {topic}-{partition} is worker {worker}'s now, but worker {from} of the pipeline committed its offset: the source topic's partition count changed, which moves partitions between the workers of one layout, and the position is in worker {from}'s checkpoint: restore the partition count, or rescale to another number of workers (a rescale restores every partition from the checkpoint that holds it)"
    )]
    PartitionMoved {
        topic: String,
        partition: i32,
        worker: crate::cluster::Worker,
        from: String,
    },

    #[error(
        "repartition topic {topic} has {found} partitions, but this worker uses {expected} (repartition_partitions; each partition a range of key groups, fixed for the life of the pipeline): set repartition_partitions = {found}, or leave it out to take the topic's own count (at most max_parallelism), or delete the topic if it holds nothing unread"
    )]
    RepartitionPartitions {
        topic: String,
        found: usize,
        expected: i32,
    },

    #[error(
        "repartition topic {topic}, partition {partition}: the checkpoint resumes at offset {restored}, but the partition now starts at {earliest}: records this worker had not read yet were deleted (a retention or DeleteRecords on the topic from outside Weir?), and the state of their key group cannot be rebuilt without them; restore the records, or start the pipeline over"
    )]
    RepartitionRecordsDeleted {
        topic: String,
        partition: i32,
        restored: i64,
        earliest: i64,
    },

    #[error(
        "repartition topic {topic}, partition {partition}, offset {offset}: {reason}; Weir writes this topic's records only as frames of its own format, so the topic was written by something else or damaged, and the records of these key groups cannot be read: restore the topic, or start the pipeline over"
    )]
    RepartitionFrame {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },

    #[error(
        "topic {topic} does not exist on {bootstrap}: create it (e.g. `kafka.sh topics --create --topic {topic} --partitions 3`) or fix `topic` in the spec"
    )]
    MissingTopic { topic: String, bootstrap: String },

    #[error(
        "topic {topic} is one Weir makes for the pipeline itself (its progress or a repartition topic) and creates at start, with its own settings, but {bootstrap} did not list it within {}: do not create it by hand; restart the run, and if this persists check that the cluster can create topics (enough live brokers for its replication factor)",
        humantime::format_duration(*.waited)
    )]
    MissingOwnTopic {
        topic: String,
        bootstrap: String,
        waited: Duration,
    },

    #[error(
        "transaction_timeout {} is too small: it must exceed checkpoint interval {} + 2 x checkpoint timeout {} + restart_budget {} = {}ms; raise transaction_timeout, or lower [checkpoint] interval/timeout or restart_budget",
        ms(*.timeout), ms(*.interval), ms(*.checkpoint_timeout), ms(*.restart_budget), .needed_ms
    )]
    TransactionTimeoutTooSmall {
        timeout: Duration,
        interval: Duration,
        checkpoint_timeout: Duration,
        restart_budget: Duration,
        needed_ms: u128,
    },

    #[error(
        "transaction_timeout {} exceeds the broker's transaction.max.timeout.ms = {max_ms}: lower transaction_timeout to at most {max_ms}ms (or raise transaction.max.timeout.ms on the broker)",
        ms(*.timeout)
    )]
    TransactionTimeoutTooLarge { timeout: Duration, max_ms: u64 },

    #[error(
        "the broker refused transaction_timeout {} (INVALID_TRANSACTION_TIMEOUT): it exceeds the broker's transaction.max.timeout.ms; lower transaction_timeout",
        ms(*.timeout)
    )]
    TransactionTimeoutRefused { timeout: Duration },

    #[error(
        "the Kafka sinks of a pipeline share one pair of transactional producers, but {first} and {other} set `{field}` differently: give every Kafka sink the same {field}"
    )]
    InconsistentSinks {
        first: String,
        other: String,
        field: &'static str,
    },

    #[error(
        "producer {transactional_id} was fenced while {what}: another instance of pipeline {pipeline} started with the same transactional id (for a worker: the same worker, or a rescale taking it over) and now owns its output; this instance stops (run only one instance of a pipeline)"
    )]
    Fenced {
        pipeline: String,
        transactional_id: String,
        what: String,
    },

    #[error(
        "the transaction of checkpoint {checkpoint} on producer {transactional_id} was open for {}, longer than transaction_timeout {}, so the broker aborted it (was this process stopped or starved?); found while {what}. This instance stops; a restart resumes from the last committed checkpoint",
        ms(*.open_for), ms(*.timeout)
    )]
    TransactionTimedOut {
        transactional_id: String,
        checkpoint: CheckpointId,
        what: String,
        open_for: Duration,
        timeout: Duration,
    },

    #[error(
        "consumer group {group} holds the progress of pipeline {owner}: pipeline {pipeline} cannot commit its own there (each would overwrite the other's progress marker); give one of them its own `group`"
    )]
    GroupShared {
        pipeline: String,
        group: String,
        owner: String,
    },

    #[error(
        "checkpoint storage {storage} holds complete checkpoints {checkpoints} of pipeline {pipeline}, but no progress marker says which one's output was committed (group {group} has none: its offsets expired, were reset or deleted; topic {topic} has none: it was deleted). Weir will not guess: run with --from-checkpoint N to resume after checkpoint N (the last one whose output is in the output topics), or with --from-scratch to start over"
    )]
    MarkerMissing {
        pipeline: String,
        group: String,
        topic: String,
        storage: String,
        checkpoints: String,
    },

    #[error("{what}: {reason}")]
    Client { what: String, reason: String },

    #[error(
        "{what}: refused by the broker ({reason}): the connector's Kafka principal (`security`) lacks an ACL for it, or the spec names a topic, group or transactional_prefix that is not the principal's"
    )]
    NotAuthorized { what: String, reason: String },

    #[error(
        "Kafka at {bootstrap} refused to authenticate {principal} ({reason}): check `security`'s username, mechanism and password (password_env / password_file)"
    )]
    AuthenticationFailed {
        bootstrap: String,
        principal: String,
        reason: String,
    },

    #[error("{what}: cannot read the Kafka password: {reason}")]
    Credentials { what: &'static str, reason: String },

    #[error(
        "{call}: no answer from Kafka at {bootstrap} within {} (the broker is stalled or unreachable); this instance stops, and a restart resumes from the last committed checkpoint (a stall shorter than the checkpoint timeout is ridden through: raise [checkpoint] timeout to ride through longer ones)",
        ms(*.waited)
    )]
    BrokerStalled {
        call: String,
        bootstrap: String,
        waited: Duration,
    },

    #[error(
        "producer {transactional_id}: {call}: the broker requires the transaction to be aborted ({reason}), as it may while its coordinator moves (a broker failing over); a restart resumes from the last committed checkpoint"
    )]
    TransactionAborted {
        transactional_id: String,
        call: String,
        reason: String,
    },

    #[error("{what}: the run was ended by another failure before Kafka at {bootstrap} answered")]
    Abandoned { what: String, bootstrap: String },

    #[error("delivery to Kafka failed for checkpoint {checkpoint}: {reason}")]
    Delivery {
        checkpoint: CheckpointId,
        reason: String,
        /// The record was purged or refused retriably (see `DeliveryContext`).
        transient: bool,
    },

    #[error(
        "Kafka group {group} says checkpoint {marker} of pipeline {pipeline} was committed, but checkpoint storage {storage} has no complete checkpoint {marker}: restore that checkpoint directory, or run with --from-scratch (the output topics then receive everything again)"
    )]
    MarkerWithoutCheckpoint {
        pipeline: String,
        group: String,
        marker: CheckpointId,
        storage: String,
    },

    #[error(
        "transaction protocol violated on producer {transactional_id}: {reason} (a bug in weir; the pipeline stops and recovers from its last committed checkpoint)"
    )]
    Protocol {
        transactional_id: String,
        reason: String,
    },
}

impl KafkaError {
    /// Whether the run that met this error may be restarted in the same process, from
    /// its last committed checkpoint: the cluster was failing over or stalled (see
    /// `pipeline::run`). Never for a fencing (another instance owns the output), a
    /// refusal, or a wrong setting, which a restart would only meet again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            KafkaError::TransactionAborted { .. }
                | KafkaError::BrokerStalled { .. }
                | KafkaError::Delivery {
                    transient: true,
                    ..
                }
        )
    }

    /// A librdkafka failure while doing `what`; a refusal by the broker (see
    /// `error_class::DENIED`) becomes `NotAuthorized`.
    pub fn client(what: impl Into<String>, error: &RdKafkaError) -> KafkaError {
        let (what, reason) = (what.into(), reason(error));
        if is_denied(error) {
            KafkaError::NotAuthorized { what, reason }
        } else {
            KafkaError::Client { what, reason }
        }
    }

    /// A bare error code answered while doing `what` (a per-topic or per-resource
    /// answer); a refusal becomes `NotAuthorized`.
    pub fn from_code(what: impl Into<String>, code: RDKafkaErrorCode) -> KafkaError {
        let (what, reason) = (what.into(), code.to_string());
        if classify_code(code) == ErrorClass::Denied {
            KafkaError::NotAuthorized { what, reason }
        } else {
            KafkaError::Client { what, reason }
        }
    }
}

/// librdkafka's message, without rust-rdkafka's "Transaction error: " style prefixes.
pub fn reason(error: &RdKafkaError) -> String {
    match error {
        RdKafkaError::Transaction(e) => e.to_string(),
        RdKafkaError::MessageProduction(code)
        | RdKafkaError::MessageConsumption(code)
        | RdKafkaError::MessageConsumptionFatal(code)
        | RdKafkaError::MetadataFetch(code)
        | RdKafkaError::Global(code)
        | RdKafkaError::AdminOp(code) => code.to_string(),
        other => other.to_string(),
    }
}

fn ms(d: Duration) -> String {
    crate::field::units::format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::kafka::error_class::DENIED;

    #[test]
    fn refusals_by_the_broker_say_so_in_one_line() {
        for code in DENIED {
            let e = KafkaError::from_code("cannot read topic t", code);
            assert!(matches!(e, KafkaError::NotAuthorized { .. }), "{code:?}");
            let e = KafkaError::client("cannot read topic t", &RdKafkaError::MetadataFetch(code));
            let line = e.to_string();
            assert!(
                line.starts_with(&format!(
                    "cannot read topic t: refused by the broker ({code})"
                )),
                "{line}"
            );
            assert!(!line.contains('\n'));
        }
        let e = KafkaError::from_code("x", RDKafkaErrorCode::UnknownTopic);
        assert!(matches!(e, KafkaError::Client { .. }));
    }
}
