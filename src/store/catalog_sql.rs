//! The catalog tables: inputs, outputs, connections and their settings revisions, plus `meta`.
//! Written by the admin API, read whole into the in-memory catalog.

use sqlx::FromRow;

use super::{Store, StoreError, StoreResult, with_pool};

/// An input row.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct InputRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) platform: String,
    pub(crate) api_key: String,
    pub(crate) api_secret: String,
    pub(crate) created_at: i64,
    /// JSON of the input's settings.
    pub(crate) settings: String,
}

/// An output row; `settings` is the JSON of the output's kind-specific settings.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct OutputRow {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) settings: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// A connection row joined with its current settings revision.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct ConnectionRow {
    pub(crate) id: String,
    pub(crate) input_id: String,
    pub(crate) output_id: String,
    pub(crate) revision_id: i64,
    pub(crate) settings: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

const INSERT_INPUT: &str = "INSERT INTO inputs \
     (id, name, platform, api_key, api_secret, created_at, settings) VALUES ($1, $2, $3, $4, $5, $6, $7)";
const SELECT_INPUTS: &str =
    "SELECT id, name, platform, api_key, api_secret, created_at, settings FROM inputs ORDER BY id";
const SELECT_INPUT: &str = "SELECT id, name, platform, api_key, api_secret, created_at, settings FROM inputs WHERE id = $1";
const UPDATE_INPUT: &str = "UPDATE inputs SET name = $2, settings = $3 WHERE id = $1";
const UPDATE_INPUT_SECRET: &str = "UPDATE inputs SET api_secret = $2 WHERE id = $1";
const DELETE_INPUT: &str = "DELETE FROM inputs WHERE id = $1";
const COUNT_CONNECTIONS_OF_INPUT: &str = "SELECT COUNT(*) FROM connections WHERE input_id = $1";

const INSERT_OUTPUT: &str = "INSERT INTO outputs (id, name, kind, settings, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $5)";
const SELECT_OUTPUTS: &str =
    "SELECT id, name, kind, settings, created_at, updated_at FROM outputs ORDER BY id";
const SELECT_OUTPUT: &str =
    "SELECT id, name, kind, settings, created_at, updated_at FROM outputs WHERE id = $1";
const UPDATE_OUTPUT: &str =
    "UPDATE outputs SET name = $2, settings = $3, updated_at = $4 WHERE id = $1";
const DELETE_OUTPUT: &str = "DELETE FROM outputs WHERE id = $1";
const COUNT_CONNECTIONS_OF_OUTPUT: &str = "SELECT COUNT(*) FROM connections WHERE output_id = $1";

const INSERT_REVISION: &str = "INSERT INTO connection_revisions (connection_id, settings, created_at) \
     VALUES ($1, $2, $3) RETURNING id";
const INSERT_CONNECTION: &str = "INSERT INTO connections \
     (id, input_id, output_id, revision_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)";
const SELECT_CONNECTIONS: &str = "SELECT c.id, c.input_id, c.output_id, c.revision_id, r.settings, \
     c.created_at, c.updated_at FROM connections c \
     JOIN connection_revisions r ON r.id = c.revision_id ORDER BY c.id";
const SELECT_CONNECTION: &str = "SELECT c.id, c.input_id, c.output_id, c.revision_id, r.settings, \
     c.created_at, c.updated_at FROM connections c \
     JOIN connection_revisions r ON r.id = c.revision_id WHERE c.id = $1";
const UPDATE_CONNECTION: &str =
    "UPDATE connections SET revision_id = $2, output_id = $3, updated_at = $4 WHERE id = $1";
const DELETE_CONNECTION: &str = "DELETE FROM connections WHERE id = $1";
const DELETE_CONNECTION_JOBS: &str = "DELETE FROM jobs WHERE connection_id = $1";
const SELECT_REVISION: &str = "SELECT settings FROM connection_revisions WHERE id = $1";

const RECORD_FORWARDING: &str = "INSERT INTO forwarding_stats (input_id, module_id, events, last_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (input_id, module_id) DO UPDATE SET \
     events = forwarding_stats.events + excluded.events, last_at = excluded.last_at";
const SELECT_FORWARDING: &str = "SELECT module_id, events, last_at FROM forwarding_stats WHERE input_id = $1 ORDER BY module_id";

const SELECT_META: &str = "SELECT value FROM meta WHERE key = $1";
const INSERT_META: &str =
    "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING";

