//! Storage: one `Store` over SQLite (the embedded default) or PostgreSQL, chosen by the URL.
//!
//! Only this module speaks SQL. Both backends share the same SQL text where the dialects agree
//! (`$n` placeholders, `ON CONFLICT`, `RETURNING`); the `with_pool!` macro expands one body for
//! each backend so the shared code is written once and type-checked twice. Hot-path writes
//! (accepted batches, job acks) go through the group-commit [`writer`]; admin writes go straight
//! to the pool.

mod catalog_sql;
mod group;
pub(crate) mod identity_sql;
pub(crate) mod queue;
pub(crate) mod writer;

#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub(crate) use catalog_sql::{ConnectionRow, InputRow, OutputRow};

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Expands `$body` once per backend with `$pool` bound to that backend's pool.
macro_rules! with_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            $crate::store::Store::Sqlite($pool) => $body,
            $crate::store::Store::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// Errors a store operation can end in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Conflict(&'static str),
    #[error("database error")]
    Database(#[from] sqlx::Error),
    #[error("the writer has stopped")]
    WriterStopped,
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

/// The database, on one of two backends.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Store {
    /// Connects to the database the URL names, creating a SQLite file (and its directory) if needed,
    /// and runs the migrations.
    pub(crate) async fn connect(url: &str) -> anyhow::Result<Self> {
        let store = if url.starts_with("sqlite:") {
            Store::Sqlite(connect_sqlite(url).await?)
        } else {
            let pool = PgPoolOptions::new()
                .max_connections(16)
                .connect(url)
                .await
                .context("failed to connect to PostgreSQL")?;
            Store::Postgres(pool)
        };
        store.migrate().await?;
        Ok(store)
    }

    /// Runs pending migrations (sqlx takes an advisory lock on PostgreSQL, so nodes may race).
    pub(crate) async fn migrate(&self) -> anyhow::Result<()> {
        match self {
            Store::Sqlite(pool) => SQLITE_MIGRATOR.run(pool).await,
            Store::Postgres(pool) => POSTGRES_MIGRATOR.run(pool).await,
        }
        .context("failed to run database migrations")
    }

    /// Whether the database answers.
    pub(crate) async fn ping(&self) -> bool {
        with_pool!(self, pool => sqlx::query("SELECT 1").execute(pool).await.is_ok())
    }

    /// Whether this is the embedded single-node backend.
    pub(crate) fn is_embedded(&self) -> bool {
        matches!(self, Store::Sqlite(_))
    }

    pub(crate) async fn close(&self) {
        with_pool!(self, pool => pool.close().await);
    }
}

async fn connect_sqlite(url: &str) -> anyhow::Result<SqlitePool> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or(path);
    if let Some(dir) = std::path::Path::new(path)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create data directory {}", dir.display()))?;
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
        .with_context(|| format!("invalid SQLite URL {url:?}"))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: an accepted batch survives power loss, not only a process crash. Group commit
        // makes its cost per group, not per request.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .with_context(|| format!("failed to open SQLite database {path}"))
}
