//! Unauthenticated routes: liveness, readiness, metrics and the OpenAPI document.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use crate::server::api::api_doc;
use crate::server::app::{AdminAuth, SharedApp};
use crate::server::catalog::state_text;
use crate::server::metrics::StateLabel;

/// Liveness: the server answers.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = String)))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: the catalog is open and the pipelines that should run were started.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, body = String), (status = 503, body = String)))]
pub async fn readyz(State(app): State<SharedApp>) -> (StatusCode, &'static str) {
    if app.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// Prometheus metrics (OpenMetrics text); those labelled by tenant (worker restarts,
/// pipeline state changes) only with the admin token.
#[utoipa::path(get, path = "/metrics", tag = "health", responses((status = 200, body = String,
    content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
pub async fn metrics(State(app): State<SharedApp>, admin: Option<AdminAuth>) -> impl IntoResponse {
    if let Ok(rows) = app.catalog.all_pipelines() {
        app.metrics.pipelines.clear();
        for row in rows {
            let label = StateLabel {
                state: state_text(row.state).into(),
            };
            app.metrics.pipelines.get_or_create(&label).inc();
        }
    }
    if admin.is_some()
        && app.walls.enabled()
        && let Ok(tenants) = app.catalog.tenants()
    {
        let usages: Vec<_> = tenants
            .into_iter()
            .filter_map(|t| Some((t.id.clone(), app.walls.usage(&t.id)?)))
            .collect();
        app.metrics.set_tenant_usages(&usages);
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(admin.is_some()),
    )
}

/// This API's OpenAPI document.
#[utoipa::path(get, path = "/openapi.json", tag = "health", responses((status = 200, body = Object)))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(api_doc())
}
