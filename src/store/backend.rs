//! The one place that knows there are two backends. Every statement is an [`Sql`]: one text
//! both dialects accept (`$n` placeholders, `ON CONFLICT`, `RETURNING`), or one text each where
//! they differ (JSON functions, row locks, id sequences). Values are bound as [`Arg`]s, the few
//! column types Boson's tables hold. The rest of the store runs statements through
//! [`Store`] (on the pool) or [`Tx`] (in a transaction) and never asks which backend it is on.

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgConnection, PgRow, Postgres};
use sqlx::sqlite::{Sqlite, SqliteRow};
use sqlx::{Database, Decode, FromRow, Transaction, Type};

use super::Store;
pub(crate) use super::arg::Arg;
use super::direct::{DirectConnection, DirectRow, DirectTx};
use super::pg_lane::{Begin, KeptPg, LaneTx};
use crate::model::ids::{BatchId, ConnectionId, InputId, Mpid, OutputId};

/// A statement, as each backend spells it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql {
    sqlite: &'static str,
    postgres: &'static str,
    /// A statement PostgreSQL does another way (in a statement of its own): running it there is
    /// a bug, answered with an error rather than with an empty query's nothing.
    sqlite_only: bool,
}

impl Sql {
    /// A statement both backends accept as written.
    pub(crate) const fn shared(text: &'static str) -> Self {
        Self {
            sqlite: text,
            postgres: text,
            sqlite_only: false,
        }
    }

    /// A statement the dialects spell differently. Both texts are needed (a `const` with an
    /// empty one does not compile): a statement one backend does without is
    /// [`Sql::postgres_only`] or [`Sql::sqlite_only`].
    pub(crate) const fn each(sqlite: &'static str, postgres: &'static str) -> Self {
        assert!(
            !sqlite.is_empty() && !postgres.is_empty(),
            "an empty statement: use Sql::postgres_only or Sql::sqlite_only"
        );
        Self {
            sqlite,
            postgres,
            sqlite_only: false,
        }
    }

    /// A statement only SQLite runs, where PostgreSQL does the same work another way (e.g. the
    /// identity step's reads and writes, one statement each there). Run on PostgreSQL, it is an
    /// error: a step that forgot to branch would otherwise skip its work without a word.
    pub(crate) const fn sqlite_only(sqlite: &'static str) -> Self {
        Self {
            sqlite,
            postgres: "",
            sqlite_only: true,
        }
    }

    /// The SQLite text (for tests that read a statement's plan).
    #[cfg(test)]
    pub(in crate::store) const fn sqlite_text(self) -> &'static str {
        self.sqlite
    }

    /// The PostgreSQL text (for tests that read a statement's plan).
    #[cfg(test)]
    pub(in crate::store) const fn postgres_text(self) -> &'static str {
        self.postgres
    }

    /// A statement only PostgreSQL needs (e.g. an advisory lock, where SQLite's single writer
    /// already serialises); on SQLite it does nothing: `execute` changes no row, the fetches
    /// return no row.
    pub(crate) const fn postgres_only(postgres: &'static str) -> Self {
        Self {
            sqlite: "",
            postgres,
            sqlite_only: false,
        }
    }
}

/// Serialises rows for a JSON-array parameter, the way a whole group's rows go in one statement
/// (plain data: this cannot fail).
pub(super) fn json<T: serde::Serialize + ?Sized>(rows: &T) -> String {
    serde_json::to_string(rows).unwrap_or_else(|_| "[]".to_owned())
}

