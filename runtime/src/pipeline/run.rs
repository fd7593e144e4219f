//! `run`: a pipeline from recovery to the final checkpoint: `recover` (see
//! `recovery.rs`), `start` (see `running.rs`), then wait for the end.
//!
//! Invariants:
//! - A run that fails because the Kafka cluster was failing over or stalled
//!   ([`PipelineError::is_transient`]: the broker required a transaction to be aborted,
//!   or a call outlived the checkpoint timeout) is recovered and started again in the
//!   same process, from its last committed checkpoint, as a supervisor would restart
//!   the process: exactly-once holds across it by the same recovery. At most
//!   [`RESTARTS_IN_A_ROW`] restarts follow one another without a run lasting
//!   [`SETTLED`]; each waits [`FIRST_PAUSE`], doubled at each restart in a row. Past
//!   that the run fails with `GaveUp` (the last failure, and what to do); for any other
//!   failure, the error is the run's.
//! - A failure in recovery or start-up goes through the same rule as one while running
//!   (a broker lost while a run starts is a failover too). Once a recovery of the run
//!   has reached the cluster, a cluster that does not answer
//!   ([`PipelineError::is_unreachable`]) is also transient: it answered before, so it is
//!   failing over; a run that never reached it fails at once (a wrong `bootstrap` is the
//!   operator's to fix, not to wait out).
//! - A restart never deletes anything: `from_scratch` and `from_checkpoint` apply to
//!   the first recovery only. A run asked to stop is not restarted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::pipeline::error::PipelineError;
use crate::pipeline::options::{RunOptions, RunSummary};
use crate::pipeline::recovery::recover;
use crate::pipeline::running::start;
use crate::spec::PipelineSpec;

/// Restarts in a row (runs shorter than [`SETTLED`]) before a transient failure is final.
pub const RESTARTS_IN_A_ROW: u32 = 3;
/// A run that lasted this long before failing settled: the next failure starts a new row.
const SETTLED: Duration = Duration::from_secs(60);
/// Pause before the first restart of a row.
const FIRST_PAUSE: Duration = if cfg!(test) {
    Duration::from_millis(1)
} else {
    Duration::from_secs(1)
};

/// Runs `spec` until its sources are drained and the final checkpoint is committed, or
/// until `options.stop` asks it to stop after one more committed checkpoint.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunSummary, PipelineError> {
    with_restarts(&spec.name, options, |options, recovered| {
        let recovered_run = recover(spec, options)?;
        *recovered = true;
        start(recovered_run, options)?.wait()
    })
}