/// A unique-constraint violation becomes a `Conflict` with `code`; other errors pass through.
fn unique_as_conflict(error: sqlx::Error, code: &'static str) -> StoreError {
    match error.as_database_error() {
        Some(db) if db.is_unique_violation() => StoreError::Conflict(code),
        _ => StoreError::Database(error),
    }
}

impl Store {
    pub(crate) async fn insert_input(&self, row: &InputRow) -> StoreResult<()> {
        with_pool!(self, pool => {
            sqlx::query(INSERT_INPUT)
                .bind(&row.id).bind(&row.name).bind(&row.platform)
                .bind(&row.api_key).bind(&row.api_secret).bind(row.created_at).bind(&row.settings)
                .execute(pool).await?;
        });
        Ok(())
    }

    pub(crate) async fn list_inputs(&self) -> StoreResult<Vec<InputRow>> {
        Ok(with_pool!(self, pool => sqlx::query_as(SELECT_INPUTS).fetch_all(pool).await?))
    }

    pub(crate) async fn get_input(&self, id: &str) -> StoreResult<InputRow> {
        let row = with_pool!(self, pool => sqlx::query_as(SELECT_INPUT).bind(id).fetch_optional(pool).await?);
        row.ok_or(StoreError::NotFound)
    }

    pub(crate) async fn update_input(
        &self,
        id: &str,
        name: &str,
        settings: &str,
    ) -> StoreResult<()> {
        let affected = with_pool!(self, pool =>
            sqlx::query(UPDATE_INPUT).bind(id).bind(name).bind(settings).execute(pool).await?.rows_affected());
        if affected == 0 {
            Err(StoreError::NotFound)
        } else {
            Ok(())
        }
    }

    pub(crate) async fn set_input_secret(&self, id: &str, secret: &str) -> StoreResult<()> {
        let affected = with_pool!(self, pool =>
            sqlx::query(UPDATE_INPUT_SECRET).bind(id).bind(secret).execute(pool).await?.rows_affected());
        if affected == 0 {
            Err(StoreError::NotFound)
        } else {
            Ok(())
        }
    }

