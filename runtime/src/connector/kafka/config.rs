//! The `type = "kafka"` source and sink configurations, as written in a pipeline spec.
//!
//! Invariants after parsing and `validate`: a source names at least one topic (`topic`
//! or `topics`, not both) and no topic name is empty; a sink names one non-empty topic;
//! `transactional_prefix` is not empty; durations are typed. Broker-dependent checks
//! (reachability, topics exist, `transaction_timeout` within the broker's
//! `transaction.max.timeout.ms`) happen when the pipeline starts, see `preflight`.
//! `bootstrap` defaults to `$KAFKA_BOOTSTRAP`, resolved when the connector opens, so a
//! spec stays portable between a laptop and CI; so is `security` (see `security.rs`),
//! whose password is read only then.
//!
//! # Memory budget
//!
//! librdkafka's own defaults let a consumer pre-fetch 64 MB and 100,000 records per
//! partition and a producer queue 1 GB and 100,000 records, far more than a pipeline
//! needs to keep the broker busy. `buffer_bytes` bounds them instead, and is the only
//! place their queue settings come from ([`KafkaSourceConfig::consumer_settings`],
//! [`KafkaSinkConfig::producer_settings`]):
//!
//! - a source subtask's consumer holds at most `buffer_bytes` of fetched records, split
//!   evenly over its partitions (one librdkafka queue each), plus one fetch response in
//!   flight (`fetch.max.bytes`: `buffer_bytes / 2`, or 1,000,000 B if that is more,
//!   the largest record librdkafka accepts by default);
//! - the sink's producers (one per pipeline run at-least-once, two exactly-once) share
//!   `buffer_bytes` evenly: each queues at most its share of records not yet
//!   acknowledged by the broker, and its in-flight requests copy at most 5 batches of
//!   `batch.size` (at most its share / 8).
//!
//! Every record counts its key and value plus [`RECORD_OVERHEAD_BYTES`] of librdkafka
//! bookkeeping (a message count bound), so small records are bounded by number. A full
//! producer queue blocks the sending sink subtask (backpressure, see
//! `KafkaCommitUnit::send_record`); a full consumer queue pauses fetching that
//! partition for [`FETCH_QUEUE_BACKOFF_MS`]. Bounds: `buffer_bytes` is at least
//! [`MIN_SOURCE_BUFFER_BYTES`] / [`MIN_SINK_BUFFER_BYTES`] (a producer's share must hold
//! the largest record librdkafka sends, 1,000,000 B) and at most [`MAX_BUFFER_BYTES`].

use std::time::Duration;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

use crate::connector::kafka::client::Endpoint;
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::security::{ClientSecurity, SecurityConfig};
use crate::field::InvalidField;
use crate::field::units;

/// Environment variable giving the bootstrap servers when a spec has no `bootstrap`.
pub const BOOTSTRAP_ENV: &str = "KAFKA_BOOTSTRAP";
/// Default transactional id prefix (a tenant's namespace on a shared server).
pub const DEFAULT_TRANSACTIONAL_PREFIX: &str = "weir.";
/// Default `transaction.timeout.ms`: 5 min, above the sum of the default checkpoint
/// interval (1 s), checkpoint timeout (60 s) and restart budget (30 s), and below Kafka's
/// default `transaction.max.timeout.ms` (15 min).
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(300);
/// Default time allowed for a crashed pipeline to restart and resume its transactions.
pub const DEFAULT_RESTART_BUDGET: Duration = Duration::from_secs(30);
/// Default bound on reaching the broker at start (metadata, admin requests).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `failover_timeout` of a Kafka source: Kafka's broker session (9 s) that a
/// dead partition leader's must run out, a leader election, and room for a busy host.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `buffer_bytes` of a Kafka source: per subtask, over its partitions.
pub const DEFAULT_SOURCE_BUFFER_BYTES: usize = 4 << 20;
/// Default `buffer_bytes` of the Kafka sinks: over the pipeline's producers.
pub const DEFAULT_SINK_BUFFER_BYTES: usize = 8 << 20;
/// Smallest source `buffer_bytes`: 256 KiB.
pub const MIN_SOURCE_BUFFER_BYTES: usize = 256 << 10;
/// Smallest sink `buffer_bytes`: 2 MiB, so each of two producers' shares holds the
/// largest record librdkafka sends by default (`message.max.bytes`, 1,000,000 B): a
/// record larger than a producer's queue could never be queued.
pub const MIN_SINK_BUFFER_BYTES: usize = 2 << 20;
/// Largest `buffer_bytes`: 1 GiB (librdkafka's queue limits are a little above 2 GiB).
pub const MAX_BUFFER_BYTES: usize = 1 << 30;
/// librdkafka's bookkeeping per queued record (its message and op structures, about
/// 200-250 bytes), counted against `buffer_bytes` as a bound on the number of records.
pub const RECORD_OVERHEAD_BYTES: usize = 256;
/// How long a consumer waits before fetching a partition again once its queue is full
/// (librdkafka's default, 1 s, would starve a small queue).
pub const FETCH_QUEUE_BACKOFF_MS: u64 = 10;
/// Producer batching delay: small, so a checkpoint's flush is quick.
pub const LINGER_MS: u64 = 5;
/// librdkafka's default `message.max.bytes` (the largest record it sends or fetches),
/// which Weir leaves unchanged.
const MESSAGE_MAX_BYTES: usize = 1_000_000;
/// librdkafka's default `max.partition.fetch.bytes` (1 MiB): a partition's share of one
/// fetch, lowered only for a small budget.
const PARTITION_FETCH_BYTES: usize = 1 << 20;
/// `batch.size` bounds: librdkafka's default (1,000,000 B) and 64 KiB.
const MIN_BATCH_BYTES: usize = 64 << 10;

