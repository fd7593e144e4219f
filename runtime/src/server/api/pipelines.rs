//! Pipeline routes (`/v1/pipelines`, tenant token): create, list, status, start, stop,
//! savepoint, upgrade, delete.
//!
//! A pipeline runs as `workers` processes (1 unless the create says more, within the
//! tenant's `workers` quota). A stop (and a savepoint, which is a stop that reports its
//! checkpoint) answers once every worker has taken its final checkpoint and exited; an
//! upgrade starts from that savepoint with the new modules, the old state and, if it
//! says so, another number of workers (a rescale: the new workers take the old ones
//! over and restore exactly the key groups and partitions each now owns).
//!
//! Every change of a pipeline (create, start, stop, savepoint, upgrade, delete) holds the
//! pipeline's lifecycle lock (`lifecycle`) for its whole effect and reads the row again
//! under it; a pipeline whose delete was asked (`desired: deleted`) refuses every change
//! but another delete with 409 at once. A delete records `deleted` before any effect,
//! so one cut short (the client gone, the server killed) is finished by the next delete
//! or the next server start (`retire::finish_deletes`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::connector::kafka::names::collision_key;
use crate::server::app::{SharedApp, TenantAuth};
use crate::server::catalog::{AddOutcome, PipelineRow, TenantRow, now};
use crate::server::config::quotas_over;
use crate::server::error::{ApiError, ServerError};
use crate::server::hosted_spec::HostedSpec;
use crate::server::ids;
use crate::server::lifecycle::PipelineLock;
use crate::server::retire;
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

/// Refuses every change but a delete of a pipeline whose delete was asked.
fn not_deleted(row: PipelineRow) -> Result<PipelineRow, ApiError> {
    if row.desired == Desired::Deleted {
        return Err(ApiError::conflict(format!(
            "pipeline {:?} is being deleted (a delete that failed is finished by the next one)",
            row.name
        )));
    }
    Ok(row)
}

/// The pipeline's lifecycle lock and its row as read under it (see the module doc): a
/// pipeline being deleted is refused at once, without waiting for its delete.
async fn changing(
    app: &SharedApp,
    tenant: &TenantRow,
    name: &str,
) -> Result<(PipelineLock, PipelineRow), ApiError> {
    let name = not_deleted(find(app, tenant, name)?)?.name;
    let lock = app.lifecycles.hold((tenant.id.clone(), name.clone())).await;
    let row = not_deleted(find(app, tenant, &name)?)?;
    Ok((lock, row))
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
    let (desired, state) = if body.start {
        (Desired::Running, PipelineState::Starting)
    } else {
        (Desired::Stopped, PipelineState::Stopped)
    };
    let row = PipelineRow {
        tenant: tenant.id.clone(),
        name: hosted.name.clone(),
        spec: body.spec,
        modules: hosted.modules.clone(),
        desired,
        state,
        restarts: 0,
        last_error: None,
        savepoint: None,
        created_at: now(),
        workers,
    };
    let _lock = app
        .lifecycles
        .hold((tenant.id.clone(), row.name.clone()))
        .await;
    add(&app, &tenant, &row, &hosted).await?;
    if body.start {
        app.start_pipeline(&tenant, &row, None)?;
    }
    Ok((StatusCode::CREATED, current(&app, &tenant, &row.name)?))
}

/// Adds a new pipeline's row, within the tenant's pipeline quota and with topics of its
/// own (`topics_free`); the caller holds the pipeline's lifecycle lock.
async fn add(
    app: &SharedApp,
    tenant: &TenantRow,
    row: &PipelineRow,
    hosted: &HostedSpec,
) -> Result<(), ApiError> {
    let quota = quotas_over(&tenant.quotas, &app.config.quotas)
        .pipelines
        .unwrap_or(u32::MAX);
    let _names = app.pipeline_names.hold(tenant.id.clone()).await;
    topics_free(app, tenant, hosted)?;
    match app.catalog.add_pipeline(row, quota)? {
        AddOutcome::Added => Ok(()),
        AddOutcome::Exists => {
            if let Some(old) = app.catalog.pipeline(&tenant.id, &row.name)? {
                not_deleted(old)?;
            }
            Err(ApiError::conflict(format!(
                "pipeline {:?} exists",
                row.name
            )))
        }
        AddOutcome::OverQuota => Err(ApiError::conflict(format!(
            "you have {quota} pipelines, your quota: delete one first"
        ))),
    }
}

