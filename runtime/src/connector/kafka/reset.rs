//! Resetting a pipeline on Kafka: deleting everything it keeps on the cluster between
//! runs, so that a pipeline of the same name starts from nothing (`weir reset-kafka`,
//! and a hosting server's pipeline delete).
//!
//! What a pipeline keeps there (all named by `KafkaNames`): its consumer groups (the
//! default `{P}{p}` and any a source names), which hold its committed offsets and the
//! progress marker; its progress topics (`{P}{p}.progress`, and `{P}{p}.{I}-of-{N}.progress`
//! of every worker layout it ever ran as); its repartition topics (one per keyed step
//! of the spec); and the broker's state of its transactional ids. Its output topics are
//! the user's and are never touched.
//!
//! Invariants:
//! - Nothing of a killed instance commits afterwards: every commit unit found (`0`, and
//!   each `I-of-N` whose progress topic exists) is fenced first (`init_transactions` on
//!   both of its transactional ids), which aborts what it left open and waits out a
//!   commit already under way. Only then are the groups deleted, so no late transaction
//!   puts offsets back into a deleted group. (The transactional ids' own state cannot
//!   be deleted; the broker expires it, `transactional.id.expiration.ms`, and a new
//!   pipeline of the name fences it like any earlier instance.)
//! - A group with live members is not deleted (the broker refuses it): the reset
//!   fails with one line saying to stop every instance first. Weir's own clients never
//!   join the group (they assign partitions), so a stopped pipeline's group is empty.
//! - Only names that are the pipeline's by construction are deleted: exact names, and
//!   for worker progress topics exactly `{P}{p}.<digits>-of-<digits>.progress`.
//! - It returns only once the broker no longer lists the deleted topics (bounded), so a
//!   pipeline created at once after it never finds a topic still being deleted.

use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{Producer, ThreadedProducer};

use crate::cluster::Worker;
use crate::connector::kafka::client::{self, Endpoint, QuietContext, block_on, client_config};
use crate::connector::kafka::error::KafkaError;
use crate::connector::kafka::names::KafkaNames;

/// Wait between two looks at whether deleted topics are gone.
const GONE_POLL: Duration = Duration::from_millis(100);

/// What a reset is asked to remove.
#[derive(Debug, Clone)]
pub struct ResetRequest<'a> {
    pub endpoint: &'a Endpoint,
    pub names: &'a KafkaNames,
    /// The repartition topics of the spec's keyed steps (`PipelineSpec::repartition_topics`).
    pub repartition_topics: Vec<String>,
    /// Every consumer group the pipeline commits to.
    pub groups: Vec<String>,
    /// Whether the pipeline's sinks are transactional (its commit units are fenced).
    pub transactional: bool,
    /// Bound on each call to the broker.
    pub timeout: Duration,
}

/// What a reset removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    pub topics: Vec<String>,
    pub groups: Vec<String>,
    /// The commit units fenced (`0`, `I-of-N`).
    pub fenced: Vec<String>,
}

/// Of the topics `listed` on the cluster, those that are the pipeline's own (see the
/// module invariants), with the workers whose progress topic they are.
pub fn owned_topics(
    names: &KafkaNames,
    repartition_topics: &[String],
    listed: &[String],
) -> (Vec<String>, Vec<Worker>) {
    let single = names.progress_topic();
    let worker_prefix = format!("{}.", names.group());
    let mut topics = Vec::new();
    let mut workers = vec![Worker::SINGLE];
    for topic in listed {
        if *topic == single || repartition_topics.contains(topic) {
            topics.push(topic.clone());
            continue;
        }
        let worker = topic
            .strip_prefix(&worker_prefix)
            .and_then(|rest| rest.strip_suffix(".progress"))
            .and_then(Worker::parse_unit)
            .filter(|w| !w.is_single());
        if let Some(worker) = worker {
            topics.push(topic.clone());
            workers.push(worker);
        }
    }
    topics.sort();
    workers.sort();
    workers.dedup();
    (topics, workers)
}

/// Deletes what the pipeline keeps on the cluster (see the module invariants).
pub fn reset(request: &ResetRequest<'_>) -> Result<Removed, KafkaError> {
    let endpoint = request.endpoint;
    let admin = client::admin(endpoint, request.timeout)?;
    let listed = topic_names(&admin, endpoint, request.timeout)?;
    let (topics, workers) = owned_topics(request.names, &request.repartition_topics, &listed);
    let mut fenced = Vec::new();
    if request.transactional {
        for worker in workers {
            let names = request.names.clone().for_worker(worker);
            fence_unit(endpoint, &names, request.timeout)?;
            fenced.push(names.unit());
        }
    }
    client::delete_topics(&admin, &endpoint.bootstrap, &topics, request.timeout)?;
    let groups = delete_groups(&admin, endpoint, &request.groups, request.timeout)?;
    wait_gone(&admin, endpoint, &topics, request.timeout)?;
    Ok(Removed {
        topics,
        groups,
        fenced,
    })
}

