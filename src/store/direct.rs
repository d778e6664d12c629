//! The SQLite writer's own connection, on which the writer's thread runs every statement of its
//! groups itself (issue 16 items 1 and 6). Through sqlx each statement was a round trip to the
//! connection's worker thread: the writer sent it, slept, and woke when the worker answered,
//! two thread wake-ups per statement and four or more statements per group (BEGIN, the batch
//! insert, the profile upsert, COMMIT). At 500 events/s those wake-ups were most of the CPU per
//! event, and sqlx's thread was the largest CPU user; the bare group-commit program calls
//! SQLite on its writer's thread. Here `rusqlite` does the same: the statements run in place,
//! prepared once per connection and kept ([`Connection::prepare_cached`]).
//!
//! The connection has every setting the pool's connections have ([`super::sqlite_pragmas`]),
//! but waits for a lock another connection holds with a busy handler of its own
//! ([`busy_step`]), and is opened after the migrations ran (at the lane's first group).
//! Readers, admin writes and PostgreSQL keep sqlx. The steps run the same statements through
//! [`super::backend::Tx`] either way: this module binds [`Arg`]s as sqlx binds them (`$n` is
//! the n-th argument, a bare `?` the next one, across the statements of a text) and decodes
//! rows with [`DirectRow`], and its errors are sqlx errors (a constraint's kind included), so
//! the steps and the group's error handling do not tell the two apart.

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::{FromSql, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};

use super::arg::Arg;

/// Prepared statements one connection keeps (as many as sqlx keeps per connection): the
/// writer's steps use a few dozen distinct texts.
const STATEMENT_CACHE: usize = 100;

/// The writer's connection to the SQLite database.
pub(crate) struct DirectConnection {
    connection: Connection,
}

impl std::fmt::Debug for DirectConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectConnection")
            .field("path", &self.connection.path())
            .finish()
    }
}

/// Tries at [`SHORT_STEP`] before [`LONG_STEP`]: 20 ms of sleeps (30–40 ms with the kernel's
/// timer slack), the time a pool connection's write transaction (a metrics or data catalog
/// flush, an admin change) usually holds the lock.
const SHORT_STEPS: i32 = 200;
const SHORT_STEP: Duration = Duration::from_micros(100);
/// Then tries at [`LONG_STEP`] for the rest of the pool's
/// [`BUSY_TIMEOUT`](super::BUSY_TIMEOUT): (10 s − 20 ms) / 1 ms. The sleeps add up to the
/// timeout; with the timer's slack on each, the writer gives up about 0.5–1 s after it.
const LONG_STEPS: i32 = 9_980;
const LONG_STEP: Duration = Duration::from_millis(1);

/// The sleep before the writer's try number `count` (from 0) at a lock another connection
/// holds, or `None` once [`BUSY_TIMEOUT`](super::BUSY_TIMEOUT) is spent (the statement then
/// fails busy).
///
/// SQLite's own busy timeout sleeps 1, 2, 5, 10, 15, 20, 25 … ms between tries (it tries at 0,
/// 1, 3, 8, 18, 33 … ms), so the writer, and every request in its group, waited up to 2.7
/// times as long as the lock was held: a pool connection's write held up one group's BEGIN
/// for 18.4 ms in a 5M-batch run (issue 16 item 5, docs/PERFORMANCE.md). The writer has a
/// thread of its own and holds no lock while it sleeps here, so it can afford to try often.
fn busy_step(count: i32) -> Option<Duration> {
    match count {
        c if c < SHORT_STEPS => Some(SHORT_STEP),
        c if c < SHORT_STEPS + LONG_STEPS => Some(LONG_STEP),
        _ => None,
    }
}

/// The writer connection's busy handler: sleeps [`busy_step`], or gives up.
fn wait_for_lock(count: i32) -> bool {
    #[cfg(test)]
    tests::LOCK_WAITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match busy_step(count) {
        Some(step) => {
            std::thread::sleep(step);
            true
        }
        None => false,
    }
}

