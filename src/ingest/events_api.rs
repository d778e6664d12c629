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
use super::body::{batch_document, parse_json};
use super::response::{IngestError, accepted, reject};
use crate::model::batch::Channel;
use crate::model::kept_members::{KeptMembers, split_bulk};
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
    let documents = documents_of(&body, shape, state.config.ingest.max_bulk_batches)?;
    state
        .pipeline
        .accept(input, documents, Channel::ServerToServer)
        .await?;
    Ok(())
}

/// The request's batches, each with the members Boson only stores kept as the text they came in
/// (`model::kept_members`). A body that does not split so (malformed, or not of the expected
/// shape) is parsed whole as before, which gives it the same answer as before.
fn documents_of(body: &[u8], shape: Shape, limit: usize) -> Result<Vec<Document>, IngestError> {
    match shape {
        Shape::Single => Ok(vec![batch_document(body)?]),
        Shape::Bulk => {
            if let Some(batches) = split_bulk(body) {
                check_bulk_size(batches.len(), limit)?;
                let documents = batches.into_iter().enumerate();
                return Ok(documents
                    .map(|(i, (members, kept))| {
                        Document::split(format!("[{i}]"), Value::Object(members), kept)
                    })
                    .collect());
            }
            let Value::Array(items) = parse_json(body)? else {
                return Err(IngestError::bad_request(
                    "invalid_batch",
                    "Request body must be a JSON array of batches.",
                ));
            };
            check_bulk_size(items.len(), limit)?;
            Ok(items
                .into_iter()
                .enumerate()
                .map(|(i, body)| Document::split(format!("[{i}]"), body, KeptMembers::default()))
                .collect())
        }
    }
}

fn check_bulk_size(batches: usize, limit: usize) -> Result<(), IngestError> {
    if batches > limit {
        return Err(IngestError::bad_request(
            "too_many_batches",
            format!("A bulk request may hold at most {limit} batches; this one holds {batches}."),
        ));
    }
    Ok(())
}
