//! The web dashboard: static assets embedded in the binary (no build step, nothing fetched at
//! build or run time), and sign-in with the admin token into a session cookie. The dashboard
//! itself only talks to the admin API, so the two never disagree.
//!
//! Sessions: the cookie is `HttpOnly; SameSite=Strict` and holds a random id; state-changing
//! admin requests made with it must also carry the session's CSRF token in `x-boson-csrf`
//! (a header other sites cannot set), so a forged form post is refused twice over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, COOKIE, ETAG, IF_NONE_MATCH, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::RngCore;
use rust_embed::RustEmbed;
use serde::Deserialize;
use serde_json::json;

use crate::admin::hash_token;
use crate::error::{ApiError, AppJson};
use crate::model::now_ms;
use crate::server::AppState;

/// The dashboard's files, from `dashboard/` (read from disk in debug builds, embedded in release).
#[derive(RustEmbed)]
#[folder = "dashboard/"]
struct Assets;

const SESSION_COOKIE: &str = "boson_session";
/// The header that carries the CSRF token on state-changing requests.
pub(crate) const CSRF_HEADER: HeaderName = HeaderName::from_static("x-boson-csrf");
/// Sessions end after this long.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Signed-in dashboard sessions, in memory: a restart signs everyone out.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

#[derive(Debug, Clone)]
struct Session {
    csrf: String,
    expires_at: i64,
}

impl Sessions {
    fn create(&self) -> (String, String) {
        let (id, csrf) = (random_token(), random_token());
        let expires_at = now_ms() + i64::try_from(SESSION_LIFETIME.as_millis()).unwrap_or(i64::MAX);
        let mut sessions = self
            .by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions.retain(|_, s| s.expires_at > now_ms());
        sessions.insert(
            id.clone(),
            Session {
                csrf: csrf.clone(),
                expires_at,
            },
        );
        (id, csrf)
    }

    /// Whether a session is still signed in (not ended, not expired).
    pub(crate) fn is_live(&self, id: &str) -> bool {
        self.csrf_of(id).is_some()
    }

    fn csrf_of(&self, id: &str) -> Option<String> {
        let sessions = self
            .by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions
            .get(id)
            .filter(|s| s.expires_at > now_ms())
            .map(|s| s.csrf.clone())
    }

    fn end(&self, id: &str) {
        self.by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// Whether the request's session cookie is valid, and (for a state-changing request) its
    /// CSRF header matches.
    pub(crate) fn authorizes(&self, headers: &HeaderMap, changes_state: bool) -> bool {
        let Some(csrf) = session_id(headers).and_then(|id| self.csrf_of(&id)) else {
            return false;
        };
        !changes_state
            || headers
                .get(CSRF_HEADER)
                .is_some_and(|v| v.as_bytes() == csrf.as_bytes())
    }
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The session cookie's id, if the request carries one.
pub(crate) fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The dashboard's routes.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        // A wildcard, since the ES modules live in folders (`lib/`, `pages/`).
        .route("/assets/{*path}", get(asset))
        .route("/dashboard/session", get(session))
        .route("/dashboard/login", post(login))
        .route("/dashboard/logout", post(logout))
}

async fn index() -> Response {
    serve("index.html", &HeaderMap::new())
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    // Debug builds read assets from disk: refuse anything that could step out of `dashboard/`.
    let plain = path
        .split('/')
        .all(|part| !part.is_empty() && part != "." && part != ".." && !part.contains('\\'));
    if !plain {
        return StatusCode::NOT_FOUND.into_response();
    }
    serve(&path, &headers)
}

/// An embedded file with its content type and an ETag from its hash.
fn serve(file: &str, headers: &HeaderMap) -> Response {
    let Some(content) = Assets::get(file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let etag = format!("\"{}\"", hex::encode(&content.metadata.sha256_hash()[..8]));
    if headers
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mime = mime_guess::from_path(file).first_or_octet_stream();
    (
        [
            (CONTENT_TYPE, mime.to_string()),
            (ETAG, etag),
            (CACHE_CONTROL, "no-cache".to_owned()),
        ],
        content.data.into_owned(),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoginIn {
    token: String,
}

/// Exchanges the admin token for a session cookie and a CSRF token.
async fn login(State(state): State<AppState>, AppJson(login): AppJson<LoginIn>) -> Response {
    if hash_token(login.token.trim()) != state.admin_token_hash {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "that is not the admin token",
        )
        .into_response();
    }
    let (id, csrf) = state.sessions.create();
    // Over HTTPS the cookie must never travel in clear text.
    let secure = if state.config.tls_cert.is_some() {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!(
        "{SESSION_COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
        SESSION_LIFETIME.as_secs()
    );
    ([(SET_COOKIE, cookie)], Json(json!({"csrf": csrf}))).into_response()
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !state.sessions.authorizes(&headers, true) {
        return ApiError::unauthorized().into_response();
    }
    if let Some(id) = session_id(&headers) {
        state.sessions.end(&id);
    }
    let expired = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    ([(SET_COOKIE, expired)], StatusCode::NO_CONTENT).into_response()
}

/// Whether the browser is signed in, and its CSRF token (readable only by same-origin script).
async fn session(State(state): State<AppState>, headers: HeaderMap) -> Json<serde_json::Value> {
    match session_id(&headers).and_then(|id| state.sessions.csrf_of(&id)) {
        Some(csrf) => Json(json!({"signed_in": true, "csrf": csrf})),
        None => Json(json!({"signed_in": false})),
    }
}
