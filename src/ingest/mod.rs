//! mParticle-compatible ingestion: the Events API (`/v2/events`, `/v2/bulkevents`) and the Web
//! SDK's endpoints (v3 uploads, config, alias), with the CNAME path prefixes the SDKs use.
//! These endpoints answer with mParticle's status codes and error bodies, not the admin API's,
//! because real clients depend on them (spec §1.3).

mod accept;
mod auth;
pub(crate) mod cors;
mod events_api;
mod mobile;
mod response;
mod web;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

pub(crate) use accept::store_documents;
pub(crate) use response::IngestError;

use crate::server::AppState;

/// The ingest routes, with the configured body limit. Browser-facing routes answer CORS.
pub(crate) fn router(max_body_bytes: usize) -> Router<AppState> {
    let server = Router::new()
        .route("/v2/events", post(events_api::events))
        .route("/v2/bulkevents", post(events_api::bulk_events));
    let web = Router::new()
        .route("/v3/JS/{key}/events", post(web::events))
        .route("/webevents/v3/JS/{key}/events", post(web::events))
        .route("/JS/v2/{key}/config", get(web::config))
        .route("/tags/JS/v2/{key}/config", get(web::config))
        // Web SDK ≤ 2.21: one event per request, and kit forwarding statistics.
        .route("/v2/JS/{key}/Events", post(web::legacy_events))
        .route("/v2/JS/{key}/events", post(web::legacy_events))
        .route("/webevents/v2/JS/{key}/Events", post(web::legacy_events))
        .route("/v1/JS/{key}/Forwarding", post(web::forwarding))
        .route("/v2/JS/{key}/Forwarding", post(web::forwarding))
        .route("/webevents/v1/JS/{key}/Forwarding", post(web::forwarding))
        .route("/webevents/v2/JS/{key}/Forwarding", post(web::forwarding))
        // The Web SDK says `Alias`, the mobile SDKs `alias`.
        .route("/v1/identity/{key}/Alias", post(web::alias))
        .route("/v1/identity/{key}/alias", post(web::alias))
        .route("/webevents/v1/identity/{key}/Alias", post(web::alias))
        .route("/nativeevents/v1/identity/{key}/alias", post(web::alias))
        .layer(cors::layer());
    let mobile = Router::new()
        .route("/v2/{key}/events", post(mobile::events))
        .route("/nativeevents/v2/{key}/events", post(mobile::events))
        .route("/v4/{key}/config", get(mobile::config))
        .route("/config/v4/{key}/config", get(mobile::config));
    server
        .merge(web)
        .merge(mobile)
        .layer(DefaultBodyLimit::max(max_body_bytes))
}

/// Counts a refused request and renders mParticle's error.
pub(crate) fn reject(state: &AppState, input: Option<&str>, error: IngestError) -> Response {
    state.metrics.rejected(input, error.reason);
    error.into_response()
}

/// Parses a JSON body (whatever its declared content type: the Web SDK sends `text/plain`).
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, IngestError> {
    serde_json::from_slice(body).map_err(|e| {
        IngestError::bad_request(
            "malformed_json",
            format!("Request body is not valid JSON: {e}."),
        )
    })
}

/// The request body, gunzipped when `Content-Encoding: gzip` (the mobile SDKs compress uploads
/// and Android identity calls). The decompressed size is bounded too, against gzip bombs.
pub(crate) fn decode_body(
    headers: &HeaderMap,
    body: &[u8],
    limit: usize,
) -> Result<Vec<u8>, IngestError> {
    use std::io::Read;
    let gzip = headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("gzip"));
    if !gzip {
        return Ok(body.to_vec());
    }
    // Compressed JSON expands about tenfold; allow that much of the body limit.
    let ceiling = limit.saturating_mul(10);
    let mut out = Vec::with_capacity(body.len() * 4);
    let mut decoder =
        flate2::read::GzDecoder::new(body).take(u64::try_from(ceiling).unwrap_or(u64::MAX) + 1);
    decoder.read_to_end(&mut out).map_err(|e| {
        IngestError::bad_request("bad_gzip", format!("Request body is not valid gzip: {e}."))
    })?;
    if out.len() > ceiling {
        return Err(IngestError::too_large(ceiling));
    }
    Ok(out)
}

/// An MPID sent as a number or as a decimal string (the Web SDK keeps MPIDs as strings).
pub(crate) fn mpid_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}
