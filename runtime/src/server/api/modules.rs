//! Module routes (`/v1/modules`, tenant token): upload, list, get, delete.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header::CONTENT_LENGTH};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::server::app::{SharedApp, TenantAuth};
use crate::server::catalog::DeleteOutcome;
use crate::server::config::quotas_over;
use crate::server::error::{ApiError, ServerError};
use crate::server::ids;
use crate::server::metrics::OutcomeLabel;
use crate::server::module_store::over_quota;
use crate::server::wire::{ErrorBody, Module};

#[derive(Debug, Deserialize, IntoParams)]
pub struct UploadQuery {
    /// A name for people (pipelines name modules by id); default `module`.
    pub name: Option<String>,
}

fn display_name(name: Option<String>) -> Result<String, ApiError> {
    let name = name.unwrap_or_else(|| "module".into());
    if name.is_empty()
        || name.len() > 128
        || name.chars().any(char::is_control)
        || name.contains(['/', '\\'])
        || name.contains("..")
    {
        return Err(ApiError::bad_request(
            "module name: 1 to 128 printable characters, without slashes or ..",
        ));
    }
    Ok(name)
}

/// Upload a component (`.wasm` bytes as the body). The same bytes twice are one module.
#[utoipa::path(post, path = "/v1/modules", tag = "modules", security(("bearer" = [])), params(UploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the .wasm bytes (any content type is taken)"),
    responses((status = 201, body = Module), (status = 200, body = Module, description = "already uploaded"),
              (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn upload(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Module>), ApiError> {
    let name = display_name(query.name)?;
    let quota = quotas_over(&tenant.quotas, &app.config.quotas)
        .module_bytes
        .unwrap_or(u64::MAX);
    let stored = || app.catalog.module_bytes(&tenant.id);
    // What is left now bounds the streaming; the reservation below decides.
    let left = quota.saturating_sub(stored()?.saturating_add(app.admission.reserved(&tenant.id)));
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let outcome = |o: &str| {
        app.metrics
            .module_uploads
            .get_or_create(&OutcomeLabel { outcome: o.into() })
            .inc();
    };
    if declared.is_some_and(|n| n > left) {
        outcome("too_large");
        return Err(over_quota(left));
    }
    let received = app
        .store
        .receive(body, left)
        .await
        .inspect_err(|_| outcome("refused"))?;
    if let Some(existing) = app.catalog.module(&tenant.id, &received.sha256)? {
        outcome("duplicate");
        return Ok((StatusCode::OK, Json(existing)));
    }
    // Held until the module is in the catalog (or refused): see `admission`.
    let _reservation = app
        .admission
        .reserve(&tenant.id, received.size, quota, stored)
        .inspect_err(|_| outcome("too_large"))?;
    let _slot = app.admission.compile_slot(&tenant.id).await;
    let (admitting, tenant_id) = (Arc::clone(&app), tenant.id.clone());
    let module =
        tokio::task::spawn_blocking(move || admitting.store.admit(&received, &name, &tenant_id))
            .await
            .map_err(|e| ServerError::Other(format!("module check: {e}")))?
            .inspect_err(|_| outcome("refused"))?;
    app.catalog.add_module(&tenant.id, &module)?;
    outcome("accepted");
    Ok((StatusCode::CREATED, Json(module)))
}

/// List your modules.
#[utoipa::path(get, path = "/v1/modules", tag = "modules", security(("bearer" = [])),
    responses((status = 200, body = [Module]), (status = 401, body = ErrorBody)))]
pub async fn list(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
) -> Result<Json<Vec<Module>>, ApiError> {
    Ok(Json(app.catalog.modules(&tenant.id)?))
}

/// One of your modules.
#[utoipa::path(get, path = "/v1/modules/{id}", tag = "modules", security(("bearer" = [])),
    params(("id" = String, Path, description = "module id (SHA-256)")),
    responses((status = 200, body = Module), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn get(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> Result<Json<Module>, ApiError> {
    let id = ids::module_id(&id)?;
    app.catalog
        .module(&tenant.id, id)?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("module", id))
}

/// Delete one of your modules (refused while a pipeline uses it).
#[utoipa::path(delete, path = "/v1/modules/{id}", tag = "modules", security(("bearer" = [])),
    params(("id" = String, Path, description = "module id (SHA-256)")),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn delete(
    State(app): State<SharedApp>,
    TenantAuth(tenant): TenantAuth,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = ids::module_id(&id)?;
    match app.catalog.delete_module(&tenant.id, id)? {
        DeleteOutcome::Deleted => {
            if !app.catalog.module_in_store(id)? {
                app.store.remove(id);
            }
            Ok(StatusCode::NO_CONTENT)
        }
        DeleteOutcome::Missing => Err(ApiError::not_found("module", id)),
        DeleteOutcome::InUse(users) => Err(ApiError::conflict(format!(
            "module {id} is used by pipelines {}",
            users.join(", ")
        ))),
    }
}
