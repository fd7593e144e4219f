//! `WorkerPlan`: what one worker of a pipeline runs, derived by the runtime from the
//! spec the user wrote (`PipelineSpec`, which holds nothing else).
//!
//! A plan is the worker (`Worker`, I of N), its layout of workers (generation, rescaled
//! from which), its keyed exchanges through Kafka repartition topics, and the spec it
//! runs: the user's, with the worker's own directories and the sources reading its
//! repartition topics back, values a user could have written for that one worker.
//!
//! Invariants:
//! - Worker 0/1 runs the spec unchanged: the whole pipeline in one process, with every
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
//!   topic of its own (`connector::kafka::repartition`): the plan gets one
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

use crate::cluster::{LayoutStamp, Worker};
use crate::connector::kafka::repartition::{self, RepartitionRead};
use crate::connector::kafka::repartition_watermark::{RepartitionWriter, RepartitionWriters};
use crate::connector::kafka::unit_plan::UnitPlan;
use crate::connector::kafka::{KafkaNames, KafkaSourceConfig, Repartition, StartOffset};
use crate::record::ids;
use crate::spec::{PipelineSpec, SourceConfig, SourceSpec, StepSpec};

/// See the module doc.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerPlan {
    /// The spec this worker runs (see the module doc).
    pub spec: PipelineSpec,
    /// Which worker of the pipeline this is: 0/1 for the whole pipeline in one process.
    pub worker: Worker,
    /// The layout of workers this one runs in: the first of `worker.count()` workers as
    /// `WorkerPlan::new` makes it; `pipeline::recover` sets the one storage says is
    /// current (see `cluster::layout`).
    pub layout: LayoutStamp,
    /// The keyed exchanges through Kafka repartition topics, one per keyed step in step
    /// order: only worker I of N > 1 of a keyed pipeline has them.
    pub repartitions: Vec<Repartition>,
}

/// Why a spec cannot run as worker I of N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerPlanError {
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

impl WorkerPlan {
    /// The whole pipeline `spec` in one process: worker 0/1.
    pub fn single(spec: &PipelineSpec) -> WorkerPlan {
        WorkerPlan {
            spec: spec.clone(),
            worker: Worker::SINGLE,
            layout: LayoutStamp::first(1),
            repartitions: Vec::new(),
        }
    }

    /// What worker `worker` of `spec` runs (see the module invariants).
    pub fn new(spec: &PipelineSpec, worker: Worker) -> Result<WorkerPlan, WorkerPlanError> {
        let Some(dir) = worker.dir_name() else {
            return Ok(WorkerPlan::single(spec));
        };
        if let Some((s, source)) = spec
            .sources
            .iter()
            .enumerate()
            .find(|(_, source)| !matches!(source.config, SourceConfig::Kafka(_)))
        {
            return Err(WorkerPlanError::NotKafkaSource {
                pipeline: spec.name.clone(),
                worker,
                source_id: ids::source_id(s),
                kind: source.config.type_name(),
            });
        }
        let mut plan = WorkerPlan {
            spec: spec.clone(),
            worker,
            layout: LayoutStamp::first(worker.count()),
            repartitions: Vec::new(),
        };
        plan.spec.state_dir = spec.state_dir.join(&dir);
        plan.spec.checkpoint.dir = spec.checkpoint.dir.child(&dir);
        plan.add_repartitions()?;
        Ok(plan)
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

    /// The writers of `exchange`'s topic in this plan's layout (see
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
        let windowed = self.spec.steps[exchange.step..]
            .iter()
            .any(|step| matches!(step, StepSpec::Aggregate(agg) if agg.window.is_some()));
        if !windowed {
            return None;
        }
        // The spec's own sources are those before the first repartition source.
        let tasks = if exchange.stage == 1 {
            exchange.source * self.spec.parallelism
        } else {
            self.spec.parallelism
        };
        Some(u32::try_from(tasks).unwrap_or(u32::MAX))
    }

