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
//!   that, or for any other failure, the error is the run's.
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
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// Runs `spec` until its sources are drained and the final checkpoint is committed, or
/// until `options.stop` asks it to stop after one more committed checkpoint.
pub fn run(spec: &PipelineSpec, options: &RunOptions) -> Result<RunSummary, PipelineError> {
    let mut options = options.clone();
    let mut in_a_row = 0u32;
    loop {
        let started = Instant::now();
        let error = match start(recover(spec, &options)?, &options)?.wait() {
            Ok(summary) => return Ok(summary),
            Err(e) => e,
        };
        if started.elapsed() >= SETTLED {
            in_a_row = 0;
        }
        let asked_to_stop = options.stop.load(Ordering::SeqCst) != 0;
        if !error.is_transient() || asked_to_stop || in_a_row >= RESTARTS_IN_A_ROW {
            return Err(error);
        }
        let pause = FIRST_PAUSE * 2u32.pow(in_a_row);
        in_a_row += 1;
        tracing::warn!(pipeline = %spec.name, restart = in_a_row, ?pause, error = %error,
            "the run failed while the Kafka cluster was failing over or stalled: restarting it from its last committed checkpoint");
        std::thread::sleep(pause);
        options.from_scratch = false;
        options.from_checkpoint = None;
    }
}
