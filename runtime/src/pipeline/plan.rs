//! The physical plan: how a spec's steps become stages, tasks and operator ids.
//!
//! Invariants:
//! - Stage 0 holds one task per (source, subtask); every later stage holds
//!   `parallelism` tasks and starts at an aggregate step, because an aggregate needs its
//!   input partitioned by key: each stage boundary is a hash shuffle by key group.
//! - Steps between two shuffles are chained into the same task (no channel hop).
//! - Names are stable for a given spec, because checkpoints are keyed by them: task
//!   `src<s>-<i>` or `stage<k>-<i>`, operator `source-<s>`, `step-<n>` (its index in the
//!   spec), `step-<n>.key-by`, `sink-<n>`, `dead-letter`.

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

pub fn source_task(source: usize, subtask: usize) -> String {
    format!("src{source}-{subtask}")
}

pub fn stage_task(stage: usize, subtask: usize) -> String {
    format!("stage{stage}-{subtask}")
}

pub fn source_id(source: usize) -> String {
    format!("source-{source}")
}

pub fn step_id(step: usize) -> String {
    format!("step-{step}")
}

pub fn key_by_id(step: usize) -> String {
    format!("step-{step}.key-by")
}

pub fn sink_id(sink: usize) -> String {
    format!("sink-{sink}")
}

pub const DEAD_LETTER_ID: &str = "dead-letter";