/// The typed ids bind as the text or integer they are stored as, and decode back from it (from
/// sqlx's rows, and from the SQLite writer's own), so row structs hold typed ids and the model
/// needs no knowledge of sqlx.
macro_rules! id_columns {
    (text: $($text:ty),*; integer: $($integer:ty),*) => {
        $(
            impl<'a> From<&'a $text> for Arg<'a> {
                fn from(id: &'a $text) -> Self {
                    Arg::Text(id.as_str())
                }
            }

            impl<DB: Database> Type<DB> for $text
            where
                str: Type<DB>,
            {
                fn type_info() -> DB::TypeInfo {
                    <str as Type<DB>>::type_info()
                }

                fn compatible(ty: &DB::TypeInfo) -> bool {
                    <str as Type<DB>>::compatible(ty)
                }
            }

            impl<'r, DB: Database> Decode<'r, DB> for $text
            where
                &'r str: Decode<'r, DB>,
            {
                fn decode(value: DB::ValueRef<'r>) -> Result<Self, BoxDynError> {
                    // Ids in the store were made by Boson (or written by a test): trusted.
                    Ok(Self::trusted(<&'r str as Decode<'r, DB>>::decode(value)?))
                }
            }

            impl rusqlite::types::FromSql for $text {
                fn column_result(
                    value: rusqlite::types::ValueRef<'_>,
                ) -> rusqlite::types::FromSqlResult<Self> {
                    value.as_str().map(Self::trusted)
                }
            }
        )*
        $(
            impl From<$integer> for Arg<'_> {
                fn from(id: $integer) -> Self {
                    Arg::Int(id.get())
                }
            }

            impl<DB: Database> Type<DB> for $integer
            where
                i64: Type<DB>,
            {
                fn type_info() -> DB::TypeInfo {
                    <i64 as Type<DB>>::type_info()
                }

                fn compatible(ty: &DB::TypeInfo) -> bool {
                    <i64 as Type<DB>>::compatible(ty)
                }
            }

            impl<'r, DB: Database> Decode<'r, DB> for $integer
            where
                i64: Decode<'r, DB>,
            {
                fn decode(value: DB::ValueRef<'r>) -> Result<Self, BoxDynError> {
                    Ok(Self::new(<i64 as Decode<'r, DB>>::decode(value)?))
                }
            }

            impl rusqlite::types::FromSql for $integer {
                fn column_result(
                    value: rusqlite::types::ValueRef<'_>,
                ) -> rusqlite::types::FromSqlResult<Self> {
                    value.as_i64().map(Self::new)
                }
            }
        )*
    };
}

id_columns!(text: InputId, OutputId, ConnectionId; integer: BatchId, Mpid);

/// `args![a, b, …]`: the arguments of a statement, each converted with `Arg::from`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::store::backend::Arg::from($value)),*]
    };
}
pub(crate) use args;

/// A row type both backends can decode (tuples of the bound types, and the store's row structs).
pub(crate) trait Row:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

impl<T> Row for T where T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{}

/// A row type a transaction can decode: on sqlx's connections, and on the SQLite writer's own
/// ([`DirectRow`]).
pub(crate) trait TxRow: Row + DirectRow {}

impl<T> TxRow for T where T: Row + DirectRow {}

/// Binds `$args` to `$query` in order.
macro_rules! bind {
    ($query:expr, $args:expr) => {{
        let mut query = $query;
        for arg in $args {
            query = match *arg {
                Arg::Int(value) => query.bind(value),
                Arg::OptInt(value) => query.bind(value),
                Arg::Text(value) => query.bind(value),
                Arg::OptText(value) => query.bind(value),
                Arg::Bytes(value) => query.bind(value),
            };
        }
        query
    }};
}

/// Runs a statement method on `$self`: `$body` with the backend's text pick and sqlx's
/// executor `$on` (pool or transaction) for either backend, or `$direct_body` with the SQLite
/// writer's own transaction `$direct` ([`DirectTx`]), where there is one.
macro_rules! dispatch {
    ($self:expr, $sqlite:pat => $sqlite_on:expr, $postgres:pat => $postgres_on:expr,
     [$($direct_pat:pat => $direct_on:expr)?],
     |$text:ident, $on:ident| $body:expr, |$direct:ident| $direct_body:expr) => {
        match $self {
            $sqlite => {
                let $on = $sqlite_on;
                let $text = Pick::Sqlite;
                $body
            }
            $postgres => {
                let $on = $postgres_on;
                let $text = Pick::Postgres;
                $body
            }
            $($direct_pat => {
                let $direct = $direct_on;
                $direct_body
            })?
        }
    };
}

/// Which text of an [`Sql`] a backend runs.
#[derive(Debug, Clone, Copy)]
enum Pick {
    Sqlite,
    Postgres,
}