/// Where a Kafka source starts when it has no checkpoint to resume from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartOffset {
    /// The first offset still in each partition.
    Earliest,
    /// The end of each partition at start (its last stable offset).
    Latest,
    /// The consumer group's committed offsets (those Weir commits inside its
    /// transactions); partitions without one start at the earliest offset.
    #[default]
    Committed,
}

/// What a Kafka sink promises across failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryGuarantee {
    /// Transactional two-phase commit: each record visible to `read_committed`
    /// consumers exactly once (see `sink`).
    #[default]
    ExactlyOnce,
    /// An idempotent producer flushed at every checkpoint: nothing lost, replays after a
    /// crash may duplicate.
    AtLeastOnce,
}

/// `[[sources]] type = "kafka"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// Bootstrap servers (`host:port,...`); default `$KAFKA_BOOTSTRAP`.
    #[serde(default)]
    pub bootstrap: Option<String>,
    /// One topic (or use `topics`).
    #[serde(default)]
    pub topic: Option<String>,
    /// Several topics; their partitions are spread over the subtasks together.
    #[serde(default)]
    pub topics: Option<Vec<String>>,
    /// Consumer group for committed offsets; default `{transactional_prefix}<pipeline>`
    /// (`KafkaNames::group`, filled in by the spec once the pipeline name is known). Offsets are committed only inside the
    /// sink's transactions, never by auto-commit.
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub start: StartOffset,
    /// Stop at the end offsets seen at start (tests, batch-style runs).
    #[serde(default)]
    pub bounded: bool,
    /// Most records per second over all subtasks (0 = unthrottled): paces a replay of a
    /// large backlog, e.g. for demos and crash tests.
    #[serde(default)]
    pub rate: u64,
    #[serde(
        default = "default_connect_timeout",
        deserialize_with = "units::positive_duration"
    )]
    pub connect_timeout: Duration,
    /// How long a read of a partition's leader or of the group's coordinator at start
    /// (the offsets to resume from) is retried while the cluster fails over: a broker
    /// that died is the leader until its session runs out and another is elected.
    #[serde(
        default = "default_failover_timeout",
        deserialize_with = "units::positive_duration"
    )]
    pub failover_timeout: Duration,
    /// How the clients authenticate and encrypt; default: plaintext, no authentication.
    #[serde(default)]
    pub security: Option<SecurityConfig>,
    /// Bytes of fetched records one subtask's consumer may hold (see the module docs).
    #[serde(
        default = "default_source_buffer_bytes",
        deserialize_with = "units::size"
    )]
    pub buffer_bytes: usize,
}

impl KafkaSourceConfig {
    /// How long a read that a failover can hold up is retried: `failover_timeout`,
    /// never less than one connection's `connect_timeout`.
    pub fn failover_bound(&self) -> Duration {
        self.failover_timeout.max(self.connect_timeout)
    }

