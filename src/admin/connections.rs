//! Connections: one input joined to one output, with the settings that decide what is forwarded.
//! Each save writes a new settings revision; batches accepted before it keep the revision they
//! were accepted under.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Page, path_id, reload};
use crate::error::{ApiError, AppJson};
use crate::model::ids::{ConnectionId, InputId, OutputId};
use crate::model::now_ms;
use crate::model::settings::{ConnectionSettings, ConnectionStatus, SettingsError, metadata_paths};
use crate::state::AppState;
use crate::store::queue::FailingJobs;
use crate::store::{ConnectionRow, StoreError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectionIn {
    // Ids stay text until the handler parses them: a malformed one is answered as an unknown
    // one (`unknown_input`), not as an unreadable body.
    input_id: String,
    output_id: String,
    #[serde(default)]
    settings: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectionPatch {
    output_id: Option<String>,
    /// Keys to change; omitted keys keep their value.
    settings: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ConnectionOut {
    id: ConnectionId,
    input_id: InputId,
    output_id: OutputId,
    settings: Value,
    created_at: i64,
    updated_at: i64,
}

impl From<ConnectionRow> for ConnectionOut {
    fn from(row: ConnectionRow) -> Self {
        // Stored settings are re-read through the model so every key shows, defaults included.
        let settings = ConnectionSettings::from_json_str(&row.settings)
            .ok()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or(Value::Null);
        Self {
            id: row.id,
            input_id: row.input_id,
            output_id: row.output_id,
            settings,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

fn not_found(error: crate::store::StoreError) -> ApiError {
    ApiError::from_store(error, "connection_not_found", "connection")
}

/// The connection a path names.
fn connection_id(raw: &str) -> Result<ConnectionId, ApiError> {
    path_id(raw, "connection_not_found", "connection")
}

pub(super) fn settings_error(error: &SettingsError) -> ApiError {
    let code = match error {
        SettingsError::UnknownMetadataField { .. } => "invalid_metadata_field",
        SettingsError::Malformed(_) => "invalid_settings",
    };
    ApiError::bad_request(code, error.to_string())
}

/// `paused` is Boson's to set (after `auto_pause_after_hours`): an operator may keep it (a form
/// sends every key back) or leave it, not choose it.
fn only_boson_pauses(before: ConnectionStatus, after: ConnectionStatus) -> Result<(), ApiError> {
    if after == ConnectionStatus::Paused && before != ConnectionStatus::Paused {
        return Err(ApiError::bad_request(
            "invalid_settings",
            "`status` may be set to `active` or `inactive`; `paused` is set by Boson after `auto_pause_after_hours`",
        ));
    }
    Ok(())
}

fn to_text(settings: &ConnectionSettings) -> Result<String, ApiError> {
    serde_json::to_string(settings)
        .map_err(|e| ApiError::bad_request("invalid_settings", e.to_string()))
}

/// An id in a request body that names no row (a malformed one names none either).
fn unknown(code: &'static str, what: &'static str, id: &str) -> ApiError {
    ApiError::bad_request(code, format!("no {what} with id {id:?}"))
}

/// What a failed look-up of a row named in a request body answers.
fn lookup_error(
    code: &'static str,
    what: &'static str,
    id: &str,
) -> impl FnOnce(StoreError) -> ApiError {
    let id = id.to_owned();
    move |error| match error {
        StoreError::NotFound => unknown(code, what, &id),
        other => ApiError::from_store(other, code, what),
    }
}

/// The input a request body names, if it exists.
async fn existing_input(state: &AppState, raw: &str) -> Result<InputId, ApiError> {
    let id: InputId = raw
        .parse()
        .map_err(|_| unknown("unknown_input", "input", raw))?;
    state
        .store
        .get_input(&id)
        .await
        .map_err(lookup_error("unknown_input", "input", raw))?;
    Ok(id)
}

/// The output a request body names, parsed.
fn output_of_body(raw: &str) -> Result<OutputId, ApiError> {
    raw.parse()
        .map_err(|_| unknown("unknown_output", "output", raw))
}

/// Checks that an output still exists.
async fn must_exist(state: &AppState, output_id: &OutputId) -> Result<(), ApiError> {
    state
        .store
        .get_output(output_id)
        .await
        .map_err(lookup_error("unknown_output", "output", output_id.as_str()))?;
    Ok(())
}

pub(crate) async fn create(
    State(state): State<AppState>,
    AppJson(connection): AppJson<ConnectionIn>,
) -> Result<(StatusCode, Json<ConnectionOut>), ApiError> {
    let settings = ConnectionSettings::from_json(connection.settings.unwrap_or_else(|| json!({})))
        .map_err(|e| settings_error(&e))?;
    only_boson_pauses(ConnectionStatus::Active, settings.status)?;
    let input_id = existing_input(&state, &connection.input_id).await?;
    let output_id = output_of_body(&connection.output_id)?;
    must_exist(&state, &output_id).await?;
    let id = ConnectionId::new();
    let text = to_text(&settings)?;
    state
        .store
        .insert_connection(&id, &input_id, &output_id, &text, now_ms())
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    Ok((
        StatusCode::CREATED,
        Json(
            state
                .store
                .get_connection(&id)
                .await
                .map_err(not_found)?
                .into(),
        ),
    ))
}

pub(crate) async fn list(
    State(state): State<AppState>,
) -> Result<Json<Vec<ConnectionOut>>, ApiError> {
    let rows = state.store.list_connections().await.map_err(not_found)?;
    Ok(Json(rows.into_iter().map(ConnectionOut::from).collect()))
}

/// One connection as `get` answers it: with its failing deliveries, if any.
#[derive(Debug, Serialize)]
pub(crate) struct ConnectionDetailOut {
    #[serde(flatten)]
    connection: ConnectionOut,
    /// `null` while no delivery of the connection is waiting to be tried again.
    retrying: Option<RetryingOut>,
}

/// The deliveries that failed and wait for another attempt, and when the oldest is given up.
#[derive(Debug, Serialize)]
struct RetryingOut {
    failing_jobs: i64,
    /// The oldest failing delivery's next attempt (Unix ms).
    next_attempt_at: i64,
    /// When the oldest failing delivery goes to the dead letters if it still fails: where the
    /// worker starts its retry window (its acceptance; for a coalesced group the end of its
    /// batch window) plus `delivery.retry_window_secs`.
    gives_up_at: i64,
    last_error: Option<String>,
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ConnectionDetailOut>, ApiError> {
    let id = connection_id(&id)?;
    let connection = state.store.get_connection(&id).await.map_err(not_found)?;
    let window_ms = i64::try_from(state.config.delivery.retry_window_secs)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let failing = state.store.failing_jobs(&id).await.map_err(not_found)?;
    let retrying = match failing {
        Some(failing) => Some(RetryingOut {
            failing_jobs: failing.failing_jobs,
            next_attempt_at: failing.next_attempt_at,
            gives_up_at: retries_start(&state, &failing)
                .await
                .saturating_add(window_ms),
            last_error: failing.last_error,
        }),
        None => None,
    };
    Ok(Json(ConnectionDetailOut {
        connection: connection.into(),
        retrying,
    }))
}

/// Where the worker counts the failing job's retry window from: its acceptance, or for a
/// coalesced group the rule the group's worker uses ([`crate::delivery::coalesce::retries_start`]),
/// with the window of the head's settings revision. An unreadable revision counts no window,
/// as the worker does while it cannot read it.
async fn retries_start(state: &AppState, failing: &FailingJobs) -> i64 {
    if failing.coalesce_head.is_none() {
        return failing.created_at;
    }
    let window_ms = state
        .catalog()
        .revision(failing.revision_id)
        .await
        .map_or(0, |settings| settings.batch_window_ms());
    crate::delivery::coalesce::retries_start(failing.created_at, failing.newest_in_group, window_ms)
}

pub(crate) async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    AppJson(patch): AppJson<ConnectionPatch>,
) -> Result<Json<ConnectionOut>, ApiError> {
    let id = connection_id(&id)?;
    let current = state.store.get_connection(&id).await.map_err(not_found)?;
    let before =
        ConnectionSettings::from_json_str(&current.settings).map_err(|e| settings_error(&e))?;
    let settings = match patch.settings {
        Some(changes) => before.merged(changes).map_err(|e| settings_error(&e))?,
        None => before.clone(),
    };
    only_boson_pauses(before.status, settings.status)?;
    let output_id = match patch.output_id {
        Some(raw) => output_of_body(&raw)?,
        None => current.output_id,
    };
    must_exist(&state, &output_id).await?;
    state
        .store
        .update_connection(&id, &output_id, &to_text(&settings)?, now_ms())
        .await
        .map_err(not_found)?;
    if before.status == ConnectionStatus::Paused && settings.status != ConnectionStatus::Paused {
        // Resumed: a connection still failing gets a whole new auto-pause period.
        state
            .store
            .restart_failure_clock(&id, now_ms())
            .await
            .map_err(not_found)?;
    }
    reload(&state).await?;
    Ok(Json(
        state
            .store
            .get_connection(&id)
            .await
            .map_err(not_found)?
            .into(),
    ))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = connection_id(&id)?;
    state
        .store
        .delete_connection(&id)
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Recent delivery attempts of a connection, newest first.
pub(crate) async fn attempts(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(page): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    let id = connection_id(&id)?;
    state.store.get_connection(&id).await.map_err(not_found)?;
    let rows = state
        .store
        .attempts(&id, page.limit())
        .await
        .map_err(not_found)?;
    let items: Vec<Value> = rows
        .into_iter()
        .map(|a| {
            json!({"id": a.id, "job_id": a.job_id, "attempted_at": a.attempted_at, "outcome": a.outcome,
                   "status": a.status, "error": a.error, "requests": a.requests, "latency_ms": a.latency_ms})
        })
        .collect();
    Ok(Json(json!({ "items": items })))
}

/// Requests given up on for a connection, newest first, with the body that was (or would have
/// been) sent.
pub(crate) async fn dead_letters(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(page): Query<Page>,
) -> Result<Json<Value>, ApiError> {
    let id = connection_id(&id)?;
    state.store.get_connection(&id).await.map_err(not_found)?;
    let rows = state
        .store
        .dead_letters(&id, page.limit())
        .await
        .map_err(not_found)?;
    let items: Vec<Value> = rows
        .into_iter()
        .map(|d| {
            let body = serde_json::from_slice::<Value>(&d.body)
                .unwrap_or_else(|_| json!({"base64": base64::engine::general_purpose::STANDARD.encode(&d.body)}));
            json!({"id": d.id, "job_id": d.job_id, "batch_id": d.batch_id, "payload_index": d.payload_index,
                   "status": d.status, "error": d.error, "created_at": d.created_at, "body": body})
        })
        .collect();
    Ok(Json(json!({ "items": items })))
}

/// The metadata paths a connection can exclude, with readable labels.
pub(crate) async fn metadata_fields() -> Json<Value> {
    let fields: Vec<Value> = metadata_paths()
        .map(|(path, label)| json!({"path": path, "label": label}))
        .collect();
    Json(json!({ "items": fields }))
}

/// Per connection: events forwarded (within the retention), and the last attempt's outcome.
pub(crate) async fn stats(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let rows = state.store.connection_stats().await.map_err(not_found)?;
    let items: Vec<Value> = rows
        .into_iter()
        .map(|row| {
            json!({"connection_id": row.connection_id, "events_forwarded": row.events_forwarded,
                   "last_outcome": row.last_outcome, "last_error": row.last_error,
                   "last_attempt_at": row.last_attempt_at})
        })
        .collect();
    Ok(Json(json!({ "items": items })))
}

/// Sends a dead letter again, now, to the connection's current output; it leaves the dead
/// letters only when the receiver accepts it.
pub(crate) async fn replay(
    State(state): State<AppState>,
    Path((id, letter)): Path<(String, i64)>,
) -> Result<Json<Value>, ApiError> {
    let id = connection_id(&id)?;
    let letter_not_found = |e| ApiError::from_store(e, "dead_letter_not_found", "dead letter");
    let connection = state.store.get_connection(&id).await.map_err(not_found)?;
    let body = state
        .store
        .dead_letter_body(letter, &id)
        .await
        .map_err(letter_not_found)?;
    let output = state
        .store
        .get_output(&connection.output_id)
        .await
        .map_err(not_found)?;
    // Signed, with the custom headers, like every request to the output.
    let output = crate::pipeline::output::Output::from_row(&output)
        .map_err(|message| ApiError::bad_request("invalid_output", message))?;
    let delivery_id = format!("replay-{letter}");
    match crate::delivery::replay(&state.webhooks, &output, &delivery_id, body).await {
        Ok(status) => {
            state
                .store
                .delete_dead_letter(letter)
                .await
                .map_err(letter_not_found)?;
            Ok(Json(json!({"replayed": true, "status": status})))
        }
        Err(message) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "replay_failed",
            message,
        )),
    }
}
