//! The admin REST API under `/api/v1`, authenticated with `Authorization: Bearer <admin token>`.
//! Every write reloads the in-memory catalog before answering, so the next ingested event follows
//! it (activation is immediate).

mod connections;
mod data_catalog;
mod inputs;
mod live;
mod metrics;
mod outputs;
mod preview;
mod replays;
mod settings;
mod users;

use std::str::FromStr;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::access::Verdict;
use crate::error::ApiError;
use crate::state::AppState;

/// The admin routes, behind the token check.
pub(crate) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/api/v1/inputs", post(inputs::create).get(inputs::list))
        .route(
            "/api/v1/inputs/{id}",
            get(inputs::get)
                .patch(inputs::update)
                .delete(inputs::delete),
        )
        .route(
            "/api/v1/inputs/{id}/forwarding-stats",
            get(inputs::forwarding_stats),
        )
        .route(
            "/api/v1/inputs/{id}/rotate-secret",
            post(inputs::rotate_secret),
        )
        .route("/api/v1/outputs", post(outputs::create).get(outputs::list))
        .route(
            "/api/v1/outputs/{id}",
            get(outputs::get)
                .patch(outputs::update)
                .delete(outputs::delete),
        )
        .route(
            "/api/v1/outputs/{id}/signing-secret",
            post(outputs::signing_secret).delete(outputs::disable_signing),
        )
        .route(
            "/api/v1/connections",
            post(connections::create).get(connections::list),
        )
        .route(
            "/api/v1/connections/{id}",
            get(connections::get)
                .patch(connections::update)
                .delete(connections::delete),
        )
        .route(
            "/api/v1/connections/{id}/attempts",
            get(connections::attempts),
        )
        .route(
            "/api/v1/connections/{id}/dead-letters",
            get(connections::dead_letters),
        )
        .route("/api/v1/connection-stats", get(connections::stats))
        .route("/api/v1/metrics", get(metrics::get))
        .route(
            "/api/v1/connections/{id}/dead-letters/{letter}/replay",
            post(connections::replay),
        )
        .route("/api/v1/connections/{id}/replay", post(replays::start))
        .route("/api/v1/connections/{id}/dry-run", post(preview::dry_run))
        .route("/api/v1/replays/{id}", get(replays::get))
        .route("/api/v1/replays/{id}/cancel", post(replays::cancel))
        .route("/api/v1/catalog", get(data_catalog::get))
        .route("/api/v1/live-stream", get(live::stream))
        .route("/api/v1/metadata-fields", get(connections::metadata_fields))
        .route("/api/v1/connection-settings", get(settings::list))
        .route("/api/v1/users", get(users::find))
        .route("/api/v1/users/{mpid}", get(users::get))
        .route_layer(middleware::from_fn_with_state(state, require_admin))
}

async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let changes_state = !matches!(*request.method(), Method::GET | Method::HEAD);
    match state
        .access
        .authorizes(request.headers(), changes_state)
        .await
    {
        Verdict::Allowed => next.run(request).await,
        Verdict::Refused => ApiError::unauthorized().into_response(),
        Verdict::Unavailable(error) => ApiError::sessions_unavailable(&error).into_response(),
    }
}

/// Reloads the catalog after a write; failure is an internal error, since the write happened
/// but would not take effect until the next reload.
async fn reload(state: &AppState) -> Result<(), ApiError> {
    state
        .catalog()
        .reload()
        .await
        .map_err(|e| ApiError::from_store(e, "not_found", "catalog"))
}

/// Parses an id in a request path. A malformed id names nothing, so it gets the answer an
/// unknown one gets (404 with `not_found`) without a trip to the store. Handlers parse after
/// their other extractors ran, so a request with a bad body and a bad id still hears about its
/// body first.
fn path_id<T: FromStr>(raw: &str, not_found: &'static str, what: &str) -> Result<T, ApiError> {
    raw.parse()
        .map_err(|_| ApiError::not_found(not_found, what))
}

/// `?limit=` of a listing: 100 items unless given, between 1 and 1,000.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Page {
    limit: Option<i64>,
}

impl Page {
    fn limit(&self) -> i64 {
        self.limit.unwrap_or(100).clamp(1, 1000)
    }
}

/// Checks a human-given name.
fn check_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err(ApiError::bad_request(
            "invalid_name",
            "`name` must be 1 to 200 characters",
        ));
    }
    Ok(name.to_owned())
}
