//! A tenant's topics on the shared cluster, managed through the API (`/v1/topics`) with
//! the tenant's own Kafka principal, so the broker's ACLs hold the calls to its prefix
//! as they hold its pipelines.
//!
//! Invariants:
//! - Every name handled lies under the tenant's prefix and is not a pipeline's internal
//!   topic (`*.progress`, `*-repartition`): those are made and deleted by pipelines
//!   (and a pipeline delete), never through this API, and are not listed or counted.
//! - Every call to the broker is bounded by `CALL_TIMEOUT`; a broker that does not answer
//!   is `Unreachable`, never a hang.

use std::time::Duration;

use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;

use crate::connector::kafka::KafkaError;
use crate::connector::kafka::client::{self, Endpoint, block_on};
use crate::connector::kafka::names::is_derived_topic;
use crate::server::wire::TopicInfo;

/// Bound on each call to the broker.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest topic name Kafka accepts.
const MAX_TOPIC_NAME: usize = 249;

/// Whether `name` is one of the names pipelines make for themselves, or the same name
/// to Kafka (`.` and `_` are one to it: see `KafkaNames`).
pub fn is_internal(name: &str) -> bool {
    is_derived_topic(name)
}

/// Why `name` cannot be one of the tenant's topics (prefix `prefix`), if it cannot.
pub fn check_name(name: &str, prefix: &str) -> Result<(), String> {
    let legal = name.len() <= MAX_TOPIC_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !legal {
        return Err(format!(
            "topic {name:?}: use at most {MAX_TOPIC_NAME} of a-z, A-Z, 0-9, ., _ and -"
        ));
    }
    if name.strip_prefix(prefix).is_none_or(str::is_empty) {
        return Err(format!("topic {name:?} is outside your prefix {prefix:?}"));
    }
    if is_internal(name) {
        return Err(format!(
            "topic {name:?}: names ending in .progress (or _progress, the same name to Kafka) or -repartition are pipelines' own"
        ));
    }
    Ok(())
}

/// The tenant's topics (under `prefix`, internal ones left out), by name.
pub fn list(endpoint: &Endpoint, prefix: &str) -> Result<Vec<TopicInfo>, KafkaError> {
    let admin = client::admin(endpoint, CALL_TIMEOUT)?;
    let mut topics: Vec<TopicInfo> =
        client::list_topics(&admin, &endpoint.bootstrap, CALL_TIMEOUT)?
            .into_iter()
            .filter(|(name, _)| name.starts_with(prefix) && !is_internal(name))
            .map(|(name, partitions)| TopicInfo {
                name,
                partitions: u32::try_from(partitions).unwrap_or(u32::MAX),
            })
            .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(topics)
}

/// Creates `name` with `partitions` partitions (the broker's default replication);
/// `Ok(false)` if it exists.
pub fn create(endpoint: &Endpoint, name: &str, partitions: u32) -> Result<bool, KafkaError> {
    let admin = client::admin(endpoint, CALL_TIMEOUT)?;
    let partitions = i32::try_from(partitions).unwrap_or(i32::MAX);
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(-1));
    let what = || format!("cannot create topic {name}");
    let results = block_on(
        admin.create_topics([&topic], &client::admin_options(CALL_TIMEOUT)),
        CALL_TIMEOUT * 2,
    )
    .ok_or_else(|| KafkaError::Unreachable {
        bootstrap: endpoint.bootstrap.clone(),
        timeout: CALL_TIMEOUT,
        reason: "CreateTopics did not answer".to_owned(),
    })?
    .map_err(|e| KafkaError::client(what(), &e))?;
    match results.into_iter().next() {
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((_, code))) => Err(KafkaError::from_code(what(), code)),
        _ => Ok(true),
    }
}

/// Deletes `name`; `Ok(false)` if there is none.
pub fn delete(endpoint: &Endpoint, name: &str) -> Result<bool, KafkaError> {
    let admin = client::admin(endpoint, CALL_TIMEOUT)?;
    let deleted = client::delete_topics(
        &admin,
        &endpoint.bootstrap,
        &[name.to_owned()],
        CALL_TIMEOUT,
    )?;
    Ok(!deleted.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_under_the_prefix_and_not_internal() {
        assert_eq!(check_name("a.orders", "a."), Ok(()));
        for bad in [
            "b.orders",
            "a.",
            "ab.x",
            "a.x/y",
            "a.x y",
            "a.wc.progress",
            "a.wc-count-repartition",
        ] {
            assert!(check_name(bad, "a.").is_err(), "{bad}");
        }
        assert!(check_name(&format!("a.{}", "x".repeat(248)), "a.").is_err());
    }
}
