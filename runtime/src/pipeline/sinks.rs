//! The pipeline's sinks, wired in one place: for every `[[sinks]]` entry and for the
//! dead-letter output, the sink each task writes through and the committer that makes
//! a complete checkpoint's output visible.
//!
//! Invariants:
//! - Sink `i` is `sink-<i>` in every task and in its committer; the dead-letter output
//!   is `dead-letter` (see `record::ids`), a file sink like any other.
//! - Committers commit in this order: the Kafka sinks' one committer first (one for
//!   all of them: they share the transactional producers, and that transaction is the
//!   checkpoint's commit point, see `kafka::sink`), then the file sinks in spec order,
//!   then the dead letters.
//! - A file sink's files are named `<pipeline>-<sink id>-<task>-<checkpoint>`
//!   (`<pipeline>-worker-<I>-of-<N>-<sink id>-...` for worker I of N > 1, with
//!   `-gen-<g>` after the worker in layout generation g > 0), so sinks, workers and
//!   layouts sharing a directory never write the same file.

use std::sync::Arc;

use crate::checkpoint::commit::Committer;
use crate::connector::error::ConnectorError;
use crate::connector::file::{FileSink, FileSinkCommitter};
use crate::connector::kafka::{KafkaCommitUnit, KafkaCommitter, KafkaSink};
use crate::connector::record_format::OutputFormat;
use crate::connector::stdout::StdoutSink;
use crate::dataflow::sink::Sink;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::record::ids;
use crate::spec::SinkSpec;

/// File-name prefix of file sink `index`'s output.
pub fn sink_file_name(plan: &WorkerPlan, index: usize) -> String {
    format!("{}-{}", file_prefix(plan), ids::sink_id(index))
}

/// File-name prefix of the dead-letter output.
pub fn dead_letter_file_name(plan: &WorkerPlan) -> String {
    format!("{}-{}", file_prefix(plan), ids::DEAD_LETTER_ID)
}

/// The pipeline's name, and for worker I of N > 1 its `worker-<I>-of-<N>`, and for a
/// layout after the first its generation (`-gen-<g>`): workers write into the same
/// directories, each under names of its own, and a later layout with the same N
/// (3 -> 2 -> 3) never takes an earlier one's committed files for its own.
fn file_prefix(plan: &WorkerPlan) -> String {
    let name = &plan.spec.name;
    let base = match plan.worker.dir_name() {
        None => name.clone(),
        Some(worker) => format!("{name}-{worker}"),
    };
    match plan.layout.generation {
        0 => base,
        g => format!("{base}-gen-{g}"),
    }
}

/// The sinks of one pipeline run.
#[derive(Debug, Clone, Copy)]
pub struct PipelineSinks<'a> {
    plan: &'a WorkerPlan,
    /// The producers every Kafka sink shares, if the spec has a Kafka sink.
    kafka: Option<&'a Arc<KafkaCommitUnit>>,
}

impl<'a> PipelineSinks<'a> {
    pub fn new(plan: &'a WorkerPlan, kafka: Option<&'a Arc<KafkaCommitUnit>>) -> Self {
        PipelineSinks { plan, kafka }
    }

    /// The committers of the transactional sinks, in commit order.
    pub fn committers(&self) -> Vec<Box<dyn Committer>> {
        let spec = &self.plan.spec;
        let mut out: Vec<Box<dyn Committer>> = Vec::new();
        let first_kafka = spec
            .sinks
            .iter()
            .position(|s| matches!(s, SinkSpec::Kafka(_)));
        if let (Some(unit), Some(first)) = (self.kafka, first_kafka) {
            out.push(Box::new(KafkaCommitter::new(
                ids::sink_id(first),
                unit.clone(),
            )));
        }
        for (i, sink) in spec.sinks.iter().enumerate() {
            if let SinkSpec::File(file) = sink {
                out.push(Box::new(FileSinkCommitter::new(
                    ids::sink_id(i),
                    sink_file_name(self.plan, i),
                    &file.path,
                )));
            }
        }
        out.push(Box::new(FileSinkCommitter::new(
            ids::DEAD_LETTER_ID,
            dead_letter_file_name(self.plan),
            &spec.dead_letter.path,
        )));
        out
    }

    /// Task `task`'s writer of every sink in the spec, in spec order.
    pub fn for_task(&self, task: &str) -> Result<Vec<Box<dyn Sink>>, ConnectorError> {
        let spec = &self.plan.spec;
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        for (i, sink) in spec.sinks.iter().enumerate() {
            let id = ids::sink_id(i);
            sinks.push(match sink {
                SinkSpec::File(file) => Box::new(FileSink::new(
                    id,
                    sink_file_name(self.plan, i),
                    task,
                    &file.path,
                    file.format,
                )?),
                SinkSpec::Stdout(stdout) => Box::new(StdoutSink::new(id, stdout.format)),
                SinkSpec::Kafka(kafka) => {
                    // `pipeline::recover` opens the unit whenever the spec has a Kafka sink.
                    let unit = self.kafka.ok_or(ConnectorError::Unavailable("kafka"))?;
                    Box::new(KafkaSink::new(id, kafka.topic.clone(), unit.clone()))
                }
            });
        }
        Ok(sinks)
    }

    /// Task `task`'s writer of the dead-letter output.
    pub fn dead_letters_for_task(&self, task: &str) -> Result<Box<dyn Sink>, ConnectorError> {
        Ok(Box::new(FileSink::new(
            ids::DEAD_LETTER_ID,
            dead_letter_file_name(self.plan),
            task,
            &self.plan.spec.dead_letter.path,
            OutputFormat::Value,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Worker;
    use crate::spec::PipelineSpec;

    #[test]
    fn workers_write_file_output_under_names_of_their_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = "name = \"p\"\n[[sources]]\ntype = \"generator\"\ncount = 1\n[[sinks]]\ntype = \"stdout\"\n";
        let spec = PipelineSpec::parse(text, dir.path(), "spec.toml").expect("spec");
        let mut plan = WorkerPlan::single(&spec);
        assert_eq!(
            sink_file_name(&plan, 0),
            "p-sink-0",
            "0/1: as before workers"
        );
        assert_eq!(dead_letter_file_name(&plan), "p-dead-letter");
        plan.worker = Worker::new(1, 3).expect("1/3");
        assert_eq!(sink_file_name(&plan, 0), "p-worker-1-of-3-sink-0");
        assert_eq!(dead_letter_file_name(&plan), "p-worker-1-of-3-dead-letter");
        plan.layout.generation = 2;
        assert_eq!(sink_file_name(&plan, 0), "p-worker-1-of-3-gen-2-sink-0");
    }
}
