//! Admin routes (`/v1/admin`, admin token): tenants and their tokens.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::server::app::{AdminAuth, SharedApp};
use crate::server::catalog::{DeleteOutcome, TenantRow};
use crate::server::config::{check_quotas, quotas_over};
use crate::server::error::{ApiError, ServerError};
use crate::server::ids;
use crate::server::tokens;
use crate::server::wire::{CreateTenant, ErrorBody, IssuedToken, Tenant, TokenInfo};

pub fn tenant_view(app: &SharedApp, row: TenantRow) -> Tenant {
    Tenant {
        kafka_prefix: app.namespace(&row.id).kafka_prefix(),
        quotas: quotas_over(&row.quotas, &app.config.quotas),
        kafka_principal: row.kafka_principal,
        tokens: row.tokens,
        created_at: row.created_at,
        id: row.id,
    }
}

/// Create a tenant. Refused (409) on a server whose Kafka access is SASL with a
/// principal per tenant: such tenants are declared in the server config.
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin", request_body = CreateTenant,
    security(("bearer" = [])),
    responses((status = 201, body = Tenant), (status = 400, body = ErrorBody),
              (status = 401, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn create_tenant(
    State(app): State<SharedApp>,
    _: AdminAuth,
    Json(body): Json<CreateTenant>,
) -> Result<(StatusCode, Json<Tenant>), ApiError> {
    let id = ids::tenant_id(&body.id)?;
    check_quotas(&body.quotas).map_err(ApiError::bad_request)?;
    if let Some(protocol) = app
        .config
        .kafka
        .protocol
        .as_deref()
        .filter(|p| p.starts_with("sasl"))
    {
        // Its pipelines would reach a SASL listener with no principal, and loop on a
        // connection error the tenant cannot fix.
        return Err(ApiError::conflict(format!(
            "tenant {id:?}: this server reaches Kafka over {protocol} with a principal per tenant, and a tenant created through the API has none: declare it in the server config ([[tenants]] id = {id:?}, kafka = {{ username = ..., password_env = ... }}) and restart the server"
        )));
    }
    if !app.catalog.put_tenant(id, &body.quotas, None, false)? {
        return Err(ApiError::conflict(format!("tenant {id:?} exists")));
    }
    let row = app
        .catalog
        .tenant(id)?
        .ok_or_else(|| ApiError::not_found("tenant", id))?;
    Ok((StatusCode::CREATED, Json(tenant_view(&app, row))))
}

/// List tenants.
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "admin", security(("bearer" = [])),
    responses((status = 200, body = [Tenant]), (status = 401, body = ErrorBody)))]
pub async fn list_tenants(
    State(app): State<SharedApp>,
    _: AdminAuth,
) -> Result<Json<Vec<Tenant>>, ApiError> {
    let rows = app.catalog.tenants()?;
    Ok(Json(
        rows.into_iter().map(|r| tenant_view(&app, r)).collect(),
    ))
}

/// Delete a tenant (refused while it has pipelines): its tokens, modules, cgroup, files
/// and compiled-code cache go with it, so an id declared again starts from nothing.
#[utoipa::path(delete, path = "/v1/admin/tenants/{id}", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "tenant id")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub async fn delete_tenant(
    State(app): State<SharedApp>,
    _: AdminAuth,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = ids::tenant_id(&id)?;
    let modules = app.catalog.modules(id)?;
    match app.catalog.delete_tenant(id)? {
        DeleteOutcome::Deleted => {
            app.walls.remove_tenant(id);
            for m in modules {
                if !app.catalog.module_in_store(&m.id)? {
                    app.store.remove(&m.id);
                }
            }
            let dirs = [
                Some(app.namespace(id).root().to_path_buf()),
                app.store.tenant_cache(id),
            ];
            for dir in dirs.into_iter().flatten() {
                std::fs::remove_dir_all(&dir).or_else(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(ServerError::io("cannot remove", &dir, e)),
                })?;
            }
            Ok(StatusCode::NO_CONTENT)
        }
        DeleteOutcome::Missing => Err(ApiError::not_found("tenant", id)),
        DeleteOutcome::InUse(what) => Err(ApiError::conflict(format!(
            "tenant {id:?} still has {}: delete them first",
            what.join(", ")
        ))),
    }
}

/// Issue an API token for a tenant. The token is shown once; only its hash is kept.
#[utoipa::path(post, path = "/v1/admin/tenants/{id}/tokens", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "tenant id")),
    responses((status = 201, body = IssuedToken), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn issue_token(
    State(app): State<SharedApp>,
    _: AdminAuth,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<IssuedToken>), ApiError> {
    let id = ids::tenant_id(&id)?;
    if app.catalog.tenant(id)?.is_none() {
        return Err(ApiError::not_found("tenant", id));
    }
    let token = tokens::generate();
    app.catalog.add_token(id, &token.key, &token.secret_hash)?;
    Ok((
        StatusCode::CREATED,
        Json(IssuedToken {
            tenant: id.to_owned(),
            token: token.token,
            key: token.key,
        }),
    ))
}

/// List a tenant's tokens: their keys and when each was issued (never the tokens).
#[utoipa::path(get, path = "/v1/admin/tenants/{id}/tokens", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "tenant id")),
    responses((status = 200, body = [TokenInfo]), (status = 401, body = ErrorBody),
              (status = 404, body = ErrorBody)))]
pub async fn list_tokens(
    State(app): State<SharedApp>,
    _: AdminAuth,
    Path(id): Path<String>,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    let id = ids::tenant_id(&id)?;
    if app.catalog.tenant(id)?.is_none() {
        return Err(ApiError::not_found("tenant", id));
    }
    let tokens = app.catalog.tokens_of(id)?;
    Ok(Json(
        tokens
            .into_iter()
            .map(|(key, created_at)| TokenInfo { key, created_at })
            .collect(),
    ))
}

/// Revoke one of a tenant's tokens, by key: requests bearing it are refused (401) from
/// this answer on. To rotate a token, issue a new one, move the client to it, then
/// revoke the old one.
#[utoipa::path(delete, path = "/v1/admin/tenants/{id}/tokens/{key}", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "tenant id"),
           ("key" = String, Path, description = "the token's key (16 hex digits)")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_token(
    State(app): State<SharedApp>,
    _: AdminAuth,
    Path((id, key)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = ids::tenant_id(&id)?;
    let key = ids::token_key(&key)?;
    if app.catalog.delete_token(id, key)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("token", key))
    }
}
