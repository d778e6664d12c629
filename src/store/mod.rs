//! Storage: one `Store` over SQLite (the embedded default) or PostgreSQL, chosen by the URL.
//!
//! Only this module speaks SQL, and it decides nothing: it commits the rows it is given and
//! returns ids. [`backend`] is the one place that knows there are two databases; every
//! statement is written once where the dialects agree and once per backend where they do not.
//! Hot-path writes (accepted batches, job updates, claims) go through the group-commit
//! [`writer`], whose transaction runs the named [`steps`]; admin writes go straight to the pool.

mod arg;
mod backend;
mod batch_steps;
mod catalog_changes;
mod catalog_sql;
pub(crate) mod checkpoint;
pub(crate) mod coalesce_sql;
pub(crate) mod data_catalog_sql;
mod direct;
#[cfg(test)]
pub(crate) mod faults;
pub(crate) mod forwarding_sql;
mod gather;
mod group;
pub(crate) mod health_sql;
mod identity_known;
mod identity_read;
pub(crate) mod identity_sql;
mod identity_steps;
pub(crate) mod metrics_sql;
mod pg_lane;
mod private_files;
pub(crate) mod prune_step;
pub(crate) mod queue;
pub(crate) mod replays_sql;
mod retention_sql;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod scratch;
pub(crate) mod sessions_sql;
mod steps;
pub(crate) mod writer;

#[cfg(test)]
pub(crate) mod tests;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

pub(crate) use catalog_changes::CatalogChange;
pub(crate) use catalog_sql::{ConnectionRow, InputRow, OutputRow};

use backend::Sql;

static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");
static POSTGRES_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// Every transaction Boson runs takes milliseconds. One left open longer belongs to a node that
/// stalled in the middle of it (a paused VM, a stopped process): PostgreSQL then ends its session,
/// so the row locks it holds (a user's profile, say) do not stop every other node's writes.
const IDLE_IN_TRANSACTION_TIMEOUT_MS: &str = "2000";

/// Errors a store operation can end in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Conflict(&'static str),
    /// The caller declined to go on (e.g. a cap on new users); nothing was written.
    #[error("refused by the caller")]
    Refused,
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
            let options = sqlx::postgres::PgConnectOptions::from_str(url)
                .context("invalid PostgreSQL URL")?
                .options([(
                    "idle_in_transaction_session_timeout",
                    IDLE_IN_TRANSACTION_TIMEOUT_MS,
                )]);
            let pool = PgPoolOptions::new()
                .max_connections(16)
                .connect_with(options)
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
        self.execute(Sql::shared("SELECT 1"), &[]).await.is_ok()
    }

    /// Whether other nodes may work on this database too (PostgreSQL), so this node must not
    /// assume its own memory is the whole truth: it follows the catalog changes other nodes
    /// make ([`Store::catalog_changes`]), and leases found at start may belong to a live node.
    /// The embedded database has one node.
    pub(crate) fn is_shared_by_nodes(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    pub(crate) async fn close(&self) {
        match self {
            Store::Sqlite(pool) => pool.close().await,
            Store::Postgres(pool) => pool.close().await,
        }
    }
}

async fn connect_sqlite(url: &str) -> anyhow::Result<SqlitePool> {
    let path = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let path = path.split('?').next().unwrap_or(path);
    private_files::prepare(std::path::Path::new(path))?;
    let pragmas = sqlite_pragmas();
    let mut options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))
        .with_context(|| format!("invalid SQLite URL {url:?}"))?
        .create_if_missing(true)
        .busy_timeout(BUSY_TIMEOUT);
    for (name, value) in pragmas {
        options = options.pragma(name, value);
    }
    SqlitePoolOptions::new()
        .max_connections(4)
        // A ping before each use is a round trip to the connection's thread (two thread
        // wake-ups) on every query and transaction, and checks nothing an embedded database
        // can lose: a dead worker thread fails the query itself. sqlx still pings on release.
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .with_context(|| format!("failed to open SQLite database {path}"))
}

/// The pragmas of every connection to a SQLite database, in the order they are set: the pool's
/// (sqlx's) and the writer's own ([`direct`]), so both sync and checkpoint alike. Both also
/// wait [`BUSY_TIMEOUT`] for a lock (the writer with a busy handler of its own).
fn sqlite_pragmas() -> [(&'static str, String); 4] {
    [
        ("journal_mode", "WAL".to_owned()),
        // FULL: an accepted batch survives power loss, not only a process crash. Group commit
        // makes its cost per group, not per request.
        ("synchronous", "FULL".to_owned()),
        // The WAL is copied back by a background task; a commit does it only past this bound.
        ("wal_autocheckpoint", checkpoint::BOUND_PAGES.to_string()),
        ("foreign_keys", "ON".to_owned()),
    ]
}

/// How long a SQLite connection waits, in all, for a lock another one holds before its statement
/// fails busy: the pool's connections with SQLite's own handler, the writer's with its own
/// ([`direct`]'s `busy_step`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
