//! `reset_kafka`: deletes what a stopped pipeline keeps on Kafka between runs (its
//! consumer groups, progress and repartition topics; see `connector::kafka::reset`),
//! so that its name can start from nothing.
//!
//! Invariants:
//! - It never runs beside an instance on this machine: it takes the state dir's lock
//!   (and that of every worker's state dir found there) first, as a run does, and is
//!   refused with the holder's pid. Instances elsewhere are the operator's to stop
//!   (a live one is fenced, and fails).
//! - Local files are left alone: checkpoints and committed file output are removed by
//!   `weir run --from-scratch` (or, on a hosting server, with the pipeline's
//!   directory). Output topics are never touched.

use crate::cluster::Worker;
use crate::connector::kafka::reset::{self, Removed, ResetRequest};
use crate::connector::kafka::{DeliveryGuarantee, KafkaError};
use crate::pipeline::error::PipelineError;
use crate::pipeline::state_dir_lock::StateDirLock;
use crate::spec::PipelineSpec;

/// Bound on each call to the broker.
const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Resets `spec`'s pipeline on its Kafka cluster; `None` when it uses no Kafka (or
/// names no cluster: no run of it reached one).
pub fn reset_kafka(spec: &PipelineSpec) -> Result<Option<Removed>, PipelineError> {
    let _locks = lock_every_state_dir(spec)?;
    let kafka = |e: KafkaError| PipelineError::connector(&spec.name, "reset", e);
    let endpoint = match (spec.kafka_sinks().next(), spec.kafka_sources().next()) {
        (Some(sink), _) => sink.endpoint(),
        (None, Some(source)) => source.endpoint(),
        (None, None) => return Ok(None),
    };
    // Without a bootstrap no run of this spec ever reached a cluster.
    let endpoint = match endpoint {
        Err(KafkaError::NoBootstrap { .. }) => return Ok(None),
        other => other.map_err(kafka)?,
    };
    let names = spec.kafka_names();
    let mut groups = vec![names.group()];
    groups.extend(spec.kafka_sources().filter_map(|s| s.group.clone()));
    groups.sort();
    groups.dedup();
    let request = ResetRequest {
        endpoint: &endpoint,
        names: &names,
        repartition_topics: spec.repartition_topics(),
        groups,
        transactional: spec
            .kafka_sinks()
            .any(|s| s.delivery == DeliveryGuarantee::ExactlyOnce),
        timeout: CALL_TIMEOUT,
    };
    reset::reset(&request).map(Some).map_err(kafka)
}

/// The locks of the state dir and of each worker's state dir in it.
fn lock_every_state_dir(spec: &PipelineSpec) -> Result<Vec<StateDirLock>, PipelineError> {
    let locked = |source| PipelineError::Locked {
        pipeline: spec.name.clone(),
        source,
    };
    let mut locks = vec![StateDirLock::acquire(&spec.state_dir).map_err(locked)?];
    let entries = std::fs::read_dir(&spec.state_dir).into_iter().flatten();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        if Worker::parse_dir_name(&name.to_string_lossy()).is_some() {
            locks.push(StateDirLock::acquire(&entry.path()).map_err(locked)?);
        }
    }
    Ok(locks)
}