impl DirectConnection {
    /// Opens the database at `path` (made and migrated already) with the pool's settings.
    pub(crate) fn open(path: &Path) -> Result<Self, sqlx::Error> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(path, flags).map_err(error)?;
        // The pool's busy timeout, kept by a handler of its own (`busy_step`).
        let pragmas = super::sqlite_pragmas();
        connection
            .busy_handler(Some(wait_for_lock))
            .map_err(error)?;
        for (name, value) in pragmas {
            // `journal_mode` answers a row: stepped through, like any statement here.
            let mut statement = connection
                .prepare(&format!("PRAGMA {name} = {value}"))
                .map_err(error)?;
            let mut rows = statement.raw_query();
            while rows.next().map_err(error)?.is_some() {}
        }
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Self { connection })
    }

    /// Starts a transaction with `begin` (SQLite's `BEGIN IMMEDIATE`).
    pub(crate) fn begin(&mut self, begin: &str) -> Result<DirectTx<'_>, sqlx::Error> {
        run(&self.connection, begin, &[], |_| Ok(())).map_err(error)?;
        Ok(DirectTx {
            connection: &mut self.connection,
            open: true,
        })
    }

    /// Closes the connection; the last one to the database copies the WAL back and deletes it.
    pub(crate) fn close(self) -> Result<(), sqlx::Error> {
        self.connection.close().map_err(|(_, e)| error(e))
    }
}

/// A transaction on the writer's connection; rolled back if dropped before its commit.
pub(crate) struct DirectTx<'c> {
    /// Held mutably (not shared) so that the transaction, like a sqlx one, may cross threads
    /// with the future that holds it: a connection is `Send`, not `Sync`.
    connection: &'c mut Connection,
    open: bool,
}

impl std::fmt::Debug for DirectTx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectTx")
            .field("open", &self.open)
            .finish()
    }
}

