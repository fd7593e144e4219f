//! Sources and sinks.
//!
//! Local connectors: `generator` (synthetic, deterministic), `file` (line source and
//! exactly-once sink), `stdin` (source, not replayable), `stdout` (sink,
//! at-least-once), `kafka` (read_committed source, exactly-once transactional sink).
//! Sources implement `dataflow::source::Source`, sinks `dataflow::sink::Sink`; `sinks`
//! wires every sink kind and its committer in one place.
//! Each connector owns its config struct; the spec deserializes into it.
pub mod error;
pub mod file;
pub mod generator;
pub mod kafka;
pub mod pacer;
pub mod record_format;
pub mod sinks;
pub mod stdin;
pub mod stdout;

pub use error::ConnectorError;
pub use file::{FileSink, FileSinkCommitter, FileSinkConfig, FileSource, FileSourceConfig};
pub use generator::{GeneratorConfig, GeneratorSource, KeyDistribution};
pub use record_format::{InputFormat, OutputFormat};
pub use sinks::PipelineSinks;
pub use stdin::{StdinSource, StdinSourceConfig};
pub use stdout::{StdoutSink, StdoutSinkConfig};

use crate::cluster::Worker;
use crate::dataflow::source::{RestoredSource, Source};
use crate::spec::{SourceConfig, SourceSpec};

/// Opens subtask `subtask` of `parallelism` of the source `spec` in worker `worker`
/// (a Kafka source reads only the worker's partitions; the spec admits no other source
/// for a worker of N > 1), resuming from the restored checkpoint's positions if there
/// is one.
pub fn open_source(
    spec: &SourceSpec,
    worker: Worker,
    subtask: usize,
    parallelism: usize,
    restored: Option<RestoredSource<'_>>,
) -> Result<Box<dyn Source>, ConnectorError> {
    let own = restored.and_then(|r| r.own);
    Ok(match &spec.config {
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
            Box::new(kafka::KafkaSource::open(
                c,
                &group,
                worker,
                subtask,
                parallelism,
                restored.map(|r| r.all),
            )?)
        }
    })
}
