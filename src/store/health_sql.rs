//! Connection health (`connection_health`, migration 0016): since when a connection's endpoint
//! has failed, whether Boson paused it, and when its last aggregated alerts went out.
//!
//! Every transition is one conditional statement, so however many nodes try it at once exactly
//! one changes the row, and only that one sends the operator alert: a node learns whether it
//! won from the rows the statement changed or returned.

use super::backend::{Sql, args};
use super::{Store, StoreResult};
use crate::model::ids::ConnectionId;

/// `$1` connection, `$2` since, `$3` last error: only when it is not failing already.
const MARK_FAILING: Sql = Sql::shared(
    "INSERT INTO connection_health (connection_id, failing_since_ms, last_error) \
     VALUES ($1, $2, $3) ON CONFLICT (connection_id) DO UPDATE \
     SET failing_since_ms = excluded.failing_since_ms, last_error = excluded.last_error \
     WHERE connection_health.failing_since_ms IS NULL RETURNING connection_id",
);
const SELECT_FAILING_SINCE: Sql = Sql::shared(
    "SELECT failing_since_ms FROM connection_health \
     WHERE connection_id = $1 AND failing_since_ms IS NOT NULL",
);
/// `$1` connection, `$2` the `failing_since_ms` read: a compare-and-set, so one node clears it.
const CLEAR_FAILING: Sql = Sql::shared(
    "UPDATE connection_health SET failing_since_ms = NULL, last_error = NULL, \
     paused_at_ms = NULL WHERE connection_id = $1 AND failing_since_ms = $2",
);
/// Failing connections not paused since they began failing.
const SELECT_UNPAUSED_FAILING: Sql = Sql::shared(
    "SELECT connection_id, failing_since_ms FROM connection_health \
     WHERE failing_since_ms IS NOT NULL AND paused_at_ms IS NULL",
);
/// `$1` connection, `$2` now, `$3` latest `failing_since_ms` that is long enough.
const MARK_PAUSED: Sql = Sql::shared(
    "UPDATE connection_health SET paused_at_ms = $2 WHERE connection_id = $1 \
     AND paused_at_ms IS NULL AND failing_since_ms IS NOT NULL AND failing_since_ms <= $3 \
     RETURNING failing_since_ms, last_error",
);
/// `$1` connection, `$2` now: the failure clock starts again when an operator resumes it.
const RESTART_CLOCK: Sql = Sql::shared(
    "UPDATE connection_health SET failing_since_ms = $2, paused_at_ms = NULL \
     WHERE connection_id = $1 AND paused_at_ms IS NOT NULL AND failing_since_ms IS NOT NULL",
);
const INSERT_REVISION: Sql = Sql::shared(
    "INSERT INTO connection_revisions (connection_id, settings, created_at) \
     VALUES ($1, $2, $3) RETURNING id",
);
/// `$1` connection, `$2` new revision, `$3` the revision the caller read, `$4` now.
const SWAP_REVISION: Sql = Sql::shared(
    "UPDATE connections SET revision_id = $2, updated_at = $4 WHERE id = $1 AND revision_id = $3",
);
/// `$1` connection, `$2` now, `$3` start of the current window: one alert per window.
const CLAIM_DEAD_LETTER_ALERT: Sql = Sql::shared(
    "INSERT INTO connection_health (connection_id, dead_letter_alert_at_ms) VALUES ($1, $2) \
     ON CONFLICT (connection_id) DO UPDATE SET dead_letter_alert_at_ms = excluded.dead_letter_alert_at_ms \
     WHERE connection_health.dead_letter_alert_at_ms IS NULL \
     OR connection_health.dead_letter_alert_at_ms <= $3 RETURNING connection_id",
);
const CLAIM_BACKLOG_ALERT: Sql = Sql::shared(
    "INSERT INTO connection_health (connection_id, backlog_alert_at_ms) VALUES ($1, $2) \
     ON CONFLICT (connection_id) DO UPDATE SET backlog_alert_at_ms = excluded.backlog_alert_at_ms \
     WHERE connection_health.backlog_alert_at_ms IS NULL \
     OR connection_health.backlog_alert_at_ms <= $3 RETURNING connection_id",
);
/// `$1` threshold.
const SELECT_BACKLOGS: Sql = Sql::shared(
    "SELECT connection_id, COUNT(*) FROM jobs GROUP BY connection_id HAVING COUNT(*) > $1",
);
const SELECT_NAMES: Sql = Sql::shared(
    "SELECT i.name, o.name FROM connections c JOIN inputs i ON i.id = c.input_id \
     JOIN outputs o ON o.id = c.output_id WHERE c.id = $1",
);

