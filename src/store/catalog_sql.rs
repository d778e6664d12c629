//! The catalog tables: inputs, outputs, connections and their settings revisions, plus `meta`.
//! Written by the admin API, read whole into the in-memory catalog.

use sqlx::FromRow;

use super::backend::{Sql, args};
use super::{Store, StoreError, StoreResult};
use crate::model::ids::{ConnectionId, InputId, OutputId};

/// An input row.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct InputRow {
    pub(crate) id: InputId,
    pub(crate) name: String,
    pub(crate) platform: String,
    pub(crate) api_key: String,
    pub(crate) api_secret: String,
    pub(crate) created_at: i64,
    /// JSON of the input's settings.
    pub(crate) settings: String,
}

/// An output row; `settings` is the JSON of the output's kind-specific settings. The signing
/// secrets are columns of their own, never part of the settings the admin API shows.
#[derive(Clone, FromRow)]
pub(crate) struct OutputRow {
    pub(crate) id: OutputId,
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) settings: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    /// The `whsec_…` secret requests are signed with; `None`: not signed.
    pub(crate) signing_secret: Option<String>,
    /// The secret the last rotation replaced, which signs too for a while after it.
    pub(crate) previous_signing_secret: Option<String>,
    /// When the current secret was issued (Unix milliseconds).
    pub(crate) signing_rotated_at: Option<i64>,
}

impl std::fmt::Debug for OutputRow {
    // The secrets are left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputRow")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("settings", &self.settings)
            .field("signing", &self.signing_secret.is_some())
            .field("signing_rotated_at", &self.signing_rotated_at)
            .finish_non_exhaustive()
    }
}

/// A connection row joined with its current settings revision.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct ConnectionRow {
    pub(crate) id: ConnectionId,
    pub(crate) input_id: InputId,
    pub(crate) output_id: OutputId,
    pub(crate) revision_id: i64,
    pub(crate) settings: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

const INSERT_INPUT: Sql = Sql::shared(
    "INSERT INTO inputs \
     (id, name, platform, api_key, api_secret, created_at, settings) VALUES ($1, $2, $3, $4, $5, $6, $7)",
);
const SELECT_INPUTS: Sql = Sql::shared(
    "SELECT id, name, platform, api_key, api_secret, created_at, settings FROM inputs ORDER BY id",
);
const SELECT_INPUT: Sql = Sql::shared(
    "SELECT id, name, platform, api_key, api_secret, created_at, settings FROM inputs WHERE id = $1",
);
const UPDATE_INPUT: Sql = Sql::shared("UPDATE inputs SET name = $2, settings = $3 WHERE id = $1");
const UPDATE_INPUT_SECRET: Sql = Sql::shared("UPDATE inputs SET api_secret = $2 WHERE id = $1");
const DELETE_INPUT: Sql = Sql::shared("DELETE FROM inputs WHERE id = $1");
const COUNT_CONNECTIONS_OF_INPUT: Sql =
    Sql::shared("SELECT COUNT(*) FROM connections WHERE input_id = $1");

const INSERT_OUTPUT: Sql = Sql::shared(
    "INSERT INTO outputs (id, name, kind, settings, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $5)",
);
const SELECT_OUTPUTS: Sql = Sql::shared(
    "SELECT id, name, kind, settings, created_at, updated_at, signing_secret, \
     previous_signing_secret, signing_rotated_at FROM outputs ORDER BY id",
);
const SELECT_OUTPUT: Sql = Sql::shared(
    "SELECT id, name, kind, settings, created_at, updated_at, signing_secret, \
     previous_signing_secret, signing_rotated_at FROM outputs WHERE id = $1",
);
const UPDATE_OUTPUT: Sql =
    Sql::shared("UPDATE outputs SET name = $2, settings = $3, updated_at = $4 WHERE id = $1");
/// The right-hand sides read the row as it was, so the current secret becomes the previous one.
const ROTATE_SIGNING_SECRET: Sql = Sql::shared(
    "UPDATE outputs SET previous_signing_secret = signing_secret, signing_secret = $2, \
     signing_rotated_at = $3, updated_at = $3 WHERE id = $1",
);
const CLEAR_SIGNING_SECRETS: Sql = Sql::shared(
    "UPDATE outputs SET signing_secret = NULL, previous_signing_secret = NULL, \
     signing_rotated_at = NULL, updated_at = $2 WHERE id = $1",
);
const DELETE_OUTPUT: Sql = Sql::shared("DELETE FROM outputs WHERE id = $1");
const COUNT_CONNECTIONS_OF_OUTPUT: Sql =
    Sql::shared("SELECT COUNT(*) FROM connections WHERE output_id = $1");

