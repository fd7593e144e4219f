//! Builds the tasks of one run from the spec, the loaded guests and the restored
//! checkpoint (if any).
//!
//! Invariants: every operator is opened with its own snapshot from the restored
//! checkpoint (looked up by task and operator id, see `plan`), or after a rescale with
//! its key groups from the old workers' snapshots and its partitions' positions from
//! their checkpoints (see `rescale`), or empty when starting from scratch; every
//! channel between two tasks is bounded; each downstream subtask gets one channel per
//! upstream task, so it can align barriers per input. With repartition topics (worker
//! I of N > 1, see `plan`'s split), the spec's sources end in the first topic, each
//! later stage but the last ends in the next one, and each keyed stage's upstream
//! tasks are those of the source reading its topic back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::checkpoint::metadata::CheckpointMetadata;
use crate::connector::ConnectorError;
use crate::connector::kafka::repartition::REPARTITION_SINK_ID;
use crate::connector::kafka::repartition_watermark::RepartitionWriter;
use crate::connector::kafka::{KafkaCommitUnit, KafkaSink};
use crate::dataflow::alignment::InputGate;
use crate::dataflow::chain::Chain;
use crate::dataflow::operator::Operator;
use crate::dataflow::operators::aggregate::{AggregateConfig, AggregateOperator, StateLocation};
use crate::dataflow::operators::key_by::KeyByField;
use crate::dataflow::operators::map::MapOperator;
use crate::dataflow::partition::ShuffleWriter;
use crate::dataflow::sink::{Sink, SinkSet};
use crate::dataflow::source::RestoredSource;
use crate::dataflow::task::{Pipe, SourceInput, SourceTask, StageTask, TaskOutput};
use crate::dataflow::task_context::TaskContext;
use crate::dataflow::window::WindowAssigner;
use crate::engine::{GuestLimits, GuestLogBudget, GuestModule};
use crate::metrics::PipelineMetrics;
use crate::pipeline::error::PipelineError;
use crate::pipeline::module_changes::ModuleChange;
use crate::pipeline::plan::{self, SourceRoute, StagePlan};
use crate::pipeline::rescale::RescaleRestore;
use crate::pipeline::sinks::PipelineSinks;
use crate::pipeline::sources;
use crate::pipeline::worker_plan::WorkerPlan;
use crate::record::CheckpointId;
use crate::record::SourcePosition;
use crate::record::batch::BatchLimit;
use crate::record::ids;
use crate::record::message::{Barrier, Message};
use crate::spec::step::AggregateStep;
use crate::spec::{PipelineSpec, StepSpec, WindowSpec};
use crate::state::{CacheBounds, memtable_bytes};
use crate::storage::CheckpointStorage;

/// Batches buffered per channel: enough to keep both ends busy, small enough that
/// backpressure reaches the sources quickly and memory stays bounded.
pub const CHANNEL_CAPACITY: usize = 16;

/// Everything `build` needs.
pub struct BuildContext<'a> {
    /// What this worker runs.
    pub plan: &'a WorkerPlan,
    /// Loaded guests by step index.
    pub modules: &'a BTreeMap<usize, Arc<GuestModule>>,
    /// Steps whose module is not the one `restored` was taken with (see `recover`).
    pub module_changes: &'a [ModuleChange],
    pub storage: Arc<CheckpointStorage>,
    pub restored: Option<&'a CheckpointMetadata>,
    /// A rescale: sources and aggregates restore from the old workers' checkpoints
    /// instead (`restored` is then none).
    pub rescaled: Option<&'a RescaleRestore>,
    /// The run's checkpoints are numbered after this id: the first barrier is
    /// `checkpoint_base.next()`. It is the restored checkpoint's id, or later (see
    /// `CheckpointId::numbering_base`); sinks stage their first output for the id after it.
    pub checkpoint_base: CheckpointId,
    /// Template for every task's context (the task name is filled in per task).
    pub context: TaskContext,
    /// The producers every Kafka sink shares (opened by `recover`), if the spec has one.
    pub kafka: Option<Arc<KafkaCommitUnit>>,
    /// The run's budget of guest text, shared by every guest instance.
    pub guest_log: GuestLogBudget,
}

