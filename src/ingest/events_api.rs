//! `POST /v2/events` (one batch) and `POST /v2/bulkevents` (an array of batches).
//!
//! A request is validated whole before anything is stored, and all its batches are committed in
//! one transaction: either every batch is accepted or none is. The 202 is sent only after the
//! commit.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::auth::authenticate;
use super::response::{IngestError, accepted};
use crate::catalog::InputEntry;
use crate::model::batch::{Channel, normalize};
use crate::model::now_ms;
use crate::server::AppState;
use crate::store::queue::{IngestOutcome, NewBatch};

/// `POST /v2/events`: one batch.
pub(crate) async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(&state, &headers, body, Shape::Single).await
}

/// `POST /v2/bulkevents`: a JSON array of batches.
pub(crate) async fn bulk_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(&state, &headers, body, Shape::Bulk).await
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Single,
    Bulk,
}

async fn handle(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    shape: Shape,
) -> Response {
    let input = match authenticate(&state.catalog, headers) {
        Ok(input) => input,
        Err(error) => return reject(state, None, error),
    };
    match accept(state, &input, body, shape).await {
        Ok(()) => accepted(),
        Err(error) => reject(state, Some(&input.id), error),
    }
}

fn reject(state: &AppState, input: Option<&str>, error: IngestError) -> Response {
    state.metrics.rejected(input, error.reason);
    error.into_response()
}

async fn accept(
    state: &AppState,
    input: &InputEntry,
    body: Result<Bytes, BytesRejection>,
    shape: Shape,
) -> Result<(), IngestError> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => IngestError::too_large(state.config.ingest.max_body_bytes),
        _ => IngestError::bad_request("unreadable_body", rejection.body_text()),
    })?;
    let value: Value = serde_json::from_slice(&body).map_err(|e| {
        IngestError::bad_request(
            "malformed_json",
            format!("Request body is not valid JSON: {e}."),
        )
    })?;
    let documents = match (shape, value) {
        (Shape::Single, value) => vec![(String::new(), value)],
        (Shape::Bulk, Value::Array(items)) => {
            let limit = state.config.ingest.max_bulk_batches;
            if items.len() > limit {
                return Err(IngestError::bad_request(
                    "too_many_batches",
                    format!(
                        "A bulk request may hold at most {limit} batches; this one holds {}.",
                        items.len()
                    ),
                ));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), v))
                .collect()
        }
        (Shape::Bulk, _) => {
            return Err(IngestError::bad_request(
                "invalid_batch",
                "Request body must be a JSON array of batches.",
            ));
        }
    };

    let now = now_ms();
    let routes = state.catalog.routes(&input.id);
    let mut batches = Vec::with_capacity(documents.len());
    let mut events = Vec::with_capacity(documents.len());
    for (prefix, document) in documents {
        let batch = normalize(document, Channel::ServerToServer, now, &prefix)
            .map_err(|e| IngestError::bad_request("invalid_batch", e.message))?;
        let body = serde_json::to_vec(&batch.document).map_err(|_| IngestError::unavailable())?;
        events.push(batch.event_count);
        batches.push(NewBatch {
            input_id: input.id.clone(),
            source_request_id: batch.source_request_id,
            received_at: now,
            event_count: i64::try_from(batch.event_count).unwrap_or(i64::MAX),
            body: Arc::from(body),
            routes: routes.clone(),
        });
    }

    let outcomes = state.writer.ingest(batches).await.map_err(|error| {
        tracing::error!(%error, input = %input.id, "Storing an accepted request failed.");
        IngestError::unavailable()
    })?;
    let stored: usize = outcomes
        .iter()
        .zip(&events)
        .filter(|(outcome, _)| matches!(outcome, IngestOutcome::Stored { .. }))
        .map(|(_, n)| n)
        .sum();
    state.metrics.accepted(&input.id, stored);
    Ok(())
}