impl DirectTx<'_> {
    /// Runs `text`; the rows its statements changed.
    pub(crate) fn execute(&mut self, text: &str, args: &[Arg<'_>]) -> Result<u64, sqlx::Error> {
        self.still_open()?;
        run(self.connection, text, args, |_| Ok(())).map_err(error)
    }

    /// Refuses a statement once SQLite itself has ended the transaction (an I/O error, a full
    /// disk, no memory roll it back): run now, it would be committed on its own, and part of
    /// the group stored. The step that met the error has it already; this is for one that goes
    /// on regardless.
    fn still_open(&self) -> Result<(), sqlx::Error> {
        if self.connection.is_autocommit() {
            return Err(sqlx::Error::Protocol(
                "SQLite ended the writer's transaction after an error".into(),
            ));
        }
        Ok(())
    }

    /// Every row `text` returns.
    pub(crate) fn fetch_all<R: DirectRow>(
        &mut self,
        text: &str,
        args: &[Arg<'_>],
    ) -> Result<Vec<R>, sqlx::Error> {
        self.still_open()?;
        let mut rows = Vec::new();
        run(self.connection, text, args, |row| {
            rows.push(R::decode(row)?);
            Ok(())
        })
        .map_err(error)?;
        Ok(rows)
    }

    /// The first row `text` returns, if any. The statements run to their end all the same, as
    /// a statement that writes must.
    pub(crate) fn fetch_optional<R: DirectRow>(
        &mut self,
        text: &str,
        args: &[Arg<'_>],
    ) -> Result<Option<R>, sqlx::Error> {
        self.still_open()?;
        let mut first = None;
        run(self.connection, text, args, |row| {
            if first.is_none() {
                first = Some(R::decode(row)?);
            }
            Ok(())
        })
        .map_err(error)?;
        Ok(first)
    }

    /// Commits; the transaction is over whatever the answer.
    pub(crate) fn commit(mut self) -> Result<(), sqlx::Error> {
        self.open = false;
        self.still_open()?;
        run(self.connection, "COMMIT", &[], |_| Ok(()))
            .map(drop)
            .map_err(error)
            .inspect_err(|_| self.roll_back_if_open())
    }

    /// Rolls back (a test's COMMIT that fails: `faults`).
    #[cfg(test)]
    pub(crate) fn rollback(mut self) -> Result<(), sqlx::Error> {
        self.open = false;
        run(self.connection, "ROLLBACK", &[], |_| Ok(()))
            .map(drop)
            .map_err(error)
    }

    /// After a COMMIT that failed: SQLite leaves the transaction open if the COMMIT could not
    /// take its lock (SQLITE_BUSY), and the connection must not carry it into the next group.
    fn roll_back_if_open(&mut self) {
        if !self.connection.is_autocommit() {
            let _ = run(self.connection, "ROLLBACK", &[], |_| Ok(()));
        }
    }
}

impl Drop for DirectTx<'_> {
    fn drop(&mut self) {
        if self.open {
            // A failed statement or a failed step: nothing of the group stays.
            self.roll_back_if_open();
        }
    }
}

/// Runs every statement of `text` with `args`, handing each row to `each`; the rows changed.
fn run(
    connection: &Connection,
    text: &str,
    args: &[Arg<'_>],
    mut each: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<()>,
) -> rusqlite::Result<u64> {
    let mut changed = 0;
    // Bare `?`s are numbered across the text's statements, as sqlx numbers them.
    let mut next = 0;
    for piece in statements(text) {
        let mut statement = connection.prepare_cached(piece)?;
        for place in 1..=statement.parameter_count() {
            let number = match statement.parameter_name(place) {
                Some(name) => parameter_number(name)?,
                None => {
                    next += 1;
                    next
                }
            };
            // SQLite reads a parameter left unbound as NULL; sqlx leaves those past the
            // arguments given unbound, and so does this.
            let Some(arg) = number.checked_sub(1).and_then(|index| args.get(index)) else {
                break;
            };
            statement.raw_bind_parameter(place, arg)?;
        }
        let mut rows = statement.raw_query();
        while let Some(row) = rows.next()? {
            each(row)?;
        }
        // sqlx's count: what SQLite says the last statement that wrote changed.
        changed += connection.changes();
    }
    Ok(changed)
}

/// The argument number of a named parameter: `$n` or `?n`, as sqlx takes them.
fn parameter_number(name: &str) -> rusqlite::Result<usize> {
    name.strip_prefix('$')
        .or_else(|| name.strip_prefix('?'))
        .and_then(|number| number.parse().ok())
        .ok_or_else(|| rusqlite::Error::InvalidParameterName(name.to_owned()))
}

/// The statements of `text`, split at the semicolons outside its quotes and comments (the
/// batch insert reads its id base and inserts in one text). A text without a semicolon is one
/// statement, as nearly all are.
fn statements(text: &str) -> impl Iterator<Item = &str> {
    let mut pieces = Vec::new();
    if text.contains(';') {
        let mut start = 0;
        let mut rest = text.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            let closing = match c {
                '\'' | '"' | '`' => Some(c.to_string()),
                '[' => Some("]".to_owned()),
                '-' if rest.next_if(|&(_, next)| next == '-').is_some() => Some("\n".to_owned()),
                '/' if rest.next_if(|&(_, next)| next == '*').is_some() => Some("*/".to_owned()),
                ';' => {
                    pieces.push(&text[start..at]);
                    start = at + 1;
                    None
                }
                _ => None,
            };
            // Skips to the end of the quote or comment (or of the text, if it never ends).
            if let Some(closing) = closing {
                let from = rest.peek().map_or(text.len(), |&(i, _)| i);
                let end = text[from..].find(&closing).map_or(text.len(), |i| from + i);
                while rest.next_if(|&(i, _)| i < end + closing.len()).is_some() {}
            }
        }
        pieces.push(&text[start..]);
    } else {
        pieces.push(text);
    }
    pieces.into_iter().filter(|piece| !piece.trim().is_empty())
}

impl ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Int(value) | Arg::OptInt(Some(value)) => ValueRef::Integer(value),
            Arg::OptInt(None) | Arg::OptText(None) => ValueRef::Null,
            Arg::Text(value) | Arg::OptText(Some(value)) => ValueRef::Text(value.as_bytes()),
            Arg::Bytes(value) => ValueRef::Blob(value),
        }))
    }
}

