//! The pipeline service and its one entry, [`Pipeline::accept`]: documents of one request in,
//! durably stored batches and their delivery jobs out, or a typed reason why nothing was stored.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::Value;

use super::Handoff;
use super::catalog::{Catalog, InputEntry};
use super::data_catalog::{self, BatchPoints, DataCatalog};
use super::fanout::{self, fan_out};
use super::{identity, inbound};
use crate::live::LiveStream;
use crate::model::alias_request::AliasRequest;
use crate::model::batch::{Channel, NormalizedBatch, normalize_split};
use crate::model::ids::InputId;
use crate::model::kept_members::KeptMembers;
use crate::model::{Platform, now_ms};
use crate::store::queue::IngestOutcome;
use crate::store::writer::Writer;
use crate::telemetry::Metrics;

/// One document of a request, with where it sits in the request (for error messages: empty for
/// a single batch, `[3]` for the fourth of a bulk request).
#[derive(Debug, Clone)]
pub(crate) struct Document {
    pub(crate) location: String,
    /// The batch, without the members in `kept`.
    pub(crate) body: Value,
    /// Members kept as the text they came in ([`crate::model::kept_members`]).
    pub(crate) kept: KeptMembers,
}

impl Document {
    /// The only document of a request.
    pub(crate) fn single(body: Value) -> Self {
        Self::split(String::new(), body, KeptMembers::default())
    }

    /// A document at `location` whose members in `kept` were kept as sent.
    pub(crate) fn split(location: String, body: Value, kept: KeptMembers) -> Self {
        Self {
            location,
            body,
            kept,
        }
    }
}

/// What an accepted request stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Accepted {
    /// One outcome per document, in order.
    pub(crate) outcomes: Vec<IngestOutcome>,
    /// Events in the batches stored (duplicates not counted).
    pub(crate) events_stored: usize,
}

/// Why a request was not accepted. Nothing of it was stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    /// A document is not a valid batch; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// A batch holds more events than a batch may; the message names the batch and the limit.
    #[error("{0}")]
    TooManyEvents(String),
    /// The database or the writer failed; the client should retry.
    #[error("storage unavailable")]
    Unavailable,
}

impl AcceptError {
    /// Whether the server failed (the client is not to blame), which is worth an `error!` log;
    /// an invalid document is the client's doing, and its message quotes what the client sent.
    pub(crate) fn is_server_fault(&self) -> bool {
        matches!(self, AcceptError::Unavailable)
    }

    /// A bounded name for logs and metrics, free of anything the client sent.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            AcceptError::Invalid(_) => "invalid_batch",
            AcceptError::TooManyEvents(_) => "too_many_events",
            AcceptError::Unavailable => "unavailable",
        }
    }
}

/// The pipeline service; cheap to clone (one reference count: handlers' state is cloned per
/// request).
#[derive(Debug, Clone)]
pub(crate) struct Pipeline {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    catalog: Arc<Catalog>,
    writer: Writer,
    live: Arc<LiveStream>,
    metrics: Arc<Metrics>,
    handoff: Arc<dyn Handoff>,
    /// The data points of stored batches, until flushed.
    data_catalog: Arc<DataCatalog>,
    /// Most events one batch may hold (`ingest.max_events_per_batch`).
    max_events_per_batch: usize,
}

