//! Opening a worker's sources: each `[[sources]]` entry (and each repartition topic's
//! reader `WorkerPlan::new` adds) becomes the connector's `Source` for one subtask,
//! resumed at its restored positions.

use crate::connector::kafka::{self, KafkaSource};
use crate::connector::{ConnectorError, FileSource, GeneratorSource, StdinSource};
use crate::dataflow::source::{RestoredSource, Source};
use crate::pipeline::worker_plan::WorkerPlan;
use crate::spec::SourceConfig;

/// Opens subtask `subtask` of source `s` of the worker plan `plan` (a Kafka source
/// reads only the worker's partitions, those of its key-group ranges if it reads a
/// repartition topic back; the spec admits no other source for a worker of N > 1),
/// resuming from the restored checkpoint's positions if there is one.
pub fn open_source(
    plan: &WorkerPlan,
    s: usize,
    subtask: usize,
    restored: Option<RestoredSource<'_>>,
) -> Result<Box<dyn Source>, ConnectorError> {
    let spec = &plan.spec;
    let parallelism = spec.parallelism;
    let own = restored.and_then(|r| r.own);
    Ok(match &spec.sources[s].config {
        SourceConfig::Generator(c) => {
            Box::new(GeneratorSource::open(c.clone(), subtask, parallelism, own)?)
        }
        SourceConfig::File(c) => Box::new(FileSource::open(c, subtask, parallelism, own)?),
        SourceConfig::Stdin(c) => Box::new(StdinSource::open(c, subtask, own)?),
        SourceConfig::Kafka(c) => {
            // The spec fills in the default group (it knows the pipeline's name).
            let group = c.group.clone().unwrap_or_else(|| {
                kafka::KafkaNames::new(kafka::config::DEFAULT_TRANSACTIONAL_PREFIX, "pipeline")
                    .group()
            });
            Box::new(KafkaSource::open(
                (c, plan.repartition_read(s)),
                &group,
                plan.worker,
                subtask,
                parallelism,
                restored.map(|r| r.all),
            )?)
        }
    })
}