/// A row type the writer's connection decodes: the tuples the steps fetch (by position), and
/// the row structs (by column name, as sqlx's `FromRow` takes them).
pub(crate) trait DirectRow: Sized {
    fn decode(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
}

macro_rules! tuple_rows {
    ($(($($column:ident $index:tt),+)),+ $(,)?) => {
        $(
            impl<$($column: FromSql),+> DirectRow for ($($column,)+) {
                fn decode(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
                    Ok(($(row.get::<_, $column>($index)?,)+))
                }
            }
        )+
    };
}

tuple_rows!(
    (A 0),
    (A 0, B 1),
    (A 0, B 1, C 2),
    (A 0, B 1, C 2, D 3),
    (A 0, B 1, C 2, D 3, E 4),
    (A 0, B 1, C 2, D 3, E 4, F 5),
);

/// A rusqlite error as the sqlx error the store's callers expect: SQLite's own failures as
/// database errors (a constraint's kind kept, which the identity step reads), the rest as the
/// decoding or protocol errors they are.
pub(crate) fn error(error: rusqlite::Error) -> sqlx::Error {
    match error {
        rusqlite::Error::SqliteFailure(failure, message) => {
            let message = message.unwrap_or_else(|| failure.to_string());
            sqlx::Error::Database(Box::new(DirectError {
                code: failure.extended_code,
                message,
            }))
        }
        error @ (rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnIndex(_)
        | rusqlite::Error::InvalidColumnName(_)) => sqlx::Error::Decode(Box::new(error)),
        other => sqlx::Error::Protocol(other.to_string()),
    }
}

/// A failure SQLite reported on the writer's connection.
#[derive(Debug)]
struct DirectError {
    /// SQLite's extended result code.
    code: std::os::raw::c_int,
    message: String,
}

impl std::fmt::Display for DirectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(code: {}) {}", self.code, self.message)
    }
}

impl std::error::Error for DirectError {}

