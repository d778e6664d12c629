//! The Web SDK's endpoints: batched v3 uploads (`/v3/JS/{key}/events`, JSON sent as
//! `text/plain` and authenticated by the key alone), the legacy per-event upload, the config
//! request and alias requests. (Its forwarding statistics have a module of their own.)

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::{decode_body, mpid_of, parse_json};
use super::response::{IngestError, reject};
use crate::model::batch::Channel;
use crate::model::legacy_web;
use crate::model::{Platform, now_ms};
use crate::pipeline::Document;
use crate::pipeline::catalog::InputEntry;
use crate::state::AppState;
use crate::store::identity_sql::NewAlias;

/// The input a Web SDK request's key names; it must be a web input.
pub(super) fn web_input(
    state: &AppState,
    key: &str,
    headers: &HeaderMap,
) -> Result<InputEntry, IngestError> {
    let input = state
        .catalog()
        .input_by_key(key)
        .ok_or_else(IngestError::forbidden)?;
    if input.platform != Platform::Web {
        return Err(IngestError::wrong_platform(input.platform, Platform::Web));
    }
    super::cors::origin_allowed(&input, headers)
        .map_err(|origin| IngestError::origin_not_allowed(&origin))?;
    Ok(input)
}

/// `POST /v3/JS/{key}/events`: one v3 batch.
pub(crate) async fn events(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    upload(&state, &key, &headers, body, "web_v3", Ok).await
}

/// `POST /v2/JS/{key}/Events`: one event in the legacy per-event format (Web SDK ≤ 2.21).
pub(crate) async fn legacy_events(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let translate = |dto: Value| {
        legacy_web::translate(&dto)
            .map_err(|e| IngestError::bad_request("invalid_batch", e.message))
    };
    upload(&state, &key, &headers, body, "web_legacy", translate).await
}

/// Accepts one Web SDK upload: `to_batch` turns the parsed body into an Events API batch.
async fn upload(
    state: &AppState,
    key: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    endpoint: &'static str,
    to_batch: impl FnOnce(Value) -> Result<Value, IngestError>,
) -> Response {
    let input = match web_input(state, key, headers) {
        Ok(input) => input,
        Err(error) => return reject(state, None, error),
    };
    state.metrics.ingest_request(&input.id, endpoint);
    let result = async {
        let body = body.map_err(|r| {
            IngestError::from_body_rejection(&r, state.config.ingest.max_body_bytes)
        })?;
        let document = to_batch(parse_json(&body)?)?;
        state
            .pipeline
            .accept(
                &input,
                vec![Document::single(document)],
                Channel::Javascript,
            )
            .await?;
        Ok(())
    }
    .await;
    match result {
        // The SDK ignores the body; `{}` is what mParticle sends.
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({}))).into_response(),
        Err(error) => reject(state, Some(&input.id), error),
    }
}

/// `GET /JS/v2/{key}/config`: what the SDK needs to finish init. No client kits.
pub(crate) async fn config(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Response {
    match web_input(&state, &key, &headers) {
        Ok(input) => Json(config_answer(&input)).into_response(),
        Err(error) => error.into_response(),
    }
}

/// No kits; the input's flags, and its host overrides as top-level keys (the SDK merges the
/// answer over its init options, so these steer deployed apps).
fn config_answer(input: &InputEntry) -> Value {
    let mut answer = json!({
        "appName": input.name,
        "workspaceToken": input.id,
        "kitConfigs": [],
        "pixelConfigs": [],
        "flags": input.settings.web_flags,
    });
    for (key, host) in &input.settings.web_hosts {
        answer[key] = Value::from(host.as_str());
    }
    answer
}

#[derive(Debug, Deserialize)]
pub(crate) struct AliasRequest {
    data: AliasData,
}

#[derive(Debug, Deserialize)]
struct AliasData {
    source_mpid: Value,
    destination_mpid: Value,
    start_unixtime_ms: Option<i64>,
    end_unixtime_ms: Option<i64>,
}

/// `POST /v1/identity/{key}/Alias`: records that one MPID's data belongs to another. (The
/// mobile SDKs send the same body gzip-compressed to `/alias`.)
pub(crate) async fn alias(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(input) = state.catalog().input_by_key(&key) else {
        return IngestError::forbidden().into_response();
    };
    if let Err(origin) = super::cors::origin_allowed(&input, &headers) {
        return IngestError::origin_not_allowed(&origin).into_response();
    }
    let limit = state.config.ingest.max_body_bytes;
    let body = body
        .ok()
        .and_then(|b| decode_body(&headers, &b, limit).ok());
    let request: AliasRequest = match body.and_then(|b| serde_json::from_slice(&b).ok()) {
        Some(request) => request,
        None => {
            return alias_error(
                "Alias request must be JSON with data.source_mpid and data.destination_mpid.",
            );
        }
    };
    let (Some(source_mpid), Some(destination_mpid)) = (
        mpid_of(&request.data.source_mpid),
        mpid_of(&request.data.destination_mpid),
    ) else {
        return alias_error("data.source_mpid and data.destination_mpid must be 64-bit integers.");
    };
    let alias = NewAlias {
        input_id: input.id,
        source_mpid,
        destination_mpid,
        start_ms: request.data.start_unixtime_ms,
        end_ms: request.data.end_unixtime_ms,
    };
    match state.store.insert_alias(&alias, now_ms()).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(error) => {
            tracing::error!(%error, "Storing an alias request failed.");
            IngestError::unavailable().into_response()
        }
    }
}

/// The Web SDK surfaces a 400 alias body as `{code, message}`.
fn alias_error(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"code": 400, "message": message})),
    )
        .into_response()
}