/// Refuses a pipeline whose own topics (`HostedSpec::topics`) meet another pipeline's
/// of the tenant under Kafka's `.`/`_` rule (`KafkaNames`: `x` with step `y-count`
/// and `x-y` with step `count` would share one repartition topic). The caller holds the
/// tenant's `pipeline_names` lock until its row is written, so two such pipelines
/// cannot pass at once. Another pipeline whose spec no longer builds (it cannot start
/// either) is passed over.
fn topics_free(app: &SharedApp, tenant: &TenantRow, hosted: &HostedSpec) -> Result<(), ApiError> {
    let mine: HashMap<String, &str> = hosted
        .topics
        .iter()
        .map(|t| (collision_key(t), t.as_str()))
        .collect();
    for other in app.catalog.pipelines(&tenant.id)? {
        if other.name == hosted.name {
            continue;
        }
        let Ok(theirs) = app.hosted_spec(tenant, &other.spec, other.workers) else {
            continue;
        };
        if let Some((topic, t)) = theirs
            .topics
            .iter()
            .find_map(|topic| mine.get(&collision_key(topic)).map(|t| (topic, t)))
        {
            return Err(ApiError::conflict(format!(
                "pipeline {:?} would make topic {t:?}, the same name to Kafka as pipeline {:?}'s {topic:?}: rename the pipeline or its step",
                hosted.name, other.name
            )));
        }
    }
    Ok(())
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
    let (_lock, mut row) = changing(&app, &tenant, &name).await?;
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

/// Stops the workers (final checkpoint each) and records the desired state `stopped`;
/// returns the pipeline's lock, still held, and its row after the stop. The stop goes
/// on with the lock if the client goes away.
async fn stop_workers(
    app: &SharedApp,
    tenant: &TenantRow,
    name: &str,
) -> Result<(PipelineLock, PipelineRow), ApiError> {
    let (lock, mut row) = changing(app, tenant, name).await?;
    row.desired = Desired::Stopped;
    app.catalog.update_pipeline(&row)?;
    let (stopping, t, n) = (app.clone(), tenant.id.clone(), row.name.clone());
    let lock = tokio::task::spawn_blocking(move || {
        stopping.supervisor.stop(&t, &n);
        lock
    })
    .await
    .map_err(|e| ServerError::Other(format!("stop: {e}")))?;
    Ok((lock, find(app, tenant, &row.name)?))
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
    let (_lock, row) = stop_workers(&app, &tenant, &name).await?;
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
    let (_lock, mut row) = stop_workers(&app, &tenant, &name).await?;
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
    let (_lock, mut row) = changing(&app, &tenant, &name).await?;
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
    let hosted = app.hosted_spec(&tenant, &row.spec, workers)?;
    let _names = app.pipeline_names.hold(tenant.id.clone()).await;
    topics_free(&app, &tenant, &hosted)?;
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
/// The delete is recorded first (`desired: deleted`): from then on the pipeline refuses
/// every other change. If Kafka cannot be reached, the pipeline stays, stopped and
/// still being deleted (503): ask again, or the next server start finishes it.
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
    let name = ids::pipeline_name(&name)?;
    let lock = app
        .lifecycles
        .hold((tenant.id.clone(), name.to_owned()))
        .await;
    let mut row = find(&app, &tenant, name)?;
    row.desired = Desired::Deleted;
    app.catalog.update_pipeline(&row)?;
    let (deleting, t) = (app.clone(), tenant.id.clone());
    tokio::task::spawn_blocking(move || {
        let _lock = lock;
        retire::delete_pipeline(&deleting, &t, &row)
    })
    .await
    .map_err(|e| ServerError::Other(format!("delete: {e}")))??;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
#[path = "pipelines_model_tests.rs"]
mod model_tests;
