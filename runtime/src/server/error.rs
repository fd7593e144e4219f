//! Errors of the hosting server: `ServerError` for what goes wrong inside it (catalog,
//! files, workers), `ApiError` for what a client is told.
//!
//! Invariants: every answer that is not a success is an `ApiError`: a status and one
//! line (`wire::ErrorBody`). A tenant never learns whether another tenant's object
//! exists: an object that is not the caller's is `404`, exactly as one that does not
//! exist. Internal errors become `500` with their one-line cause (without the server's
//! paths: `without_paths`), and are logged whole.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::server::wire::ErrorBody;

/// A failure inside the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("catalog {path}: {source}")]
    Catalog {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("server config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("{0}")]
    Other(String),
}

impl ServerError {
    pub fn io(what: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        ServerError::Io {
            what,
            path: path.display().to_string(),
            source,
        }
    }
}

/// What a client is told: a status and one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let message: String = message.into();
        ApiError {
            status,
            message: message.replace(['\n', '\r'], " "),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(what: &str, id: &str) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, format!("no {what} {id:?}"))
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::CONFLICT, message)
    }
    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or unknown token: send `Authorization: Bearer <token>`",
        )
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }
    pub fn status(&self) -> StatusCode {
        self.status
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl ServerError {
    /// What a client is told: the error without the server's file paths (the log has
    /// them).
    fn without_paths(&self) -> String {
        match self {
            ServerError::Catalog { source, .. } => format!("the server's catalog: {source}"),
            ServerError::Io { what, source, .. } => {
                format!("{what} a file of the server: {source}")
            }
            ServerError::Config { reason, .. } => format!("server config: {reason}"),
            ServerError::Other(message) => message.clone(),
        }
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        tracing::error!(error = %e, "server error");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.without_paths())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}
