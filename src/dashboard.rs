//! The web dashboard: static assets embedded in the binary (no build step, nothing fetched at
//! build or run time), and sign-in with the admin token into a session cookie. The dashboard
//! itself only talks to the admin API, so the two never disagree.
//! Sessions themselves are kept in [`crate::access`] (in the database, shared by every node).

use std::time::Duration;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, RETRY_AFTER, SET_COOKIE,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use rust_embed::RustEmbed;
use serde::Deserialize;
use serde_json::json;

use crate::access::{Client, Peer, SESSION_COOKIE, SESSION_LIFETIME, Verdict, session_id};
use crate::error::{ApiError, AppJson};
use crate::state::AppState;

/// The dashboard's files, from `dashboard/` (read from disk in debug builds, embedded in release).
#[derive(RustEmbed)]
#[folder = "dashboard/"]
struct Assets;

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

/// Exchanges the admin token for a session cookie and a CSRF token. A client that keeps giving
/// a wrong token must wait longer and longer before it may try again (`access::throttle`).
async fn login(
    State(state): State<AppState>,
    peer: Option<Extension<ConnectInfo<Peer>>>,
    AppJson(login): AppJson<LoginIn>,
) -> Response {
    let client = Client::of(peer.map(|Extension(ConnectInfo(Peer(address)))| address.ip()));
    let sign_ins = &state.access.sign_ins;
    if let Err(wait) = sign_ins.check(client) {
        return too_many_attempts(wait);
    }
    // Compared exactly as typed: a secret is never trimmed.
    if !state.access.is_token(&login.token) {
        sign_ins.failed(client);
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "that is not the admin token",
        )
        .into_response();
    }
    sign_ins.succeeded(client);
    let (id, csrf) = match state.access.sessions.create().await {
        Ok(session) => session,
        Err(error) => return ApiError::sessions_unavailable(&error).into_response(),
    };
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

/// 429 with the seconds to wait, in `Retry-After` and in words.
fn too_many_attempts(wait: Duration) -> Response {
    // Rounded up, so a client that waits as told is let in.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_attempts",
        format!("too many wrong sign-ins from this address; try again in {secs} s"),
    )
    .into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs));
    response
}

/// Ends the session in the database, so it is signed out on every node at once.
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match state.access.sessions.authorizes(&headers, true).await {
        Verdict::Allowed => {}
        Verdict::Refused => return ApiError::unauthorized().into_response(),
        Verdict::Unavailable(error) => {
            return ApiError::sessions_unavailable(&error).into_response();
        }
    }
    if let Some(id) = session_id(&headers)
        && let Err(error) = state.access.sessions.end(&id).await
    {
        return ApiError::sessions_unavailable(&error).into_response();
    }
    let expired = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    ([(SET_COOKIE, expired)], StatusCode::NO_CONTENT).into_response()
}

/// Whether the browser is signed in, and its CSRF token (readable only by same-origin script).
async fn session(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(id) = session_id(&headers) else {
        return Json(json!({"signed_in": false})).into_response();
    };
    match state.access.sessions.csrf_of(&id).await {
        Ok(Some(csrf)) => Json(json!({"signed_in": true, "csrf": csrf})).into_response(),
        Ok(None) => Json(json!({"signed_in": false})).into_response(),
        Err(error) => ApiError::sessions_unavailable(&error).into_response(),
    }
}