impl Pick {
    /// The text to run; an error for a [`Sql::sqlite_only`] statement on PostgreSQL.
    fn text(self, sql: Sql) -> Result<&'static str, sqlx::Error> {
        match self {
            Pick::Sqlite => Ok(sql.sqlite),
            Pick::Postgres if sql.sqlite_only => Err(sqlx::Error::Configuration(
                format!("a SQLite-only statement run on PostgreSQL: {}", sql.sqlite).into(),
            )),
            Pick::Postgres => Ok(sql.postgres),
        }
    }

    /// The text to run, counted as a round trip in test builds; `None` for a statement only
    /// the other backend needs (its text here is empty).
    fn to_run(self, sql: Sql) -> Result<Option<&'static str>, sqlx::Error> {
        let text = self.text(sql)?;
        if text.is_empty() {
            return Ok(None);
        }
        #[cfg(test)]
        round_trips::count(1);
        Ok(Some(text))
    }
}

/// The statement methods, the same on the pool and in a transaction (sqlx's, or the SQLite
/// writer's own, which runs them in place). `$row` is the bound on the rows fetched.
macro_rules! statements {
    ($ty:ty, [$($recv:tt)+], $self:ident, $row:ident,
     $sqlite:pat => $sqlite_on:expr, $postgres:pat => $postgres_on:expr
     $(, $direct_pat:pat => $direct_on:expr)?) => {
        impl $ty {
            /// Runs a statement; returns the rows it changed.
            pub(crate) async fn execute(
                $($recv)+,
                sql: Sql,
                args: &[Arg<'_>],
            ) -> Result<u64, sqlx::Error> {
                dispatch!($self, $sqlite => $sqlite_on, $postgres => $postgres_on,
                    [$($direct_pat => $direct_on)?],
                    |pick, on| {
                        let Some(text) = pick.to_run(sql)? else {
                            return Ok(0);
                        };
                        Ok(bind!(sqlx::query(text), args).execute(on).await?.rows_affected())
                    },
                    |direct| {
                        let Some(text) = Pick::Sqlite.to_run(sql)? else {
                            return Ok(0);
                        };
                        direct.execute(text, args)
                    })
            }

            /// Every row a query returns.
            pub(crate) async fn fetch_all<R: $row>(
                $($recv)+,
                sql: Sql,
                args: &[Arg<'_>],
            ) -> Result<Vec<R>, sqlx::Error> {
                dispatch!($self, $sqlite => $sqlite_on, $postgres => $postgres_on,
                    [$($direct_pat => $direct_on)?],
                    |pick, on| {
                        let Some(text) = pick.to_run(sql)? else {
                            return Ok(Vec::new());
                        };
                        bind!(sqlx::query_as(text), args).fetch_all(on).await
                    },
                    |direct| {
                        let Some(text) = Pick::Sqlite.to_run(sql)? else {
                            return Ok(Vec::new());
                        };
                        direct.fetch_all(text, args)
                    })
            }

            /// The row a query returns, if any.
            pub(crate) async fn fetch_optional<R: $row>(
                $($recv)+,
                sql: Sql,
                args: &[Arg<'_>],
            ) -> Result<Option<R>, sqlx::Error> {
                dispatch!($self, $sqlite => $sqlite_on, $postgres => $postgres_on,
                    [$($direct_pat => $direct_on)?],
                    |pick, on| {
                        let Some(text) = pick.to_run(sql)? else {
                            return Ok(None);
                        };
                        bind!(sqlx::query_as(text), args).fetch_optional(on).await
                    },
                    |direct| {
                        let Some(text) = Pick::Sqlite.to_run(sql)? else {
                            return Ok(None);
                        };
                        direct.fetch_optional(text, args)
                    })
            }

            /// The row a query must return.
            pub(crate) async fn fetch_one<R: $row>(
                $($recv)+,
                sql: Sql,
                args: &[Arg<'_>],
            ) -> Result<R, sqlx::Error> {
                dispatch!($self, $sqlite => $sqlite_on, $postgres => $postgres_on,
                    [$($direct_pat => $direct_on)?],
                    |pick, on| {
                        let Some(text) = pick.to_run(sql)? else {
                            return Err(sqlx::Error::RowNotFound);
                        };
                        bind!(sqlx::query_as(text), args).fetch_one(on).await
                    },
                    |direct| {
                        let Some(text) = Pick::Sqlite.to_run(sql)? else {
                            return Err(sqlx::Error::RowNotFound);
                        };
                        direct.fetch_optional(text, args)?.ok_or(sqlx::Error::RowNotFound)
                    })
            }
        }
    };
}

/// A transaction on either backend: on a connection from the pool (`'static`), or on one a
/// writer keeps ([`WriterConnection`]).
#[derive(Debug)]
pub(crate) enum Tx<'c> {
    Sqlite(Transaction<'c, Sqlite>),
    Postgres(PgTx<'c>),
    /// The SQLite writer's own connection ([`DirectConnection`]): its statements run on the
    /// thread that awaits them, so these futures never wait for another thread.
    Direct(DirectTx<'c>),
}

/// A PostgreSQL transaction: sqlx's, on a pool connection, or a writer lane's, which the lane
/// begins and ends itself ([`super::pg_lane`]).
#[derive(Debug)]
pub(crate) enum PgTx<'c> {
    Pool(Transaction<'c, Postgres>),
    Lane(LaneTx<'c>),
}

impl PgTx<'_> {
    fn connection(&mut self) -> &mut PgConnection {
        match self {
            PgTx::Pool(tx) => tx,
            PgTx::Lane(tx) => tx.connection(),
        }
    }

    /// Commits; with `next`, a lane's transaction begins the next group's in the same round
    /// trip (see [`LaneTx::commit`]). A pool's transaction has no next group.
    async fn commit(self, next: Option<Begin>) -> Result<(), sqlx::Error> {
        match self {
            PgTx::Pool(tx) => tx.commit().await,
            PgTx::Lane(tx) => tx.commit(next).await,
        }
    }

    #[cfg(test)]
    async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            PgTx::Pool(tx) => tx.rollback().await,
            PgTx::Lane(tx) => tx.rollback().await,
        }
    }
}

/// SQLite must take the write lock up front: a transaction that reads first and writes later
/// cannot wait for the lock and fails at once if another writer holds it. (On PostgreSQL row
/// locks and advisory locks do that job.) PostgreSQL's isolation is pinned to READ COMMITTED,
/// which the store is written for, whatever the server's `default_transaction_isolation`: a
/// statement after an advisory lock must see what the lock's holder committed (IDSync's reads,
/// the identity step's: at REPEATABLE READ they would decide from a snapshot older than that
/// commit, a new user for an identity that has one, whose write then fails the transaction with
/// a serialization error), and an update must not fail on a row another transaction changed.
/// Part of the BEGIN: no round trip.
const BEGIN: Sql = Sql::each("BEGIN IMMEDIATE", "BEGIN ISOLATION LEVEL READ COMMITTED");

impl Store {
    /// Starts a transaction that may write.
    pub(crate) async fn begin(&self) -> Result<Tx<'static>, sqlx::Error> {
        Ok(match self {
            Store::Sqlite(pool) => Tx::Sqlite(pool.begin_with(BEGIN.sqlite).await?),
            Store::Postgres(pool) => {
                Tx::Postgres(PgTx::Pool(pool.begin_with(BEGIN.postgres).await?))
            }
        })
    }
}

statements!(Store, [&self], self, Row, Store::Sqlite(pool) => pool, Store::Postgres(pool) => pool);
statements!(Tx<'_>, [&mut self], self, TxRow,
    Tx::Sqlite(tx) => &mut **tx, Tx::Postgres(tx) => tx.connection(), Tx::Direct(tx) => tx);

/// The connection a writer lane runs its group commits on: one of its own, out of the pool, on
/// either backend. Taking one from the pool and giving it back cost, per group, a ping (sqlx
/// tests a connection before handing it out: a round trip, on SQLite to the connection's thread)
/// and on SQLite a spawned task; on PostgreSQL the ping was one of ten round trips of a group of
/// 45 ingests. A lane commits one group at a time, so it never needs a second connection.
#[derive(Debug)]
pub(crate) enum WriterConnection {
    /// Opened at the first group, with the pool's settings but not through sqlx: the lane's
    /// thread runs its statements itself ([`super::direct`]). Dropped after a group fails and
    /// opened again at the next group, as on PostgreSQL.
    Sqlite(Option<DirectConnection>),
    /// Taken from the pool at the first group; dropped after a group fails, so a broken
    /// connection is replaced at the next group. A BEGIN that fails on it, or the first
    /// statement of a transaction the last COMMIT began, is tried once more on a fresh one
    /// (`group::commit`): a connection the server closed while idle costs no request its
    /// answer. The lane begins and ends its transactions itself ([`super::pg_lane`]).
    Postgres(Option<KeptPg>),
}

impl Store {
    /// The connection a new writer lane commits on (nothing is opened until its first group).
    pub(crate) fn writer_connection(&self) -> WriterConnection {
        match self {
            Store::Sqlite(_) => WriterConnection::Sqlite(None),
            Store::Postgres(_) => WriterConnection::Postgres(None),
        }
    }
}

/// PostgreSQL plans a prepared statement once for all calls after its first few (a generic
/// plan) and keeps that plan until the table's statistics change, which autovacuum does at
/// most once a minute. `jobs` is a queue: a few hundred rows while every endpoint answers,
/// thousands a minute later when one fails. A plan made while it was small reads it whole
/// (cheaper then than an index), and goes on doing so at every renewal, finish, release and
/// claim once it has grown: 16 million rows in the failure phase of a 60 s isolation run on
/// three nodes, with `IN` fixed. In a group commit's transaction sequential scans are priced
/// out, so a plan made in a group reads `jobs` through its indexes (a scan nothing else can
/// answer still runs). A setting does not invalidate cached plans: a statement first planned
/// on a pooled connection outside a group keeps its plan there; the group's statements are
/// the ones that run at every poll.
///
/// Sent with the BEGIN (one simple query), the setting costs no round trip of its own. SQLite
/// plans each statement from the table as it is: nothing to do. READ COMMITTED as in [`BEGIN`],
/// for the same reasons.
macro_rules! group_begin_postgres {
    () => {
        "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL enable_seqscan = off"
    };
}
/// A group of ingests (an ingest lane's) also forces the generic plan ([`Plans::Generic`]).
macro_rules! ingest_begin_postgres {
    () => {
        concat!(
            group_begin_postgres!(),
            "; SET LOCAL plan_cache_mode = force_generic_plan"
        )
    };
}

impl Plans {
    /// The BEGIN of a lane's group with these plans (see [`super::pg_lane`]). The texts are
    /// macros so that `concat!` can make each variant a constant.
    pub(crate) fn begin_postgres(self) -> Begin {
        match self {
            Plans::Chosen => Begin {
                alone: group_begin_postgres!(),
                after_commit: concat!("COMMIT; ", group_begin_postgres!()),
                after_rollback: concat!("ROLLBACK; ", group_begin_postgres!()),
            },
            Plans::Generic => Begin {
                alone: ingest_begin_postgres!(),
                after_commit: concat!("COMMIT; ", ingest_begin_postgres!()),
                after_rollback: concat!("ROLLBACK; ", ingest_begin_postgres!()),
            },
        }
    }
}

/// How PostgreSQL plans the statements of a group's transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plans {
    /// As the server chooses, the generic plan or one made for the run's parameters.
    Chosen,
    /// Always the generic plan kept for the connection. Left to choose, PostgreSQL planned an
    /// ingest group's statements afresh at every run: they take their rows as arrays and JSON,
    /// and their planning was 8–10% of the writer's backend CPU, in the statements' own
    /// execution and in `boson_group_identities`' (issue 16, item 4; docs/PERFORMANCE.md).
    /// Each of them inserts its rows or probes a unique index per key, a plan no parameter
    /// changes. Not for delivery's groups, whose claims read ranges of `jobs` with a `LIMIT`,
    /// where a plan made for the parameters can be the better one.
    Generic,
}

/// How long a kept PostgreSQL connection may take to answer a group's BEGIN before it is taken
/// for dead and replaced. Generous: a live server answers in well under a millisecond, even
/// busy; a false alarm costs only a reconnection.
const KEPT_BEGIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl WriterConnection {
    /// Starts a transaction that may write, on the kept connection (taken from `store`'s pool
    /// first if there is none).
    pub(crate) async fn begin<'c>(
        &'c mut self,
        store: &Store,
        plans: Plans,
    ) -> Result<Tx<'c>, sqlx::Error> {
        // Each kept connection is detached: the pool opens another in its place for readers,
        // and closing the pool does not wait for the writer's.
        #[cfg(test)]
        round_trips::count(u64::from(!self.has_begun(plans)));
        match (self, store) {
            (WriterConnection::Sqlite(held), Store::Sqlite(pool)) => {
                let connection = match held {
                    Some(connection) => connection,
                    None => held.insert(DirectConnection::open(
                        pool.connect_options().get_filename(),
                    )?),
                };
                Ok(Tx::Direct(connection.begin(BEGIN.sqlite)?))
            }
            (WriterConnection::Postgres(held), Store::Postgres(pool)) => {
                let connection = match held {
                    Some(connection) => connection,
                    None => held.insert(KeptPg::new(pool.acquire().await?.detach())),
                };
                // A connection that went silent (a NAT or load balancer dropped it without a
                // word) would hold the lane until TCP gives up, about 15 minutes; the pool's
                // acquire had a timeout of its own. BEGIN is answered at once by a live server.
                // A transaction the last COMMIT began with these plans is taken as it is,
                // with no round trip.
                let begin = connection.begin(plans.begin_postgres());
                match tokio::time::timeout(KEPT_BEGIN_TIMEOUT, begin).await {
                    Ok(tx) => Ok(Tx::Postgres(PgTx::Lane(tx?))),
                    Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the writer's connection did not answer its BEGIN",
                    ))),
                }
            }
            _ => Err(sqlx::Error::Configuration(
                "a writer connection of the other backend".into(),
            )),
        }
    }

    /// Whether the last COMMIT began a transaction for a group with `plans` (PostgreSQL only),
    /// which [`Self::begin`] then takes without a round trip.
    pub(crate) fn has_begun(&self, plans: Plans) -> bool {
        matches!(self, WriterConnection::Postgres(Some(kept)) if kept.has_begun(plans.begin_postgres()))
    }

    /// Whether a connection is kept from an earlier group (the next BEGIN runs on it).
    pub(crate) fn is_kept(&self) -> bool {
        match self {
            WriterConnection::Sqlite(held) => held.is_some(),
            WriterConnection::Postgres(held) => held.is_some(),
        }
    }

    /// Forgets the kept connection (after a failure: it may be broken); the next transaction
    /// opens another.
    pub(crate) fn reset(&mut self) {
        match self {
            WriterConnection::Sqlite(held) => *held = None,
            WriterConnection::Postgres(held) => *held = None,
        }
    }

    /// Closes the kept connection, if any.
    pub(crate) async fn close(self) {
        let closed = match self {
            WriterConnection::Sqlite(Some(connection)) => connection.close(),
            WriterConnection::Postgres(Some(connection)) => connection.close().await,
            _ => Ok(()),
        };
        if let Err(error) = closed {
            tracing::debug!(%error, "The writer's connection did not close cleanly.");
        }
    }
}