/// The names of every topic the principal may see.
fn topic_names(
    admin: &AdminClient<QuietContext>,
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<Vec<String>, KafkaError> {
    let listed = client::list_topics(admin, &endpoint.bootstrap, timeout)?;
    Ok(listed.into_iter().map(|(name, _)| name).collect())
}

/// Initialises both transactional ids of the commit unit of `names` and closes them:
/// whatever an earlier instance left open is aborted, a commit under way completes.
fn fence_unit(
    endpoint: &Endpoint,
    names: &KafkaNames,
    timeout: Duration,
) -> Result<(), KafkaError> {
    for slot in 0..2 {
        let id = names.transactional_id(slot);
        let producer: ThreadedProducer<QuietContext> = client_config(endpoint, timeout)
            .set("transactional.id", &id)
            .create_with_context(QuietContext)
            .map_err(|e| KafkaError::client(format!("cannot create producer {id}"), &e))?;
        producer
            .init_transactions(timeout)
            .map_err(|e| KafkaError::client(format!("fencing transactional id {id}"), &e))?;
    }
    Ok(())
}

/// Deletes `groups`; returns those that existed.
fn delete_groups(
    admin: &AdminClient<QuietContext>,
    endpoint: &Endpoint,
    groups: &[String],
    timeout: Duration,
) -> Result<Vec<String>, KafkaError> {
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let results = block_on(
        admin.delete_groups(&names, &client::admin_options(timeout)),
        timeout + Duration::from_secs(1),
    )
    .ok_or_else(|| KafkaError::Unreachable {
        bootstrap: endpoint.bootstrap.clone(),
        timeout,
        reason: "DeleteGroups did not answer".to_owned(),
    })?
    .map_err(|e| KafkaError::client("deleting the pipeline's consumer groups", &e))?;
    let mut deleted = Vec::new();
    for result in results {
        match result {
            Ok(group) => deleted.push(group),
            Err((_, RDKafkaErrorCode::GroupIdNotFound)) => {}
            Err((group, RDKafkaErrorCode::NonEmptyGroup)) => {
                return Err(KafkaError::Client {
                    what: format!("deleting consumer group {group}"),
                    reason: "the group has active members: stop every instance of the pipeline (and any other consumer of the group) first".to_owned(),
                });
            }
            Err((group, code)) => {
                return Err(KafkaError::from_code(
                    format!("deleting consumer group {group}"),
                    code,
                ));
            }
        }
    }
    Ok(deleted)
}

/// Waits, bounded by `timeout`, until the cluster lists none of `topics`.
fn wait_gone(
    admin: &AdminClient<QuietContext>,
    endpoint: &Endpoint,
    topics: &[String],
    timeout: Duration,
) -> Result<(), KafkaError> {
    let deadline = Instant::now() + timeout;
    loop {
        let listed = topic_names(admin, endpoint, timeout)?;
        let left: Vec<&String> = topics.iter().filter(|t| listed.contains(t)).collect();
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(KafkaError::Client {
                what: format!("deleting topics {left:?}"),
                reason: format!("the broker still lists them after {timeout:?}"),
            });
        }
        std::thread::sleep(GONE_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_the_pipelines_own_topics_are_chosen() {
        let names = KafkaNames::new("t.", "wc");
        let repartition = strings(&["t.wc-count-repartition"]);
        let listed = strings(&[
            "t.wc.progress",
            "t.wc.1-of-3.progress",
            "t.wc.0-of-2.progress",
            "t.wc-count-repartition",
            "t.wc-other-repartition",
            "t.wc.x-of-3.progress",
            "t.wc.0.progress",
            "t.wc.3-of-3.progress",
            "t.wc.01-of-3.progress",
            "t.wc.1-of-3.progress.bak",
            "t.wc2.progress",
            "t.wc-x.progress",
            "t.out",
            "u.wc.progress",
        ]);
        let (topics, workers) = owned_topics(&names, &repartition, &listed);
        assert_eq!(
            topics,
            strings(&[
                "t.wc-count-repartition",
                "t.wc.0-of-2.progress",
                "t.wc.1-of-3.progress",
                "t.wc.progress",
            ])
        );
        let units: Vec<String> = workers.iter().map(|w| w.unit()).collect();
        assert_eq!(units, strings(&["0", "0-of-2", "1-of-3"]));
    }
}
