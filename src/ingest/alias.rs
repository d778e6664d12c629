//! Alias requests: one MPID's data belongs to another. Each SDK family has its own route, and
//! each takes only its own inputs' keys, since a key is public:
//! - the Web SDK's `POST /v1/identity/{key}/Alias`: plain JSON, the key alone (a web input's,
//!   from an allowed origin), errors as `{code, message}`, which the SDK surfaces;
//! - the mobile SDKs' `POST /v1/identity/{key}/alias`: gzip, signed with `x-mp-signature` over
//!   the default path and a recent `Date`, checked like their uploads, so only the app's secret
//!   can add aliases.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::body::decode_body;
use super::mobile::check_signed;
use super::response::{IngestError, reject};
use super::web::web_input;
use crate::model::alias_request::{self, AliasRequest};
use crate::model::ids::InputId;
use crate::model::{Platform, now_ms};
use crate::pipeline::catalog::InputEntry;
use crate::state::AppState;
use crate::store::identity_sql::NewAlias;

/// `POST /v1/identity/{key}/Alias`: the Web SDK's alias request.
pub(crate) async fn web(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let input = match web_input(&state, &key, &headers) {
        Ok(input) => input,
        Err(error) => return reject(&state, None, error),
    };
    let alias = body
        .map_err(|_| "The request body could not be read.")
        .and_then(|body| parse(&input.id, &body));
    match alias {
        Ok(alias) => match insert(&state, &input, &alias).await {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(error) => reject(&state, Some(&input.id), error),
        },
        Err(message) => {
            state.metrics.rejected(Some(&input.id), "invalid_alias");
            web_error(message)
        }
    }
}

/// The Web SDK surfaces a 400 alias body as `{code, message}`.
fn web_error(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"code": 400, "message": message})),
    )
        .into_response()
}

/// `POST /v1/identity/{key}/alias`: the mobile SDKs' alias request, gzip and signed.
pub(crate) async fn mobile(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(input) = state.catalog().input_by_key(&key) else {
        return reject(&state, None, IngestError::forbidden());
    };
    match accept_mobile(&state, &input, &key, &headers, body).await {
        // As for uploads: a JSON object, which every mobile SDK can parse from a 2xx answer.
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({}))).into_response(),
        Err(error) => reject(&state, Some(&input.id), error),
    }
}

async fn accept_mobile(
    state: &AppState,
    input: &InputEntry,
    key: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(), IngestError> {
    if !matches!(input.platform, Platform::Ios | Platform::Android) {
        return Err(IngestError::wrong_platform(input.platform, Platform::Ios));
    }
    let limit = state.config.ingest.max_body_bytes;
    let body = body.map_err(|r| IngestError::from_body_rejection(&r, limit))?;
    let body = decode_body(headers, &body, limit)?;
    // The SDKs sign the default path, whatever path (CNAME, custom host) they actually call.
    check_signed(
        headers,
        &input.secret,
        &format!("/v1/identity/{key}/alias"),
        &body,
        state.config.ingest.mobile_max_clock_skew_secs,
    )?;
    let alias = parse(&input.id, &body)
        .map_err(|message| IngestError::bad_request("invalid_alias", message))?;
    insert(state, input, &alias).await
}

/// The alias a request body asks for, or what is wrong with it.
fn parse(input_id: &InputId, body: &[u8]) -> Result<(NewAlias, AliasRequest), &'static str> {
    let request = alias_request::parse(body, now_ms())?;
    let alias = NewAlias {
        input_id: input_id.clone(),
        source_mpid: request.source_mpid,
        destination_mpid: request.destination_mpid,
        start_ms: request.start_ms,
        end_ms: request.end_ms,
    };
    Ok((alias, request))
}

/// Stores the alias, after handing the request to the connections that forward alias requests
/// (first, so that a failure between the two is answered with a 503 and the SDK's retry, under
/// the same request id, is not forwarded twice).
async fn insert(
    state: &AppState,
    input: &InputEntry,
    (alias, request): &(NewAlias, AliasRequest),
) -> Result<(), IngestError> {
    state
        .pipeline
        .accept_alias(input, request)
        .await
        .map_err(IngestError::from)?;
    state
        .store
        .insert_alias(alias, now_ms())
        .await
        .map_err(|error| {
            tracing::error!(%error, "Storing an alias request failed.");
            IngestError::unavailable()
        })
}
