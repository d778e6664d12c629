//! Outputs: webhook configurations (a POST URL, an optional Authorization header, Include MP
//! DeviceId, custom headers). Every setting is checked when saved (a 400 naming the field), the
//! URL's destination included. An output's Standard Webhooks signing secret is issued (or
//! rotated) by its own route and shown only in that answer.

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
use crate::model::signing::generate_secret;
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
    signing: SigningOut,
    created_at: i64,
    updated_at: i64,
}

/// Whether an output signs, never with what.
#[derive(Debug, Serialize)]
struct SigningOut {
    enabled: bool,
    /// When the current secret was issued (Unix milliseconds).
    rotated_at: Option<i64>,
    /// Until when the secret the last rotation replaced signs too (it may be past).
    previous_secret_until: Option<i64>,
}

impl From<OutputRow> for OutputOut {
    fn from(row: OutputRow) -> Self {
        // Parsed and written again, so a row saved before a setting existed shows its default.
        let parsed = serde_json::from_str::<WebhookSettings>(&row.settings).ok();
        let previous_secret_until = match (&parsed, &row.previous_signing_secret) {
            (Some(settings), Some(_)) => row.signing_rotated_at.map(|at| {
                at.saturating_add(settings.signing_rotation_overlap_secs.saturating_mul(1000))
            }),
            _ => None,
        };
        let settings = parsed
            .and_then(|settings| serde_json::to_value(settings).ok())
            .or_else(|| serde_json::from_str(&row.settings).ok())
            .unwrap_or(Value::Null);
        Self {
            settings,
            signing: SigningOut {
                enabled: row.signing_secret.is_some(),
                rotated_at: row.signing_rotated_at,
                previous_secret_until,
            },
            id: row.id,
            name: row.name,
            kind: row.kind,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// The answer that issues a signing secret: the only place it is ever shown.
#[derive(Serialize)]
pub(crate) struct SecretOut {
    secret: String,
}

impl std::fmt::Debug for SecretOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretOut { .. }")
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
            WebhookSettingsError::Malformed(_)
            | WebhookSettingsError::AuthorizationHeader(_)
            | WebhookSettingsError::CustomHeaders(_)
            | WebhookSettingsError::RotationOverlap => "invalid_settings",
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
        signing_secret: None,
        previous_signing_secret: None,
        signing_rotated_at: None,
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

/// Issues the output a new signing secret, answered once (`201 {"secret": "whsec_…"}`). From
/// then on its requests are signed with it; the secret it replaces (if any) signs too for the
/// output's `signing_rotation_overlap_secs`, and one replaced before stops signing at once.
pub(crate) async fn signing_secret(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<SecretOut>), ApiError> {
    let id = output_id(&id)?;
    let secret = generate_secret();
    state
        .store
        .rotate_signing_secret(&id, &secret, now_ms())
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    Ok((StatusCode::CREATED, Json(SecretOut { secret })))
}

/// Stops signing the output's requests (`204`): its current and previous secrets are deleted,
/// so no overlap keeps a replaced secret signing. Disabling an unsigned output is not an error.
pub(crate) async fn disable_signing(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = output_id(&id)?;
    state
        .store
        .clear_signing_secrets(&id, now_ms())
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    Ok(StatusCode::NO_CONTENT)
}
