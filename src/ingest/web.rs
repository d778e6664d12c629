//! The Web SDK's endpoints: batched v3 uploads (`/v3/JS/{key}/events`, JSON sent as
//! `text/plain` and authenticated by the key alone), the legacy per-event upload and the config
//! request. (Its forwarding statistics and alias requests have modules of their own.)

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::body::{batch_document, parse_json};
use super::response::{IngestError, reject};
use crate::model::Platform;
use crate::model::batch::Channel;
use crate::model::legacy_web;
use crate::pipeline::Document;
use crate::pipeline::catalog::InputEntry;
use crate::state::AppState;

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
    upload(&state, &key, &headers, body, "web_v3", batch_document).await
}

/// `POST /v2/JS/{key}/Events`: one event in the legacy per-event format (Web SDK ≤ 2.21).
pub(crate) async fn legacy_events(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let translate = |body: &[u8]| {
        let document = legacy_web::translate(&parse_json(body)?)
            .map_err(|e| IngestError::bad_request("invalid_batch", e.message))?;
        Ok(Document::single(document))
    };
    upload(&state, &key, &headers, body, "web_legacy", translate).await
}

/// Accepts one Web SDK upload: `to_batch` turns the body into an Events API batch.
async fn upload(
    state: &AppState,
    key: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    endpoint: &'static str,
    to_batch: impl FnOnce(&[u8]) -> Result<Document, IngestError>,
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
        let document = to_batch(&body)?;
        state
            .pipeline
            .accept(&input, vec![document], Channel::Javascript)
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
