//! Retiring a deleted pipeline's Kafka names: the server runs `weir reset-kafka` on the
//! pipeline's generated spec, as a child with exactly a worker's environment (the
//! tenant's principal, never the server's), so that a pipeline created later under
//! the same name starts from nothing instead of finding the old one's group, progress
//! markers and repartition records.
//!
//! Invariants:
//! - It runs after every worker of the pipeline was killed (`Supervisor::kill`): the
//!   reset fences the commit units, then deletes (see `connector::kafka::reset`).
//! - It is bounded (`RESET_BOUND`): a child that overruns is killed, and the delete
//!   fails; the pipeline then stays, stopped, and the delete can be asked again.
//! - What fails is said in one line with the worker's own error text (the caller
//!   redacts it before a tenant sees it).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::child_process;
use crate::server::namespace::PipelineDir;
use crate::server::worker::{last_error_line, tenant_command};

/// How long the reset may take in all (each broker call inside is bounded at 30 s).
const RESET_BOUND: Duration = Duration::from_secs(180);

/// How much of the child's stderr is read (its error is its last line).
const MAX_STDERR: u64 = 1 << 20;

/// Resets the pipeline of `dir` on Kafka (see the module doc); `Err` is one line.
/// A pipeline that never started has no generated spec and nothing on Kafka.
pub fn reset_on_kafka(
    program: &Path,
    dir: &PipelineDir,
    env: &[(String, String)],
) -> Result<(), String> {
    if !dir.spec().exists() {
        return Ok(());
    }
    let child = tenant_command(program, env)
        .arg("reset-kafka")
        .arg(dir.spec())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .current_dir(dir.root())
        .spawn()
        .map_err(|e| format!("cannot start `weir reset-kafka`: {e}"))?;
    let ended = child_process::run_to_end(child, None, Instant::now() + RESET_BOUND, MAX_STDERR)
        .map_err(|e| format!("cannot wait for `weir reset-kafka`: {e}"))?;
    match ended.status {
        None => Err(format!(
            "Kafka did not finish the reset within {RESET_BOUND:?}"
        )),
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(last_error_line(ended.stderr.lines())
            .unwrap_or_else(|| format!("`weir reset-kafka` ended with {s}"))),
    }
}
