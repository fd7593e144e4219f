//! `PipelineSpec::for_worker`: the spec of worker I of N of a pipeline.
//!
//! Invariants:
//! - Worker 0/1 is the spec unchanged: the whole pipeline in one process, with every
//!   name and directory it had before workers existed.
//! - Worker I of N > 1 keeps the pipeline's name (so its Kafka names stay in the
//!   pipeline's namespace, see `KafkaNames`) but owns its own places: checkpoints in
//!   `<checkpoint dir>/worker-<I>-of-<N>/` and local state in
//!   `<state_dir>/worker-<I>-of-<N>/` (its own lock, RocksDB working files). A rescale
//!   finds every old worker's checkpoints by listing `worker-*-of-<M>` under the
//!   checkpoint dir (or the dir itself for M = 1).
//! - Only what N workers compute correctly is accepted: every source is a Kafka source
//!   (each worker reads its own slice of the partitions; a file, stdin or generator
//!   source would be read whole by every worker), and no step is keyed (an aggregate
//!   shuffles records by key, and a shuffle across workers needs the repartition
//!   topic, which is not built yet). Anything else is refused, naming the source or
//!   step, before anything is locked, fenced or written.

use crate::cluster::Worker;
use crate::record::ids;
use crate::spec::{PipelineSpec, SourceConfig, StepSpec};

/// Why a spec cannot run as worker I of N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerSpecError {
    #[error(
        "pipeline {pipeline}, worker {worker}: step {step} is a keyed {kind} step: its shuffle by key across {count} workers needs a Kafka repartition topic, which Weir does not build yet; run this pipeline as one worker (without --worker, or --worker 0/1)"
    )]
    KeyedStep {
        pipeline: String,
        worker: Worker,
        count: u32,
        /// The step's name if it has one, else its id (`step-<n>`).
        step: String,
        kind: &'static str,
    },
    #[error(
        "pipeline {pipeline}, worker {worker}: source {source_id} is a {kind} source, which every worker would read whole; workers split Kafka sources only: run this pipeline as one worker (without --worker, or --worker 0/1)"
    )]
    NotKafkaSource {
        pipeline: String,
        worker: Worker,
        source_id: String,
        kind: &'static str,
    },
}

impl PipelineSpec {
    /// This spec as worker `worker` (see the module invariants).
    pub fn for_worker(&self, worker: Worker) -> Result<PipelineSpec, WorkerSpecError> {
        let Some(dir) = worker.dir_name() else {
            return Ok(self.clone());
        };
        if let Some((s, source)) = self
            .sources
            .iter()
            .enumerate()
            .find(|(_, source)| !matches!(source.config, SourceConfig::Kafka(_)))
        {
            return Err(WorkerSpecError::NotKafkaSource {
                pipeline: self.name.clone(),
                worker,
                source_id: ids::source_id(s),
                kind: source.config.type_name(),
            });
        }
        if let Some((n, step)) = self
            .steps
            .iter()
            .enumerate()
            .find(|(_, step)| matches!(step, StepSpec::Aggregate(_)))
        {
            return Err(WorkerSpecError::KeyedStep {
                pipeline: self.name.clone(),
                worker,
                count: worker.count(),
                step: step
                    .name()
                    .map_or_else(|| ids::step_id(n), ToOwned::to_owned),
                kind: step.type_name(),
            });
        }
        let mut spec = self.clone();
        spec.worker = worker;
        spec.state_dir = self.state_dir.join(&dir);
        spec.checkpoint.dir = self.checkpoint.dir.child(&dir);
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn spec(dir: &Path, steps: &str, source: &str) -> PipelineSpec {
        std::fs::write(dir.join("m.wasm"), b"\0asm").expect("module");
        let text = format!(
            r#"
name = "p"
state_dir = "state"
{source}
{steps}
[[sinks]]
type = "kafka"
topic = "out"
bootstrap = "127.0.0.1:1"
"#
        );
        PipelineSpec::parse(&text, dir, "spec.toml").expect("spec")
    }

    const KAFKA: &str =
        "[[sources]]\ntype = \"kafka\"\ntopic = \"in\"\nbootstrap = \"127.0.0.1:1\"";
    const MAP: &str = "[[steps]]\ntype = \"map\"\nmodule = \"m.wasm\"";

    #[test]
    fn worker_0_of_1_is_the_spec_unchanged_others_get_their_own_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = spec(dir.path(), MAP, KAFKA);
        assert_eq!(s.for_worker(Worker::SINGLE), Ok(s.clone()));
        let w = s
            .for_worker(Worker::new(2, 3).expect("2/3"))
            .expect("stateless");
        assert_eq!(w.worker.to_string(), "2/3");
        assert_eq!(w.name, "p");
        assert_eq!(w.state_dir, s.state_dir.join("worker-2-of-3"));
        assert_eq!(w.checkpoint.dir, s.checkpoint.dir.child("worker-2-of-3"));
        assert_eq!(
            w.dead_letter, s.dead_letter,
            "one dead-letter dir, names per worker"
        );
    }

    #[test]
    fn a_keyed_step_or_a_non_kafka_source_is_refused_with_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keyed = format!(
            "{MAP}\n[[steps]]\ntype = \"aggregate\"\nname = \"count\"\nmodule = \"m.wasm\""
        );
        let s = spec(dir.path(), &keyed, KAFKA);
        s.for_worker(Worker::SINGLE)
            .expect("one worker runs it whole");
        let error = s
            .for_worker(Worker::new(0, 2).expect("0/2"))
            .expect_err("keyed with 2 workers");
        assert_eq!(
            error.to_string(),
            "pipeline p, worker 0/2: step count is a keyed aggregate step: its shuffle by key across 2 workers needs a Kafka repartition topic, which Weir does not build yet; run this pipeline as one worker (without --worker, or --worker 0/1)"
        );
        let generator = "[[sources]]\ntype = \"generator\"\ncount = 10";
        let error = spec(dir.path(), MAP, generator)
            .for_worker(Worker::new(1, 2).expect("1/2"))
            .expect_err("generator with 2 workers");
        assert!(
            error.to_string().starts_with(
                "pipeline p, worker 1/2: source source-0 is a generator source, which every worker would read whole"
            ),
            "{error}"
        );
    }
}
