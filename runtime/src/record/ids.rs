//! The names of tasks and operators, by which checkpoints key their snapshots.
//!
//! Invariant: a name is stable for a given spec (a checkpoint written by one run is
//! found by the next): task `src<s>-<i>` or `stage<k>-<i>`, operator `source-<s>`,
//! `step-<n>` (its index in the spec), `step-<n>.key-by`, `sink-<n>`, `dead-letter`.

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