/// The tasks of a run, ready to spawn, and what the coordinator needs.
pub struct BuiltPipeline {
    pub source_tasks: Vec<SourceTask>,
    pub stage_tasks: Vec<StageTask>,
    /// Barrier channel of each source task, by task name.
    pub barriers: BTreeMap<String, Sender<Barrier>>,
}

impl BuiltPipeline {
    pub fn task_names(&self) -> Vec<String> {
        self.source_tasks
            .iter()
            .map(|t| t.ctx.task.clone())
            .chain(self.stage_tasks.iter().map(|t| t.ctx.task.clone()))
            .collect()
    }
}

pub fn build(cx: &BuildContext<'_>) -> Result<BuiltPipeline, PipelineError> {
    let spec = &cx.plan.spec;
    let stages = plan::stages(spec);
    let mut channels = Channels::new(cx.plan, &stages);
    let mut built = BuiltPipeline {
        source_tasks: Vec::new(),
        stage_tasks: Vec::new(),
        barriers: BTreeMap::new(),
    };
    for s in 0..spec.sources.len() {
        for i in 0..spec.parallelism {
            let (task, barriers) = source_task(cx, &stages, &mut channels, s, i)?;
            built.barriers.insert(task.ctx.task.clone(), barriers);
            built.source_tasks.push(task);
        }
    }
    for stage in &stages[1..] {
        for j in 0..spec.parallelism {
            let task = ids::stage_task(stage.index, j);
            // Across workers the next keyed stage is fed through its topic.
            let (end, output) = match cx.plan.repartition_into(stage.index + 1) {
                Some(exchange) => (
                    ChainEnd::Repartition(cx.plan.repartition_writer(exchange, j)),
                    TaskOutput::Sinks,
                ),
                None => (
                    ChainEnd::of(stage),
                    channels.output(stage, j, spec.max_parallelism),
                ),
            };
            let pipe = Pipe::new(
                chain(cx, stage, &stages, &task, end)?,
                dead_letter_sink(cx, &task)?,
                output,
            );
            built.stage_tasks.push(StageTask::new(
                context(cx, &task),
                InputGate::new(channels.inputs(stage.index, j)),
                pipe,
            ));
        }
    }
    Ok(built)
}

/// Subtask `i` of source `s`, opened at its restored position, and the sender of its
/// barriers.
fn source_task(
    cx: &BuildContext<'_>,
    stages: &[StagePlan],
    channels: &mut Channels,
    s: usize,
    i: usize,
) -> Result<(SourceTask, Sender<Barrier>), PipelineError> {
    let spec = &cx.plan.spec;
    let source_op = ids::source_id(s);
    let task = ids::source_task(s, i);
    let all_positions: Vec<&SourcePosition> = match (cx.rescaled, cx.restored) {
        (Some(rescaled), _) => rescaled.positions_of(&source_op),
        (None, Some(m)) => m
            .snapshots_of(&source_op)
            .into_iter()
            .map(|snap| &snap.state)
            .collect(),
        (None, None) => Vec::new(),
    };
    let restored = match (cx.rescaled, cx.restored) {
        // Kafka partitions only (workers read nothing else): no subtask's own position.
        (Some(_), _) => Some(RestoredSource {
            own: None,
            all: &all_positions,
        }),
        (None, Some(m)) => Some(RestoredSource {
            own: m.snapshot(&task, &source_op).map(|snap| &snap.state),
            all: &all_positions,
        }),
        (None, None) => None,
    };
    let reader = sources::open_source(cx.plan, s, i, restored)
        .map_err(|source| PipelineError::connector(&spec.name, &task, source))?;
    PipelineMetrics::add(
        &cx.context.metrics.records_skipped,
        reader.skipped_at_open(),
    );
    let (barriers, barrier_rx) = crossbeam_channel::unbounded();
    let input = SourceInput {
        id: source_op,
        source: reader,
        barriers: barrier_rx,
        batch_limit: BatchLimit {
            records: spec.batch_size,
            bytes: spec.batch_bytes,
        },
        out_of_orderness: spec.sources[s].out_of_orderness,
    };
    let (chain, output) = source_route(cx, stages, channels, (s, i), &task)?;
    let pipe = Pipe::new(chain, dead_letter_sink(cx, &task)?, output);
    let task = SourceTask::new(context(cx, &task), input, pipe);
    Ok((task, barriers))
}