impl Tx<'_> {
    /// Whether this is SQLite's transaction: the one writer, where a step may skip what only
    /// concurrent writers need (a lock order, a separate id allocation).
    pub(crate) fn is_sqlite(&self) -> bool {
        matches!(self, Tx::Sqlite(_) | Tx::Direct(_))
    }

    /// What a PostgreSQL lane remembers of the identities its groups knew (see
    /// [`super::identity_known`]); `None` on any other transaction, which reads instead.
    pub(super) fn remembered(&mut self) -> Option<&mut super::identity_known::Remembered> {
        match self {
            Tx::Postgres(PgTx::Lane(tx)) => Some(tx.remembered()),
            _ => None,
        }
    }

    /// PostgreSQL only: every row of a query built with sqlx's own binds, for parameters SQLite
    /// has no type for (arrays: a whole group's rows in one statement).
    pub(crate) async fn fetch_all_postgres<R>(
        &mut self,
        query: sqlx::query::QueryAs<'_, Postgres, R, PgArguments>,
    ) -> Result<Vec<R>, sqlx::Error>
    where
        R: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        let Tx::Postgres(tx) = self else {
            return Err(sqlx::Error::Configuration(
                "a PostgreSQL statement in a SQLite transaction".into(),
            ));
        };
        #[cfg(test)]
        round_trips::count(1);
        query.fetch_all(tx.connection()).await
    }

    /// The first column of every row (ids, mostly).
    pub(crate) async fn fetch_ids<I>(
        &mut self,
        sql: Sql,
        args: &[Arg<'_>],
    ) -> Result<Vec<I>, sqlx::Error>
    where
        (I,): TxRow,
    {
        let rows: Vec<(I,)> = self.fetch_all(sql, args).await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.commit_then(None).await
    }

    /// Commits; on a PostgreSQL lane's transaction with `next` (from
    /// [`Plans::begin_postgres`]), begins the next group's transaction in the same round trip.
    /// Elsewhere `next` changes nothing.
    pub(crate) async fn commit_then(self, next: Option<Begin>) -> Result<(), sqlx::Error> {
        #[cfg(test)]
        round_trips::count(1);
        #[cfg(test)]
        if let Some(fault) = super::faults::take_commit_fault() {
            return self.commit_with(fault).await;
        }
        match self {
            Tx::Sqlite(tx) => tx.commit().await,
            Tx::Postgres(tx) => tx.commit(next).await,
            Tx::Direct(tx) => tx.commit(),
        }
    }

    #[cfg(test)]
    async fn commit_with(self, fault: super::faults::CommitFault) -> Result<(), sqlx::Error> {
        use super::faults::{CommitFault, commit_error};
        match (fault, self) {
            (CommitFault::AnswerLost, Tx::Sqlite(tx)) => tx.commit().await?,
            (CommitFault::AnswerLost, Tx::Postgres(tx)) => tx.commit(None).await?,
            (CommitFault::RolledBack, Tx::Sqlite(tx)) => tx.rollback().await?,
            (CommitFault::RolledBack, Tx::Postgres(tx)) => tx.rollback().await?,
            (CommitFault::AnswerLost, Tx::Direct(tx)) => tx.commit()?,
            (CommitFault::RolledBack, Tx::Direct(tx)) => tx.rollback()?,
        }
        Err(commit_error())
    }
}

