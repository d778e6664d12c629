//! A PostgreSQL writer lane's connection and its transactions, which the lane begins and ends
//! itself rather than through sqlx's `Transaction`, so that a group's COMMIT can carry the next
//! group's BEGIN (issue 16, items 2 and 4).
//!
//! Under load the next group is already queued when a group commits. Its BEGIN then went out
//! as a round trip of its own, right after the lane had answered the committed group's
//! requests, and took 0.35–0.6 ms a group on a two-core machine (more than the COMMIT with its
//! WAL flush): the answer waited behind the burst of responses those requests wrote. One simple
//! query `COMMIT; BEGIN …` ends the group and opens the next transaction in one round trip,
//! while the lane answers. PostgreSQL runs the statements of a simple query in order and stops
//! at the first that fails, so the BEGIN runs only after a COMMIT that succeeded. When nothing
//! is queued the lane commits alone and the next group begins as before: a transaction is
//! never left open while the lane waits for work (it would stay "idle in transaction" for as
//! long as the node is quiet, which a server's `idle_in_transaction_session_timeout` ends).
//!
//! A transaction that ends neither way (a group run again, a step that failed and the lane
//! reset the connection; a panic drops the connection with it) is rolled back before the next
//! BEGIN on the same connection, as sqlx's `Transaction` does when dropped.

use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// A BEGIN with a group's settings, alone and as it follows a COMMIT in one simple query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Begin {
    pub(crate) alone: &'static str,
    pub(crate) after_commit: &'static str,
}

/// The connection a PostgreSQL lane keeps between groups.
#[derive(Debug)]
pub(crate) struct KeptPg {
    connection: PgConnection,
    /// A transaction is open that no group has taken yet, begun with the last COMMIT and
    /// these settings.
    begun: Option<Begin>,
    /// A group's transaction was taken and neither committed nor rolled back.
    open: bool,
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
        }
    }

    /// Whether the next [`Self::begin`] takes the transaction the last COMMIT began, with no
    /// round trip of its own.
    #[cfg(test)]
    pub(crate) fn is_begun(&self) -> bool {
        self.begun.is_some()
    }

    /// The group's transaction: the one already begun with the same settings, else `begin`
    /// sent now, after rolling back a transaction left open (or begun with other settings:
    /// the delivery lane's groups plan differently from the rare group of ingests alone there).
    pub(crate) async fn begin(&mut self, begin: Begin) -> Result<LaneTx<'_>, sqlx::Error> {
        let begun = self.begun.take();
        if begun != Some(begin) {
            if self.open || begun.is_some() {
                self.open = false;
                run(&mut self.connection, "ROLLBACK").await?;
            }
            run(&mut self.connection, begin.alone).await?;
        }
        self.open = true;
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

    /// Commits; with `next` (the next group's BEGIN), begins the next group's transaction in
    /// the same round trip. An error leaves no transaction begun: whether the COMMIT took
    /// effect is then for the caller to find out, as for any failed COMMIT. A BEGIN that failed
    /// after it may have left a transaction open (its settings refused): the next BEGIN rolls
    /// back first.
    pub(crate) async fn commit(self, next: Option<Begin>) -> Result<(), sqlx::Error> {
        let sql = next.map_or("COMMIT", |begin| begin.after_commit);
        let done = run(&mut self.kept.connection, sql).await;
        self.kept.open = done.is_err() && next.is_some();
        self.kept.begun = next.filter(|_| done.is_ok());
        done
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
