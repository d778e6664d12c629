//! mParticle-compatible ingestion. Today: the Events API (`/v2/events`, `/v2/bulkevents`).
//! These endpoints answer with mParticle's status codes and error bodies, not the admin API's,
//! because real clients depend on them (spec §1.3).

mod auth;
mod events_api;
mod response;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;

use crate::server::AppState;

/// The ingest routes, with the configured body limit.
pub(crate) fn router(max_body_bytes: usize) -> Router<AppState> {
    Router::new()
        .route("/v2/events", post(events_api::events))
        .route("/v2/bulkevents", post(events_api::bulk_events))
        .layer(DefaultBodyLimit::max(max_body_bytes))
}