/// Test-only: how many statements this thread's code sent to the database (a statement, BEGIN
/// with the pool's ping if the connection came from the pool, COMMIT; on a PostgreSQL lane a
/// COMMIT that begins the next transaction counts once, and a group that takes that transaction
/// counts no BEGIN), so a test can see what a group commit costs. Through sqlx each is a round
/// trip: to a PostgreSQL backend, or to the SQLite connection's worker thread. The SQLite
/// writer runs its statements on its own thread ([`DirectTx`]), where each costs SQLite's work
/// but no wake-up; they are counted alike, so the count is the statements a group needs on
/// either backend. Per thread, as
/// `#[tokio::test]` runs a test and the tasks it spawns on one thread.
#[cfg(test)]
pub(crate) mod round_trips {
    use std::cell::Cell;

    thread_local! {
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn count(trips: u64) {
        COUNT.with(|count| count.set(count.get() + trips));
    }

    /// The round trips counted on this thread since the last call.
    pub(crate) fn take() -> u64 {
        COUNT.with(|count| count.replace(0))
    }
}

#[cfg(test)]
mod tests {
    use super::{Pick, Sql};

    #[test]
    fn a_sqlite_only_statement_is_an_error_on_postgresql() {
        let sql = Sql::sqlite_only("SELECT json_each('[]')");
        assert_eq!(Pick::Sqlite.text(sql).ok(), Some("SELECT json_each('[]')"));
        let error = Pick::Postgres.text(sql).expect_err("run on PostgreSQL");
        assert!(
            error.to_string().contains("SQLite-only"),
            "unclear error: {error}"
        );
    }

    #[test]
    fn a_postgres_only_statement_is_nothing_on_sqlite() {
        let sql = Sql::postgres_only("SELECT pg_advisory_xact_lock(1)");
        assert_eq!(Pick::Sqlite.text(sql).ok(), Some(""));
        assert_eq!(
            Pick::Postgres.text(sql).ok(),
            Some("SELECT pg_advisory_xact_lock(1)")
        );
    }
}
