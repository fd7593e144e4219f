//! What makes the API answer as its OpenAPI document says, beyond each handler's own
//! annotations: every error body is `{"error": "..."}` JSON, axum's own rejections
//! included (`json_errors`), and the document states, for every operation, the
//! patterns of its path ids and the error statuses every route can give
//! (`ErrorResponses`).
//!
//! Invariants:
//! - An answer of status >= 400 whose body is not JSON (a rejection of axum's: a body
//!   that is not JSON, of the wrong content type, too large, a method the route does
//!   not have, an unknown route, the request timeout) leaves as `ErrorBody` with the same
//!   status and its text on one line, at most `MAX_ERROR_TEXT` bytes of it.
//! - Path parameters carry the patterns `ids` checks: tenant ids, pipeline names and
//!   module ids; an id outside its pattern is a `400` naming it.
//! - Each operation documents `400` (any id or body refused), `401` for a secured one,
//!   `429` for a tenant's (`fairness`), `404` for one with a path id, and for one with
//!   a body `413`, `415` and `422`; and `405` and `408` for all.

use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa::Modify;
use utoipa::openapi::path::{Operation, Parameter, ParameterIn};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};

use crate::server::error::ApiError;

/// Longest error text taken from a non-JSON error body.
const MAX_ERROR_TEXT: usize = 4 << 10;

/// Turns a non-JSON error answer into an `ErrorBody` (see the module invariants).
pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), MAX_ERROR_TEXT)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let text = match text.trim() {
        "" => status.canonical_reason().unwrap_or("error").to_lowercase(),
        text => text.to_owned(),
    };
    ApiError::new(status, text).into_response()
}

/// The patterns of the path ids (as `ids` checks them), by parameter and path.
fn id_pattern(path: &str, name: &str) -> Option<&'static str> {
    match name {
        "name" if path.starts_with("/v1/topics") => Some("^[A-Za-z0-9._-]{1,249}$"),
        "name" => Some("^[a-z0-9_-]{1,64}$"),
        "key" => Some("^[0-9a-f]{16}$"),
        "id" if path.starts_with("/v1/modules") => Some("^[0-9a-f]{64}$"),
        "id" if path.starts_with("/v1/admin/tenants") => Some("^[a-z0-9][a-z0-9-]{0,31}$"),
        _ => None,
    }
}

/// Adds the id patterns and the common error responses (see the module invariants).
pub struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        for (path, item) in doc.paths.paths.iter_mut() {
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.delete,
                &mut item.put,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                add_patterns(path, operation);
                add_error_responses(path, operation);
            }
        }
    }
}

fn add_patterns(path: &str, operation: &mut Operation) {
    for parameter in operation.parameters.iter_mut().flatten() {
        set_pattern(path, parameter);
    }
}

fn set_pattern(path: &str, parameter: &mut Parameter) {
    if parameter.parameter_in != ParameterIn::Path {
        return;
    }
    let Some(pattern) = id_pattern(path, &parameter.name) else {
        return;
    };
    if let Some(utoipa::openapi::RefOr::T(utoipa::openapi::Schema::Object(schema))) =
        parameter.schema.as_mut()
    {
        schema.pattern = Some(pattern.to_owned());
    }
}

fn add_error_responses(path: &str, operation: &mut Operation) {
    let secured = operation.security.as_ref().is_some_and(|s| !s.is_empty());
    let has_body = operation.request_body.is_some();
    let mut statuses = vec![
        ("400", "a path id or the request refused, naming why"),
        ("405", "a method this path does not have"),
        ("408", "the request took longer than the server allows"),
    ];
    if secured {
        statuses.push(("401", "a missing, unknown or wrong token"));
    }
    if secured && !path.starts_with("/v1/admin") {
        statuses.push((
            "429",
            "the tenant has its share of requests in flight (fairness): retry after the Retry-After header's seconds",
        ));
    }
    if path.contains('{') {
        statuses.push(("404", "no such object of the caller's"));
    }
    if has_body {
        statuses.extend([
            ("413", "the body is larger than allowed"),
            ("415", "the body's content type is not the one documented"),
            ("422", "the JSON body does not have the documented fields"),
        ]);
    }
    for (status, description) in statuses {
        let responses = &mut operation.responses.responses;
        responses.entry(status.to_owned()).or_insert_with(|| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .into()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt;

    /// A plain-text answer, as axum's rejections are.
    fn plain(status: StatusCode, text: &'static str) -> Response {
        (status, Body::from(text)).into_response()
    }

    async fn answer(router: Router, uri: &str) -> (StatusCode, String, String) {
        let response = router
            .layer(axum::middleware::from_fn(json_errors))
            .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
            .await
            .expect("answer");
        let status = response.status();
        let kind = response.headers()[CONTENT_TYPE]
            .to_str()
            .expect("type")
            .to_owned();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, kind, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn a_plain_error_becomes_an_error_body_and_a_success_is_left_alone() {
        let router = Router::new()
            .route(
                "/plain",
                get(|| async { plain(StatusCode::UNSUPPORTED_MEDIA_TYPE, "Expected JSON\n") }),
            )
            .route("/ok", get(|| async { "fine" }));
        let (status, kind, body) = answer(router.clone(), "/plain").await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(kind, "application/json");
        assert_eq!(body, r#"{"error":"Expected JSON"}"#);
        let (status, _, body) = answer(router.clone(), "/ok").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "fine"));
        let (status, _, body) = answer(router, "/nowhere").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body, r#"{"error":"not found"}"#);
    }
}