    /// A bounded source of `topic` from the earliest offsets (tests, examples).
    pub fn new(topic: impl Into<String>) -> Self {
        KafkaSourceConfig {
            bootstrap: None,
            topic: Some(topic.into()),
            topics: None,
            group: None,
            start: StartOffset::Earliest,
            bounded: true,
            rate: 0,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            failover_timeout: DEFAULT_FAILOVER_TIMEOUT,
            security: None,
            buffer_bytes: DEFAULT_SOURCE_BUFFER_BYTES,
        }
    }

    pub fn validate(&self) -> Result<(), InvalidField> {
        check_buffer_bytes(self.buffer_bytes, MIN_SOURCE_BUFFER_BYTES, "256KiB")?;
        match (&self.topic, &self.topics) {
            (Some(_), Some(_)) => {
                return Err(InvalidField::new(
                    "topics",
                    "give either topic or topics, not both",
                ));
            }
            (None, None) => {
                return Err(InvalidField::new(
                    "topic",
                    "a kafka source needs `topic = \"...\"` (or `topics = [...]`)",
                ));
            }
            (None, Some(t)) if t.is_empty() => {
                return Err(InvalidField::new("topics", "topics must not be empty"));
            }
            _ => {}
        }
        if self.topic_names().iter().any(|t| t.is_empty()) {
            return Err(InvalidField::new("topic", "a topic name must not be empty"));
        }
        if self.group.as_deref() == Some("") {
            return Err(InvalidField::new(
                "group",
                "group must not be empty: remove it to use the default <transactional_prefix><pipeline>",
            ));
        }
        validate_security(self.security.as_ref())
    }

    /// The consumer settings sizing librdkafka's queues from `buffer_bytes`, for a
    /// subtask reading `partitions` partitions (each from its own queue).
    pub fn consumer_settings(&self, partitions: usize) -> Vec<(&'static str, String)> {
        let per_partition = self.buffer_bytes / partitions.max(1);
        let fetch_max = (self.buffer_bytes / 2).max(MESSAGE_MAX_BYTES);
        let partition_fetch = (per_partition / 2).clamp(MIN_BATCH_BYTES, PARTITION_FETCH_BYTES);
        vec![
            (
                "queued.max.messages.kbytes",
                (per_partition / 1024).max(1).to_string(),
            ),
            (
                "queued.min.messages",
                (per_partition / RECORD_OVERHEAD_BYTES).max(1).to_string(),
            ),
            ("fetch.max.bytes", fetch_max.to_string()),
            ("max.partition.fetch.bytes", partition_fetch.to_string()),
            ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string()),
        ]
    }

    /// The topics read, in the order given.
    pub fn topic_names(&self) -> Vec<String> {
        match (&self.topic, &self.topics) {
            (Some(t), _) => vec![t.clone()],
            (None, Some(ts)) => ts.clone(),
            (None, None) => Vec::new(),
        }
    }

    pub fn bootstrap(&self) -> Result<String, KafkaError> {
        resolve_bootstrap(self.bootstrap.as_deref(), "kafka source")
    }

    /// The bootstrap servers and security settings, password read now.
    pub fn endpoint(&self) -> Result<Endpoint, KafkaError> {
        resolve_endpoint(self.bootstrap()?, self.security.as_ref(), "kafka source")
    }
}

/// `[[sinks]] type = "kafka"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkConfig {
    /// Bootstrap servers; default `$KAFKA_BOOTSTRAP`.
    #[serde(default)]
    pub bootstrap: Option<String>,
    pub topic: String,
    #[serde(default)]
    pub delivery: DeliveryGuarantee,
    /// Transactional ids are `{prefix}{pipeline}.{unit}.{0|1}`; must not be empty.
    #[serde(default = "default_prefix", deserialize_with = "transactional_prefix")]
    pub transactional_prefix: String,
    /// The producers' `transaction.timeout.ms`. Must exceed checkpoint interval +
    /// checkpoint timeout + `restart_budget`, and not exceed the broker's
    /// `transaction.max.timeout.ms`.
    #[serde(
        default = "default_transaction_timeout",
        deserialize_with = "units::positive_duration"
    )]
    pub transaction_timeout: Duration,
    #[serde(
        default = "default_restart_budget",
        deserialize_with = "units::duration"
    )]
    pub restart_budget: Duration,
    #[serde(
        default = "default_connect_timeout",
        deserialize_with = "units::positive_duration"
    )]
    pub connect_timeout: Duration,
    /// How the clients authenticate and encrypt; default: plaintext, no authentication.
    #[serde(default)]
    pub security: Option<SecurityConfig>,
    /// Bytes of records not yet acknowledged that the pipeline's producers may hold
    /// together (see the module docs).
    #[serde(
        default = "default_sink_buffer_bytes",
        deserialize_with = "units::size"
    )]
    pub buffer_bytes: usize,
}

