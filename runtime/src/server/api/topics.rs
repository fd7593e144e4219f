//! Topic routes (`/v1/topics`, tenant token): a tenant creates, lists and deletes the
//! topics under its prefix itself, within its `topic_partitions` quota, with its own
//! Kafka principal (`topic_admin`). Pipelines' internal topics are neither listed nor
//! touched here.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::connector::kafka::KafkaError;
use crate::server::app::{App, SharedApp, TenantAuth};
use crate::server::catalog::TenantRow;
use crate::server::config::quotas_over;
use crate::server::error::{ApiError, ServerError};
use crate::server::topic_admin;
use crate::server::wire::{CreateTopic, ErrorBody, TopicInfo};

/// A Kafka failure as the tenant sees it: refused by the broker's ACLs, or the
/// broker unavailable.
fn kafka_error(app: &App, tenant: &str, e: KafkaError) -> ApiError {
    let status = match e {
        KafkaError::NotAuthorized { .. } => StatusCode::FORBIDDEN,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, app.redact(tenant, &e.to_string()))
}

/// Runs `f` off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::from(ServerError::Other(format!("topic call: {e}"))))?
}

/// List your topics (not pipelines' internal ones).
#[utoipa::path(get, path = "/v1/topics", tag = "topics", security(("bearer" = [])),
    responses((status = 200, body = [TopicInfo]), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn list(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
) -> Result<Json<Vec<TopicInfo>>, ApiError> {
    blocking(move || {
        let endpoint = app.tenant_endpoint(&tenant.id)?;
        let prefix = app.namespace(&tenant.id).kafka_prefix();
        topic_admin::list(&endpoint, &prefix).map_err(|e| kafka_error(&app, &tenant.id, e))
    })
    .await
    .map(Json)
}

/// Create a topic under your prefix, within your `topic_partitions` quota.
#[utoipa::path(post, path = "/v1/topics", tag = "topics", security(("bearer" = [])),
    request_body = CreateTopic,
    responses((status = 201, body = TopicInfo), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn create(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Json(body): Json<CreateTopic>,
) -> Result<(StatusCode, Json<TopicInfo>), ApiError> {
    let prefix = app.namespace(&tenant.id).kafka_prefix();
    topic_admin::check_name(&body.name, &prefix).map_err(ApiError::bad_request)?;
    if body.partitions == 0 {
        return Err(ApiError::bad_request("partitions: at least 1"));
    }
    blocking(move || create_within_quota(&app, &tenant, &body, &prefix))
        .await
        .map(|topic| (StatusCode::CREATED, Json(topic)))
}

/// The create, under the tenant's `topic_creates` lock: the quota is checked against
/// what exists. Runs on a blocking thread.
fn create_within_quota(
    app: &App,
    tenant: &TenantRow,
    body: &CreateTopic,
    prefix: &str,
) -> Result<TopicInfo, ApiError> {
    let _one_at_a_time = app.topic_creates.hold_blocking(tenant.id.clone());
    let endpoint = app.tenant_endpoint(&tenant.id)?;
    let kafka = |e| kafka_error(app, &tenant.id, e);
    let existing = topic_admin::list(&endpoint, prefix).map_err(kafka)?;
    let used: u64 = existing.iter().map(|t| u64::from(t.partitions)).sum();
    let quota = quotas_over(&tenant.quotas, &app.config.quotas)
        .topic_partitions
        .unwrap_or(u32::MAX);
    if used + u64::from(body.partitions) > u64::from(quota) {
        return Err(ApiError::conflict(format!(
            "{} more partitions would make {}, over your topic_partitions quota of {quota}: delete a topic first",
            body.partitions,
            used + u64::from(body.partitions)
        )));
    }
    if !topic_admin::create(&endpoint, &body.name, body.partitions).map_err(kafka)? {
        return Err(ApiError::conflict(format!("topic {:?} exists", body.name)));
    }
    Ok(TopicInfo {
        name: body.name.clone(),
        partitions: body.partitions,
    })
}

/// Delete one of your topics (its records go with it).
#[utoipa::path(delete, path = "/v1/topics/{name}", tag = "topics", security(("bearer" = [])),
    params(("name" = String, Path, description = "the topic's full name")),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 503, body = ErrorBody)))]
pub async fn delete(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let prefix = app.namespace(&tenant.id).kafka_prefix();
    topic_admin::check_name(&name, &prefix).map_err(ApiError::bad_request)?;
    blocking(move || {
        let endpoint = app.tenant_endpoint(&tenant.id)?;
        match topic_admin::delete(&endpoint, &name) {
            Ok(true) => Ok(StatusCode::NO_CONTENT),
            Ok(false) => Err(ApiError::not_found("topic", &name)),
            Err(e) => Err(kafka_error(&app, &tenant.id, e)),
        }
    })
    .await
}
