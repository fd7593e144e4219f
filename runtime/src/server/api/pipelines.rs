//! Pipeline routes (`/v1/pipelines`, tenant token): create, list, status, start, stop,
//! savepoint, upgrade, delete.
//!
//! A pipeline runs as `workers` processes (1 unless the create says more, within the
//! tenant's `workers` quota). A stop (and a savepoint, which is a stop that reports its
//! checkpoint) answers once every worker has taken its final checkpoint and exited; an
//! upgrade starts from that savepoint with the new modules, the old state and, if it
//! says so, another number of workers (a rescale: the new workers take the old ones
//! over and restore exactly the key groups and partitions each now owns).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::server::app::{App, SharedApp, TenantAuth};
use crate::server::catalog::{AddOutcome, PipelineRow, RunRecord, TenantRow, now};
use crate::server::config::quotas_over;
use crate::server::error::{ApiError, ServerError};
use crate::server::ids;
use crate::server::wire::{
    CreatePipeline, Desired, ErrorBody, PipelineState, PipelineStatus, UpgradePipeline,
    WorkerStatus,
};
use crate::server::worker::{pipeline_checkpoint, read_status, smallest_of_every_worker, workers};

/// Lines of each worker's log a status shows.
const LOG_TAIL_LINES: usize = 20;

/// A pipeline's status: its row, its workers' status files and what the supervisor
/// last saw of each worker. Counters are summed over the workers; with several, the
/// last committed checkpoint is the smallest of theirs (none until each has one).
pub fn status(app: &SharedApp, row: PipelineRow) -> PipelineStatus {
    let dir = app.namespace(&row.tenant).pipeline_dir(&row.name);
    let live = app.supervisor.workers(&row.tenant, &row.name);
    let redaction = app.redaction(&row.tenant);
    let mut reported = Vec::new();
    let mut worker_status = Vec::new();
    for worker in workers(row.workers) {
        let counters = read_status(&dir, worker);
        let view = live
            .as_ref()
            .and_then(|views| views.get(worker.index() as usize))
            .filter(|v| v.worker == worker);
        let c = counters.clone().unwrap_or_default();
        worker_status.push(WorkerStatus {
            index: worker.index(),
            state: view.map_or(row.state, |v| v.state),
            pid: view.and_then(|v| v.pid),
            restarts: view.map_or(0, |v| v.restarts),
            last_error: view
                .and_then(|v| v.last_error.as_deref())
                .map(|e| redaction.apply(e)),
            last_committed_checkpoint: (c.last_checkpoint_id > 0).then_some(c.last_checkpoint_id),
            records_in: c.records_in,
            records_out: c.records_out,
            log_tail: crate::server::worker_log::tail(&dir.log(worker), LOG_TAIL_LINES)
                .iter()
                .map(|l| redaction.apply(l))
                .collect(),
        });
        reported.push(counters);
    }
    let sum = |f: fn(&crate::metrics::MetricsSnapshot) -> u64| -> u64 {
        reported.iter().flatten().map(f).sum()
    };
    let consumer_lag = reported
        .iter()
        .any(Option::is_some)
        .then(|| sum(|c| c.consumer_lag));
    let last_committed_checkpoint =
        smallest_of_every_worker(worker_status.iter().map(|w| w.last_committed_checkpoint));
    PipelineStatus {
        state: row.state,
        desired: row.desired,
        modules: row.modules,
        last_complete_checkpoint: pipeline_checkpoint(&dir, row.workers),
        last_committed_checkpoint,
        records_in: sum(|c| c.records_in),
        records_out: sum(|c| c.records_out),
        dead_letters: sum(|c| c.dead_letters),
        consumer_lag,
        restarts: row.restarts,
        last_error: row.last_error.map(|e| redaction.apply(&e)),
        savepoint: row.savepoint,
        created_at: row.created_at,
        name: row.name,
        workers: row.workers,
        worker_status,
    }
}

fn find(app: &SharedApp, tenant: &TenantRow, name: &str) -> Result<PipelineRow, ApiError> {
    let name = ids::pipeline_name(name)?;
    app.catalog
        .pipeline(&tenant.id, name)?
        .ok_or_else(|| ApiError::not_found("pipeline", name))
}

fn current(
    app: &SharedApp,
    tenant: &TenantRow,
    name: &str,
) -> Result<Json<PipelineStatus>, ApiError> {
    Ok(Json(status(app, find(app, tenant, name)?)))
}