impl KafkaSinkConfig {
    pub fn new(topic: impl Into<String>) -> Self {
        KafkaSinkConfig {
            bootstrap: None,
            topic: topic.into(),
            delivery: DeliveryGuarantee::ExactlyOnce,
            transactional_prefix: default_prefix(),
            transaction_timeout: DEFAULT_TRANSACTION_TIMEOUT,
            restart_budget: DEFAULT_RESTART_BUDGET,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            security: None,
            buffer_bytes: DEFAULT_SINK_BUFFER_BYTES,
        }
    }

    pub fn validate(&self) -> Result<(), InvalidField> {
        check_buffer_bytes(self.buffer_bytes, MIN_SINK_BUFFER_BYTES, "2MiB")?;
        if self.topic.is_empty() {
            return Err(InvalidField::new("topic", "topic must not be empty"));
        }
        validate_security(self.security.as_ref())
    }

    /// How many producers share `buffer_bytes`: two transactional ones exactly-once,
    /// one idempotent producer at-least-once.
    pub fn producers(&self) -> usize {
        match self.delivery {
            DeliveryGuarantee::ExactlyOnce => 2,
            DeliveryGuarantee::AtLeastOnce => 1,
        }
    }

    /// The settings every producer of the sink shares: batching and the queue bounds
    /// of one producer's share of `buffer_bytes`. (Acknowledgements are librdkafka's
    /// default for idempotent producers, `acks=all`; no compression.)
    pub fn producer_settings(&self) -> Vec<(&'static str, String)> {
        let share = self.buffer_bytes / self.producers();
        let batch = (share / 8).clamp(MIN_BATCH_BYTES, MESSAGE_MAX_BYTES);
        vec![
            ("linger.ms", LINGER_MS.to_string()),
            (
                "queue.buffering.max.kbytes",
                (share / 1024).max(1).to_string(),
            ),
            (
                "queue.buffering.max.messages",
                (share / RECORD_OVERHEAD_BYTES).max(1).to_string(),
            ),
            ("batch.size", batch.to_string()),
        ]
    }

    pub fn bootstrap(&self) -> Result<String, KafkaError> {
        resolve_bootstrap(self.bootstrap.as_deref(), "kafka sink")
    }

    /// The bootstrap servers and security settings, password read now.
    pub fn endpoint(&self) -> Result<Endpoint, KafkaError> {
        resolve_endpoint(self.bootstrap()?, self.security.as_ref(), "kafka sink")
    }
}

fn resolve_bootstrap(given: Option<&str>, what: &'static str) -> Result<String, KafkaError> {
    match given {
        Some(b) if !b.trim().is_empty() => Ok(b.to_owned()),
        _ => match std::env::var(BOOTSTRAP_ENV) {
            Ok(b) if !b.trim().is_empty() => Ok(b),
            _ => Err(KafkaError::NoBootstrap { what }),
        },
    }
}

/// `buffer_bytes` within `min` (written `min_text`) ..= [`MAX_BUFFER_BYTES`].
fn check_buffer_bytes(bytes: usize, min: usize, min_text: &str) -> Result<(), InvalidField> {
    if bytes < min {
        return Err(InvalidField::new(
            "buffer_bytes",
            format!(
                "buffer_bytes must be at least {min_text} (it was {bytes} bytes): librdkafka's queues need room for the largest record"
            ),
        ));
    }
    if bytes > MAX_BUFFER_BYTES {
        return Err(InvalidField::new(
            "buffer_bytes",
            format!("buffer_bytes must be at most 1GiB (it was {bytes} bytes)"),
        ));
    }
    Ok(())
}

fn validate_security(security: Option<&SecurityConfig>) -> Result<(), InvalidField> {
    security.map_or(Ok(()), SecurityConfig::validate)
}

fn resolve_endpoint(
    bootstrap: String,
    security: Option<&SecurityConfig>,
    what: &'static str,
) -> Result<Endpoint, KafkaError> {
    let security = match security {
        Some(s) => s.resolve(what)?,
        None => ClientSecurity::default(),
    };
    Ok(Endpoint {
        bootstrap,
        security,
    })
}

