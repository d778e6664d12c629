//! Replays by time range: the `replays` rows, the batch-log and dead-letter pages a replay walks,
//! and the steps that advance its cursor. Every step is fenced by the replay's lease and its
//! `running` status, so a cancel (or another node's takeover) stops the cursor at once.

use sqlx::FromRow;

use super::backend::{Sql, args};
use super::{Store, StoreError, StoreResult};
use crate::model::ids::{BatchId, ConnectionId, InputId};

/// A replay to start.
#[derive(Debug, Clone)]
pub(crate) struct NewReplay<'a> {
    pub(crate) connection_id: &'a ConnectionId,
    pub(crate) source: &'a str,
    pub(crate) from_ms: i64,
    pub(crate) to_ms: i64,
    /// The JSON array of event type names, if restricted.
    pub(crate) event_types: Option<String>,
    pub(crate) rate_per_second: i64,
    /// Settings to save as a revision of their own for the replay's jobs (batch replays).
    pub(crate) settings: Option<String>,
    pub(crate) now: i64,
}

/// A replay as stored.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct ReplayRow {
    pub(crate) id: i64,
    pub(crate) connection_id: ConnectionId,
    pub(crate) source: String,
    pub(crate) from_ms: i64,
    pub(crate) to_ms: i64,
    pub(crate) event_types: Option<String>,
    pub(crate) revision_id: Option<i64>,
    pub(crate) rate_per_second: i64,
    pub(crate) status: String,
    pub(crate) cursor_id: i64,
    pub(crate) batches: i64,
    pub(crate) events: i64,
    pub(crate) requests: i64,
    pub(crate) sent: i64,
    pub(crate) failed: i64,
    /// Batches pruned before their turn: read, but gone when their job was to be made.
    pub(crate) expired: i64,
    pub(crate) error: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

/// What one step of a replay did, added to its totals.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Step {
    /// The batch or dead letter handled: the cursor moves past it.
    pub(crate) cursor_id: i64,
    pub(crate) batches: i64,
    pub(crate) events: i64,
    pub(crate) requests: i64,
    pub(crate) sent: i64,
    pub(crate) failed: i64,
    pub(crate) expired: i64,
}

/// A replayed batch's job: on the replay's settings revision, with its user where those
/// settings keep a user's batches in order or gather them, and gathered for `window_ms` like a
/// live batch accepted now (0: sent at once).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplayJob<'a> {
    pub(crate) batch_id: BatchId,
    pub(crate) connection_id: &'a ConnectionId,
    pub(crate) revision_id: i64,
    pub(crate) mpid: Option<i64>,
    pub(crate) window_ms: i64,
}

/// The lease a node holds on a replay it drives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReplayLease<'a> {
    pub(crate) replay_id: i64,
    pub(crate) node: &'a str,
    pub(crate) until: i64,
}