/// Calls `attempt` (recover, start, wait; it sets its flag once recovery is done) until
/// it succeeds or fails for good (see the module's invariants).
fn with_restarts(
    pipeline: &str,
    options: &RunOptions,
    mut attempt: impl FnMut(&RunOptions, &mut bool) -> Result<RunSummary, PipelineError>,
) -> Result<RunSummary, PipelineError> {
    let mut options = options.clone();
    let mut in_a_row = 0u32;
    // Whether the cluster answered a recovery of this run once: it is there.
    let mut answered = false;
    loop {
        let started = Instant::now();
        let mut recovered = false;
        let outcome = attempt(&options, &mut recovered);
        answered |= recovered;
        let error = match outcome {
            Ok(summary) => return Ok(summary),
            Err(e) => e,
        };
        if started.elapsed() >= SETTLED {
            in_a_row = 0;
        }
        let transient = error.is_transient() || (answered && error.is_unreachable());
        let asked_to_stop = options.stop.load(Ordering::SeqCst) != 0;
        if !transient || asked_to_stop {
            return Err(error);
        }
        if in_a_row >= RESTARTS_IN_A_ROW {
            return Err(PipelineError::GaveUp {
                pipeline: pipeline.to_owned(),
                restarts: in_a_row,
                source: Box::new(error),
            });
        }
        let pause = FIRST_PAUSE * 2u32.pow(in_a_row);
        in_a_row += 1;
        tracing::warn!(%pipeline, restart = in_a_row, ?pause, error = %error,
            "the run failed while the Kafka cluster was failing over or stalled: restarting it from its last committed checkpoint");
        std::thread::sleep(pause);
        options.from_scratch = false;
        options.from_checkpoint = None;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::checkpoint::coordinator::RunEnd;
    use crate::connector::kafka::KafkaError;
    use crate::record::CheckpointId;

    fn failure(kafka: KafkaError) -> PipelineError {
        PipelineError::connector("p", "kafka-sink", kafka)
    }

    fn unreachable() -> PipelineError {
        failure(KafkaError::Unreachable {
            bootstrap: "b1,b2,b3".into(),
            timeout: Duration::from_secs(10),
            reason: "OperationTimedOut".into(),
        })
    }

    fn aborted() -> PipelineError {
        failure(KafkaError::TransactionAborted {
            transactional_id: "weir.p.0.0".into(),
            call: "adding the offsets of checkpoint 10".into(),
            reason: "Coordinator not available".into(),
        })
    }

    fn finished() -> RunSummary {
        RunSummary {
            metrics: Default::default(),
            end: RunEnd::Finished(CheckpointId(7)),
            restored_from: None,
        }
    }

    /// Runs `with_restarts` over `outcomes`, one per attempt, each after a recovery that
    /// reached the cluster; answers the result and whether each attempt started from
    /// scratch.
    fn run_through(
        outcomes: Vec<Result<RunSummary, PipelineError>>,
    ) -> (Result<RunSummary, PipelineError>, Vec<bool>) {
        let recovered = outcomes.iter().map(|_| true).collect();
        run_through_recoveries(outcomes, recovered)
    }

    /// `run_through`, where `recovered[i]` says whether attempt `i` got past recovery.
    fn run_through_recoveries(
        mut outcomes: Vec<Result<RunSummary, PipelineError>>,
        mut recovered: Vec<bool>,
    ) -> (Result<RunSummary, PipelineError>, Vec<bool>) {
        recovered.reverse();
        outcomes.reverse();
        let mut seen = Vec::new();
        let options = RunOptions {
            from_scratch: true,
            ..Default::default()
        };
        let result = with_restarts("p", &options, |o, got_past_recovery| {
            seen.push(o.from_scratch);
            *got_past_recovery = recovered.pop().expect("one flag an attempt");
            outcomes.pop().expect("no attempt past the outcomes")
        });
        (result, seen)
    }

    #[test]
    fn a_recovery_that_cannot_reach_a_failing_over_cluster_is_restarted() {
        // The run failed in a failover; its restart's recovery asked a dead broker.
        let outcomes = vec![Err(aborted()), Err(unreachable()), Ok(finished())];
        let (result, seen) = run_through_recoveries(outcomes, vec![true, false, true]);
        assert!(result.is_ok(), "{result:?}");
        let only_the_first_starts_over = [true, false, false];
        assert_eq!(seen, only_the_first_starts_over);
    }

    #[test]
    fn a_running_run_that_loses_the_cluster_for_a_moment_is_restarted() {
        let (result, seen) = run_through(vec![Err(unreachable()), Ok(finished())]);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn a_run_that_never_reached_the_cluster_fails_at_once() {
        let (result, seen) = run_through_recoveries(vec![Err(unreachable())], vec![false]);
        assert!(
            result
                .expect_err("a run that never reached the cluster")
                .is_unreachable()
        );
        assert_eq!(seen.len(), 1);
    }

    #[test]
    fn a_transient_failure_in_a_first_recovery_is_restarted() {
        let outcomes = vec![Err(aborted()), Ok(finished())];
        let (result, seen) = run_through_recoveries(outcomes, vec![false, true]);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn restarts_in_a_row_end_with_the_last_error() {
        let outcomes = (0..=RESTARTS_IN_A_ROW).map(|_| Err(aborted())).collect();
        let (result, seen) = run_through(outcomes);
        let error = result.expect_err("past the restarts in a row");
        assert!(matches!(
            error,
            PipelineError::GaveUp {
                restarts: RESTARTS_IN_A_ROW,
                ..
            }
        ));
        assert!(
            error.to_string().ends_with(
                "gave up after 3 restarts in a row: once the Kafka cluster is available again, a restart resumes from the last committed checkpoint"
            ),
            "{error}"
        );
        assert_eq!(seen.len() as u32, RESTARTS_IN_A_ROW + 1);
    }

    #[test]
    fn a_failure_that_is_not_kafkas_is_not_restarted() {
        let error = PipelineError::CoordinatorPanicked {
            pipeline: "p".into(),
            message: "a bug".into(),
        };
        let (result, seen) = run_through(vec![Err(aborted()), Err(error)]);
        assert!(matches!(
            result,
            Err(PipelineError::CoordinatorPanicked { .. })
        ));
        assert_eq!(seen.len(), 2);
    }
}
