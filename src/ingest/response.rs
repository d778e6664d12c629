//! mParticle's answers: `202` with an empty body, and errors as
//! `{"errors":[{"code":"BAD_REQUEST","message":"…"}]}` (spec §1.3).

use axum::Json;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::model::Platform;
use crate::model::ids::InputId;
use crate::pipeline::AcceptError;
use crate::state::AppState;

/// An ingest error, rendered the way mParticle renders it.
#[derive(Debug)]
pub(crate) struct IngestError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    /// The bounded reason used in metrics.
    pub(crate) reason: &'static str,
}

impl IngestError {
    pub(crate) fn bad_request(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "BAD_REQUEST",
            message: message.into(),
            reason,
        }
    }

    pub(crate) fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "UNAUTHORIZED",
            message:
                "Missing Authorization header: use HTTP Basic with the input's API key and secret."
                    .into(),
            reason: "unauthorized",
        }
    }

    pub(crate) fn forbidden() -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            code: "FORBIDDEN",
            message: "Invalid API key or secret.".into(),
            reason: "forbidden",
        }
    }

    pub(crate) fn too_large(limit: usize) -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "REQUEST_TOO_LARGE",
            message: format!("Request body exceeds the limit of {limit} bytes."),
            reason: "too_large",
        }
    }

    /// A browser request from an origin the input does not allow.
    pub(crate) fn origin_not_allowed(origin: &str) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            code: "FORBIDDEN",
            message: format!("Origin {origin} is not allowed for this input."),
            reason: "origin_not_allowed",
        }
    }

    /// A mobile upload without `Date` and `x-mp-signature`.
    pub(crate) fn unsigned() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "UNAUTHORIZED",
            message: "Missing Date or x-mp-signature header.".into(),
            reason: "unsigned",
        }
    }

    /// A mobile upload whose signature does not match the input's secret.
    pub(crate) fn bad_signature() -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            code: "FORBIDDEN",
            message: "x-mp-signature does not match.".into(),
            reason: "bad_signature",
        }
    }

    /// A mobile upload whose signed `Date` cannot be read as a date.
    pub(crate) fn bad_date() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "UNAUTHORIZED",
            message: "The Date header is not a date (expected e.g. Sat, 21 Nov 2026 10:00:00 GMT)."
                .into(),
            reason: "bad_date",
        }
    }

    /// A mobile upload whose signed `Date` is too far from the server's clock: a replay, or a
    /// device whose clock is wrong. A 4xx, so the SDKs drop the batch instead of retrying it
    /// forever (they would sign every retry with the same wrong clock).
    pub(crate) fn clock_skew(off_by_secs: u64, max_secs: u64) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            code: "FORBIDDEN",
            message: format!(
                "The Date header is {off_by_secs} s from the server's clock; at most {max_secs} s \
                 is accepted. Check the device's clock."
            ),
            reason: "clock_skew",
        }
    }

    /// A key of another platform's input (spec: platform fidelity).
    pub(crate) fn wrong_platform(actual: Platform, expected: Platform) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            code: "FORBIDDEN",
            message: format!(
                "This API key belongs to a {} input; this endpoint takes {} data.",
                actual.as_str(),
                expected.as_str()
            ),
            reason: "wrong_platform",
        }
    }

    /// A body that could not be read: too large (413) or broken.
    pub(crate) fn from_body_rejection(rejection: &BytesRejection, limit: usize) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::too_large(limit),
            _ => Self::bad_request("unreadable_body", rejection.body_text()),
        }
    }

    pub(crate) fn unavailable() -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "SERVICE_UNAVAILABLE",
            message: "The batch could not be stored; retry with backoff.".into(),
            reason: "unavailable",
        }
    }
}

impl IntoResponse for IngestError {
    fn into_response(self) -> Response {
        let body = json!({"errors": [{"code": self.code, "message": self.message}]});
        (self.status, Json(body)).into_response()
    }
}

/// The success answer: 202 Accepted, empty body.
pub(crate) fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// Counts a refused request and renders mParticle's error.
pub(crate) fn reject(state: &AppState, input: Option<&InputId>, error: IngestError) -> Response {
    state.metrics.rejected(input, error.reason);
    error.into_response()
}

impl From<AcceptError> for IngestError {
    fn from(error: AcceptError) -> Self {
        match error {
            AcceptError::Invalid(message) => IngestError::bad_request("invalid_batch", message),
            AcceptError::TooManyEvents(message) => {
                IngestError::bad_request("too_many_events", message)
            }
            AcceptError::Unavailable => IngestError::unavailable(),
        }
    }
}