/// Where source task `i` of source `s` sends its records: through the first stage's
/// chain (into a repartition topic, or on to the next stage in this process), or, for a
/// source reading a repartition topic back, straight into its stage's shuffle.
fn source_route(
    cx: &BuildContext<'_>,
    stages: &[StagePlan],
    channels: &mut Channels,
    (s, i): (usize, usize),
    task: &str,
) -> Result<(Chain, TaskOutput), PipelineError> {
    let spec = &cx.plan.spec;
    let stage = &stages[0];
    // This task's number among the upstream tasks of the stage it feeds.
    let upstream = |k: usize| match plan::stage_inputs(cx.plan, k) {
        plan::StageInputs::Sources(feeders) => feeders
            .iter()
            .position(|&f| f == s)
            .map(|f| f * spec.parallelism + i),
        plan::StageInputs::PreviousStage => None,
    };
    Ok(match plan::source_route(cx.plan, s) {
        SourceRoute::ToRepartition => {
            let writer = cx.plan.repartition_into(1).and_then(|exchange| {
                cx.plan
                    .repartition_writer(exchange, s * spec.parallelism + i)
            });
            (
                chain(cx, stage, stages, task, ChainEnd::Repartition(writer))?,
                TaskOutput::Sinks,
            )
        }
        SourceRoute::Local => {
            let u = upstream(1).expect("in one process every source feeds stage 1");
            (
                chain(cx, stage, stages, task, ChainEnd::of(stage))?,
                channels.output(stage, u, spec.max_parallelism),
            )
        }
        SourceRoute::FromRepartition { stage: k } => {
            let u = upstream(k).expect("a repartition source feeds its stage");
            (
                Chain::new(Vec::new(), SinkSet::new(Vec::new(), cx.checkpoint_base)),
                channels.shuffle_into(k, u, spec.max_parallelism),
            )
        }
    })
}

/// The bounded channels between stages: each subtask of stage k >= 1 has one input
/// per task upstream of it (`plan::upstream_tasks`), so it can align barriers per
/// input.
struct Channels {
    /// `inputs[k][j]`: the receivers of subtask j of stage k, one per upstream task.
    inputs: Vec<Vec<Vec<Receiver<Message>>>>,
    /// `outputs[k][u]`: the senders of stage k's upstream task u into its subtasks.
    outputs: Vec<Vec<Vec<Sender<Message>>>>,
}

impl Channels {
    fn new(worker_plan: &WorkerPlan, stages: &[StagePlan]) -> Channels {
        let parallelism = worker_plan.spec.parallelism;
        let mut inputs: Vec<Vec<Vec<Receiver<Message>>>> = vec![Vec::new(); stages.len()];
        let mut outputs: Vec<Vec<Vec<Sender<Message>>>> = vec![Vec::new(); stages.len()];
        for k in 1..stages.len() {
            let upstream = plan::upstream_tasks(worker_plan, k);
            inputs[k] = (0..parallelism)
                .map(|_| Vec::with_capacity(upstream))
                .collect();
            outputs[k] = (0..upstream)
                .map(|_| Vec::with_capacity(parallelism))
                .collect();
            for senders in &mut outputs[k] {
                for receivers in &mut inputs[k] {
                    let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
                    senders.push(tx);
                    receivers.push(rx);
                }
            }
        }
        Channels { inputs, outputs }
    }

    /// The inputs of subtask `j` of stage `k` (taken once).
    fn inputs(&mut self, k: usize, j: usize) -> Vec<Receiver<Message>> {
        std::mem::take(&mut self.inputs[k][j])
    }

    /// Where task `u` of `stage` sends its output: a shuffle into the next stage, or
    /// its own sinks.
    fn output(&mut self, stage: &StagePlan, u: usize, max_parallelism: usize) -> TaskOutput {
        if stage.shuffles {
            self.shuffle_into(stage.index + 1, u, max_parallelism)
        } else {
            TaskOutput::Sinks
        }
    }

