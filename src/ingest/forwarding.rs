//! `POST /v1/JS/{key}/Forwarding` (one report) and `/v2/JS/{key}/Forwarding`
//! (`{"uuid", "data": [reports]}`): the Web SDK's kit forwarding statistics, counted per kit and
//! never forwarded to outputs. A request is counted in one transaction; an input keeps at most
//! `ingest.max_forwarding_kits_per_input` kits, further kits share the `overflow` bucket, and
//! reports without a `mid` (sideloaded kits) count under `sideloaded`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::parse_json;
use super::response::{IngestError, reject};
use super::web::web_input;
use crate::model::forwarding::{reports_of, tally};
use crate::model::now_ms;
use crate::pipeline::catalog::InputEntry;
use crate::state::AppState;

/// Counts a request's reports; `202` with no body (the SDK ignores the answer), a refused
/// request counts nothing.
pub(crate) async fn forwarding(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let input = match web_input(&state, &key, &headers) {
        Ok(input) => input,
        Err(error) => return reject(&state, None, error),
    };
    match record(&state, &input, body).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(error) => reject(&state, Some(&input.id), error),
    }
}

async fn record(
    state: &AppState,
    input: &InputEntry,
    body: Result<Bytes, BytesRejection>,
) -> Result<(), IngestError> {
    let limits = &state.config.ingest;
    let body = body.map_err(|r| IngestError::from_body_rejection(&r, limits.max_body_bytes))?;
    let counts = tally(&reports_of(parse_json(&body)?))
        .map_err(|message| IngestError::bad_request("invalid_forwarding", message))?;
    state
        .store
        .record_forwarding(
            &input.id,
            counts,
            limits.max_forwarding_kits_per_input,
            now_ms(),
        )
        .await
        .map_err(|error| {
            tracing::error!(%error, "Storing forwarding statistics failed.");
            IngestError::unavailable()
        })
}