/// Create a pipeline from a spec (and start it, unless `start` is false).
#[utoipa::path(post, path = "/v1/pipelines", tag = "pipelines", security(("bearer" = [])),
    request_body = CreatePipeline,
    responses((status = 201, body = PipelineStatus), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn create(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Json(body): Json<CreatePipeline>,
) -> Result<(StatusCode, Json<PipelineStatus>), ApiError> {
    let workers = body.workers.unwrap_or(1);
    let hosted = app.hosted_spec(&tenant, &body.spec, workers)?;
    let quota = quotas_over(&tenant.quotas, &app.config.quotas)
        .pipelines
        .unwrap_or(u32::MAX);
    let row = PipelineRow {
        tenant: tenant.id.clone(),
        name: hosted.name.clone(),
        spec: body.spec,
        modules: hosted.modules,
        desired: if body.start {
            Desired::Running
        } else {
            Desired::Stopped
        },
        state: if body.start {
            PipelineState::Starting
        } else {
            PipelineState::Stopped
        },
        restarts: 0,
        last_error: None,
        savepoint: None,
        created_at: now(),
        workers,
    };
    match app.catalog.add_pipeline(&row, quota)? {
        AddOutcome::Added => {}
        AddOutcome::Exists => {
            return Err(ApiError::conflict(format!(
                "pipeline {:?} exists",
                row.name
            )));
        }
        AddOutcome::OverQuota => {
            return Err(ApiError::conflict(format!(
                "you have {quota} pipelines, your quota: delete one first"
            )));
        }
    }
    if body.start {
        app.start_pipeline(&tenant, &row, None)?;
    }
    Ok((StatusCode::CREATED, current(&app, &tenant, &row.name)?))
}

/// List your pipelines.
#[utoipa::path(get, path = "/v1/pipelines", tag = "pipelines", security(("bearer" = [])),
    responses((status = 200, body = [PipelineStatus]), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
) -> Result<Json<Vec<PipelineStatus>>, ApiError> {
    let rows = app.catalog.pipelines(&tenant.id)?;
    Ok(Json(rows.into_iter().map(|r| status(&app, r)).collect()))
}

/// A pipeline's status.
#[utoipa::path(get, path = "/v1/pipelines/{name}", tag = "pipelines", security(("bearer" = [])),
    params(("name" = String, Path, description = "pipeline name")),
    responses((status = 200, body = PipelineStatus), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>, ApiError> {
    current(&app, &tenant, &name)
}

/// Start a pipeline (resuming from its last committed checkpoint), or those of its
/// workers that failed while the others run.
#[utoipa::path(post, path = "/v1/pipelines/{name}/start", tag = "pipelines", security(("bearer" = [])),
    params(("name" = String, Path, description = "pipeline name")),
    responses((status = 200, body = PipelineStatus), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub async fn start(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>, ApiError> {
    let mut row = find(&app, &tenant, &name)?;
    if !app.supervisor.is_fully_supervised(&tenant.id, &row.name) {
        row.desired = Desired::Running;
        row.state = PipelineState::Starting;
        row.restarts = 0;
        row.last_error = None;
        app.catalog.update_pipeline(&row)?;
        app.start_pipeline(&tenant, &row, None)?;
    }
    current(&app, &tenant, &row.name)
}

/// Stops the workers (final checkpoint each) and records the desired state `stopped`.
async fn stop_workers(
    app: &SharedApp,
    tenant: &TenantRow,
    name: &str,
) -> Result<PipelineRow, ApiError> {
    let mut row = find(app, tenant, name)?;
    row.desired = Desired::Stopped;
    app.catalog.update_pipeline(&row)?;
    let (stopping, t, n) = (app.clone(), tenant.id.clone(), row.name.clone());
    tokio::task::spawn_blocking(move || stopping.supervisor.stop(&t, &n))
        .await
        .map_err(|e| ServerError::Other(format!("stop: {e}")))?;
    find(app, tenant, &row.name)
}

/// Stop a pipeline after one more committed checkpoint.
#[utoipa::path(post, path = "/v1/pipelines/{name}/stop", tag = "pipelines", security(("bearer" = [])),
    params(("name" = String, Path, description = "pipeline name")),
    responses((status = 200, body = PipelineStatus), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn stop(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>, ApiError> {
    let row = stop_workers(&app, &tenant, &name).await?;
    Ok(Json(status(&app, row)))
}

/// Stop with a savepoint: stop after one more committed checkpoint and keep it as the
/// savepoint an upgrade starts from.
#[utoipa::path(post, path = "/v1/pipelines/{name}/savepoint", tag = "pipelines", security(("bearer" = [])),
    params(("name" = String, Path, description = "pipeline name")),
    responses((status = 200, body = PipelineStatus), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub async fn savepoint(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>, ApiError> {
    let mut row = stop_workers(&app, &tenant, &name).await?;
    let dir = app.namespace(&tenant.id).pipeline_dir(&row.name);
    row.savepoint = pipeline_checkpoint(&dir, row.workers);
    if row.savepoint.is_none() {
        let of_each = if row.workers > 1 {
            " on every worker"
        } else {
            ""
        };
        return Err(ApiError::conflict(format!(
            "pipeline {:?} has no checkpoint yet to keep as a savepoint{of_each}",
            row.name
        )));
    }
    app.catalog.update_pipeline(&row)?;
    Ok(Json(status(&app, row)))
}

/// Upgrade a stopped pipeline's modules and/or number of workers and start it from its
/// savepoint, keeping state. Another number of workers is a rescale: the new workers
/// take over the old ones' last committed checkpoints (one worker to several too; from
/// several back to one it is refused).
#[utoipa::path(post, path = "/v1/pipelines/{name}/upgrade", tag = "pipelines", security(("bearer" = [])),
    params(("name" = String, Path, description = "pipeline name")), request_body = UpgradePipeline,
    responses((status = 200, body = PipelineStatus), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub async fn upgrade(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
    Json(body): Json<UpgradePipeline>,
) -> Result<Json<PipelineStatus>, ApiError> {
    let mut row = find(&app, &tenant, &name)?;
    if app.supervisor.is_supervised(&tenant.id, &row.name) {
        return Err(ApiError::conflict(
            "the pipeline is running: take a savepoint first (it stops the pipeline)",
        ));
    }
    let Some(savepoint) = row.savepoint else {
        return Err(ApiError::conflict(
            "the pipeline has no savepoint: take one first",
        ));
    };
    for (step, id) in &body.modules {
        replace_module(&app, &tenant, &mut row, step, id)?;
    }
    let workers = body.workers.unwrap_or(row.workers);
    // Checked (and the new module paths resolved) before anything is recorded.
    app.hosted_spec(&tenant, &row.spec, workers)?;
    if workers == 1 && row.workers > 1 {
        return Err(ApiError::conflict(format!(
            "pipeline {:?} runs as {} workers: rescaling from several workers back to one is not supported (a keyed step's repartition topic would have to be drained first); upgrade to 2 or more workers, or create a new pipeline",
            row.name, row.workers
        )));
    }
    row.workers = workers;
    row.desired = Desired::Running;
    row.state = PipelineState::Starting;
    row.restarts = 0;
    row.last_error = None;
    app.catalog.update_pipeline(&row)?;
    app.start_pipeline(&tenant, &row, Some(savepoint))?;
    current(&app, &tenant, &row.name)
}

fn replace_module(
    app: &SharedApp,
    tenant: &TenantRow,
    row: &mut PipelineRow,
    step: &str,
    id: &str,
) -> Result<(), ApiError> {
    let step = ids::step_name(step)?;
    let id = ids::module_id(id)?;
    let Some(old) = row.modules.get(step) else {
        return Err(ApiError::bad_request(format!(
            "pipeline {:?} has no step {step:?}",
            row.name
        )));
    };
    let new = app
        .catalog
        .module(&tenant.id, id)?
        .ok_or_else(|| ApiError::not_found("module", id))?;
    let old_world = app.catalog.module(&tenant.id, old)?.map(|m| m.world);
    if old_world.as_deref() != Some(new.world.as_str()) {
        return Err(ApiError::bad_request(format!(
            "step {step:?}: module {id} is a {}, the step's module a {}",
            new.world,
            old_world.unwrap_or_else(|| "deleted module".into())
        )));
    }
    let steps = row.spec.get_mut("steps").and_then(|s| s.as_array_mut());
    for (i, s) in steps.into_iter().flatten().enumerate() {
        let key = s
            .get("name")
            .and_then(|n| n.as_str())
            .map_or_else(|| format!("step-{i}"), str::to_owned);
        if key == step {
            s["module"] = serde_json::json!(id);
        }
    }
    row.modules.insert(step.to_owned(), id.to_owned());
    Ok(())
}

/// Delete a pipeline: its workers are killed; its consumer group, progress and
/// repartition topics are deleted from Kafka (its output topics are not); its state
/// and checkpoints are removed. A pipeline of the same name then starts from nothing.
/// If Kafka cannot be reached, the pipeline stays, stopped (503): ask again.
#[utoipa::path(delete, path = "/v1/pipelines/{name}", tag = "pipelines", security(("bearer" = [])),
    params(("name" = String, Path, description = "pipeline name")),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
pub async fn delete(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let mut row = find(&app, &tenant, &name)?;
    row.desired = Desired::Stopped;
    app.catalog.update_pipeline(&row)?;
    let (deleting, t) = (app.clone(), tenant.id.clone());
    tokio::task::spawn_blocking(move || retire(&deleting, &t, &row))
        .await
        .map_err(|e| ServerError::Other(format!("delete: {e}")))??;
    Ok(StatusCode::NO_CONTENT)
}

/// The delete's work (see `delete`), off the async runtime.
fn retire(app: &App, tenant: &str, row: &PipelineRow) -> Result<(), ApiError> {
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

/// What a delete removes once no worker runs (see `delete`).
fn remove_everything(app: &App, tenant: &str, row: &PipelineRow) -> Result<(), ApiError> {
    let dir = app.namespace(tenant).pipeline_dir(&row.name);
    let env = app.kafka_password(tenant)?;
    if let Err(reason) = crate::server::retire::reset_on_kafka(&app.program, &dir, &env) {
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