const INSERT_REVISION: Sql = Sql::shared(
    "INSERT INTO connection_revisions (connection_id, settings, created_at) \
     VALUES ($1, $2, $3) RETURNING id",
);
const INSERT_CONNECTION: Sql = Sql::shared(
    "INSERT INTO connections \
     (id, input_id, output_id, revision_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)",
);
const SELECT_CONNECTIONS: Sql = Sql::shared(
    "SELECT c.id, c.input_id, c.output_id, c.revision_id, r.settings, \
     c.created_at, c.updated_at FROM connections c \
     JOIN connection_revisions r ON r.id = c.revision_id ORDER BY c.id",
);
const SELECT_CONNECTION: Sql = Sql::shared(
    "SELECT c.id, c.input_id, c.output_id, c.revision_id, r.settings, \
     c.created_at, c.updated_at FROM connections c \
     JOIN connection_revisions r ON r.id = c.revision_id WHERE c.id = $1",
);
const UPDATE_CONNECTION: Sql = Sql::shared(
    "UPDATE connections SET revision_id = $2, output_id = $3, updated_at = $4 WHERE id = $1",
);
const DELETE_CONNECTION: Sql = Sql::shared("DELETE FROM connections WHERE id = $1");
const DELETE_CONNECTION_JOBS: Sql = Sql::shared("DELETE FROM jobs WHERE connection_id = $1");
const SELECT_REVISION: Sql = Sql::shared("SELECT settings FROM connection_revisions WHERE id = $1");

const SELECT_META: Sql = Sql::shared("SELECT value FROM meta WHERE key = $1");
const INSERT_META: Sql =
    Sql::shared("INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING");

/// A unique-constraint violation becomes a `Conflict` with `code`; other errors pass through.
fn unique_as_conflict(error: sqlx::Error, code: &'static str) -> StoreError {
    match error.as_database_error() {
        Some(db) if db.is_unique_violation() => StoreError::Conflict(code),
        _ => StoreError::Database(error),
    }
}

/// A statement that must change a row: none changed means the row does not exist.
fn changed_one(affected: u64) -> StoreResult<()> {
    if affected == 0 {
        Err(StoreError::NotFound)
    } else {
        Ok(())
    }
}

impl Store {
    pub(crate) async fn insert_input(&self, row: &InputRow) -> StoreResult<()> {
        let args = args![
            &row.id,
            &row.name,
            &row.platform,
            &row.api_key,
            &row.api_secret,
            row.created_at,
            &row.settings
        ];
        self.execute(INSERT_INPUT, args).await?;
        Ok(())
    }

    pub(crate) async fn list_inputs(&self) -> StoreResult<Vec<InputRow>> {
        Ok(self.fetch_all(SELECT_INPUTS, &[]).await?)
    }

    pub(crate) async fn get_input(&self, id: &InputId) -> StoreResult<InputRow> {
        let row = self.fetch_optional(SELECT_INPUT, args![id]).await?;
        row.ok_or(StoreError::NotFound)
    }

    pub(crate) async fn update_input(
        &self,
        id: &InputId,
        name: &str,
        settings: &str,
    ) -> StoreResult<()> {
        changed_one(
            self.execute(UPDATE_INPUT, args![id, name, settings])
                .await?,
        )
    }

    pub(crate) async fn set_input_secret(&self, id: &InputId, secret: &str) -> StoreResult<()> {
        changed_one(self.execute(UPDATE_INPUT_SECRET, args![id, secret]).await?)
    }

    /// Deletes an input that no connection uses.
    pub(crate) async fn delete_input(&self, id: &InputId) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let (used,): (i64,) = tx.fetch_one(COUNT_CONNECTIONS_OF_INPUT, args![id]).await?;
        if used > 0 {
            return Err(StoreError::Conflict("input_in_use"));
        }
        changed_one(tx.execute(DELETE_INPUT, args![id]).await?)?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn insert_output(&self, row: &OutputRow) -> StoreResult<()> {
        let args = args![&row.id, &row.name, &row.kind, &row.settings, row.created_at];
        self.execute(INSERT_OUTPUT, args).await?;
        Ok(())
    }

    pub(crate) async fn list_outputs(&self) -> StoreResult<Vec<OutputRow>> {
        Ok(self.fetch_all(SELECT_OUTPUTS, &[]).await?)
    }

