//! The admin API's error type: `{"error": {"code", "message"}}` with stable snake_case codes.
//! 5xx bodies are opaque; their cause is logged once, here, where the error is turned into a
//! response, and 4xx are not logged at error level.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::store::StoreError;

/// An admin API error.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn not_found(code: &'static str, what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, format!("{what} not found"))
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid admin token; send `Authorization: Bearer <token>`",
        )
    }

    /// Dashboard sessions the database could not read or write: a session that cannot be
    /// checked is refused, with 503 rather than 401 so the dashboard keeps its sign-in and the
    /// browser can try again.
    pub(crate) fn sessions_unavailable(error: &StoreError) -> Self {
        tracing::warn!(%error, "Dashboard sessions are unavailable; the request is refused.");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "sessions are unavailable; try again",
        )
    }

    /// Maps a store error; `not_found` is the code to use if the row is missing.
    pub(crate) fn from_store(error: StoreError, not_found: &'static str, what: &str) -> Self {
        match error {
            StoreError::NotFound => Self::not_found(not_found, what),
            StoreError::Conflict(code) => {
                let message = match code {
                    "input_in_use" => {
                        "the input is used by a connection; delete the connection first"
                    }
                    "output_in_use" => {
                        "the output is used by a connection; delete the connection first"
                    }
                    "connection_exists" => {
                        "this input is already connected to this output; edit that connection instead"
                    }
                    other => other,
                };
                Self::new(StatusCode::CONFLICT, code, message)
            }
            // Only IDSync refuses from inside a store call; no admin call does.
            StoreError::WriterStopped | StoreError::Refused => {
                tracing::error!(%error, "Admin request failed.");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "service unavailable",
                )
            }
            StoreError::Database(source) => {
                tracing::error!(error = %source, "Admin request failed on the database.");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "internal error",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

/// `Json` whose rejections use our error body instead of axum's plain text.
#[derive(Debug)]
pub(crate) struct AppJson<T>(pub(crate) T);

impl<S, T> FromRequest<S> for AppJson<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection) => {
                // axum answers a well-formed body of the wrong shape with 422; the admin API's
                // contract is 400 for every bad body (only a missing content type differs).
                let (status, code) = match rejection {
                    JsonRejection::MissingJsonContentType(_) => {
                        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
                    }
                    JsonRejection::JsonSyntaxError(_) => {
                        (StatusCode::BAD_REQUEST, "malformed_json")
                    }
                    _ => (StatusCode::BAD_REQUEST, "invalid_body"),
                };
                Err(ApiError::new(status, code, rejection.body_text()))
            }
        }
    }
}