const INSERT_REVISION: Sql = Sql::shared(
    "INSERT INTO connection_revisions (connection_id, settings, created_at) \
     VALUES ($1, $2, $3) RETURNING id",
);
const INSERT_REPLAY: Sql = Sql::shared(
    "INSERT INTO replays (connection_id, source, from_ms, to_ms, event_types, revision_id, \
     rate_per_second, status, created_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8, $8) RETURNING id",
);
const SELECT_REPLAY: Sql = Sql::shared(
    "SELECT id, connection_id, source, from_ms, to_ms, event_types, revision_id, \
     rate_per_second, status, cursor_id, batches, events, requests, sent, failed, expired, error, \
     created_at, updated_at FROM replays WHERE id = $1",
);
const CANCEL_REPLAY: Sql = Sql::shared(
    "UPDATE replays SET status = 'cancelled', updated_at = $2 WHERE id = $1 AND status = 'running'",
);
/// `$1` lease end, `$2` now, `$3` this node: the oldest running replay nobody drives.
const CLAIM_REPLAY: Sql = Sql::each(
    "UPDATE replays SET lease_until = $1, leased_by = $3 WHERE id = \
     (SELECT id FROM replays WHERE status = 'running' AND lease_until <= $2 ORDER BY id LIMIT 1) \
     RETURNING id, connection_id, source, from_ms, to_ms, event_types, revision_id, \
     rate_per_second, status, cursor_id, batches, events, requests, sent, failed, expired, error, \
     created_at, updated_at",
    "UPDATE replays SET lease_until = $1, leased_by = $3 WHERE id = \
     (SELECT id FROM replays WHERE status = 'running' AND lease_until <= $2 ORDER BY id LIMIT 1 \
      FOR UPDATE SKIP LOCKED) \
     RETURNING id, connection_id, source, from_ms, to_ms, event_types, revision_id, \
     rate_per_second, status, cursor_id, batches, events, requests, sent, failed, expired, error, \
     created_at, updated_at",
);
/// `$1` replay, `$2` node, `$3` lease end: renews a lease still held on a running replay.
const RENEW_REPLAY: Sql = Sql::shared(
    "UPDATE replays SET lease_until = $3 \
     WHERE id = $1 AND leased_by = $2 AND status = 'running'",
);
const ADVANCE_REPLAY: Sql = Sql::shared(
    "UPDATE replays SET lease_until = $3, cursor_id = $4, batches = batches + $5, \
     events = events + $6, requests = requests + $7, sent = sent + $8, failed = failed + $9, \
     updated_at = $10, expired = expired + $11 WHERE id = $1 AND leased_by = $2 AND status = 'running'",
);
const FINISH_REPLAY: Sql = Sql::shared(
    "UPDATE replays SET status = $3, error = $4, lease_until = 0, updated_at = $5 \
     WHERE id = $1 AND leased_by = $2 AND status = 'running'",
);
const RELEASE_REPLAYS: Sql =
    Sql::shared("UPDATE replays SET lease_until = 0 WHERE leased_by = $1 AND status = 'running'");
/// Every replay lease, at the start of the one process of an embedded database.
const RELEASE_ALL_REPLAYS: Sql =
    Sql::shared("UPDATE replays SET lease_until = 0 WHERE status = 'running' AND lease_until > 0");
/// `$1` batch, `$2` connection, `$3` revision, `$4` now, `$5` due, `$6` user, `$7` coalescing
/// mark: a replayed batch's job, held by no one, so the ordinary pollers deliver it. It is
/// made only if its batch still exists, in the same statement (see
/// [`Store::enqueue_replayed_batch`] for why that is enough against the retention's prune).
pub(in crate::store) const INSERT_JOB: Sql = Sql::each(
    "INSERT INTO jobs (batch_id, connection_id, revision_id, created_at, next_attempt_at, \
     mpid, coalesce_head) SELECT id, $2, $3, $4, $5, $6, $7 FROM batches WHERE id = $1",
    "INSERT INTO jobs (batch_id, connection_id, revision_id, created_at, next_attempt_at, \
     mpid, coalesce_head) SELECT id, $2, $3, $4, $5, $6, $7 FROM batches WHERE id = $1 \
     FOR KEY SHARE",
);
const DELETE_DEAD_LETTER: Sql = Sql::shared("DELETE FROM dead_letters WHERE id = $1");
const BATCHES_IN_RANGE: Sql = Sql::shared(
    "SELECT id, body FROM batches WHERE input_id = $1 AND received_at >= $2 \
     AND received_at <= $3 AND id > $4 ORDER BY id LIMIT $5",
);
/// `$1` input, `$2` below this id, `$3` rows: an input's batch log, newest first.
const LATEST_BATCHES: Sql = Sql::shared(
    "SELECT id, body FROM batches WHERE input_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
);
const DEAD_LETTERS_IN_RANGE: Sql = Sql::shared(
    "SELECT id, body FROM dead_letters WHERE connection_id = $1 AND created_at >= $2 \
     AND created_at <= $3 AND id > $4 ORDER BY id LIMIT $5",
);