    /// Deletes an input that no connection uses.
    pub(crate) async fn delete_input(&self, id: &str) -> StoreResult<()> {
        with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let (used,): (i64,) = sqlx::query_as(COUNT_CONNECTIONS_OF_INPUT).bind(id).fetch_one(&mut *tx).await?;
            if used > 0 {
                return Err(StoreError::Conflict("input_in_use"));
            }
            let affected = sqlx::query(DELETE_INPUT).bind(id).execute(&mut *tx).await?.rows_affected();
            if affected == 0 {
                return Err(StoreError::NotFound);
            }
            tx.commit().await?;
        });
        Ok(())
    }

    pub(crate) async fn insert_output(&self, row: &OutputRow) -> StoreResult<()> {
        with_pool!(self, pool => {
            sqlx::query(INSERT_OUTPUT)
                .bind(&row.id).bind(&row.name).bind(&row.kind).bind(&row.settings).bind(row.created_at)
                .execute(pool).await?;
        });
        Ok(())
    }

    pub(crate) async fn list_outputs(&self) -> StoreResult<Vec<OutputRow>> {
        Ok(with_pool!(self, pool => sqlx::query_as(SELECT_OUTPUTS).fetch_all(pool).await?))
    }

    pub(crate) async fn get_output(&self, id: &str) -> StoreResult<OutputRow> {
        let row = with_pool!(self, pool => sqlx::query_as(SELECT_OUTPUT).bind(id).fetch_optional(pool).await?);
        row.ok_or(StoreError::NotFound)
    }

    pub(crate) async fn update_output(
        &self,
        id: &str,
        name: &str,
        settings: &str,
        now: i64,
    ) -> StoreResult<()> {
        let affected = with_pool!(self, pool =>
            sqlx::query(UPDATE_OUTPUT).bind(id).bind(name).bind(settings).bind(now)
                .execute(pool).await?.rows_affected());
        if affected == 0 {
            Err(StoreError::NotFound)
        } else {
            Ok(())
        }
    }

    /// Deletes an output that no connection uses.
    pub(crate) async fn delete_output(&self, id: &str) -> StoreResult<()> {
        with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let (used,): (i64,) = sqlx::query_as(COUNT_CONNECTIONS_OF_OUTPUT).bind(id).fetch_one(&mut *tx).await?;
            if used > 0 {
                return Err(StoreError::Conflict("output_in_use"));
            }
            let affected = sqlx::query(DELETE_OUTPUT).bind(id).execute(&mut *tx).await?.rows_affected();
            if affected == 0 {
                return Err(StoreError::NotFound);
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Creates a connection and its first settings revision in one transaction.
    pub(crate) async fn insert_connection(
        &self,
        id: &str,
        input_id: &str,
        output_id: &str,
        settings: &str,
        now: i64,
    ) -> StoreResult<()> {
        with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let (revision,): (i64,) = sqlx::query_as(INSERT_REVISION)
                .bind(id).bind(settings).bind(now).fetch_one(&mut *tx).await?;
            sqlx::query(INSERT_CONNECTION)
                .bind(id).bind(input_id).bind(output_id).bind(revision).bind(now)
                .execute(&mut *tx).await
                .map_err(|e| unique_as_conflict(e, "connection_exists"))?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Saves a new settings revision (and possibly a new output) for a connection.
    pub(crate) async fn update_connection(
        &self,
        id: &str,
        output_id: &str,
        settings: &str,
        now: i64,
    ) -> StoreResult<()> {
        with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let (revision,): (i64,) = sqlx::query_as(INSERT_REVISION)
                .bind(id).bind(settings).bind(now).fetch_one(&mut *tx).await?;
            let affected = sqlx::query(UPDATE_CONNECTION)
                .bind(id).bind(revision).bind(output_id).bind(now)
                .execute(&mut *tx).await?.rows_affected();
            if affected == 0 {
                return Err(StoreError::NotFound);
            }
            tx.commit().await?;
        });
        Ok(())
    }

    pub(crate) async fn list_connections(&self) -> StoreResult<Vec<ConnectionRow>> {
        Ok(with_pool!(self, pool => sqlx::query_as(SELECT_CONNECTIONS).fetch_all(pool).await?))
    }

    pub(crate) async fn get_connection(&self, id: &str) -> StoreResult<ConnectionRow> {
        let row = with_pool!(self, pool => sqlx::query_as(SELECT_CONNECTION).bind(id).fetch_optional(pool).await?);
        row.ok_or(StoreError::NotFound)
    }

    /// Deletes a connection and its pending deliveries.
    pub(crate) async fn delete_connection(&self, id: &str) -> StoreResult<()> {
        with_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            let affected = sqlx::query(DELETE_CONNECTION).bind(id).execute(&mut *tx).await?.rows_affected();
            if affected == 0 {
                return Err(StoreError::NotFound);
            }
            sqlx::query(DELETE_CONNECTION_JOBS).bind(id).execute(&mut *tx).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// The settings JSON of one revision.
    pub(crate) async fn get_revision(&self, id: i64) -> StoreResult<String> {
        let row: Option<(String,)> = with_pool!(self, pool => sqlx::query_as(SELECT_REVISION).bind(id).fetch_optional(pool).await?);
        row.map(|(settings,)| settings).ok_or(StoreError::NotFound)
    }

    /// Adds `events` forwarded by kit `module_id` to an input's statistics.
    pub(crate) async fn record_forwarding(
        &self,
        input_id: &str,
        module_id: i64,
        events: i64,
        now: i64,
    ) -> StoreResult<()> {
        with_pool!(self, pool => {
            sqlx::query(RECORD_FORWARDING).bind(input_id).bind(module_id).bind(events).bind(now).execute(pool).await?;
        });
        Ok(())
    }

    /// An input's kit forwarding statistics: (module id, events, last report).
    pub(crate) async fn forwarding_stats(
        &self,
        input_id: &str,
    ) -> StoreResult<Vec<(i64, i64, i64)>> {
        Ok(
            with_pool!(self, pool => sqlx::query_as(SELECT_FORWARDING).bind(input_id).fetch_all(pool).await?),
        )
    }

    pub(crate) async fn get_meta(&self, key: &str) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = with_pool!(self, pool => sqlx::query_as(SELECT_META).bind(key).fetch_optional(pool).await?);
        Ok(row.map(|(v,)| v))
    }

    /// Sets a value unless the key already has one; returns the value that is stored afterwards,
    /// so two nodes racing to initialise agree on one.
    pub(crate) async fn init_meta(&self, key: &str, value: &str) -> StoreResult<String> {
        with_pool!(self, pool => { sqlx::query(INSERT_META).bind(key).bind(value).execute(pool).await?; });
        self.get_meta(key).await?.ok_or(StoreError::NotFound)
    }
}
