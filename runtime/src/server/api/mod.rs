//! The HTTP API: routes, the layers around them, and the OpenAPI document generated
//! from the handlers' annotations (`GET /openapi.json`).
//!
//! Invariants: JSON bodies are limited to `MAX_JSON_BODY`; module uploads are streamed
//! and limited by the tenant's quota instead (see `module_store`); every request has a
//! time limit, and every answer is counted in the metrics by method and status. A
//! tenant has a share of requests in flight (`fairness`); past it, 429. Every
//! error answer is `{"error": ...}` JSON and every status is in the document
//! (`conformance`).

pub mod admin;
pub mod conformance;
pub mod fairness;
pub mod health;
pub mod modules;
pub mod pipelines;
pub mod topics;

use std::sync::OnceLock;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::server::api::conformance::ErrorResponses;
use crate::server::app::SharedApp;
use crate::server::metrics::RequestLabels;
use crate::server::wire;

/// Largest JSON body (a spec, a tenant).
pub const MAX_JSON_BODY: usize = 1 << 20;
/// Longest a request may take: an upload's compile or a stop's final checkpoint.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The document's fixed parts; `routes` adds every path, `api_doc` the rest.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "weir serve",
        description = "Weir's multi-tenant hosting API: modules, pipelines, tenants."
    ),
    components(schemas(
        wire::ErrorBody,
        wire::Quotas,
        wire::CreateTenant,
        wire::Tenant,
        wire::IssuedToken,
        wire::TokenInfo,
        wire::Module,
        wire::CreatePipeline,
        wire::UpgradePipeline,
        wire::PipelineState,
        wire::PipelineStatus,
        wire::WorkerStatus,
        wire::CreateTopic,
        wire::TopicInfo,
    ))
)]
struct ApiDoc;

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

/// Every route, each listed once: a handler's `#[utoipa::path]` is both its route and
/// its entry in the document (handlers of one path share a `routes!`).
fn routes() -> OpenApiRouter<SharedApp> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::openapi))
        .routes(routes!(admin::create_tenant, admin::list_tenants))
        .routes(routes!(admin::delete_tenant))
        .routes(routes!(admin::issue_token, admin::list_tokens))
        .routes(routes!(admin::revoke_token))
        .routes(routes!(modules::upload, modules::list))
        .routes(routes!(modules::get, modules::delete))
        .routes(routes!(pipelines::create, pipelines::list))
        .routes(routes!(pipelines::get, pipelines::delete))
        .routes(routes!(pipelines::start))
        .routes(routes!(pipelines::stop))
        .routes(routes!(pipelines::savepoint))
        .routes(routes!(pipelines::upgrade))
        .routes(routes!(topics::create, topics::list))
        .routes(routes!(topics::delete))
}

/// This API's OpenAPI document (`GET /openapi.json`): every route's path, then the
/// bearer scheme and the error answers every operation may give (`conformance`), which
/// need the paths in place.
pub fn api_doc() -> utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, mut doc) = routes().split_for_parts();
        BearerAuth.modify(&mut doc);
        ErrorResponses.modify(&mut doc);
        doc
    })
    .clone()
}

pub fn router(app: SharedApp) -> Router {
    let (routes, _) = routes().split_for_parts();
    routes
        .layer(middleware::from_fn(conformance::json_errors))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            fairness::within_share,
        ))
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
