//! The physical plan: how a spec's steps become stages, tasks and operator ids.
//!
//! Invariants:
//! - Stage 0 holds one task per (source, subtask); every later stage holds
//!   `parallelism` tasks and starts at an aggregate step, because an aggregate needs its
//!   input partitioned by key: each stage boundary is a hash shuffle by key group.
//! - Steps between two shuffles are chained into the same task (no channel hop).
//! - Tasks and operators are named by `record::ids`, stably for a given spec.

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
