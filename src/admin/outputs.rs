//! Outputs: webhook configurations (a POST URL, an optional Authorization header, Include MP
//! DeviceId). Every setting is checked when saved (a 400 naming the field), the URL's
//! destination included.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{check_name, path_id, reload};
use crate::delivery::webhook::check_destination;
use crate::error::{ApiError, AppJson};
use crate::model::ids::OutputId;
use crate::model::now_ms;
use crate::model::settings::{WebhookSettings, WebhookSettingsError};
use crate::state::AppState;
use crate::store::OutputRow;

const WEBHOOK: &str = "webhook";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputIn {
    name: String,
    kind: String,
    settings: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputPatch {
    name: Option<String>,
    /// Keys to change; omitted keys keep their value.
    settings: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(crate) struct OutputOut {
    id: OutputId,
    name: String,
    kind: String,
    settings: Value,
    created_at: i64,
    updated_at: i64,
}

impl From<OutputRow> for OutputOut {
    fn from(row: OutputRow) -> Self {
        Self {
            settings: serde_json::from_str(&row.settings).unwrap_or(Value::Null),
            id: row.id,
            name: row.name,
            kind: row.kind,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

fn not_found(error: crate::store::StoreError) -> ApiError {
    ApiError::from_store(error, "output_not_found", "output")
}

/// The output a path names.
fn output_id(raw: &str) -> Result<OutputId, ApiError> {
    path_id(raw, "output_not_found", "output")
}

/// Parses and checks webhook settings, returning them as stored JSON text.
async fn webhook_settings(state: &AppState, settings: Value) -> Result<String, ApiError> {
    let settings = WebhookSettings::parse(settings).map_err(|error| {
        let code = match error {
            WebhookSettingsError::Url(_) => "invalid_url",
            WebhookSettingsError::Malformed(_) | WebhookSettingsError::AuthorizationHeader(_) => {
                "invalid_settings"
            }
        };
        ApiError::bad_request(code, error.to_string())
    })?;
    check_destination(&settings.url, state.config.allow_private_destinations)
        .await
        .map_err(|message| ApiError::bad_request("invalid_url", message))?;
    serde_json::to_string(&settings)
        .map_err(|e| ApiError::bad_request("invalid_settings", e.to_string()))
}

pub(crate) async fn create(
    State(state): State<AppState>,
    AppJson(output): AppJson<OutputIn>,
) -> Result<(StatusCode, Json<OutputOut>), ApiError> {
    let name = check_name(&output.name)?;
    if output.kind != WEBHOOK {
        return Err(ApiError::bad_request(
            "invalid_kind",
            "`kind` must be \"webhook\"",
        ));
    }
    let settings = webhook_settings(&state, output.settings).await?;
    let now = now_ms();
    let row = OutputRow {
        id: OutputId::new(),
        name,
        kind: WEBHOOK.into(),
        settings,
        created_at: now,
        updated_at: now,
    };
    state.store.insert_output(&row).await.map_err(not_found)?;
    reload(&state).await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Vec<OutputOut>>, ApiError> {
    let rows = state.store.list_outputs().await.map_err(not_found)?;
    Ok(Json(rows.into_iter().map(OutputOut::from).collect()))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<OutputOut>, ApiError> {
    let id = output_id(&id)?;
    Ok(Json(
        state.store.get_output(&id).await.map_err(not_found)?.into(),
    ))
}

pub(crate) async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    AppJson(patch): AppJson<OutputPatch>,
) -> Result<Json<OutputOut>, ApiError> {
    let id = output_id(&id)?;
    let current = state.store.get_output(&id).await.map_err(not_found)?;
    let name = match patch.name {
        Some(name) => check_name(&name)?,
        None => current.name,
    };
    let settings = match patch.settings {
        Some(Value::Object(changes)) => {
            let mut merged: serde_json::Map<String, Value> =
                serde_json::from_str(&current.settings).unwrap_or_default();
            merged.extend(changes);
            webhook_settings(&state, Value::Object(merged)).await?
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_settings",
                "`settings` must be an object",
            ));
        }
        None => current.settings,
    };
    state
        .store
        .update_output(&id, &name, &settings, now_ms())
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    Ok(Json(
        state.store.get_output(&id).await.map_err(not_found)?.into(),
    ))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = output_id(&id)?;
    state.store.delete_output(&id).await.map_err(not_found)?;
    reload(&state).await?;
    Ok(StatusCode::NO_CONTENT)
}
