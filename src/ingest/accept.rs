//! Accepting documents into an input's stream, shared by every ingest path (Events API, Web SDK,
//! identity profile events): validate and normalise every batch, resolve a missing MPID from the
//! batch's identities, then commit them all at once through the writer. Nothing is stored unless
//! every batch is valid.

use std::sync::Arc;

use serde_json::Value;

use super::response::IngestError;
use crate::catalog::InputEntry;
use crate::identity::resolve::Call;
use crate::live::{LiveItem, event_type_of};
use crate::model::batch::{Channel, NormalizedBatch, normalize};
use crate::model::now_ms;
use crate::server::AppState;
use crate::store::queue::{IngestOutcome, NewBatch, ProfileUpdate};

/// Validates, normalises and durably stores `documents` (each with its location prefix for
/// error messages) for `input`; returns once they are committed.
pub(crate) async fn store_documents(
    state: &AppState,
    input: &InputEntry,
    documents: Vec<(String, Value)>,
    channel: Channel,
) -> Result<(), IngestError> {
    let now = now_ms();
    let mut normalized = Vec::with_capacity(documents.len());
    for (prefix, document) in documents {
        let batch = normalize(document, channel, now, &prefix)
            .map_err(|e| IngestError::bad_request("invalid_batch", e.message))?;
        normalized.push(batch);
    }
    for batch in &mut normalized {
        resolve_mpid(state, batch, now).await?;
    }

    let routes = state.catalog.routes(&input.id);
    // Kept only while someone watches the Live Stream.
    let watched: Vec<Value> = if state.live.watched() {
        normalized.iter().map(|b| b.document.clone()).collect()
    } else {
        Vec::new()
    };
    let mut batches = Vec::with_capacity(normalized.len());
    let mut events = Vec::with_capacity(normalized.len());
    for batch in normalized {
        let body = serde_json::to_vec(&batch.document).map_err(|_| IngestError::unavailable())?;
        events.push(batch.event_count);
        batches.push(NewBatch {
            input_id: input.id.clone(),
            source_request_id: batch.source_request_id,
            received_at: now,
            event_count: i64::try_from(batch.event_count).unwrap_or(i64::MAX),
            body: Arc::from(body),
            routes: routes.clone(),
            profile: profile_update(&batch.document),
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
    for (document, outcome) in watched.iter().zip(&outcomes) {
        if let IngestOutcome::Stored { batch_id } = *outcome {
            publish_inbound(state, &input.id, batch_id, document);
        }
    }
    Ok(())
}

/// Puts a stored batch's events on the Live Stream, with "filtered: status" for every inactive
/// connection of the input (those get no delivery job, so nothing else would report them).
fn publish_inbound(state: &AppState, input_id: &str, batch_id: i64, document: &Value) {
    let mpid = document.get("mpid").and_then(Value::as_i64);
    let inactive = state.catalog.inactive_connections(input_id);
    let now = now_ms();
    for (index, event) in document
        .get("events")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let item = LiveItem {
            direction: "inbound",
            at: now,
            input_id: input_id.to_owned(),
            connection_id: None,
            batch_id,
            index,
            event_type: event_type_of(event),
            mpid,
            event: Some(event.clone()),
            outcome: None,
            setting: None,
            status: None,
            latency_ms: None,
            error: None,
        };
        for connection in &inactive {
            state.live.publish(LiveItem {
                direction: "outbound",
                connection_id: Some(connection.clone()),
                event: None,
                outcome: Some("filtered"),
                setting: Some("status"),
                ..item.clone()
            });
        }
        state.live.publish(item);
    }
}

/// The batch's user attributes as a merge patch on its user's profile (deletions as `null`).
fn profile_update(document: &Value) -> Option<ProfileUpdate> {
    let mpid = document.get("mpid")?.as_i64().filter(|m| *m != 0)?;
    let mut patch = document
        .get("user_attributes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for deleted in document
        .get("deleted_user_attributes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = deleted.as_str() {
            patch.insert(name.to_owned(), Value::Null);
        }
    }
    Some(ProfileUpdate { mpid, patch })
}

/// A batch without an `mpid` gets the one its identities (or its device) resolve to, as an
/// IDSync identify would give it.
async fn resolve_mpid(
    state: &AppState,
    batch: &mut NormalizedBatch,
    now: i64,
) -> Result<(), IngestError> {
    let Value::Object(document) = &mut batch.document else {
        return Ok(());
    };
    // 0 is what SDKs send before they have an MPID: as good as none.
    if document
        .get("mpid")
        .and_then(Value::as_i64)
        .is_some_and(|m| m != 0)
    {
        return Ok(());
    }
    let identities: Vec<(String, String)> = document
        .get("user_identities")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some((
                i["identity_type"].as_str()?.to_owned(),
                i["identity"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let device = document
        .get("mp_deviceid")
        .and_then(Value::as_str)
        .map(|d| format!("device_application_stamp:{d}"));
    if identities.is_empty() && device.is_none() {
        return Ok(());
    }
    let resolution = state
        .store
        .resolve_identity(Call::Identify, &identities, device.as_deref(), None, now)
        .await
        .map_err(|error| {
            tracing::error!(%error, "Resolving a batch's MPID failed.");
            IngestError::unavailable()
        })?;
    document.insert("mpid".into(), Value::from(resolution.mpid));
    Ok(())
}
