//! `PipelineError`: why a pipeline run could not start or stopped, with context.

use std::path::PathBuf;

use crate::checkpoint::coordinator::CoordinatorError;
use crate::connector::ConnectorError;
use crate::connector::kafka::KafkaError;
use crate::dataflow::operator::OperatorError;
use crate::engine::EngineError;
use crate::record::CheckpointId;
use crate::storage::StorageError;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("pipeline {pipeline}, step {step}: {source}")]
    Module {
        pipeline: String,
        step: String,
        #[source]
        source: EngineError,
    },
    #[error(
        "pipeline {pipeline}, step {step}: {module} is {} guest, but a {kind} step needs {} guest: make it a `type = \"{}\"` step, or build the module for world {expected}",
        with_article(.actual),
        with_article(.expected),
        step_type_of(.actual)
    )]
    WrongWorld {
        pipeline: String,
        step: String,
        module: String,
        kind: &'static str,
        actual: &'static str,
        expected: &'static str,
    },
    #[error("pipeline {pipeline}: {source}")]
    Engine {
        pipeline: String,
        #[source]
        source: EngineError,
    },
    /// Built by [`PipelineError::connector`]; the source is boxed so that every
    /// `Result<_, PipelineError>` stays small.
    #[error("pipeline {pipeline}, task {task}: {source}")]
    Connector {
        pipeline: String,
        task: String,
        #[source]
        source: Box<ConnectorError>,
    },
    #[error("pipeline {pipeline}: checkpoint storage: {source}")]
    Storage {
        pipeline: String,
        #[source]
        source: StorageError,
    },
    #[error("pipeline {pipeline}: cannot restore checkpoint {checkpoint}: {reason}")]
    Incompatible {
        pipeline: String,
        checkpoint: CheckpointId,
        reason: String,
    },
    #[error("pipeline {pipeline}, task {task}, operator {operator}: {source}")]
    Operator {
        pipeline: String,
        task: String,
        operator: String,
        #[source]
        source: OperatorError,
    },
    #[error("pipeline {pipeline}: {path}: {source}")]
    Io {
        pipeline: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "pipeline {pipeline}: --from-checkpoint {wanted}: checkpoint storage {storage} holds no complete checkpoint {wanted} (complete: {complete})"
    )]
    NoSuchCheckpoint {
        pipeline: String,
        wanted: CheckpointId,
        /// A directory or an `s3://` URL.
        storage: String,
        complete: String,
    },
    #[error("pipeline {pipeline}: {source}")]
    Locked {
        pipeline: String,
        #[source]
        source: crate::pipeline::state_dir_lock::LockError,
    },
    #[error(transparent)]
    Run(#[from] CoordinatorError),

    /// The spec cannot run as the requested worker (a keyed step, a non-Kafka source).
    #[error(transparent)]
    Worker(#[from] crate::pipeline::worker_plan::WorkerPlanError),

    /// One process over workers' checkpoints (a rescale from N workers back to 1).
    #[error(
        "pipeline {pipeline}, worker {worker}: checkpoint storage {storage} holds complete checkpoints of {found}: rescaling from workers back to one process is not supported (a keyed step's repartition topic would have to be drained first); run the pipeline as workers (--worker I/N, any N > 1), or start over on a fresh checkpoint dir"
    )]
    OtherWorkerLayout {
        pipeline: String,
        worker: crate::cluster::Worker,
        storage: String,
        /// E.g. `worker-0-of-2, worker-1-of-2`.
        found: String,
    },

    /// Checkpoint storage does not say which layout of workers is current.
    #[error("pipeline {pipeline}: checkpoint storage {storage}: {reason}")]
    Layout {
        pipeline: String,
        storage: String,
        reason: String,
    },

    /// `--from-scratch` over complete checkpoints of another number of workers.
    #[error(
        "pipeline {pipeline}, worker {worker}: --from-scratch starts this worker's own checkpoints over, but checkpoint storage {storage} also holds complete checkpoints of {found}, which would stay the newer layout: delete them first, or start over on a fresh checkpoint dir"
    )]
    StartOverOverLayouts {
        pipeline: String,
        worker: crate::cluster::Worker,
        storage: String,
        found: String,
    },

    /// This worker's progress topic says a rescale took it over.
    #[error(
        "pipeline {pipeline}, worker {worker}: a rescale to {to} workers took this worker over (its progress topic holds the hand-over of layout generation {generation}), so its checkpoints are no longer the pipeline's state: run {to} workers"
    )]
    HandedOver {
        pipeline: String,
        worker: crate::cluster::Worker,
        generation: u64,
        to: u32,
    },

    /// A run that kept failing while the Kafka cluster was failing over or stalled:
    /// the last failure, after `restarts` restarts in a row (`pipeline::run`).
    #[error(
        "{source}; pipeline {pipeline} gave up after {restarts} restarts in a row: once the Kafka cluster is available again, a restart resumes from the last committed checkpoint"
    )]
    GaveUp {
        pipeline: String,
        restarts: u32,
        #[source]
        source: Box<PipelineError>,
    },

    /// A rescale could not hand the old workers' units over.
    #[error(transparent)]
    Rescale(Box<crate::pipeline::rescale::RescaleError>),

    /// The coordinator's thread panicked: a bug, reported as the run's failure.
    #[error("pipeline {pipeline}: the checkpoint coordinator panicked: {message}")]
    CoordinatorPanicked { pipeline: String, message: String },
}