impl Pipeline {
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        writer: Writer,
        live: Arc<LiveStream>,
        metrics: Arc<Metrics>,
        handoff: Arc<dyn Handoff>,
        max_events_per_batch: usize,
    ) -> Self {
        let inner = Inner {
            catalog,
            writer,
            live,
            metrics,
            handoff,
            data_catalog: Arc::default(),
            max_events_per_batch,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Routing: inputs by key, connections and their settings.
    pub(crate) fn catalog(&self) -> &Arc<Catalog> {
        &self.inner.catalog
    }

    /// The data points of stored batches not yet flushed to the database.
    pub(crate) fn data_catalog(&self) -> &Arc<DataCatalog> {
        &self.inner.data_catalog
    }

    /// Whether batches can be stored (the writer is running).
    pub(crate) fn is_running(&self) -> bool {
        self.inner.writer.is_running()
    }

    /// Validates, normalises and durably stores a request's documents for `input`, creating
    /// their delivery jobs; returns once they are committed. All or nothing.
    pub(crate) async fn accept(
        &self,
        input: &InputEntry,
        documents: Vec<Document>,
        channel: Channel,
    ) -> Result<Accepted, AcceptError> {
        let inner = &*self.inner;
        let now = now_ms();
        check_event_counts(&documents, inner.max_events_per_batch)?;
        let batches = normalize_all(documents, channel, now)?;
        // Only server-side inputs prove who they are (the input's secret); the others' new users
        // come from IDSync, under its caps.
        let may_create_users = input.platform == Platform::CustomFeed;
        let routes = inner.catalog.routes(&input.id);
        // The documents are dropped here, before waiting for the commit, on the thread that
        // parsed them, unless the Live Stream needs them afterwards: kept across the wait, they
        // were freed from another worker thread, which cost about 1 µs per event (measured).
        let watched = inner.live.watched();
        let mut rows = Vec::with_capacity(batches.len());
        let mut stored = Vec::with_capacity(batches.len());
        for mut batch in batches {
            // A batch without an MPID gets its user in the commit that stores it.
            let unnamed = identity::unnamed(&mut batch.document);
            // Delivery copies an unchanged event's stored bytes into its requests
            // (`request_body`): an event kept as sent goes out as sent, with its ids added
            // (`model::kept_events`), any other as serde_json wrote it.
            let body = batch.stored_body().map_err(|_| AcceptError::Unavailable)?;
            let document = watched.then(|| batch.whole_document());
            let accepted = fanout::AcceptedBatch {
                input_id: &input.id,
                source_request_id: batch.source_request_id,
                received_at: now,
                event_count: batch.event_count,
                document: &batch.document,
                body: Arc::from(body),
            };
            let handoff = inner.handoff.as_ref();
            let row = match unnamed {
                Some(who) => {
                    fanout::fan_out_unnamed(accepted, &routes, handoff, who, may_create_users)
                }
                None => fan_out(accepted, &routes, handoff),
            };
            let resolved = row.unresolved.as_ref().map(|u| Arc::clone(&u.resolved));
            rows.push(row);
            let points = data_catalog::points_of(&batch.document, &batch.events);
            stored.push(StoredBatch {
                event_count: batch.event_count,
                document,
                points,
                resolved,
            });
        }
        let outcomes = inner.writer.ingest(rows).await.map_err(|error| {
            tracing::error!(%error, input = %input.id, "Storing an accepted request failed.");
            AcceptError::Unavailable
        })?;
        Ok(self.report(&input.id, stored, outcomes, now))
    }

    /// Durably stores an alias request for those of the input's connections that forward alias
    /// requests (`send_alias_requests`), as a batch without events that [`super::filter`]
    /// recognises; stores nothing when none does. The SDK's retry of a request (the same
    /// `request_id`) is stored once.
    pub(crate) async fn accept_alias(
        &self,
        input: &InputEntry,
        request: &AliasRequest,
    ) -> Result<(), AcceptError> {
        let inner = &*self.inner;
        let mut routes = Vec::new();
        for route in inner.catalog.routes(&input.id) {
            let settings = inner
                .catalog
                .revision(route.revision_id)
                .await
                .map_err(|error| {
                    tracing::error!(%error, "Reading a connection's settings failed.");
                    AcceptError::Unavailable
                })?;
            if settings.send_alias_requests {
                routes.push(route);
            }
        }
        if routes.is_empty() {
            return Ok(());
        }
        let body = serde_json::to_vec(&request.document).map_err(|_| AcceptError::Unavailable)?;
        let accepted = fanout::AcceptedBatch {
            input_id: &input.id,
            // Its own namespace: an alias request's id never deduplicates a batch.
            source_request_id: request.request_id.as_ref().map(|id| format!("alias:{id}")),
            received_at: request.received_ms,
            event_count: 0,
            document: &request.document,
            body: Arc::from(body),
        };
        let row = fan_out(accepted, &routes, inner.handoff.as_ref());
        inner.writer.ingest(vec![row]).await.map_err(|error| {
            tracing::error!(%error, input = %input.id, "Storing an alias request failed.");
            AcceptError::Unavailable
        })?;
        Ok(())
    }

    /// Counts what was stored, adds its data points to the data catalog and shows it on the
    /// Live Stream. Duplicates (already stored) count nowhere.
    fn report(
        &self,
        input_id: &InputId,
        batches: Vec<StoredBatch>,
        outcomes: Vec<IngestOutcome>,
        now: i64,
    ) -> Accepted {
        let inner = &*self.inner;
        let mut events_stored = 0;
        let mut points = Vec::with_capacity(batches.len());
        for (batch, outcome) in batches.into_iter().zip(&outcomes) {
            let IngestOutcome::Stored { batch_id } = *outcome else {
                continue;
            };
            events_stored += batch.event_count;
            points.push(batch.points);
            if let Some(mut document) = batch.document {
                let resolved = batch.resolved.map_or(0, |r| r.load(Ordering::Relaxed));
                if resolved != 0
                    && let Value::Object(fields) = &mut document
                {
                    fields.insert("mpid".into(), Value::from(resolved));
                }
                inbound::publish(&inner.live, &inner.catalog, input_id, batch_id, &document);
            }
        }
        inner.data_catalog.record(input_id, &points, now);
        inner.metrics.accepted(input_id, events_stored);
        Accepted {
            outcomes,
            events_stored,
        }
    }
}

/// A batch handed to the writer, and what is reported of it once stored.
struct StoredBatch {
    event_count: usize,
    /// The document, if someone watched the Live Stream when the batch was accepted.
    document: Option<Value>,
    /// Read before the commit, so the document need not be kept across it.
    points: BatchPoints,
    /// The MPID the commit gave a batch that came without one (0: none).
    resolved: Option<Arc<AtomicI64>>,
}

/// Refuses the request if one of its batches holds more than `limit` events. Checked before
/// anything is normalised: each event of a batch can become a webhook request per real-time
/// connection, so an oversized batch costs nothing beyond its parsing.
fn check_event_counts(documents: &[Document], limit: usize) -> Result<(), AcceptError> {
    for document in documents {
        let count = document.kept.event_count().unwrap_or_else(|| {
            document
                .body
                .get("events")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        });
        if count > limit {
            let field = if document.location.is_empty() {
                "events".to_owned()
            } else {
                format!("{}.events", document.location)
            };
            return Err(AcceptError::TooManyEvents(format!(
                "Field \"{field}\" holds {count} events; a batch may hold at most {limit}."
            )));
        }
    }
    Ok(())
}

/// Every document as a normalised batch, or the first one's error.
fn normalize_all(
    documents: Vec<Document>,
    channel: Channel,
    now: i64,
) -> Result<Vec<NormalizedBatch>, AcceptError> {
    documents
        .into_iter()
        .map(|document| {
            normalize_split(
                document.body,
                document.kept,
                channel,
                now,
                &document.location,
            )
            .map_err(|e| AcceptError::Invalid(e.message))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with_events(location: &str, n: usize) -> Document {
        Document::split(
            location.to_owned(),
            json!({"events": vec![json!({}); n]}),
            KeptMembers::default(),
        )
    }

    #[test]
    fn a_batch_over_the_event_cap_is_named_and_refused() {
        assert!(check_event_counts(&[with_events("", 3)], 3).is_ok());
        assert!(check_event_counts(&[Document::single(json!({}))], 3).is_ok());
        let bulk = [with_events("[0]", 1), with_events("[1]", 4)];
        let Err(error) = check_event_counts(&bulk, 3) else {
            panic!("a batch of 4 events passed a cap of 3");
        };
        assert!(!error.is_server_fault());
        assert_eq!(error.reason(), "too_many_events");
        let AcceptError::TooManyEvents(message) = error else {
            panic!("not a too-many-events error: {error:?}");
        };
        assert_eq!(
            message,
            "Field \"[1].events\" holds 4 events; a batch may hold at most 3."
        );
    }

    #[test]
    fn only_a_storage_failure_is_the_servers_fault_and_reasons_are_bounded() {
        // The message of an invalid document quotes what the client sent.
        let invalid = AcceptError::Invalid("Field \"user_attributes.\u{1b}[31mx\" …".into());
        assert!(!invalid.is_server_fault());
        assert_eq!(invalid.reason(), "invalid_batch");
        assert!(AcceptError::Unavailable.is_server_fault());
        assert_eq!(AcceptError::Unavailable.reason(), "unavailable");
    }
}
