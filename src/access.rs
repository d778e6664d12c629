//! Who may use the admin API: the admin token (only its hash is kept) and the dashboard's
//! signed-in sessions. The admin API and the dashboard both check here, so neither imports the
//! other. Also how many users callers with only a public key may create ([`NewUserLimits`]).
//!
//! Sessions: the cookie is `HttpOnly; SameSite=Strict` and holds a random id; state-changing
//! admin requests made with it must also carry the session's CSRF token in `x-boson-csrf`
//! (a header other sites cannot set), so a forged form post is refused twice over.
//!
//! Sessions live in the database, not in one node's memory, so a load balancer may send a
//! browser to any node, and signing out on one node ends the session on all of them at once
//! (every check reads the table; nothing is cached). The table holds only the SHA-256 of a
//! session id. A check the database cannot answer grants nothing: it is [`Verdict::Unavailable`],
//! which the HTTP modules answer with 503 (not 401, so the dashboard keeps its sign-in and the
//! browser can simply try again).

mod new_users;
mod throttle;

use std::time::Duration;

use axum::http::header::{AUTHORIZATION, COOKIE};
use axum::http::{HeaderMap, HeaderName};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::model::now_ms;
use crate::store::sessions_sql::NewSession;
use crate::store::{Store, StoreError, StoreResult};

pub(crate) use new_users::{CapReached, NewUserCaps, NewUserLimits};
pub(crate) use throttle::{Client, LoginThrottle};

/// The address a connection comes from, as the server records it for each request
/// (`ConnectInfo<Peer>`), for the sign-in throttle. Local to the crate so the server can
/// provide it for its own listener types.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::SocketAddr);

/// SHA-256 of a token; only the hash is kept in memory and in the database.
pub(crate) fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether a request may use the admin API.
#[derive(Debug)]
pub(crate) enum Verdict {
    Allowed,
    Refused,
    /// The session could not be checked (the database did not answer): refused as well.
    Unavailable(StoreError),
}

/// The admin token's hash and the dashboard sessions: everything that grants admin access.
#[derive(Debug)]
pub(crate) struct AdminAccess {
    token_hash: [u8; 32],
    pub(crate) sessions: Sessions,
    /// Wrong dashboard sign-ins per client, which make that client wait.
    pub(crate) sign_ins: LoginThrottle,
}

impl AdminAccess {
    pub(crate) fn new(token_hash: [u8; 32], store: Store) -> Self {
        Self {
            token_hash,
            sessions: Sessions { store },
            sign_ins: LoginThrottle::default(),
        }
    }

    /// Whether `token` is the admin token, exactly as given (never trimmed).
    pub(crate) fn is_token(&self, token: &str) -> bool {
        // Hashes of equal length, compared in constant time: the time taken says nothing of
        // how much of the token was right.
        bool::from(hash_token(token).ct_eq(&self.token_hash))
    }

    /// Whether a request may use the admin API: by the bearer token (checked in memory, so it
    /// works while the database is down), or by a dashboard session (with its CSRF token on
    /// anything that changes state).
    pub(crate) async fn authorizes(&self, headers: &HeaderMap, changes_state: bool) -> Verdict {
        let by_token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            // More than one space may follow the scheme (RFC 9110 §11.4); the token itself is
            // compared as sent (it cannot start with a space: see `config`).
            .is_some_and(|token| self.is_token(token.trim_start_matches(' ')));
        if by_token {
            return Verdict::Allowed;
        }
        self.sessions.authorizes(headers, changes_state).await
    }
}

pub(crate) const SESSION_COOKIE: &str = "boson_session";
/// The header that carries the CSRF token on state-changing requests.
pub(crate) const CSRF_HEADER: HeaderName = HeaderName::from_static("x-boson-csrf");
/// Sessions end after this long.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Signed-in dashboard sessions, in the database every node shares; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Sessions {
    store: Store,
}

impl Sessions {
    /// Starts a session: its id (for the cookie) and its CSRF token. Expired sessions are
    /// deleted first, so the table holds at most the sign-ins of one session lifetime.
    pub(crate) async fn create(&self) -> StoreResult<(String, String)> {
        let (id, csrf) = (random_token(), random_token());
        let now = now_ms();
        let lifetime = i64::try_from(SESSION_LIFETIME.as_millis()).unwrap_or(i64::MAX);
        self.store.prune_sessions(now).await?;
        let id_hash = id_hash(&id);
        self.store
            .insert_session(NewSession {
                id_hash: &id_hash,
                csrf: &csrf,
                created_at: now,
                expires_at: now.saturating_add(lifetime),
            })
            .await?;
        Ok((id, csrf))
    }

    /// Whether a session is still signed in (not ended, not expired).
    pub(crate) async fn is_live(&self, id: &str) -> StoreResult<bool> {
        Ok(self.csrf_of(id).await?.is_some())
    }

    /// The CSRF token of a live session.
    pub(crate) async fn csrf_of(&self, id: &str) -> StoreResult<Option<String>> {
        self.store.session_csrf(&id_hash(id), now_ms()).await
    }

    /// Ends a session (sign-out), on every node.
    pub(crate) async fn end(&self, id: &str) -> StoreResult<()> {
        self.store.delete_session(&id_hash(id)).await
    }

    /// Whether the request's session cookie is valid, and (for a state-changing request) its
    /// CSRF header matches.
    pub(crate) async fn authorizes(&self, headers: &HeaderMap, changes_state: bool) -> Verdict {
        let Some(id) = session_id(headers) else {
            return Verdict::Refused;
        };
        let csrf = match self.csrf_of(&id).await {
            Ok(Some(csrf)) => csrf,
            Ok(None) => return Verdict::Refused,
            Err(error) => return Verdict::Unavailable(error),
        };
        let csrf_matches = headers
            .get(CSRF_HEADER)
            .is_some_and(|v| same_secret(v.as_bytes(), csrf.as_bytes()));
        if !changes_state || csrf_matches {
            Verdict::Allowed
        } else {
            Verdict::Refused
        }
    }
}

/// Whether two secrets are equal, in time that depends only on their lengths (CSRF tokens all
/// have one length, so it reveals nothing), so a wrong guess cannot be refined byte by byte.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    bool::from(given.ct_eq(expected))
}

/// The hash a session is stored under (hex, like the admin token's).
fn id_hash(id: &str) -> String {
    hex::encode(hash_token(id))
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
