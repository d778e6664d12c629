//! Dashboard sessions, shared by every node on the database: each row is one signed-in
//! browser, keyed by the SHA-256 of its session id (hex). The raw id never reaches the
//! database; `access` hashes it and decides what a row means.

use super::backend::{Sql, args};
use super::{Store, StoreResult};

/// `$1` id hash, `$2` CSRF token, `$3` created at, `$4` expires at.
const INSERT_SESSION: Sql = Sql::shared(
    "INSERT INTO sessions (id_hash, csrf, created_at, expires_at) VALUES ($1, $2, $3, $4)",
);
/// `$1` id hash, `$2` now: only a session that has not expired answers.
const SELECT_SESSION_CSRF: Sql =
    Sql::shared("SELECT csrf FROM sessions WHERE id_hash = $1 AND expires_at > $2");
const DELETE_SESSION: Sql = Sql::shared("DELETE FROM sessions WHERE id_hash = $1");
/// `$1` now.
pub(in crate::store) const PRUNE_SESSIONS: Sql =
    Sql::shared("DELETE FROM sessions WHERE expires_at <= $1");

/// A session to store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewSession<'a> {
    pub(crate) id_hash: &'a str,
    pub(crate) csrf: &'a str,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
}

impl Store {
    /// Stores a new session.
    pub(crate) async fn insert_session(&self, session: NewSession<'_>) -> StoreResult<()> {
        let NewSession {
            id_hash,
            csrf,
            created_at,
            expires_at,
        } = session;
        self.execute(INSERT_SESSION, args![id_hash, csrf, created_at, expires_at])
            .await?;
        Ok(())
    }

    /// The CSRF token of the session whose id hashes to `id_hash`, if it is still live at `now`.
    pub(crate) async fn session_csrf(
        &self,
        id_hash: &str,
        now: i64,
    ) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = self
            .fetch_optional(SELECT_SESSION_CSRF, args![id_hash, now])
            .await?;
        Ok(row.map(|(csrf,)| csrf))
    }

    /// Ends a session (on every node at once, since they all read this table).
    pub(crate) async fn delete_session(&self, id_hash: &str) -> StoreResult<()> {
        self.execute(DELETE_SESSION, args![id_hash]).await?;
        Ok(())
    }

    /// Deletes the sessions that expired by `now`; returns how many.
    pub(crate) async fn prune_sessions(&self, now: i64) -> StoreResult<u64> {
        Ok(self.execute(PRUNE_SESSIONS, args![now]).await?)
    }
}
