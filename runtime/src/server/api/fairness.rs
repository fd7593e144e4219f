//! Fair shares of the API between tenants: each tenant has `tenant_requests` requests
//! served at once (`server::tenant_shares`); one more is answered 429 with
//! `Retry-After` at once, never queued.
//!
//! Invariants:
//! - One tenant's burst costs the server at most its share of work in flight (Kafka
//!   admin clients, catalog reads, blocking threads), so another tenant's calls and
//!   `/healthz` are answered as if the burst were not there; the bursting tenant gets
//!   429s, not 5xx or time-outs.
//! - The tenant is the one the token proves (the same check as `TenantAuth`, which
//!   then reads it from the request's `ProvenTenant` instead of asking again): a
//!   request whose token proves nothing is let through to be answered 401, and never
//!   takes a share, so no one can use up a tenant's share by naming its token's key.
//! - Requests without a tenant's token (health, metrics, the OpenAPI document, the
//!   admin's) are not limited here.
//! - A share is held until the answer is produced (a stop's final checkpoint, an
//!   upload's compile included) and given back however the request ends.

use axum::extract::{Request, State};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::server::app::{ProvenTenant, SharedApp};
use crate::server::error::ApiError;

/// Seconds a refused request is told to wait before it tries again.
const RETRY_AFTER_SECONDS: &str = "1";

/// The middleware: a tenant's request runs within its share, or is refused with 429.
pub async fn within_share(
    State(app): State<SharedApp>,
    mut request: Request,
    next: Next,
) -> Response {
    let tenant = match app.tenant_of(request.headers()) {
        Ok(Some(tenant)) => tenant,
        // Not a tenant's request, or not a proven one: the route answers it.
        Ok(None) => return next.run(request).await,
        Err(e) => return e.into_response(),
    };
    let Ok(_permit) = app.tenant_shares.of(&tenant).try_acquire_owned() else {
        let mut refused = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "tenant {tenant} has {} requests in flight, its share: retry after {RETRY_AFTER_SECONDS} s",
                app.tenant_shares.per_tenant()
            ),
        )
        .into_response();
        refused
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
        return refused;
    };
    request.extensions_mut().insert(ProvenTenant(tenant));
    next.run(request).await
}
