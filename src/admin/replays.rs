//! Replays by time range: a dry run answers what a replay would send; a real one is stored and
//! driven in the background (`replay::run`), with its progress and a cancel here.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::path_id;
use crate::error::{ApiError, AppJson};
use crate::model::event_type::EventType;
use crate::model::ids::ConnectionId;
use crate::model::now_ms;
use crate::model::settings::ConnectionSettings;
use crate::pipeline::output::Output;
use crate::replay::plan::{self, Source};
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::replays_sql::{NewReplay, ReplayRow};

/// The pace of a replay whose request and connection name none.
const DEFAULT_RATE: u32 = 100;
/// The fastest pace a replay may ask for.
const MAX_RATE: i64 = 10_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayIn {
    from_ms: i64,
    to_ms: i64,
    source: String,
    #[serde(default)]
    event_types: Option<Vec<String>>,
    #[serde(default)]
    rate_per_second: Option<i64>,
    #[serde(default)]
    dry_run: bool,
}

/// A replay request, checked.
struct Checked {
    source: Source,
    event_types: Option<Vec<EventType>>,
    rate: Option<u32>,
}

fn invalid(field: &str, why: &str) -> ApiError {
    ApiError::bad_request("invalid_replay", format!("{field}: {why}"))
}

fn check(request: &ReplayIn) -> Result<Checked, ApiError> {
    if request.from_ms > request.to_ms {
        return Err(invalid("from_ms", "must not be after to_ms"));
    }
    let source = Source::parse(&request.source)
        .ok_or_else(|| invalid("source", "must be \"batches\" or \"dead_letters\""))?;
    let event_types = match &request.event_types {
        None => None,
        Some(names) => Some(
            names
                .iter()
                .map(|name| {
                    EventType::parse(name).ok_or_else(|| {
                        invalid("event_types", &format!("unknown event type {name:?}"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let rate = match request.rate_per_second {
        None => None,
        Some(rate) if (1..=MAX_RATE).contains(&rate) => u32::try_from(rate).ok(),
        Some(_) => {
            return Err(invalid(
                "rate_per_second",
                &format!("must be between 1 and {MAX_RATE}"),
            ));
        }
    };
    Ok(Checked {
        source,
        event_types,
        rate,
    })
}

fn connection_not_found(error: StoreError) -> ApiError {
    ApiError::from_store(error, "connection_not_found", "connection")
}

fn replay_not_found(error: StoreError) -> ApiError {
    ApiError::from_store(error, "replay_not_found", "replay")
}

/// `POST /api/v1/connections/{id}/replay`: a dry run's counts and sample, or `202` and the id
/// of the replay now running.
pub(crate) async fn start(
    State(state): State<AppState>,
    Path(id): Path<String>,
    AppJson(request): AppJson<ReplayIn>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let id: ConnectionId = path_id(&id, "connection_not_found", "connection")?;
    let checked = check(&request)?;
    let store = &state.store;
    let connection = store
        .get_connection(&id)
        .await
        .map_err(connection_not_found)?;
    let output = store
        .get_output(&connection.output_id)
        .await
        .map_err(connection_not_found)?;
    let output = Output::from_row(&output)
        .map_err(|message| ApiError::bad_request("invalid_output", message))?;
    let current = ConnectionSettings::from_json_str(&connection.settings)
        .map_err(|e| ApiError::bad_request("invalid_settings", e.to_string()))?;
    let rate = checked
        .rate
        .or(current.rate_limit_per_second)
        .unwrap_or(DEFAULT_RATE);
    let settings = plan::replay_settings(&current, checked.event_types.as_deref(), rate);
    let range = (request.from_ms, request.to_ms);
    if request.dry_run {
        let (tally, complete) = crate::replay::dry_run(
            store,
            &connection,
            &output.settings,
            &settings,
            checked.source,
            range,
        )
        .await
        .map_err(connection_not_found)?;
        return Ok((
            StatusCode::OK,
            Json(json!({"batches": tally.batches, "events": tally.events,
                        "requests": tally.requests, "sample": tally.sample,
                        "complete": complete})),
        ));
    }
    let event_types = checked
        .event_types
        .as_ref()
        .map(|types| Value::from(types.iter().map(|t| t.as_str()).collect::<Vec<_>>()).to_string());
    // Only a batch replay filters again; dead letters go as they were stored.
    let settings_text = match checked.source {
        Source::Batches => Some(
            serde_json::to_string(&settings)
                .map_err(|e| ApiError::bad_request("invalid_settings", e.to_string()))?,
        ),
        Source::DeadLetters => None,
    };
    let replay_id = store
        .insert_replay(&NewReplay {
            connection_id: &id,
            source: checked.source.as_str(),
            from_ms: request.from_ms,
            to_ms: request.to_ms,
            event_types,
            rate_per_second: i64::from(rate),
            settings: settings_text,
            now: now_ms(),
        })
        .await
        .map_err(connection_not_found)?;
    state.replay_wake.ring();
    Ok((StatusCode::ACCEPTED, Json(json!({"replay_id": replay_id}))))
}

fn replay_out(row: &ReplayRow) -> Json<Value> {
    let event_types = row
        .event_types
        .as_deref()
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    Json(json!({
        "replay_id": row.id, "connection_id": row.connection_id, "source": row.source,
        "from_ms": row.from_ms, "to_ms": row.to_ms, "event_types": event_types,
        "rate_per_second": row.rate_per_second, "status": row.status,
        "batches": row.batches, "events": row.events, "requests": row.requests,
        "sent": row.sent, "failed": row.failed, "expired": row.expired, "error": row.error,
        "created_at": row.created_at, "updated_at": row.updated_at,
    }))
}

/// `GET /api/v1/replays/{replay_id}`: a replay's status and totals so far.
pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: i64 = path_id(&id, "replay_not_found", "replay")?;
    let row = state.store.get_replay(id).await.map_err(replay_not_found)?;
    Ok(replay_out(&row))
}

/// `POST /api/v1/replays/{replay_id}/cancel`: stops the cursor; jobs already enqueued still go.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id: i64 = path_id(&id, "replay_not_found", "replay")?;
    let row = state
        .store
        .cancel_replay(id, now_ms())
        .await
        .map_err(replay_not_found)?;
    Ok(replay_out(&row))
}
