//! `PipelineSpec::for_worker`: the spec of worker I of N of a pipeline.
//!
//! Invariants:
//! - Worker 0/1 is the spec unchanged: the whole pipeline in one process, with every
//!   name and directory it had before workers existed.
//! - Worker I of N > 1 keeps the pipeline's name (so its Kafka names stay in the
//!   pipeline's namespace, see `KafkaNames`) but owns its own places: checkpoints in
//!   `<checkpoint dir>/worker-<I>-of-<N>/` and local state in
//!   `<state_dir>/worker-<I>-of-<N>/` (its own lock, RocksDB working files), in the
//!   first layout of N workers (`layout`; `pipeline::recover` sets the current one). A
//!   rescale finds every old worker's checkpoints by listing `worker-*-of-<M>` under
//!   the checkpoint dir (`pipeline::worker_layout`).
//! - Only what N workers compute correctly is accepted: every source is a Kafka source
//!   (each worker reads its own slice of the partitions; a file, stdin or generator
//!   source would be read whole by every worker). Anything else is refused, naming the
//!   source or step, before anything is locked, fenced or written.
//! - Every keyed step (an aggregate) with N > 1 shuffles through a Kafka repartition
//!   topic of its own (`connector::kafka::repartition`): the worker's spec gets one
//!   `repartitions` entry per keyed step, in step order (the exchange into stage k,
//!   `pipeline::plan`), and per entry one more Kafka source, appended after the spec's
//!   own in the same order, that reads the partitions of the worker's key groups in
//!   the pipeline's group (so its offsets ride in the worker's transactions), from the
//!   earliest offset when there is no checkpoint, unbounded (only the other workers
//!   know when they are done: a worker with a repartition topic runs until stopped).
//!   Every topic has the spec's `repartition_partitions` ranges of its key groups, and
//!   a worker owns the same ranges of every one (`cluster::assignment`), so its keyed
//!   state of every stage is the key groups it reads. Event time crosses each topic as
//!   its writers' watermark markers (`repartition_watermark`) when a step from its
//!   keyed step on is windowed; the writers of the first topic are every task of the
//!   spec's own sources in every worker, those of a later one every subtask of the
//!   stage before it, numbered by `repartition_writer`. Refused with N > 1 with one
//!   line: a keyed step without a Kafka sink (whose transactions carry the
//!   repartition records).

use std::borrow::Cow;

use crate::cluster::{KeyGroupRanges, LayoutStamp, Worker};
use crate::connector::kafka::repartition::{self, RepartitionPartitions, RepartitionRead};
use crate::connector::kafka::repartition_watermark::{RepartitionWriter, RepartitionWriters};
use crate::connector::kafka::{KafkaNames, KafkaSourceConfig, Repartition, StartOffset};
use crate::record::ids;
use crate::spec::{PipelineSpec, SinkSpec, SourceConfig, SourceSpec, StepSpec};

