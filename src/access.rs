//! Who may use the admin API: the admin token (only its hash is kept) and the dashboard's
//! signed-in sessions. The admin API and the dashboard both check here, so neither imports the
//! other.
//!
//! Sessions: the cookie is `HttpOnly; SameSite=Strict` and holds a random id; state-changing
//! admin requests made with it must also carry the session's CSRF token in `x-boson-csrf`
//! (a header other sites cannot set), so a forged form post is refused twice over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::{HeaderMap, HeaderName};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::model::now_ms;

/// SHA-256 of a token; only the hash is kept in memory and in the database.
pub(crate) fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The admin token's hash and the dashboard sessions: everything that grants admin access.
#[derive(Debug)]
pub(crate) struct AdminAccess {
    token_hash: [u8; 32],
    pub(crate) sessions: Arc<Sessions>,
}

impl AdminAccess {
    pub(crate) fn new(token_hash: [u8; 32]) -> Self {
        Self {
            token_hash,
            sessions: Arc::default(),
        }
    }

    /// Whether `token` is the admin token.
    pub(crate) fn is_token(&self, token: &str) -> bool {
        // Comparing hashes: equal-length values, so a timing difference reveals nothing useful.
        hash_token(token) == self.token_hash
    }

    /// Whether a request may use the admin API: by the bearer token, or by a dashboard session
    /// (with its CSRF token on anything that changes state).
    pub(crate) fn authorizes(&self, headers: &HeaderMap, changes_state: bool) -> bool {
        let by_token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| self.is_token(token.trim()));
        by_token || self.sessions.authorizes(headers, changes_state)
    }
}

pub(crate) const SESSION_COOKIE: &str = "boson_session";
/// The header that carries the CSRF token on state-changing requests.
pub(crate) const CSRF_HEADER: HeaderName = HeaderName::from_static("x-boson-csrf");
/// Sessions end after this long.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

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
    /// Starts a session: its id (for the cookie) and its CSRF token.
    pub(crate) fn create(&self) -> (String, String) {
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

    /// The CSRF token of a live session.
    pub(crate) fn csrf_of(&self, id: &str) -> Option<String> {
        let sessions = self
            .by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        sessions
            .get(id)
            .filter(|s| s.expires_at > now_ms())
            .map(|s| s.csrf.clone())
    }

    /// Ends a session (sign-out).
    pub(crate) fn end(&self, id: &str) {
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