impl sqlx::error::DatabaseError for DirectError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Owned(self.code.to_string()))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        use rusqlite::ffi;
        use sqlx::error::ErrorKind;
        match self.code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                ErrorKind::UniqueViolation
            }
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => ErrorKind::ForeignKeyViolation,
            ffi::SQLITE_CONSTRAINT_NOTNULL => ErrorKind::NotNullViolation,
            ffi::SQLITE_CONSTRAINT_CHECK => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::super::BUSY_TIMEOUT;
    use super::{DirectConnection, busy_step, parameter_number, statements};

    /// How often the writer's busy handler ran (in this test process).
    pub(super) static LOCK_WAITS: AtomicU64 = AtomicU64::new(0);

    #[test]
    fn the_writer_tries_a_held_lock_often_at_first_and_gives_up_at_the_timeout() {
        assert_eq!(busy_step(0), Some(Duration::from_micros(100)));
        assert_eq!(busy_step(199), Some(Duration::from_micros(100)));
        assert_eq!(busy_step(200), Some(Duration::from_millis(1)));
        let total: Duration = (0..).map_while(busy_step).sum();
        assert_eq!(total, BUSY_TIMEOUT);
        assert_eq!(busy_step(200 + 9_980), None, "gives up at the timeout");
    }

    /// Another connection holds the write lock for 30 ms after the writer first finds it taken:
    /// the writer's `BEGIN IMMEDIATE` waits for it in short steps (SQLite's own busy timeout
    /// would try five times in that time, at 1, 3, 8, 18 and 33 ms), and then gets it.
    #[test]
    fn the_writer_waits_for_a_held_write_lock_in_short_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("busy.db");
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER)")
            .unwrap();
        let mut writer = DirectConnection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let before = LOCK_WAITS.load(Ordering::Relaxed);
        // Held for 30 ms from the writer's first wait, however late the writer gets there.
        let release = std::thread::spawn(move || {
            while LOCK_WAITS.load(Ordering::Relaxed) == before {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(30));
            holder.execute_batch("COMMIT").unwrap();
        });
        let mut tx = writer.begin("BEGIN IMMEDIATE").unwrap();
        tx.execute("INSERT INTO t (x) VALUES (1)", &[]).unwrap();
        tx.commit().unwrap();
        release.join().unwrap();
        let waits = LOCK_WAITS.load(Ordering::Relaxed) - before;
        assert!(waits >= 20, "tried the lock {waits} times in 30 ms");
    }

    #[test]
    fn a_text_is_split_at_semicolons_outside_quotes() {
        let pieces: Vec<&str> = statements("SELECT 1; SELECT ';' AS \"a;b\";  ").collect();
        assert_eq!(pieces, ["SELECT 1", " SELECT ';' AS \"a;b\""]);
        let one: Vec<&str> = statements("SELECT $1").collect();
        assert_eq!(one, ["SELECT $1"]);
    }

    #[test]
    fn numbered_parameters_name_their_argument() {
        assert_eq!(parameter_number("$3").ok(), Some(3));
        assert_eq!(parameter_number("?12").ok(), Some(12));
        assert!(parameter_number(":name").is_err());
    }

    /// An apostrophe in a comment opens no quote: the semicolon after the comment still ends
    /// the statement (it was hidden, and two statements went to SQLite as one text).
    #[test]
    fn a_quote_in_a_comment_does_not_hide_the_next_semicolon() {
        let pieces: Vec<&str> = statements("SELECT 1 -- it's one\n; SELECT 2").collect();
        assert_eq!(pieces.len(), 2, "{pieces:?}");
    }

    /// A unique violation on the writer's connection keeps sqlx's kind (the MPID
    /// collision path reads it), and a dropped transaction leaves nothing behind.
    #[test]
    fn a_unique_violation_keeps_its_kind_and_a_dropped_tx_rolls_back() {
        let mut connection = DirectConnection {
            connection: rusqlite::Connection::open_in_memory().unwrap(),
        };
        connection
            .connection
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, u TEXT UNIQUE)")
            .unwrap();
        {
            let mut tx = connection.begin("BEGIN IMMEDIATE").unwrap();
            tx.execute("INSERT INTO t (u) VALUES ($1)", &[super::Arg::Text("a")])
                .unwrap();
            let error = tx
                .execute("INSERT INTO t (u) VALUES ($1)", &[super::Arg::Text("a")])
                .unwrap_err();
            let sqlx::Error::Database(error) = error else {
                panic!("{error:?}")
            };
            assert!(error.is_unique_violation(), "{error:?}");
            assert_eq!(error.code().as_deref(), Some("2067"));
        }
        assert!(connection.connection.is_autocommit());
        let count: i64 = connection
            .connection
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 0);
    }

    fn connection(schema: &str) -> DirectConnection {
        let connection = DirectConnection {
            connection: rusqlite::Connection::open_in_memory().unwrap(),
        };
        connection.connection.execute_batch(schema).unwrap();
        connection
    }

    fn count(connection: &DirectConnection, table: &str) -> i64 {
        connection
            .connection
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// A COMMIT that fails with the transaction still open (a deferred constraint)
    /// is rolled back, and the connection begins the next group cleanly.
    #[test]
    fn a_failed_commit_that_leaves_the_transaction_open_is_rolled_back() {
        let mut connection = connection(
            "PRAGMA foreign_keys = ON; CREATE TABLE p (id INTEGER PRIMARY KEY); \
             CREATE TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED)",
        );
        let mut tx = connection.begin("BEGIN IMMEDIATE").unwrap();
        tx.execute("INSERT INTO c VALUES ($1)", &[super::Arg::Int(7)])
            .unwrap();
        let error = tx.commit().unwrap_err();
        assert!(matches!(error, sqlx::Error::Database(_)), "{error:?}");
        assert!(connection.connection.is_autocommit());
        assert_eq!(count(&connection, "c"), 0);
        let tx = connection.begin("BEGIN IMMEDIATE").unwrap();
        tx.commit().unwrap();
    }

    /// When SQLite ends the transaction itself (here `OR ROLLBACK`; in production an I/O
    /// error, a full disk or no memory can), the writer's transaction refuses every statement
    /// after: run in autocommit, each would be committed at once, part of the group stored.
    #[test]
    fn no_statement_runs_after_sqlite_ended_the_transaction() {
        let mut connection =
            connection("CREATE TABLE t (u TEXT UNIQUE); CREATE TABLE later (x INTEGER)");
        let mut tx = connection.begin("BEGIN IMMEDIATE").unwrap();
        tx.execute("INSERT INTO t VALUES ($1)", &[super::Arg::Text("a")])
            .unwrap();
        let _ = tx.execute(
            "INSERT OR ROLLBACK INTO t VALUES ($1)",
            &[super::Arg::Text("a")],
        );
        let after = tx.execute("INSERT INTO later VALUES (1)", &[]);
        drop(tx);
        assert!(
            after.is_err() && count(&connection, "later") == 0,
            "ran outside the transaction: {after:?}, later has {} row(s), t has {}",
            count(&connection, "later"),
            count(&connection, "t")
        );
    }
}
