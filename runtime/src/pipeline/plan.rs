//! The physical plan: how a spec's steps become stages, tasks and operator ids.
//!
//! Invariants:
//! - Stage 0 holds one task per (source, subtask); every later stage holds
//!   `parallelism` tasks and starts at an aggregate step, because an aggregate needs its
//!   input partitioned by key: each stage boundary is a hash shuffle by key group.
//! - Steps between two shuffles are chained into the same task (no channel hop).
//! - Tasks and operators are named by `record::ids`, stably for a given spec.
//! - The split across workers: with a repartition topic (worker I of N > 1 of a keyed
//!   pipeline, `spec.repartition`), the stage boundary at the keyed step goes through
//!   Kafka. The stages stay the same, but the spec's own sources run stage 0 and end
//!   in the repartition topic (`SourceRoute::ToRepartition`), and only the repartition
//!   source feeds stage 1 (`FromRepartition`), by key group among the worker's
//!   subtasks as in process. Without one every source feeds stage 1 (`Local`), exactly
//!   as before workers existed.

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
    /// Worker I of N > 1 with a repartition topic: through stage 0's steps (keyed the
    /// way the keyed step asks), then into the repartition topic; the task ends there.
    ToRepartition,
    /// The source reading the repartition topic back: no step of its own, straight
    /// into stage 1 (the keyed step) by key group.
    FromRepartition,
}

/// How source `s`'s tasks route their records (see `SourceRoute`).
pub fn source_route(spec: &PipelineSpec, s: usize) -> SourceRoute {
    match &spec.repartition {
        None => SourceRoute::Local,
        Some(r) if r.source == s => SourceRoute::FromRepartition,
        Some(_) => SourceRoute::ToRepartition,
    }
}

/// The sources whose tasks feed stage 1, ascending: the position of a source here
/// numbers its tasks' channels into stage 1. Every source in one process; only the
/// repartition source with a repartition topic.
pub fn stage_1_feeders(spec: &PipelineSpec) -> Vec<usize> {
    (0..spec.sources.len())
        .filter(|&s| source_route(spec, s) != SourceRoute::ToRepartition)
        .collect()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