fn default_prefix() -> String {
    DEFAULT_TRANSACTIONAL_PREFIX.to_owned()
}
fn default_transaction_timeout() -> Duration {
    DEFAULT_TRANSACTION_TIMEOUT
}
fn default_restart_budget() -> Duration {
    DEFAULT_RESTART_BUDGET
}
fn default_connect_timeout() -> Duration {
    DEFAULT_CONNECT_TIMEOUT
}
fn default_failover_timeout() -> Duration {
    DEFAULT_FAILOVER_TIMEOUT
}
fn default_source_buffer_bytes() -> usize {
    DEFAULT_SOURCE_BUFFER_BYTES
}
fn default_sink_buffer_bytes() -> usize {
    DEFAULT_SINK_BUFFER_BYTES
}

fn transactional_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let prefix = String::deserialize(d)?;
    if prefix.is_empty() {
        return Err(D::Error::custom(format!(
            "transactional_prefix must not be empty: remove it to use \"{DEFAULT_TRANSACTIONAL_PREFIX}\", \
             or set a prefix unique to this deployment such as \"team-a.\""
        )));
    }
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(settings: &[(&'static str, String)], key: &str) -> usize {
        settings
            .iter()
            .find(|(k, _)| *k == key)
            .unwrap_or_else(|| panic!("{key} not set"))
            .1
            .parse()
            .expect("a number")
    }

    /// Catches: a consumer's queues not split over its partitions (librdkafka applies
    /// them per partition queue), a fetch size below what librdkafka requires
    /// (`fetch.max.bytes` >= `message.max.bytes`, else the client is refused), or the
    /// 1 s queue-full backoff that starves a small queue.
    #[test]
    fn consumer_queues_share_the_budget() {
        let mut c = KafkaSourceConfig::new("in");
        c.buffer_bytes = 8 << 20;
        let s = c.consumer_settings(2);
        assert_eq!(setting(&s, "queued.max.messages.kbytes"), 4096);
        assert_eq!(setting(&s, "queued.min.messages"), (4 << 20) / 256);
        assert_eq!(setting(&s, "fetch.max.bytes"), 4 << 20);
        assert_eq!(setting(&s, "max.partition.fetch.bytes"), 1 << 20);
        assert_eq!(setting(&s, "fetch.queue.backoff.ms"), 10);
        // The smallest budget over many partitions still fetches and never asks
        // librdkafka for a value it refuses.
        c.buffer_bytes = MIN_SOURCE_BUFFER_BYTES;
        let s = c.consumer_settings(1000);
        assert_eq!(setting(&s, "queued.max.messages.kbytes"), 1);
        assert_eq!(setting(&s, "queued.min.messages"), 1);
        assert_eq!(setting(&s, "fetch.max.bytes"), MESSAGE_MAX_BYTES);
        assert_eq!(setting(&s, "max.partition.fetch.bytes"), 64 << 10);
        // A subtask without partitions.
        assert_eq!(
            setting(&c.consumer_settings(0), "queued.max.messages.kbytes"),
            256
        );
    }

    /// Catches: the producers' shares not adding up to the budget, or a share too
    /// small for the largest record librdkafka sends (it would wait for room forever).
    #[test]
    fn producers_share_the_budget() {
        let mut c = KafkaSinkConfig::new("out");
        c.buffer_bytes = 16 << 20;
        let s = c.producer_settings();
        assert_eq!(setting(&s, "queue.buffering.max.kbytes"), 8192);
        assert_eq!(setting(&s, "queue.buffering.max.messages"), (8 << 20) / 256);
        assert_eq!(setting(&s, "batch.size"), MESSAGE_MAX_BYTES);
        assert_eq!(setting(&s, "linger.ms"), 5);
        c.delivery = DeliveryGuarantee::AtLeastOnce;
        assert_eq!(
            setting(&c.producer_settings(), "queue.buffering.max.kbytes"),
            16384
        );
        c.delivery = DeliveryGuarantee::ExactlyOnce;
        c.buffer_bytes = MIN_SINK_BUFFER_BYTES;
        let s = c.producer_settings();
        assert!(setting(&s, "queue.buffering.max.kbytes") * 1024 >= MESSAGE_MAX_BYTES);
        assert_eq!(setting(&s, "batch.size"), 128 << 10);
        assert!(c.validate().is_ok());
        c.buffer_bytes = MIN_SINK_BUFFER_BYTES - 1;
        assert_eq!(c.validate().expect_err("too small").field, "buffer_bytes");
    }
}