/// A page of a time range, after the row `after`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RangePage {
    pub(crate) from_ms: i64,
    pub(crate) to_ms: i64,
    pub(crate) after: i64,
    pub(crate) limit: i64,
}

impl Store {
    /// Saves a replay (and the settings revision its jobs use, if given) in one transaction.
    pub(crate) async fn insert_replay(&self, new: &NewReplay<'_>) -> StoreResult<i64> {
        let mut tx = self.begin().await?;
        let revision_id = match &new.settings {
            Some(settings) => {
                let (id,): (i64,) = tx
                    .fetch_one(INSERT_REVISION, args![new.connection_id, settings, new.now])
                    .await?;
                Some(id)
            }
            None => None,
        };
        let (id,): (i64,) = tx
            .fetch_one(
                INSERT_REPLAY,
                args![
                    new.connection_id,
                    new.source,
                    new.from_ms,
                    new.to_ms,
                    &new.event_types,
                    revision_id,
                    new.rate_per_second,
                    new.now
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(id)
    }

    pub(crate) async fn get_replay(&self, id: i64) -> StoreResult<ReplayRow> {
        let row = self.fetch_optional(SELECT_REPLAY, args![id]).await?;
        row.ok_or(StoreError::NotFound)
    }

    /// Stops a running replay's cursor; returns the replay as it now is.
    pub(crate) async fn cancel_replay(&self, id: i64, now: i64) -> StoreResult<ReplayRow> {
        self.execute(CANCEL_REPLAY, args![id, now]).await?;
        self.get_replay(id).await
    }

    /// Leases the oldest running replay no node drives, if any.
    pub(crate) async fn claim_replay(
        &self,
        node: &str,
        now: i64,
        lease_until: i64,
    ) -> StoreResult<Option<ReplayRow>> {
        Ok(self
            .fetch_optional(CLAIM_REPLAY, args![lease_until, now, node])
            .await?)
    }

    /// Extends the lease; false when the replay was cancelled or another node holds it.
    pub(crate) async fn renew_replay(&self, lease: ReplayLease<'_>) -> StoreResult<bool> {
        let n = self
            .execute(
                RENEW_REPLAY,
                args![lease.replay_id, lease.node, lease.until],
            )
            .await?;
        Ok(n == 1)
    }

    /// Enqueues a replayed batch's job (if it has requests to send) and moves the cursor past
    /// the batch, in one transaction; false (nothing written) when the replay was cancelled or
    /// another node holds it. A batch the retention pruned since the replay read it gets no job
    /// and is counted `expired` instead of in `batches`, `events` and `requests`.
    ///
    /// Against the prune's chunk delete (`retention_sql::BATCHES`, which keeps every batch at or
    /// above the smallest one a job references): the job is inserted by `INSERT … SELECT FROM
    /// batches`, so it exists only if its batch still does. On SQLite one writer at a time
    /// makes the two serial. On PostgreSQL (READ COMMITTED) the SELECT takes `FOR KEY SHARE` on
    /// the batch row, which conflicts with the prune's `FOR UPDATE` on its chunk, taken in a
    /// statement before its delete: if the prune locked first, this statement waits for its
    /// commit and then finds the row deleted (no job); if this locked first, the prune waits for
    /// this transaction's commit, and its delete, a later statement with a later snapshot, sees
    /// the job and keeps the batch. (The delete alone would not do: its job check reads the
    /// snapshot it took before waiting for the row.)
    pub(crate) async fn enqueue_replayed_batch(
        &self,
        lease: ReplayLease<'_>,
        job: Option<ReplayJob<'_>>,
        mut step: Step,
        now: i64,
    ) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        if let Some(job) = job {
            let made = tx
                .execute(
                    INSERT_JOB,
                    args![
                        job.batch_id,
                        job.connection_id,
                        job.revision_id,
                        now,
                        now.saturating_add(job.window_ms),
                        job.mpid,
                        (job.window_ms > 0).then_some(0_i64)
                    ],
                )
                .await?;
            if made == 0 {
                step = Step {
                    cursor_id: step.cursor_id,
                    expired: 1,
                    ..Step::default()
                };
            }
        }
        if advance(&mut tx, lease, step, now).await? != 1 {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Moves the cursor past a dead letter sent again; one the receiver accepted leaves the
    /// dead letters. False when the replay was cancelled or another node holds it.
    pub(crate) async fn record_replayed_letter(
        &self,
        lease: ReplayLease<'_>,
        step: Step,
        now: i64,
    ) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        if advance(&mut tx, lease, step, now).await? != 1 {
            return Ok(false);
        }
        if step.sent > 0 {
            tx.execute(DELETE_DEAD_LETTER, args![step.cursor_id])
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Ends a running replay this node drives with `status` (`done`, `failed`).
    pub(crate) async fn finish_replay(
        &self,
        lease: ReplayLease<'_>,
        status: &str,
        error: Option<&str>,
        now: i64,
    ) -> StoreResult<()> {
        self.execute(
            FINISH_REPLAY,
            args![lease.replay_id, lease.node, status, error, now],
        )
        .await?;
        Ok(())
    }

    /// Gives up this node's replay leases (at shutdown), so another node resumes them at once.
    pub(crate) async fn release_replays(&self, node: &str) -> StoreResult<u64> {
        Ok(self.execute(RELEASE_REPLAYS, args![node]).await?)
    }

    /// Gives up the replay leases of a previous run (one process owns an embedded database,
    /// so they are stale): its replays resume at once, at their cursors.
    pub(crate) async fn release_all_replays(&self) -> StoreResult<u64> {
        Ok(self.execute(RELEASE_ALL_REPLAYS, &[]).await?)
    }

    /// A page of an input's batch log received within the range: `(id, body)` in id order.
    pub(crate) async fn batches_in_range(
        &self,
        input_id: &InputId,
        page: RangePage,
    ) -> StoreResult<Vec<(BatchId, Vec<u8>)>> {
        Ok(self
            .fetch_all(
                BATCHES_IN_RANGE,
                args![input_id, page.from_ms, page.to_ms, page.after, page.limit],
            )
            .await?)
    }

    /// A page of an input's batch log, newest first, of batches older than `before` (an id).
    pub(crate) async fn latest_batches(
        &self,
        input_id: &InputId,
        before: i64,
        limit: i64,
    ) -> StoreResult<Vec<(BatchId, Vec<u8>)>> {
        Ok(self
            .fetch_all(LATEST_BATCHES, args![input_id, before, limit])
            .await?)
    }

    /// A page of a connection's dead letters created within the range: `(id, body)` in id order.
    pub(crate) async fn dead_letters_in_range(
        &self,
        connection_id: &ConnectionId,
        page: RangePage,
    ) -> StoreResult<Vec<(i64, Vec<u8>)>> {
        Ok(self
            .fetch_all(
                DEAD_LETTERS_IN_RANGE,
                args![
                    connection_id,
                    page.from_ms,
                    page.to_ms,
                    page.after,
                    page.limit
                ],
            )
            .await?)
    }
}

async fn advance(
    tx: &mut super::backend::Tx<'_>,
    lease: ReplayLease<'_>,
    step: Step,
    now: i64,
) -> Result<u64, sqlx::Error> {
    tx.execute(
        ADVANCE_REPLAY,
        args![
            lease.replay_id,
            lease.node,
            lease.until,
            step.cursor_id,
            step.batches,
            step.events,
            step.requests,
            step.sent,
            step.failed,
            now,
            step.expired
        ],
    )
    .await
}
