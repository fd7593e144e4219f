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

use std::time::Duration;

use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

use crate::connector::kafka::client::Endpoint;
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::security::{ClientSecurity, SecurityConfig};
use crate::spec::InvalidField;
use crate::spec::units;

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
    /// How the clients authenticate and encrypt; default: plaintext, no authentication.
    #[serde(default)]
    pub security: Option<SecurityConfig>,
}

impl KafkaSourceConfig {
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
            security: None,
        }
    }

    pub fn validate(&self) -> Result<(), InvalidField> {
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
        }
    }

    pub fn validate(&self) -> Result<(), InvalidField> {
        if self.topic.is_empty() {
            return Err(InvalidField::new("topic", "topic must not be empty"));
        }
        validate_security(self.security.as_ref())
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
