//! mParticle-compatible ingestion: the Events API (`/v2/events`, `/v2/bulkevents`), the Web
//! SDK's endpoints (v3 and legacy uploads, config, forwarding statistics, alias) and the mobile
//! SDKs' (uploads, config, alias), with the CNAME path prefixes the SDKs use.
//! These endpoints answer with mParticle's status codes and error bodies, not the admin API's,
//! because real clients depend on them (spec §1.3).

mod alias;
mod auth;
pub(crate) mod body;
pub(crate) mod cors;
mod events_api;
mod forwarding;
mod mobile;
mod response;
mod web;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub(crate) use mobile::check_signed;

use crate::state::AppState;

/// The ingest routes, with the configured body limit. Browser-facing routes answer CORS.
pub(crate) fn router(max_body_bytes: usize) -> Router<AppState> {
    let server = Router::new()
        .route("/v2/events", post(events_api::events))
        .route("/v2/bulkevents", post(events_api::bulk_events));
    let web = Router::new()
        .route("/v3/JS/{key}/events", post(web::events))
        .route("/webevents/v3/JS/{key}/events", post(web::events))
        .route("/JS/v2/{key}/config", get(web::config))
        .route("/tags/JS/v2/{key}/config", get(web::config))
        // Web SDK ≤ 2.21: one event per request, and kit forwarding statistics.
        .route("/v2/JS/{key}/Events", post(web::legacy_events))
        .route("/v2/JS/{key}/events", post(web::legacy_events))
        .route("/webevents/v2/JS/{key}/Events", post(web::legacy_events))
        .route("/v1/JS/{key}/Forwarding", post(forwarding::forwarding))
        .route("/v2/JS/{key}/Forwarding", post(forwarding::forwarding))
        .route(
            "/webevents/v1/JS/{key}/Forwarding",
            post(forwarding::forwarding),
        )
        .route(
            "/webevents/v2/JS/{key}/Forwarding",
            post(forwarding::forwarding),
        )
        // The Web SDK says `Alias`, the mobile SDKs `alias` (signed, see `alias`).
        .route("/v1/identity/{key}/Alias", post(alias::web))
        .route("/webevents/v1/identity/{key}/Alias", post(alias::web))
        .layer(cors::layer());
    let mobile = Router::new()
        .route("/v2/{key}/events", post(mobile::events))
        .route("/nativeevents/v2/{key}/events", post(mobile::events))
        .route("/v1/identity/{key}/alias", post(alias::mobile))
        .route("/nativeevents/v1/identity/{key}/alias", post(alias::mobile))
        .route("/v4/{key}/config", get(mobile::config))
        .route("/config/v4/{key}/config", get(mobile::config));
    server
        .merge(web)
        .merge(mobile)
        .layer(DefaultBodyLimit::max(max_body_bytes))
}
