//! The HTTP API: routes, the layers around them, and the OpenAPI document generated
//! from the handlers' annotations (`GET /openapi.json`).
//!
//! Invariants: JSON bodies are limited to `MAX_JSON_BODY`; module uploads are streamed
//! and limited by the tenant's quota instead (see `module_store`); every request has a
//! time limit, and every answer is counted in the metrics by method and status. Every
//! error answer is `{"error": ...}` JSON and every status is in the document
//! (`conformance`).

pub mod admin;
pub mod conformance;
pub mod health;
pub mod modules;
pub mod pipelines;
pub mod topics;

use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::server::api::conformance::ErrorResponses;
use crate::server::app::SharedApp;
use crate::server::metrics::RequestLabels;
use crate::server::wire;

/// Largest JSON body (a spec, a tenant).
pub const MAX_JSON_BODY: usize = 1 << 20;
/// Longest a request may take: an upload's compile or a stop's final checkpoint.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(OpenApi)]
#[openapi(
    info(title = "weir serve", description = "Weir's multi-tenant hosting API: modules, pipelines, tenants."),
    paths(
        health::healthz, health::readyz, health::metrics, health::openapi,
        admin::create_tenant, admin::list_tenants, admin::delete_tenant, admin::issue_token,
        admin::list_tokens, admin::revoke_token,
        modules::upload, modules::list, modules::get, modules::delete,
        pipelines::create, pipelines::list, pipelines::get, pipelines::start, pipelines::stop,
        pipelines::savepoint, pipelines::upgrade, pipelines::delete,
        topics::list, topics::create, topics::delete,
    ),
    components(schemas(
        wire::ErrorBody, wire::Quotas, wire::CreateTenant, wire::Tenant, wire::IssuedToken,
        wire::TokenInfo, wire::Module, wire::CreatePipeline, wire::UpgradePipeline, wire::PipelineState,
        wire::PipelineStatus, wire::WorkerStatus, wire::CreateTopic, wire::TopicInfo,
    )),
    modifiers(&BearerAuth, &ErrorResponses),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

pub fn router(app: SharedApp) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(health::openapi))
        .route(
            "/v1/admin/tenants",
            post(admin::create_tenant).get(admin::list_tenants),
        )
        .route(
            "/v1/admin/tenants/{id}",
            axum::routing::delete(admin::delete_tenant),
        )
        .route(
            "/v1/admin/tenants/{id}/tokens",
            post(admin::issue_token).get(admin::list_tokens),
        )
        .route(
            "/v1/admin/tenants/{id}/tokens/{key}",
            axum::routing::delete(admin::revoke_token),
        )
        .route("/v1/modules", post(modules::upload).get(modules::list))
        .route(
            "/v1/modules/{id}",
            get(modules::get).delete(modules::delete),
        )
        .route(
            "/v1/pipelines",
            post(pipelines::create).get(pipelines::list),
        )
        .route(
            "/v1/pipelines/{name}",
            get(pipelines::get).delete(pipelines::delete),
        )
        .route("/v1/pipelines/{name}/start", post(pipelines::start))
        .route("/v1/pipelines/{name}/stop", post(pipelines::stop))
        .route("/v1/pipelines/{name}/savepoint", post(pipelines::savepoint))
        .route("/v1/pipelines/{name}/upgrade", post(pipelines::upgrade))
        .route("/v1/topics", post(topics::create).get(topics::list))
        .route("/v1/topics/{name}", axum::routing::delete(topics::delete))
        .layer(middleware::from_fn(conformance::json_errors))
        .layer(middleware::from_fn_with_state(app.clone(), count))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

async fn count(State(app): State<SharedApp>, request: Request, next: Next) -> Response {
    // A bounded label: a client may send any method token.
    let method = match request.method().as_str() {
        m @ ("GET" | "POST" | "PUT" | "DELETE" | "HEAD" | "PATCH" | "OPTIONS") => m,
        _ => "other",
    }
    .to_owned();
    let response = next.run(request).await;
    let labels = RequestLabels {
        method,
        status: response.status().as_u16(),
    };
    app.metrics.http_requests.get_or_create(&labels).inc();
    response
}
