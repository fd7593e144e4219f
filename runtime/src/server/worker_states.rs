//! What the supervisor knows of each worker process of a pipeline (`WorkerView`), and
//! the pipeline's state summed up from them (`summarize`).
//!
//! Invariants of the summary, for the views of all N workers of one pipeline:
//! - `failed` if any worker failed past its restart limit (or the pipeline outgrew its
//!   disk quota), its `last_error` that worker's, naming it; a worker that failed does
//!   not stop the others, which keep their own partitions and key groups going.
//! - else `restarting` if any worker waits out its backoff, naming it;
//! - else `running` only if every worker runs (a worker that finished its bounded input
//!   while others run counts as running: the pipeline still produces);
//! - `finished` when all finished, `stopped` when all stopped (or finished, at least one
//!   stopped); `starting` while any has not been started yet.
//! - `restarts` is the sum of the workers' restarts: each worker counts its own
//!   failures against the restart limit, the pipeline reports them all.
//! - With one worker (0/1) the summary is that worker's state and error, word for word
//!   as before workers existed: no `worker 0/1:` prefix.

use crate::cluster::Worker;
use crate::server::wire::PipelineState;

/// One worker as its supervising thread last recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerView {
    pub worker: Worker,
    pub state: PipelineState,
    /// Its process id while it runs.
    pub pid: Option<u32>,
    /// Its restarts after failures, since the last start on request.
    pub restarts: u32,
    pub last_error: Option<String>,
}

impl WorkerView {
    /// A worker not started yet.
    pub fn new(worker: Worker) -> Self {
        WorkerView {
            worker,
            state: PipelineState::Starting,
            pid: None,
            restarts: 0,
            last_error: None,
        }
    }

    /// Whether it is in a state its thread ends in (failed past its limit, finished,
    /// stopped): the thread records that state last and returns.
    pub fn has_ended(&self) -> bool {
        matches!(
            self.state,
            PipelineState::Failed | PipelineState::Finished | PipelineState::Stopped
        )
    }

    /// Its error as the pipeline reports it: naming the worker when there are several.
    fn error_line(&self) -> Option<String> {
        let error = self.last_error.as_deref()?;
        Some(if self.worker.is_single() {
            error.to_owned()
        } else {
            format!("worker {}: {error}", self.worker)
        })
    }
}

/// The pipeline's state, restarts and error as its workers make them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub state: PipelineState,
    pub restarts: u32,
    /// `None`: leave the recorded error as it is.
    pub last_error: Option<String>,
}

/// Sums up the workers' views (see the module invariants).
pub fn summarize(views: &[WorkerView]) -> Summary {
    use PipelineState::*;
    let restarts = views.iter().map(|v| v.restarts).sum();
    let first = |state: PipelineState| views.iter().find(|v| v.state == state);
    let all = |pred: fn(PipelineState) -> bool| views.iter().all(|v| pred(v.state));
    let (state, named) = if let Some(v) = first(Failed) {
        (Failed, Some(v))
    } else if let Some(v) = first(Restarting) {
        (Restarting, Some(v))
    } else if first(Starting).is_some() || views.is_empty() {
        (Starting, None)
    } else if all(|s| s == Finished) {
        (Finished, None)
    } else if all(|s| matches!(s, Running | Finished)) {
        (Running, None)
    } else {
        (Stopped, None)
    };
    Summary {
        state,
        restarts,
        last_error: named.and_then(WorkerView::error_line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PipelineState::*;

    fn views(states: &[PipelineState]) -> Vec<WorkerView> {
        let n = states.len() as u32;
        states
            .iter()
            .enumerate()
            .map(|(i, &state)| WorkerView {
                state,
                restarts: i as u32,
                last_error: Some(format!("error {i}")),
                ..WorkerView::new(Worker::new(i as u32, n).expect("worker"))
            })
            .collect()
    }

    #[test]
    fn running_only_if_every_worker_runs() {
        assert_eq!(
            summarize(&views(&[Running, Running, Running])).state,
            Running
        );
        assert_eq!(summarize(&views(&[Running, Starting])).state, Starting);
        assert_eq!(summarize(&views(&[Running, Finished])).state, Running);
        assert_eq!(summarize(&views(&[Finished, Finished])).state, Finished);
        assert_eq!(summarize(&views(&[Stopped, Stopped])).state, Stopped);
        assert_eq!(summarize(&views(&[Stopped, Finished])).state, Stopped);
    }

    #[test]
    fn a_failed_worker_fails_the_pipeline_and_is_named() {
        let s = summarize(&views(&[Running, Restarting, Failed]));
        assert_eq!(s.state, Failed);
        assert_eq!(s.last_error.as_deref(), Some("worker 2/3: error 2"));
        assert_eq!(s.restarts, 3, "the workers' restarts add up");
        let s = summarize(&views(&[Running, Restarting, Running]));
        assert_eq!(s.state, Restarting);
        assert_eq!(s.last_error.as_deref(), Some("worker 1/3: error 1"));
        assert_eq!(summarize(&views(&[Running, Running])).last_error, None);
    }

    #[test]
    fn one_worker_is_reported_as_before_workers_existed() {
        let s = summarize(&views(&[Failed]));
        assert_eq!(s.state, Failed);
        assert_eq!(s.last_error.as_deref(), Some("error 0"));
    }
}
