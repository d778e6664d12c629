//! `POST /v2/events` (one batch) and `POST /v2/bulkevents` (an array of batches).
//!
//! A request is validated whole before anything is stored, and all its batches are committed in
//! one transaction: either every batch is accepted or none is. The 202 is sent only after the
//! commit.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::auth::authenticate;
use super::body::parse_json;
use super::response::{IngestError, accepted, reject};
use crate::model::batch::Channel;
use crate::pipeline::Document;
use crate::pipeline::catalog::InputEntry;
use crate::state::AppState;

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
    let input = match authenticate(state.catalog(), headers) {
        Ok(input) => input,
        Err(error) => return reject(state, None, error),
    };
    match accept(state, &input, body, shape).await {
        Ok(()) => accepted(),
        Err(error) => reject(state, Some(&input.id), error),
    }
}

async fn accept(
    state: &AppState,
    input: &InputEntry,
    body: Result<Bytes, BytesRejection>,
    shape: Shape,
) -> Result<(), IngestError> {
    let body =
        body.map_err(|r| IngestError::from_body_rejection(&r, state.config.ingest.max_body_bytes))?;
    let value = parse_json(&body)?;
    let documents = match (shape, value) {
        (Shape::Single, value) => vec![Document::single(value)],
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
                .map(|(i, body)| Document {
                    location: format!("[{i}]"),
                    body,
                })
                .collect()
        }
        (Shape::Bulk, _) => {
            return Err(IngestError::bad_request(
                "invalid_batch",
                "Request body must be a JSON array of batches.",
            ));
        }
    };

    state
        .pipeline
        .accept(input, documents, Channel::ServerToServer)
        .await?;
    Ok(())
}
