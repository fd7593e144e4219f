//! The physical plan: how a spec's steps become stages, tasks and operator ids.
//!
//! Invariants:
//! - Stage 0 holds one task per (source, subtask); every later stage holds
//!   `parallelism` tasks and starts at an aggregate step, because an aggregate needs its
//!   input partitioned by key: each stage boundary is a hash shuffle by key group.
//! - Steps between two shuffles are chained into the same task (no channel hop).
//! - Tasks and operators are named by `record::ids`, stably for a given spec.
//! - The split across workers: with repartition topics (worker I of N > 1 of a keyed
//!   pipeline, `WorkerPlan::repartitions`), every stage boundary goes through Kafka. The
//!   stages stay the same, but the spec's own sources run stage 0 and end in the first
//!   topic (`SourceRoute::ToRepartition`), every later stage but the last ends in the
//!   next topic instead of a shuffle, and stage k (k >= 1) is fed only by the source
//!   reading its topic back (`FromRepartition`), by key group among the worker's
//!   subtasks as in process (`stage_inputs`). Without them every source feeds stage 1
//!   (`Local`) and each later stage is fed by the one before, exactly as before
//!   workers existed.

use crate::pipeline::worker_plan::WorkerPlan;
use crate::spec::{PipelineSpec, StepSpec};

/// One stage: the steps it chains (indices into `spec.steps`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    pub index: usize,
    pub steps: Vec<usize>,
    /// Whether the stage's output is shuffled into the next stage (else it ends in sinks).
    pub shuffles: bool,
}

/// Splits the steps into stages at every aggregate.
pub fn stages(spec: &PipelineSpec) -> Vec<StagePlan> {
    let mut stages = vec![StagePlan {
        index: 0,
        steps: Vec::new(),
        shuffles: false,
    }];
    for (n, step) in spec.steps.iter().enumerate() {
        if matches!(step, StepSpec::Aggregate(_)) {
            let last = stages.last_mut().expect("stage 0 exists");
            last.shuffles = true;
            let index = last.index + 1;
            stages.push(StagePlan {
                index,
                steps: Vec::new(),
                shuffles: false,
            });
        }
        stages.last_mut().expect("a stage exists").steps.push(n);
    }
    stages
}

/// Where the tasks of one source send what they read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceRoute {
    /// Through stage 0's steps, then into stage 1 by key group in process (or into the
    /// sinks when stage 0 is the last): every source of a pipeline in one process.
    Local,
    /// Worker I of N > 1 with repartition topics: through stage 0's steps (keyed the
    /// way the first keyed step asks), then into the first topic; the task ends there.
    ToRepartition,
    /// A source reading a repartition topic back: no step of its own, straight into
    /// `stage` (which starts at that topic's keyed step) by key group.
    FromRepartition { stage: usize },
}

/// How source `s`'s tasks route their records (see `SourceRoute`).
pub fn source_route(plan: &WorkerPlan, s: usize) -> SourceRoute {
    if plan.repartitions.is_empty() {
        SourceRoute::Local
    } else if let Some(r) = plan.repartition_read_by(s) {
        SourceRoute::FromRepartition { stage: r.stage }
    } else {
        SourceRoute::ToRepartition
    }
}

/// What feeds stage `k` >= 1 in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageInputs {
    /// The tasks of these sources, ascending: the position of a source here numbers
    /// its tasks' channels into the stage (`position x parallelism + subtask`). Stage
    /// 1 in one process (every source), or any stage k fed by its repartition source.
    Sources(Vec<usize>),
    /// The subtasks of stage k - 1, by their subtask number: a later stage in one
    /// process.
    PreviousStage,
}

/// What feeds stage `k` >= 1 (see `StageInputs`).
pub fn stage_inputs(plan: &WorkerPlan, k: usize) -> StageInputs {
    let feeders: Vec<usize> = (0..plan.spec.sources.len())
        .filter(|&s| match source_route(plan, s) {
            SourceRoute::Local => k == 1,
            SourceRoute::ToRepartition => false,
            SourceRoute::FromRepartition { stage } => stage == k,
        })
        .collect();
    if feeders.is_empty() && k > 1 {
        StageInputs::PreviousStage
    } else {
        StageInputs::Sources(feeders)
    }
}

/// How many tasks feed each subtask of stage `k` >= 1: one channel each.
pub fn upstream_tasks(plan: &WorkerPlan, k: usize) -> usize {
    let parallelism = plan.spec.parallelism;
    match stage_inputs(plan, k) {
        StageInputs::Sources(sources) => sources.len() * parallelism,
        StageInputs::PreviousStage => parallelism,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