    /// Upstream task `u`'s shuffle into stage `k` (taken once).
    fn shuffle_into(&mut self, k: usize, u: usize, max_parallelism: usize) -> TaskOutput {
        TaskOutput::Shuffle(ShuffleWriter::new(
            std::mem::take(&mut self.outputs[k][u]),
            max_parallelism as u16,
        ))
    }
}

fn context(cx: &BuildContext<'_>, task: &str) -> TaskContext {
    TaskContext {
        task: task.to_owned(),
        ..cx.context.clone()
    }
}

/// Every step's guest limits: the spec's, with the run's one guest log budget.
fn limits(cx: &BuildContext<'_>) -> GuestLimits {
    GuestLimits {
        memory_bytes: cx.plan.spec.limits.memory,
        call_timeout: cx.plan.spec.limits.call_timeout,
        log: cx.guest_log.clone(),
    }
}

/// Where a chain's records go after its operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChainEnd {
    /// The spec's sinks: the last stage.
    Sinks,
    /// Out of the chain, to the task's shuffle into the next stage.
    Shuffle,
    /// The next stage's repartition topic, inside the unit's transactions (see
    /// `plan`), as this writer of its watermarks (when event time matters downstream;
    /// see `repartition_watermark`).
    Repartition(Option<RepartitionWriter>),
}

impl ChainEnd {
    fn of(stage: &StagePlan) -> ChainEnd {
        if stage.shuffles {
            ChainEnd::Shuffle
        } else {
            ChainEnd::Sinks
        }
    }
}

/// The operators of `stage` for `task`, then its end: the sinks if it is the last
/// stage, else keyed for the next stage and out to the shuffle or the repartition
/// topic.
fn chain(
    cx: &BuildContext<'_>,
    stage: &StagePlan,
    stages: &[StagePlan],
    task: &str,
    end: ChainEnd,
) -> Result<Chain, PipelineError> {
    let spec = &cx.plan.spec;
    let mut operators = stage
        .steps
        .iter()
        .map(|&n| step_operator(cx, task, n))
        .collect::<Result<Vec<_>, _>>()?;
    if end == ChainEnd::Sinks {
        return Ok(Chain::new(operators, sinks(cx, task)?));
    }
    // The next stage starts with an aggregate: key records the way it asks.
    let next = stages[stage.index + 1].steps[0];
    if let StepSpec::Aggregate(agg) = &spec.steps[next]
        && let Some(field) = &agg.key_field
    {
        operators.push(Box::new(KeyByField::new(
            ids::key_by_id(next),
            field.clone(),
        )));
    }
    let ends_in: Vec<Box<dyn Sink>> = match (cx.plan.repartition_into(stage.index + 1), end) {
        (Some(r), ChainEnd::Repartition(writer)) => {
            // `WorkerPlan::new` gives a repartition only to a spec with a Kafka sink, and
            // `recover` opens the unit for it.
            let unit = cx.kafka.as_ref().ok_or_else(|| {
                PipelineError::connector(
                    &cx.plan.spec.name,
                    task,
                    ConnectorError::Unavailable("kafka"),
                )
            })?;
            vec![Box::new(KafkaSink::repartition(
                REPARTITION_SINK_ID,
                r.topic.clone(),
                r.key_groups,
                writer,
                unit.clone(),
            ))]
        }
        _ => Vec::new(),
    };
    Ok(Chain::new(
        operators,
        SinkSet::new(ends_in, cx.checkpoint_base),
    ))
}

