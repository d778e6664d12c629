//! Inputs: a platform (or custom feed) and the API key and secret its data arrives with.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Page, check_name, path_id, reload};
use crate::error::{ApiError, AppJson};
use crate::model::forwarding::Kit;
use crate::model::ids::InputId;
use crate::model::settings::InputSettings;
use crate::model::{Platform, now_ms};
use crate::state::AppState;
use crate::store::InputRow;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputIn {
    name: String,
    platform: String,
    #[serde(default)]
    settings: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InputPatch {
    name: Option<String>,
    /// Replaces the input's settings.
    settings: Option<Value>,
}

#[derive(Debug, Serialize)]
pub(crate) struct InputOut {
    id: InputId,
    name: String,
    platform: String,
    api_key: String,
    api_secret: String,
    created_at: i64,
    settings: Value,
}

impl From<InputRow> for InputOut {
    fn from(row: InputRow) -> Self {
        Self {
            settings: serde_json::from_str::<InputSettings>(&row.settings)
                .ok()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null),
            id: row.id,
            name: row.name,
            platform: row.platform,
            api_key: row.api_key,
            api_secret: row.api_secret,
            created_at: row.created_at,
        }
    }
}

/// The input a path names.
fn input_id(raw: &str) -> Result<InputId, ApiError> {
    path_id(raw, "input_not_found", "input")
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

pub(crate) async fn create(
    State(state): State<AppState>,
    AppJson(input): AppJson<InputIn>,
) -> Result<(StatusCode, Json<InputOut>), ApiError> {
    let name = check_name(&input.name)?;
    let platform = Platform::parse(&input.platform).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_platform",
            "`platform` must be one of ios, android, web, custom_feed",
        )
    })?;
    let settings = input_settings(input.settings)?;
    let row = InputRow {
        settings,
        id: InputId::new(),
        name,
        platform: platform.as_str().to_owned(),
        api_key: random_hex(16),
        api_secret: random_hex(32),
        created_at: now_ms(),
    };
    state
        .store
        .insert_input(&row)
        .await
        .map_err(|e| ApiError::from_store(e, "input_not_found", "input"))?;
    reload(&state).await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Validates settings and returns them as stored JSON text.
fn input_settings(settings: Option<Value>) -> Result<String, ApiError> {
    let settings =
        InputSettings::from_json(settings.unwrap_or_else(|| Value::Object(Default::default())))
            .map_err(|e| ApiError::bad_request("invalid_settings", e.to_string()))?;
    serde_json::to_string(&settings)
        .map_err(|e| ApiError::bad_request("invalid_settings", e.to_string()))
}

/// `PATCH /api/v1/inputs/{id}`: rename, or replace the settings (allowed origins).
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(id): Path<String>,
    AppJson(patch): AppJson<InputPatch>,
) -> Result<Json<InputOut>, ApiError> {
    let id = input_id(&id)?;
    let not_found = |e| ApiError::from_store(e, "input_not_found", "input");
    let current = state.store.get_input(&id).await.map_err(not_found)?;
    let name = match patch.name {
        Some(name) => check_name(&name)?,
        None => current.name,
    };
    let settings = match patch.settings {
        Some(settings) => input_settings(Some(settings))?,
        None => current.settings,
    };
    state
        .store
        .update_input(&id, &name, &settings)
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    Ok(Json(
        state.store.get_input(&id).await.map_err(not_found)?.into(),
    ))
}

pub(crate) async fn list(State(state): State<AppState>) -> Result<Json<Vec<InputOut>>, ApiError> {
    let rows = state
        .store
        .list_inputs()
        .await
        .map_err(|e| ApiError::from_store(e, "input_not_found", "input"))?;
    Ok(Json(rows.into_iter().map(InputOut::from).collect()))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<InputOut>, ApiError> {
    let id = input_id(&id)?;
    let row = state
        .store
        .get_input(&id)
        .await
        .map_err(|e| ApiError::from_store(e, "input_not_found", "input"))?;
    Ok(Json(row.into()))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = input_id(&id)?;
    state
        .store
        .delete_input(&id)
        .await
        .map_err(|e| ApiError::from_store(e, "input_not_found", "input"))?;
    reload(&state).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Issues a new secret; the old one stops working at once.
pub(crate) async fn rotate_secret(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<InputOut>, ApiError> {
    let id = input_id(&id)?;
    let not_found = |e| ApiError::from_store(e, "input_not_found", "input");
    state
        .store
        .set_input_secret(&id, &random_hex(32))
        .await
        .map_err(not_found)?;
    reload(&state).await?;
    let row = state.store.get_input(&id).await.map_err(not_found)?;
    Ok(Json(row.into()))
}

/// `?after=` of the forwarding-stats listing: the last kit of the previous page.
#[derive(Debug, Deserialize)]
pub(crate) struct AfterKit {
    after: Option<String>,
}

/// `GET /api/v1/inputs/{id}/forwarding-stats?limit=&after=`: events each client-side kit
/// reported forwarding, a page at a time (the `overflow` and `sideloaded` buckets, then kits by
/// module id); `next` is the `after` of the next page, null on the last.
pub(crate) async fn forwarding_stats(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(page): Query<Page>,
    Query(after): Query<AfterKit>,
) -> Result<Json<Value>, ApiError> {
    let after = match after.after.as_deref() {
        None => None,
        Some(name) => Some(Kit::parse(name).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_cursor",
                "`after` must be a kit from the listing: a module id, `overflow` or `sideloaded`",
            )
        })?),
    };
    let id = input_id(&id)?;
    let not_found = |e| ApiError::from_store(e, "input_not_found", "input");
    state.store.get_input(&id).await.map_err(not_found)?;
    let limit = usize::try_from(page.limit()).unwrap_or(1);
    let page = state
        .store
        .forwarding_stats(&id, after, limit)
        .await
        .map_err(not_found)?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|row| {
            let kit = row.kit();
            json!({"kit": kit.name(), "module_id": kit.module_id(), "events": row.events,
                   "last_reported_at": row.last_reported_at})
        })
        .collect();
    Ok(Json(
        json!({ "items": items, "next": page.next.map(Kit::name) }),
    ))
}