/// Which aggregated alert a window is claimed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlertWindow {
    DeadLetters,
    Backlog,
}

/// What a won pause reports: since when the connection failed, and its last error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paused {
    pub(crate) failing_since_ms: i64,
    pub(crate) last_error: Option<String>,
}

/// The settings revision a pause replaces, and the paused settings that replace it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PauseRevision<'a> {
    pub(crate) current_revision: i64,
    pub(crate) paused_settings: &'a str,
}

impl Store {
    /// Records that a connection is failing since `since_ms`; true if this call began the
    /// failing spell (it was not failing already), so its caller sends `connection.failing`.
    pub(crate) async fn mark_failing(
        &self,
        id: &ConnectionId,
        since_ms: i64,
        error: &str,
    ) -> StoreResult<bool> {
        let won: Option<(ConnectionId,)> = self
            .fetch_optional(MARK_FAILING, args![id, since_ms, error])
            .await?;
        Ok(won.is_some())
    }

    /// Ends a failing spell; answers since when it failed if this call ended it (its caller
    /// sends `connection.recovered`), `None` if it was not failing or another node ended it.
    pub(crate) async fn mark_recovered(&self, id: &ConnectionId) -> StoreResult<Option<i64>> {
        let since: Option<(i64,)> = self.fetch_optional(SELECT_FAILING_SINCE, args![id]).await?;
        let Some((since,)) = since else {
            return Ok(None);
        };
        let cleared = self.execute(CLEAR_FAILING, args![id, since]).await?;
        Ok((cleared == 1).then_some(since))
    }

    /// Connections failing and not paused, with since when.
    pub(crate) async fn unpaused_failing(&self) -> StoreResult<Vec<(ConnectionId, i64)>> {
        Ok(self.fetch_all(SELECT_UNPAUSED_FAILING, &[]).await?)
    }

    /// Pauses a connection that has failed since `failing_by` or earlier, in one transaction:
    /// marks it paused and points it at `revision.paused_settings`, only if it still uses
    /// `revision.current_revision` (an operator's change meanwhile wins; the next check tries
    /// again). `Some` if this call paused it.
    pub(crate) async fn pause_connection(
        &self,
        id: &ConnectionId,
        failing_by: i64,
        revision: PauseRevision<'_>,
        now: i64,
    ) -> StoreResult<Option<Paused>> {
        let mut tx = self.begin().await?;
        let won: Option<(i64, Option<String>)> = tx
            .fetch_optional(MARK_PAUSED, args![id, now, failing_by])
            .await?;
        let Some((failing_since_ms, last_error)) = won else {
            return Ok(None);
        };
        let (new_revision,): (i64,) = tx
            .fetch_one(INSERT_REVISION, args![id, revision.paused_settings, now])
            .await?;
        let swap = args![id, new_revision, revision.current_revision, now];
        if tx.execute(SWAP_REVISION, swap).await? != 1 {
            // Dropping the transaction rolls it back: nothing is marked.
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(Paused {
            failing_since_ms,
            last_error,
        }))
    }

    /// An operator resumed a paused connection: its failure clock starts again at `now`, so a
    /// connection still failing is paused again only after another full spell.
    pub(crate) async fn restart_failure_clock(
        &self,
        id: &ConnectionId,
        now: i64,
    ) -> StoreResult<()> {
        self.execute(RESTART_CLOCK, args![id, now]).await?;
        Ok(())
    }

    /// Claims the current alert window of `kind` for a connection: true if no alert of that kind
    /// went out for it since `window_start` (this call then recorded one at `now`).
    pub(crate) async fn claim_alert_window(
        &self,
        id: &ConnectionId,
        kind: AlertWindow,
        now: i64,
        window_start: i64,
    ) -> StoreResult<bool> {
        let sql = match kind {
            AlertWindow::DeadLetters => CLAIM_DEAD_LETTER_ALERT,
            AlertWindow::Backlog => CLAIM_BACKLOG_ALERT,
        };
        let won: Option<(ConnectionId,)> = self
            .fetch_optional(sql, args![id, now, window_start])
            .await?;
        Ok(won.is_some())
    }

    /// Connections with more than `threshold` jobs, and how many they have.
    pub(crate) async fn backlogs(&self, threshold: i64) -> StoreResult<Vec<(ConnectionId, i64)>> {
        Ok(self.fetch_all(SELECT_BACKLOGS, args![threshold]).await?)
    }

    /// A connection's input and output names, if it still exists.
    pub(crate) async fn connection_names(
        &self,
        id: &ConnectionId,
    ) -> StoreResult<Option<(String, String)>> {
        Ok(self.fetch_optional(SELECT_NAMES, args![id]).await?)
    }
}