/// Step `n`'s operator in `task`, opened at its restored snapshot.
fn step_operator(
    cx: &BuildContext<'_>,
    task: &str,
    n: usize,
) -> Result<Box<dyn Operator>, PipelineError> {
    let spec = &cx.plan.spec;
    let id = ids::step_id(n);
    let module = cx
        .modules
        .get(&n)
        .expect("every step's module is loaded")
        .clone();
    let memory = cx.context.metrics.guest_memory.gauge(&id);
    let agg = match &spec.steps[n] {
        StepSpec::Map(map) => {
            return Ok(Box::new(
                MapOperator::new(id, module, limits(cx), map.config.clone())
                    .with_memory_gauge(memory)
                    .with_on_error(map.on_error),
            ));
        }
        StepSpec::Aggregate(agg) => agg,
    };
    let location = StateLocation {
        work_dir: work_dir(&spec.state_dir, task, &id),
        storage: cx.storage.clone(),
        storage_task: format!("{task}.{id}"),
    };
    let config = aggregate_config(cx, agg, id.clone(), module);
    let opened = match cx.rescaled {
        Some(rescaled) => {
            AggregateOperator::open_rescaled(config, location, &rescaled.state_of(task, &id))
        }
        None => {
            let restored = cx.restored.and_then(|m| m.snapshot(task, &id));
            AggregateOperator::open(config, location, restored)
        }
    };
    let op = opened.map_err(|source| PipelineError::Operator {
        pipeline: spec.name.clone(),
        task: task.to_owned(),
        operator: id,
        source,
    })?;
    Ok(Box::new(op.with_memory_gauge(memory)))
}

/// Stateful subtasks of this worker per unit of parallelism: its aggregate steps.
fn stateful_steps(spec: &PipelineSpec) -> usize {
    spec.steps
        .iter()
        .filter(|s| matches!(s, StepSpec::Aggregate(_)))
        .count()
}

/// What a guest failure of step `id` adds when the state restored into it was written
/// by another module than the one it runs now (empty otherwise).
fn state_note(cx: &BuildContext<'_>, id: &str) -> String {
    cx.module_changes
        .iter()
        .find(|change| change.step == id)
        .map_or_else(String::new, ModuleChange::state_note)
}

/// What an aggregate operator needs of its step and of the spec.
fn aggregate_config(
    cx: &BuildContext<'_>,
    agg: &AggregateStep,
    id: String,
    module: Arc<GuestModule>,
) -> AggregateConfig {
    let spec = &cx.plan.spec;
    let state_note = state_note(cx, &id);
    AggregateConfig {
        id,
        module,
        limits: limits(cx),
        guest_config: agg.config.clone(),
        windows: match agg.window {
            None => WindowAssigner::Global,
            Some(WindowSpec::Tumbling { size }) => WindowAssigner::Tumbling {
                size_ms: millis(size),
            },
            Some(WindowSpec::Hopping { size, slide }) => WindowAssigner::Hopping {
                size_ms: millis(size),
                slide_ms: millis(slide),
            },
        },
        allowed_lateness_ms: millis(agg.allowed_lateness),
        max_parallelism: spec.max_parallelism as u16,
        batch_size: spec.batch_size,
        cache: CacheBounds {
            entries: agg.cache_entries,
            bytes: agg.cache_bytes,
            memtable_bytes: memtable_bytes(spec.parallelism * stateful_steps(spec)),
        },
        max_accumulator_bytes: agg.max_accumulator_bytes,
        update_and_emit: true,
        state_note,
        on_error: agg.on_error,
    }
}

/// `task`'s writers of the spec's sinks (it is in the last stage).
fn sinks(cx: &BuildContext<'_>, task: &str) -> Result<SinkSet, PipelineError> {
    let sinks = PipelineSinks::new(cx.plan, cx.kafka.as_ref())
        .for_task(task)
        .map_err(|source| PipelineError::connector(&cx.plan.spec.name, task, source))?;
    Ok(SinkSet::new(sinks, cx.checkpoint_base))
}

/// `task`'s writer of the dead-letter output.
fn dead_letter_sink(cx: &BuildContext<'_>, task: &str) -> Result<SinkSet, PipelineError> {
    let sink = PipelineSinks::new(cx.plan, cx.kafka.as_ref())
        .dead_letters_for_task(task)
        .map_err(|source| PipelineError::connector(&cx.plan.spec.name, task, source))?;
    Ok(SinkSet::new(vec![sink], cx.checkpoint_base))
}

/// The directory of a state dir that holds every operator's working RocksDB directory.
pub const WORK_DIR: &str = "work";

/// The working RocksDB directory of operator `op` in `task`.
pub fn work_dir(state_dir: &Path, task: &str, op: &str) -> PathBuf {
    state_dir.join(WORK_DIR).join(task).join(op)
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