    /// This plan running with `in_use` repartition partitions (the count its topics
    /// have, `KafkaCommitUnit::repartition_partitions`): itself when that is its own
    /// count or `None`, else a copy in which every exchange and the source reading it
    /// back cut the key groups into that many ranges (an existing topic's count,
    /// adopted when the spec does not say; see
    /// `connector::kafka::repartition::ensure_topic`).
    pub fn with_repartition_partitions(&self, in_use: Option<u16>) -> Cow<'_, WorkerPlan> {
        match in_use {
            Some(count) if usize::from(count) != self.spec.repartition_partitions => {
                let mut plan = self.clone();
                plan.spec.repartition_partitions = usize::from(count);
                repartition::adopt_partitions(&mut plan.repartitions, count);
                Cow::Owned(plan)
            }
            _ => Cow::Borrowed(self),
        }
    }

    /// What the commit unit of this worker reads of its plan (see `UnitPlan`).
    pub fn commit_unit_plan(&self) -> UnitPlan<'_> {
        let spec = &self.spec;
        UnitPlan {
            pipeline: spec.name.clone(),
            worker: self.worker,
            layout: self.layout,
            checkpoint_interval: spec.checkpoint.interval,
            checkpoint_timeout: spec.checkpoint.timeout,
            sinks: spec.kafka_sink_ids(),
            sources: (spec.sources.iter().enumerate())
                .filter_map(|(i, s)| match &s.config {
                    SourceConfig::Kafka(c) => Some((i, c)),
                    _ => None,
                })
                .collect(),
            repartitions: self.repartitions.clone(),
            repartition_partitions: spec.repartition_partitions_asked(),
        }
    }

    /// Worker I of N > 1 of a keyed pipeline: an exchange through a repartition topic
    /// for each keyed step, and the source reading each back (see the module
    /// invariants).
    fn add_repartitions(&mut self) -> Result<(), WorkerPlanError> {
        let spec = &self.spec;
        let keyed = spec.keyed_steps();
        let Some(&first) = keyed.first() else {
            return Ok(());
        };
        let Some(sink) = spec.kafka_sinks().next() else {
            return Err(WorkerPlanError::NoKafkaSink {
                pipeline: spec.name.clone(),
                worker: self.worker,
                step: spec.step_id(first),
            });
        };
        let names = KafkaNames::for_sinks(&spec.name, std::iter::once(sink));
        let key_groups = spec.key_group_ranges();
        let mut exchanges = Vec::with_capacity(keyed.len());
        let mut sources = Vec::with_capacity(keyed.len());
        for (n, &step) in keyed.iter().enumerate() {
            let topic = names.repartition_topic(&spec.step_id(step));
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
                step_id: spec.step_id(step),
                topic,
                key_groups,
                source: spec.sources.len() + n,
            });
            sources.push(SourceSpec {
                config: SourceConfig::Kafka(source),
                out_of_orderness: std::time::Duration::ZERO,
            });
        }
        self.repartitions = exchanges;
        self.spec.sources.extend(sources);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cluster::KeyGroupRanges;

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
        assert_eq!(
            WorkerPlan::new(&s, Worker::SINGLE),
            Ok(WorkerPlan::single(&s))
        );
        assert_eq!(
            WorkerPlan::single(&s).spec,
            s,
            "0/1 runs the spec unchanged"
        );
        let w = WorkerPlan::new(&s, Worker::new(2, 3).expect("2/3")).expect("stateless");
        assert_eq!(w.worker.to_string(), "2/3");
        assert_eq!(w.spec.name, "p");
        assert_eq!(w.spec.state_dir, s.state_dir.join("worker-2-of-3"));
        assert_eq!(
            w.spec.checkpoint.dir,
            s.checkpoint.dir.child("worker-2-of-3")
        );
        assert_eq!(
            w.spec.dead_letter, s.dead_letter,
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
            WorkerPlan::new(&s, Worker::SINGLE)
                .expect("one worker")
                .repartitions,
            Vec::new()
        );
        let w = WorkerPlan::new(&s, two).expect("keyed with 2 workers: through Kafka");
        let topics: Vec<String> = w.repartitions.into_iter().map(|r| r.topic).collect();
        assert_eq!(topics, vec!["weir.p-count-repartition".to_owned()]);
        // A second keyed step gets a topic of its own.
        let two_keyed = format!(
            "{keyed}\n[[steps]]\ntype = \"aggregate\"\nmodule = \"m.wasm\"\nkey_field = \"count\""
        );
        let w = WorkerPlan::new(&spec(dir.path(), &two_keyed, KAFKA), two)
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
        let w = WorkerPlan::new(&big, two).expect("ranges");
        assert_eq!(w.repartitions[0].key_groups, KeyGroupRanges::new(2048, 32));
        let mut no_kafka_sink = s.clone();
        no_kafka_sink.sinks.clear();
        assert_eq!(
            WorkerPlan::new(&no_kafka_sink, two)
                .expect_err("no sink")
                .to_string(),
            "pipeline p, worker 0/2: step count is keyed, and across workers its records travel through a Kafka repartition topic inside the transactions of the pipeline's Kafka sinks, but it has none: add a kafka sink, or run this pipeline as one worker"
        );
        // Only a worker plan makes a repartition source: a spec cannot.
        std::fs::write(dir.path().join("m.wasm"), b"\0asm").expect("module");
        let forged = format!("name = \"p\"\n{KAFKA}\nrepartition_key_groups = 4\n{MAP}");
        let error = PipelineSpec::parse(&forged, dir.path(), "spec.toml")
            .expect_err("not a spec field")
            .to_string();
        assert!(error.contains("repartition_key_groups"), "{error}");
        let generator = "[[sources]]\ntype = \"generator\"\ncount = 10";
        let error = WorkerPlan::new(
            &spec(dir.path(), MAP, generator),
            Worker::new(1, 2).expect("1/2"),
        )
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
        assert_eq!(
            WorkerPlan::single(&s).repartitions,
            Vec::new(),
            "one process: no topic"
        );
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..3 {
            let mut w = WorkerPlan::new(&s, Worker::new(index, 3).expect("I/3"))
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
            let w = WorkerPlan::new(
                &spec(dir.path(), &unwindowed_first, &two_sources),
                Worker::new(index, 3).expect("I/3"),
            )
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
        let w = WorkerPlan::new(
            &spec(dir.path(), &unwindowed, KAFKA),
            Worker::new(0, 2).expect("0/2"),
        )
        .expect("keyed");
        let exchange = &w.repartitions[0];
        assert_eq!(w.repartition_writers(exchange), None);
        assert_eq!(w.repartition_writer(exchange, 0), None);
    }
}
