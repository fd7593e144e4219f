//! Deleting a pipeline: its workers fenced, its Kafka names retired, its files removed,
//! its row dropped, in that order. Retiring the Kafka names runs `weir reset-kafka` on
//! the pipeline's generated spec, as a child with exactly a worker's environment (the
//! tenant's principal, never the server's), so that a pipeline created later under
//! the same name starts from nothing instead of finding the old one's group, progress
//! markers and repartition records.
//!
//! Invariants:
//! - A delete runs under the pipeline's lifecycle lock, after `desired: deleted` was
//!   recorded (`api::pipelines::delete`), so no start can begin a worker meanwhile or
//!   after it; every step is idempotent, and a delete cut short (Kafka unreachable, the
//!   server killed) is finished by the next delete or by the next server start
//!   (`finish_deletes`).
//! - The reset runs after every worker of the pipeline was killed and reaped
//!   (`Supervisor::retire`): it fences the commit units, then deletes (see
//!   `connector::kafka::reset`); the directory goes after Kafka, and the row last, so a
//!   delete cut short at any step leaves its row, marked `deleted`, to finish it.
//! - It is bounded (`RESET_BOUND`): a child that overruns is killed, and the delete
//!   fails; the pipeline then stays, stopped, and the delete can be asked again.
//! - What fails is said in one line with the worker's own error text (the caller
//!   redacts it before a tenant sees it).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use crate::child_process;
use crate::server::app::App;
use crate::server::catalog::{PipelineRow, RunRecord};
use crate::server::error::{ApiError, ServerError};
use crate::server::namespace::PipelineDir;
use crate::server::wire::{Desired, PipelineState};
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

/// Deletes pipeline `row` of `tenant` (see the module doc); the caller holds its
/// lifecycle lock and has recorded `desired: deleted`. Runs on a blocking thread.
pub fn delete_pipeline(app: &App, tenant: &str, row: &PipelineRow) -> Result<(), ApiError> {
    if !app.supervisor.retire(tenant, &row.name) {
        return Err(ApiError::conflict(format!(
            "pipeline {:?} is being deleted",
            row.name
        )));
    }
    let outcome = remove_everything(app, tenant, row);
    app.supervisor.retired(tenant, &row.name);
    outcome
}

/// What a delete removes once no worker runs (see `delete_pipeline`).
fn remove_everything(app: &App, tenant: &str, row: &PipelineRow) -> Result<(), ApiError> {
    let dir = app.namespace(tenant).pipeline_dir(&row.name);
    let env = app.kafka_password(tenant)?;
    if let Err(reason) = reset_on_kafka(&app.program, &dir, &env) {
        let reason = app.redact(tenant, &reason);
        let message = format!(
            "pipeline {:?} is stopped but not deleted: its consumer group and internal topics could not be removed from Kafka ({reason}); delete it again",
            row.name
        );
        let stopped = RunRecord {
            state: PipelineState::Stopped,
            restarts: row.restarts,
            last_error: Some(&message),
            savepoint: row.savepoint,
        };
        app.catalog.record_run(tenant, &row.name, &stopped)?;
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message));
    }
    std::fs::remove_dir_all(dir.root()).or_else(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(ServerError::io("cannot remove", dir.root(), e)),
    })?;
    app.catalog.delete_pipeline(tenant, &row.name)?;
    Ok(())
}

/// Finishes every delete the catalog records as asked (`desired: deleted`) but not done:
/// one cut short by a kill of the server, or one that could not reach Kafka. Each under
/// its pipeline's lock, on this (blocking) thread; a delete that fails again stays
/// recorded, with its reason in `last_error`, for the next delete or start. Returns how
/// many finished.
pub fn finish_deletes(app: &App) -> Result<usize, ServerError> {
    let mut finished = 0;
    for row in app.catalog.all_pipelines()? {
        if row.desired != Desired::Deleted {
            continue;
        }
        let _lock = app
            .lifecycles
            .hold_blocking((row.tenant.clone(), row.name.clone()));
        // Read again under the lock: a tenant's own delete may have finished it.
        let Some(row) = app.catalog.pipeline(&row.tenant, &row.name)? else {
            continue;
        };
        match delete_pipeline(app, &row.tenant, &row) {
            Ok(()) => finished += 1,
            Err(e) => {
                tracing::error!(tenant = %row.tenant, pipeline = %row.name, error = %e.message(), "cannot finish the delete")
            }
        }
    }
    Ok(finished)
}