    pub(crate) async fn get_output(&self, id: &OutputId) -> StoreResult<OutputRow> {
        let row = self.fetch_optional(SELECT_OUTPUT, args![id]).await?;
        row.ok_or(StoreError::NotFound)
    }

    pub(crate) async fn update_output(
        &self,
        id: &OutputId,
        name: &str,
        settings: &str,
        now: i64,
    ) -> StoreResult<()> {
        let args = args![id, name, settings, now];
        changed_one(self.execute(UPDATE_OUTPUT, args).await?)
    }

    /// Makes `secret` the output's signing secret, and the one it replaces the previous one (a
    /// secret replaced before stops signing at once).
    pub(crate) async fn rotate_signing_secret(
        &self,
        id: &OutputId,
        secret: &str,
        now: i64,
    ) -> StoreResult<()> {
        let args = args![id, secret, now];
        changed_one(self.execute(ROTATE_SIGNING_SECRET, args).await?)
    }

    /// Removes the output's signing secrets, current and previous: its requests go unsigned.
    pub(crate) async fn clear_signing_secrets(&self, id: &OutputId, now: i64) -> StoreResult<()> {
        changed_one(self.execute(CLEAR_SIGNING_SECRETS, args![id, now]).await?)
    }

    /// Deletes an output that no connection uses.
    pub(crate) async fn delete_output(&self, id: &OutputId) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let (used,): (i64,) = tx.fetch_one(COUNT_CONNECTIONS_OF_OUTPUT, args![id]).await?;
        if used > 0 {
            return Err(StoreError::Conflict("output_in_use"));
        }
        changed_one(tx.execute(DELETE_OUTPUT, args![id]).await?)?;
        tx.commit().await?;
        Ok(())
    }

    /// Creates a connection and its first settings revision in one transaction.
    pub(crate) async fn insert_connection(
        &self,
        id: &ConnectionId,
        input_id: &InputId,
        output_id: &OutputId,
        settings: &str,
        now: i64,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let (revision,): (i64,) = tx
            .fetch_one(INSERT_REVISION, args![id, settings, now])
            .await?;
        tx.execute(
            INSERT_CONNECTION,
            args![id, input_id, output_id, revision, now],
        )
        .await
        .map_err(|e| unique_as_conflict(e, "connection_exists"))?;
        tx.commit().await?;
        Ok(())
    }

    /// Saves a new settings revision (and possibly a new output) for a connection.
    pub(crate) async fn update_connection(
        &self,
        id: &ConnectionId,
        output_id: &OutputId,
        settings: &str,
        now: i64,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        let (revision,): (i64,) = tx
            .fetch_one(INSERT_REVISION, args![id, settings, now])
            .await?;
        let args = args![id, revision, output_id, now];
        changed_one(tx.execute(UPDATE_CONNECTION, args).await?)?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn list_connections(&self) -> StoreResult<Vec<ConnectionRow>> {
        Ok(self.fetch_all(SELECT_CONNECTIONS, &[]).await?)
    }

    pub(crate) async fn get_connection(&self, id: &ConnectionId) -> StoreResult<ConnectionRow> {
        let row = self.fetch_optional(SELECT_CONNECTION, args![id]).await?;
        row.ok_or(StoreError::NotFound)
    }

    /// Deletes a connection and its pending deliveries.
    pub(crate) async fn delete_connection(&self, id: &ConnectionId) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        changed_one(tx.execute(DELETE_CONNECTION, args![id]).await?)?;
        tx.execute(DELETE_CONNECTION_JOBS, args![id]).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The settings JSON of one revision.
    pub(crate) async fn get_revision(&self, id: i64) -> StoreResult<String> {
        let row: Option<(String,)> = self.fetch_optional(SELECT_REVISION, args![id]).await?;
        row.map(|(settings,)| settings).ok_or(StoreError::NotFound)
    }

    pub(crate) async fn get_meta(&self, key: &str) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = self.fetch_optional(SELECT_META, args![key]).await?;
        Ok(row.map(|(v,)| v))
    }

    /// Sets a value unless the key already has one; returns the value that is stored afterwards,
    /// so two nodes racing to initialise agree on one.
    pub(crate) async fn init_meta(&self, key: &str, value: &str) -> StoreResult<String> {
        self.execute(INSERT_META, args![key, value]).await?;
        self.get_meta(key).await?.ok_or(StoreError::NotFound)
    }
}