impl PipelineError {
    /// Whether this failure came from a Kafka cluster failing over or stalled (see
    /// `KafkaError::is_transient`), found anywhere in its chain of sources: the run may
    /// be restarted from its last committed checkpoint (`pipeline::run`).
    pub fn is_transient(&self) -> bool {
        self.has_kafka_cause(KafkaError::is_transient)
    }

    /// Whether this failure is a Kafka cluster that did not answer within the bound
    /// (`KafkaError::Unreachable`), found anywhere in its chain of sources.
    pub fn is_unreachable(&self) -> bool {
        self.has_kafka_cause(|k| matches!(k, KafkaError::Unreachable { .. }))
    }

    /// Whether a Kafka error in this failure's chain of sources is `what`.
    fn has_kafka_cause(&self, what: impl Fn(&KafkaError) -> bool) -> bool {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            if kafka_error_in(e).is_some_and(&what) {
                return true;
            }
            next = e.source();
        }
        false
    }

    /// `source`, a connector's failure, in `pipeline`'s `task`.
    pub fn connector(
        pipeline: impl Into<String>,
        task: impl Into<String>,
        source: impl Into<ConnectorError>,
    ) -> Self {
        PipelineError::Connector {
            pipeline: pipeline.into(),
            task: task.into(),
            source: Box::new(source.into()),
        }
    }
}

/// `world` with its indefinite article ("a mapper", "an aggregator").
pub fn with_article(world: &str) -> String {
    let article = if world.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {world}")
}

/// The step type that runs a guest of `world`.
fn step_type_of(world: &str) -> &'static str {
    if world == "aggregator" {
        "aggregate"
    } else {
        "map"
    }
}

/// The Kafka error that `e` is, bare or in a `ConnectorError`. A source held in a
/// concrete `Box` (as `Connector`'s is, to keep results small) is handed on by
/// thiserror as the box itself, so the boxed forms are looked for too.
fn kafka_error_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a KafkaError> {
    let connector = e
        .downcast_ref::<ConnectorError>()
        .or_else(|| e.downcast_ref::<Box<ConnectorError>>().map(|b| &**b));
    e.downcast_ref::<KafkaError>()
        .or_else(|| e.downcast_ref::<Box<KafkaError>>().map(|b| &**b))
        .or(match connector {
            Some(ConnectorError::Kafka(k)) => Some(&**k),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Kafka failure as the coordinator reports a commit's: boxed in a
    /// `ConnectorError`, under `CoordinatorError::Commit`.
    fn commit_failed(kafka: KafkaError) -> PipelineError {
        PipelineError::Run(CoordinatorError::Commit {
            pipeline: "p".into(),
            checkpoint: CheckpointId(9),
            phase: "commit",
            operator: "sink-0".into(),
            source: Box::new(ConnectorError::from(kafka)),
        })
    }

    #[test]
    fn a_kafka_error_is_found_bare_boxed_and_in_a_connector_error() {
        let stalled = || KafkaError::BrokerStalled {
            call: "committing".into(),
            bootstrap: "b1".into(),
            waited: std::time::Duration::from_secs(60),
        };
        let connector = || ConnectorError::from(stalled());
        let forms: [Box<dyn std::error::Error>; 4] = [
            Box::new(stalled()),
            Box::new(Box::new(stalled())),
            Box::new(connector()),
            Box::new(Box::new(connector())),
        ];
        for form in &forms {
            assert!(kafka_error_in(&**form).is_some_and(KafkaError::is_transient));
        }
        let other = ConnectorError::Unavailable("x");
        assert!(kafka_error_in(&other).is_none());
    }

    #[test]
    fn a_failover_is_transient_and_a_fencing_is_not() {
        let aborted = KafkaError::TransactionAborted {
            transactional_id: "weir.p.0.1".into(),
            call: "adding the offsets of checkpoint 9 to its transaction".into(),
            reason: "Not coordinator".into(),
        };
        assert!(commit_failed(aborted).is_transient());
        let stalled = KafkaError::BrokerStalled {
            call: "committing".into(),
            bootstrap: "b1".into(),
            waited: std::time::Duration::from_secs(60),
        };
        assert!(commit_failed(stalled).is_transient());
        let fenced = KafkaError::Fenced {
            pipeline: "p".into(),
            transactional_id: "weir.p.0.1".into(),
            what: "committing".into(),
        };
        assert!(!commit_failed(fenced).is_transient());
        assert!(
            !PipelineError::connector("p", "src", ConnectorError::Unavailable("x")).is_transient()
        );
    }
}
