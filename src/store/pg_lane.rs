//! A PostgreSQL writer lane's connection and its transactions, which the lane begins and ends
//! itself rather than through sqlx's `Transaction`, so that a group's COMMIT can carry the next
//! group's BEGIN (issue 16, items 2 and 4).
//!
//! Under load the next group is already queued when a group commits. Its BEGIN then went out
//! as a round trip of its own, right after the lane had answered the committed group's
//! requests, and took 0.35–0.6 ms a group on a two-core machine (more than the COMMIT with its
//! WAL flush): the answer waited behind the burst of responses those requests wrote. One simple
//! query `COMMIT; BEGIN …` ends the group and opens the next transaction in one round trip.
//! PostgreSQL runs the statements of a simple query in order and stops at the first that fails,
//! so the BEGIN runs only after a COMMIT that succeeded; the COMMIT's own outcome is read from
//! its own answer, so a BEGIN that fails after it does not make a committed group look failed.
//! When nothing is queued the lane commits alone and the next group begins as before: a
//! transaction is never left open while the lane waits for work (it would stay "idle in
//! transaction" for as long as the node is quiet, which a server's
//! `idle_in_transaction_session_timeout` ends).
//!
//! A transaction that ends neither way (a try given up so the group can run again) is rolled
//! back in the same round trip as the next BEGIN, as sqlx's `Transaction` queued its ROLLBACK
//! when dropped; so is one begun with other settings than the next group's. A lane that fails a
//! group drops the connection instead (`store::writer`), which ends its transaction too.

use futures_util::TryStreamExt as _;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::identity_known::Remembered;

/// A BEGIN with a group's settings: alone, after a COMMIT, and after a ROLLBACK, each one
/// simple query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Begin {
    pub(crate) alone: &'static str,
    pub(crate) after_commit: &'static str,
    pub(crate) after_rollback: &'static str,
}

/// The connection a PostgreSQL lane keeps between groups.
#[derive(Debug)]
pub(crate) struct KeptPg {
    connection: PgConnection,
    /// A transaction is open that no group has taken yet, begun with the last COMMIT and
    /// these settings.
    begun: Option<Begin>,
    /// A transaction may be open that no group will end (taken and dropped, or a BEGIN whose
    /// settings failed).
    open: bool,
    /// What the lane's groups knew of their identities, to guess the next group's read (see
    /// [`super::identity_known`]); forgotten with the connection.
    remembered: Remembered,
}

/// A group's transaction on a lane's [`KeptPg`].
#[derive(Debug)]
pub(crate) struct LaneTx<'c> {
    kept: &'c mut KeptPg,
}

impl KeptPg {
    pub(crate) fn new(connection: PgConnection) -> Self {
        Self {
            connection,
            begun: None,
            open: false,
            remembered: Remembered::default(),
        }
    }

    /// Whether [`Self::begin`] with `begin` takes the transaction the last COMMIT began, with
    /// no round trip of its own.
    pub(crate) fn has_begun(&self, begin: Begin) -> bool {
        self.begun == Some(begin)
    }

    /// The group's transaction: the one already begun with the same settings, else `begin`
    /// sent now (after a ROLLBACK of whatever transaction is open, in the same round trip).
    pub(crate) async fn begin(&mut self, begin: Begin) -> Result<LaneTx<'_>, sqlx::Error> {
        let begun = self.begun.take();
        let left_open = self.open || begun.is_some();
        // Open from here: a BEGIN whose settings then fail leaves its transaction open.
        self.open = true;
        if begun != Some(begin) {
            let sql = if left_open {
                begin.after_rollback
            } else {
                begin.alone
            };
            run(&mut self.connection, sql).await?;
        }
        Ok(LaneTx { kept: self })
    }

    pub(crate) async fn close(self) -> Result<(), sqlx::Error> {
        self.connection.close().await
    }
}

impl LaneTx<'_> {
    /// The connection, for the group's statements.
    pub(crate) fn connection(&mut self) -> &mut PgConnection {
        &mut self.kept.connection
    }

    /// What the lane remembers of the identities its groups knew.
    pub(super) fn remembered(&mut self) -> &mut Remembered {
        &mut self.kept.remembered
    }

    /// Commits; with `next` (the next group's BEGIN), begins the next group's transaction in
    /// the same round trip. The answer is the COMMIT's: a BEGIN that fails after a COMMIT that
    /// succeeded leaves nothing begun (and perhaps a transaction open, which the next BEGIN
    /// rolls back), and the group is still committed.
    pub(crate) async fn commit(self, next: Option<Begin>) -> Result<(), sqlx::Error> {
        let Some(begin) = next else {
            self.kept.open = false;
            return run(&mut self.kept.connection, "COMMIT").await;
        };
        let (committed, begun) = {
            let mut answers =
                sqlx::raw_sql(begin.after_commit).execute_many(&mut self.kept.connection);
            // The first answer is the COMMIT's; the rest are the BEGIN's and its settings'.
            let committed = answers.try_next().await.map(drop);
            let begun = committed.is_ok() && answers.try_collect::<Vec<_>>().await.is_ok();
            (committed, begun)
        };
        self.kept.begun = begun.then_some(begin);
        self.kept.open = committed.is_ok() && !begun;
        committed
    }

    #[cfg(test)]
    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.kept.open = false;
        run(&mut self.kept.connection, "ROLLBACK").await
    }
}

/// Runs `sql`, one statement or several, as one simple query: one round trip.
async fn run(connection: &mut PgConnection, sql: &'static str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sql).execute(connection).await.map(drop)
}