/// Why a spec cannot run as worker I of N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerSpecError {
    #[error(
        "pipeline {pipeline}, worker {worker}: step {step} is keyed, and across workers its records travel through a Kafka repartition topic inside the transactions of the pipeline's Kafka sinks, but it has none: add a kafka sink, or run this pipeline as one worker"
    )]
    NoKafkaSink {
        pipeline: String,
        worker: Worker,
        step: String,
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
        let mut spec = self.clone();
        spec.worker = worker;
        spec.layout = LayoutStamp::first(worker.count());
        spec.state_dir = self.state_dir.join(&dir);
        spec.checkpoint.dir = self.checkpoint.dir.child(&dir);
        spec.add_repartitions()?;
        Ok(spec)
    }

    /// The exchange into stage `stage` (`pipeline::plan::stages`), if it crosses Kafka.
    pub fn repartition_into(&self, stage: usize) -> Option<&Repartition> {
        self.repartitions.iter().find(|r| r.stage == stage)
    }

    /// The exchange whose topic source `s` reads back, if it is a repartition source.
    pub fn repartition_read_by(&self, s: usize) -> Option<&Repartition> {
        self.repartitions.iter().find(|r| r.source == s)
    }

    /// What source `s` is told of the repartition topic it reads back, if it reads one.
    pub fn repartition_read(&self, s: usize) -> Option<RepartitionRead> {
        let exchange = self.repartition_read_by(s)?;
        Some(RepartitionRead {
            key_groups: exchange.key_groups,
            writers: self.repartition_writers(exchange),
        })
    }

    /// The writers of `exchange`'s topic in this spec's layout (see
    /// `repartition_watermark`): every task upstream of it in every worker; `None`
    /// when no step from its keyed step on is windowed (event time matters to none).
    pub fn repartition_writers(&self, exchange: &Repartition) -> Option<RepartitionWriters> {
        let per_worker = self.repartition_writers_per_worker(exchange)?;
        Some(RepartitionWriters {
            generation: self.layout.generation,
            count: per_worker.saturating_mul(self.worker.count()),
        })
    }

    /// The writer that this worker's upstream task number `upstream` of `exchange` is:
    /// `worker index x writers per worker + upstream`. Upstream of the first exchange
    /// are the tasks of the spec's own sources (task `i` of source `s` is number
    /// `s x parallelism + i`); upstream of a later one, the previous stage's subtasks.
    pub fn repartition_writer(
        &self,
        exchange: &Repartition,
        upstream: usize,
    ) -> Option<RepartitionWriter> {
        let per_worker = self.repartition_writers_per_worker(exchange)?;
        Some(RepartitionWriter {
            set: self.repartition_writers(exchange)?,
            index: self
                .worker
                .index()
                .saturating_mul(per_worker)
                .saturating_add(u32::try_from(upstream).unwrap_or(u32::MAX)),
        })
    }

    /// The tasks upstream of `exchange` in one worker, if a step from its keyed step on
    /// is windowed (an unwindowed pipeline ignores event time: no markers).
    fn repartition_writers_per_worker(&self, exchange: &Repartition) -> Option<u32> {
        let windowed = self.steps[exchange.step..]
            .iter()
            .any(|step| matches!(step, StepSpec::Aggregate(agg) if agg.window.is_some()));
        if !windowed {
            return None;
        }
        // The spec's own sources are those before the first repartition source.
        let tasks = if exchange.stage == 1 {
            exchange.source * self.parallelism
        } else {
            self.parallelism
        };
        Some(u32::try_from(tasks).unwrap_or(u32::MAX))
    }

    /// What this spec asks of its repartition topics' partition count (see
    /// `connector::kafka::repartition::ensure_topic`): its own if it says
    /// `repartition_partitions`, else its default or an existing topic's.
    pub fn repartition_partitions_asked(&self) -> RepartitionPartitions {
        let ranges = self.key_group_ranges();
        if self.repartition_partitions_set {
            RepartitionPartitions::Set(ranges.count())
        } else {
            RepartitionPartitions::Default {
                count: ranges.count(),
                key_groups: ranges.key_groups(),
            }
        }
    }

    /// This spec's key groups cut into its `repartition_partitions` ranges.
    fn key_group_ranges(&self) -> KeyGroupRanges {
        // Both are checked by the spec's parse: K <= 32,768 and R <= 1,024.
        KeyGroupRanges::new(
            u16::try_from(self.max_parallelism).unwrap_or(u16::MAX),
            u16::try_from(self.repartition_partitions).unwrap_or(u16::MAX),
        )
    }

    /// This worker spec running with `in_use` repartition partitions (the count its
    /// topics have, `KafkaCommitUnit::repartition_partitions`): itself when that is
    /// its own count or `None`, else a copy in which every exchange and the source
    /// reading it back cut the key groups into that many ranges (an existing topic's
    /// count, adopted when the spec does not say; see
    /// `connector::kafka::repartition::ensure_topic`).
    pub fn with_repartition_partitions(&self, in_use: Option<u16>) -> Cow<'_, PipelineSpec> {
        match in_use {
            Some(count) if usize::from(count) != self.repartition_partitions => {
                let mut spec = self.clone();
                spec.adopt_repartition_partitions(count);
                Cow::Owned(spec)
            }
            _ => Cow::Borrowed(self),
        }
    }

    fn adopt_repartition_partitions(&mut self, partitions: u16) {
        self.repartition_partitions = usize::from(partitions);
        repartition::adopt_partitions(&mut self.repartitions, partitions);
    }

    /// The stable id of step `n`: its name, else `step-<n>`.
    pub fn step_id(&self, n: usize) -> String {
        self.steps[n]
            .name()
            .map_or_else(|| ids::step_id(n), ToOwned::to_owned)
    }

    /// The keyed steps (aggregates), in step order.
    fn keyed_steps(&self) -> Vec<usize> {
        (0..self.steps.len())
            .filter(|&n| matches!(self.steps[n], StepSpec::Aggregate(_)))
            .collect()
    }

    /// The repartition topic each keyed step has when the pipeline runs as N > 1
    /// workers (under the names of its Kafka sinks), whether or not it ever did.
    pub fn repartition_topics(&self) -> Vec<String> {
        let names = self.kafka_names();
        self.keyed_steps()
            .into_iter()
            .map(|n| names.repartition_topic(&self.step_id(n)))
            .collect()
    }

    /// Worker I of N > 1 of a keyed pipeline: an exchange through a repartition topic
    /// for each keyed step, and the source reading each back (see the module
    /// invariants).
    fn add_repartitions(&mut self) -> Result<(), WorkerSpecError> {
        let step_id = |n: usize| self.step_id(n);
        let keyed = self.keyed_steps();
        let Some(&first) = keyed.first() else {
            return Ok(());
        };
        let Some(sink) = self.sinks.iter().find_map(|s| match s {
            SinkSpec::Kafka(c) => Some(c),
            _ => None,
        }) else {
            return Err(WorkerSpecError::NoKafkaSink {
                pipeline: self.name.clone(),
                worker: self.worker,
                step: step_id(first),
            });
        };
        let names = KafkaNames::for_sinks(&self.name, std::iter::once(sink));
        let key_groups = self.key_group_ranges();
        let mut exchanges = Vec::with_capacity(keyed.len());
        let mut sources = Vec::with_capacity(keyed.len());
        for (n, &step) in keyed.iter().enumerate() {
            let topic = names.repartition_topic(&step_id(step));
            let mut source = KafkaSourceConfig::new(topic.clone());
            source.bootstrap = sink.bootstrap.clone();
            source.security = sink.security.clone();
            source.connect_timeout = sink.connect_timeout;
            source.group = Some(names.group());
            source.start = StartOffset::Earliest;
            source.bounded = false;
            exchanges.push(Repartition {
                step,
                // Every keyed step starts a stage, in order (`plan::stages`).
                stage: n + 1,
                step_id: step_id(step),
                topic,
                key_groups,
                source: self.sources.len() + n,
            });
            sources.push(SourceSpec {
                config: SourceConfig::Kafka(source),
                out_of_orderness: std::time::Duration::ZERO,
            });
        }
        self.repartitions = exchanges;
        self.sources.extend(sources);
        Ok(())
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
    fn a_non_kafka_source_or_a_keyed_step_it_cannot_shuffle_is_refused_with_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let two = Worker::new(0, 2).expect("0/2");
        let keyed = format!(
            "{MAP}\n[[steps]]\ntype = \"aggregate\"\nname = \"count\"\nmodule = \"m.wasm\""
        );
        let s = spec(dir.path(), &keyed, KAFKA);
        assert_eq!(
            s.for_worker(Worker::SINGLE)
                .expect("one worker")
                .repartitions,
            Vec::new()
        );
        let w = s
            .for_worker(two)
            .expect("keyed with 2 workers: through Kafka");
        let topics: Vec<String> = w.repartitions.into_iter().map(|r| r.topic).collect();
        assert_eq!(topics, vec!["weir.p-count-repartition".to_owned()]);
        // A second keyed step gets a topic of its own.
        let two_keyed = format!(
            "{keyed}\n[[steps]]\ntype = \"aggregate\"\nmodule = \"m.wasm\"\nkey_field = \"count\""
        );
        let w = spec(dir.path(), &two_keyed, KAFKA)
            .for_worker(two)
            .expect("two keyed steps with 2 workers");
        let topics: Vec<&str> = w.repartitions.iter().map(|r| r.topic.as_str()).collect();
        assert_eq!(
            topics,
            vec!["weir.p-count-repartition", "weir.p-step-2-repartition"]
        );
        // Many key groups are fine across workers: the topic has a partition per
        // range of them.
        let big = spec(
            dir.path(),
            &keyed,
            &format!("max_parallelism = 2048\n{KAFKA}"),
        );
        let w = big.for_worker(two).expect("ranges");
        assert_eq!(w.repartitions[0].key_groups, KeyGroupRanges::new(2048, 32));
        let mut no_kafka_sink = s.clone();
        no_kafka_sink.sinks.clear();
        assert_eq!(
            no_kafka_sink
                .for_worker(two)
                .expect_err("no sink")
                .to_string(),
            "pipeline p, worker 0/2: step count is keyed, and across workers its records travel through a Kafka repartition topic inside the transactions of the pipeline's Kafka sinks, but it has none: add a kafka sink, or run this pipeline as one worker"
        );
        // Only `for_worker` makes a repartition source: a spec cannot.
        std::fs::write(dir.path().join("m.wasm"), b"\0asm").expect("module");
        let forged = format!("name = \"p\"\n{KAFKA}\nrepartition_key_groups = 4\n{MAP}");
        let error = PipelineSpec::parse(&forged, dir.path(), "spec.toml")
            .expect_err("not a spec field")
            .to_string();
        assert!(error.contains("repartition_key_groups"), "{error}");
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
    /// Catches: writer numbers that collide between workers or sources (a reader would
    /// take one writer's marker for another's and wait on no one for the second), a
    /// count that leaves a writer out (its records would be late), a windowed step
    /// still refused, or markers written for an unwindowed step.
    #[test]
    fn every_task_upstream_of_the_exchange_in_every_worker_is_one_numbered_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let windowed = format!(
            "{MAP}\n[[steps]]\ntype = \"aggregate\"\nmodule = \"m.wasm\"\nwindow = {{ type = \"tumbling\", size = \"1s\" }}"
        );
        let two_sources = format!(
            "parallelism = 2\n{KAFKA}\n{}",
            KAFKA.replace("\"in\"", "\"in2\"")
        );
        let s = spec(dir.path(), &windowed, &two_sources);
        assert_eq!(s.repartitions, Vec::new(), "one process: no topic");
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..3 {
            let mut w = s
                .for_worker(Worker::new(index, 3).expect("I/3"))
                .expect("a windowed keyed step runs as workers");
            w.layout.generation = 4;
            let exchange = &w.repartitions[0];
            let set = w.repartition_writers(exchange).expect("writers");
            assert_eq!(
                (set.generation, set.count),
                (4, 12),
                "3 workers x 2 sources x 2"
            );
            for source in 0..2 {
                for subtask in 0..2 {
                    let writer = w
                        .repartition_writer(exchange, source * 2 + subtask)
                        .expect("a writer");
                    assert_eq!(writer.set, set);
                    assert!(writer.index < set.count);
                    assert!(seen.insert(writer.index), "writer {} twice", writer.index);
                }
            }
        }
        assert_eq!(seen.len(), 12);
        // Behind a second keyed step, the writers of its topic are the subtasks of the
        // stage before it: 2 per worker. An unwindowed first step still writes
        // markers when a later one is windowed (event time has to reach it).
        let unwindowed_first = format!(
            "{MAP}\n[[steps]]\ntype = \"aggregate\"\nmodule = \"m.wasm\"\n[[steps]]\ntype = \"aggregate\"\nmodule = \"m.wasm\"\nkey_field = \"count\"\nwindow = {{ type = \"tumbling\", size = \"1s\" }}"
        );
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..3 {
            let w = spec(dir.path(), &unwindowed_first, &two_sources)
                .for_worker(Worker::new(index, 3).expect("I/3"))
                .expect("two keyed steps");
            let [first, second] = &w.repartitions[..] else {
                panic!("two exchanges: {:?}", w.repartitions);
            };
            assert_eq!(w.repartition_writers(first).map(|set| set.count), Some(12));
            assert_eq!(w.repartition_writers(second).map(|set| set.count), Some(6));
            for subtask in 0..2 {
                let writer = w.repartition_writer(second, subtask).expect("a writer");
                assert!(writer.index < 6);
                assert!(seen.insert(writer.index), "writer {} twice", writer.index);
            }
        }
        assert_eq!(seen.len(), 6);
        // An unwindowed keyed step ignores event time: no writers, no markers.
        let unwindowed = windowed.replace("window = { type = \"tumbling\", size = \"1s\" }", "");
        let w = spec(dir.path(), &unwindowed, KAFKA)
            .for_worker(Worker::new(0, 2).expect("0/2"))
            .expect("keyed");
        let exchange = &w.repartitions[0];
        assert_eq!(w.repartition_writers(exchange), None);
        assert_eq!(w.repartition_writer(exchange, 0), None);
    }
}
