//! The batch log and the delivery queue: accepted batches, one job per (batch, connection), and
//! the attempt and dead-letter logs. The statements that change them run inside the writer's
//! group-commit transaction; the reads here run on the pool.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::FromRow;

use super::backend::{Sql, args};
use super::{Store, StoreError, StoreResult};
use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{BatchId, ConnectionId, InputId, Mpid};

/// A batch to store, with the delivery jobs to create if it is stored (not a duplicate).
#[derive(Debug, Clone)]
pub(crate) struct NewBatch {
    pub(crate) input_id: InputId,
    pub(crate) source_request_id: Option<String>,
    pub(crate) received_at: i64,
    pub(crate) event_count: i64,
    pub(crate) body: Arc<[u8]>,
    pub(crate) jobs: Vec<NewJob>,
    /// What the batch tells about its user's profile.
    pub(crate) profile: Option<ProfileUpdate>,
    /// A batch that arrived without an MPID: the identities the group commit resolves it by
    /// (see `store::identity_steps`), which then sets `body`, `jobs` and `profile`.
    pub(crate) unresolved: Option<Box<Unresolved>>,
}

/// What a batch without an MPID becomes once its user is known, either way. The commit picks
/// one (and can pick again if its group is retried), so nothing here is changed by it.
#[derive(Debug, Clone)]
pub(crate) struct Unresolved {
    /// The batch's user identities, as (type, value).
    pub(crate) identities: Vec<(String, String)>,
    /// Its device, as the identity store keys it (`device_application_stamp:…`).
    pub(crate) device: Option<String>,
    /// Whether a new user may be made for it (see `pipeline::identity`); if not and none is
    /// found, the batch keeps no user.
    pub(crate) may_create: bool,
    /// Whether the batch said `"mpid": 0` (not known), which it keeps saying if it gets no user.
    pub(crate) said_zero: bool,
    /// The body without `mpid`; the commit writes the resolved one in front.
    pub(crate) body: Arc<[u8]>,
    /// The jobs if the batch gets a user; each `mpid` set there is the resolved user's.
    pub(crate) user_jobs: Vec<NewJob>,
    /// The jobs if it gets none.
    pub(crate) anonymous_jobs: Vec<NewJob>,
    /// The profile update if it gets a user (its `mpid` is replaced by the resolved one).
    pub(crate) profile: ProfileUpdate,
    /// The MPID the commit gave it (0: none), for the Live Stream once the request is answered.
    pub(crate) resolved: Arc<std::sync::atomic::AtomicI64>,
}

/// A user's profile as a batch changes it: attributes set, and `null` for deleted ones (a JSON
/// merge patch); the consent purposes it states (see [`crate::model::consent`]).
#[derive(Debug, Clone)]
pub(crate) struct ProfileUpdate {
    pub(crate) mpid: Mpid,
    pub(crate) patch: serde_json::Map<String, serde_json::Value>,
    pub(crate) consent: serde_json::Map<String, serde_json::Value>,
}

/// A delivery job to create with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewJob {
    pub(crate) connection_id: ConnectionId,
    pub(crate) revision_id: i64,
    /// Leased to this node at once, and handed to delivery after the commit; otherwise left
    /// in the table for a poller to claim.
    pub(crate) leased: bool,
    /// The connection's rules decide on the user's consent (see
    /// [`crate::model::forwarding_rules::ForwardingRules::reads_consent`]): a leased job then
    /// takes its user's consent from the commit to delivery.
    pub(crate) reads_consent: bool,
    /// The batch's user, on a connection that keeps each user's batches in order; `None`:
    /// unordered.
    pub(crate) mpid: Option<Mpid>,
    /// How long the job waits for its user's later batches to go with it (ms; 0: it does not
    /// wait, and is not gathered). Set only with `mpid`.
    pub(crate) window_ms: i64,
}

/// What happened to one batch of an ingest request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IngestOutcome {
    Stored {
        batch_id: BatchId,
    },
    /// Its `source_request_id` was seen before for this input; nothing new was stored.
    Duplicate,
}

/// A delivery job: one stored batch owed to one connection.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) id: i64,
    pub(crate) batch_id: BatchId,
    pub(crate) connection_id: ConnectionId,
    pub(crate) revision_id: i64,
    /// How many of the batch's webhook requests were already delivered (or dead-lettered).
    pub(crate) progress: i64,
    pub(crate) attempts: i64,
    pub(crate) created_at: i64,
    /// When this node's lease on the job ends (Unix ms, this node's clock).
    pub(crate) lease_until: i64,
    /// Set when the job's connection keeps each user's batches in order (see [`NewJob::mpid`]).
    pub(crate) mpid: Option<Mpid>,
    pub(crate) body: Arc<[u8]>,
    /// The user's consent as the commit that stored the batch left their profile (this batch's
    /// statement merged over earlier ones), for a job handed over at that commit whose rules
    /// read consent; `None` otherwise, and delivery reads the profile if it needs it.
    pub(crate) profile_consent: Option<Arc<serde_json::Value>>,
    /// Set on a job of a coalesced group: the id of the group's first job (see migration 0019).
    pub(crate) coalesce_head: Option<i64>,
    /// The other jobs of this job's coalesced group, in id order (empty for any other job):
    /// this job holds them, and they are sent, retried and finished with it.
    pub(crate) mates: Vec<Job>,
    /// Which of the writer's hand-offs brought this job to delivery, counted by delivery in the
    /// order they arrive; `None` for a claimed job. A user's jobs of one hand-off are ordered by
    /// delivery itself, not by the store (see `delivery::order`).
    pub(crate) handoff: Option<u64>,
}

impl Job {
    /// Whether this job heads a coalesced group (maybe of one).
    pub(crate) fn is_coalesced(&self) -> bool {
        self.coalesce_head.is_some()
    }
}

/// What a lease renewal found: the jobs this node still held, now leased until `lease_until`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Renewed {
    pub(crate) job_ids: Vec<i64>,
    pub(crate) lease_until: i64,
}

/// How a delivery attempt ended, for the attempt log.
#[derive(Debug, Clone)]
pub(crate) struct AttemptRecord {
    pub(crate) attempted_at: i64,
    pub(crate) outcome: AttemptOutcome,
    pub(crate) status: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) requests: i64,
    pub(crate) latency_ms: i64,
    /// Events delivered by this attempt.
    pub(crate) events: i64,
}

/// A request given up on, kept for inspection and replay.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetter {
    pub(crate) payload_index: i64,
    pub(crate) body: Vec<u8>,
    pub(crate) status: Option<i64>,
    pub(crate) error: String,
}

/// What a worker reports about a job it worked on.
#[derive(Debug, Clone)]
pub(crate) enum JobUpdate {
    /// Every request was delivered or dead-lettered; the job leaves the queue.
    Finished {
        job: JobKey,
        attempt: AttemptRecord,
        dead: Vec<DeadLetter>,
    },
    /// Some requests remain; try again at `next_attempt_at`.
    Retry {
        job: JobKey,
        progress: i64,
        attempts: i64,
        next_attempt_at: i64,
        attempt: AttemptRecord,
        dead: Vec<DeadLetter>,
    },
    /// Give the job back unworked (shutdown, or no room in its connection's lane).
    Release { job_id: i64 },
}

/// What a recovering connection's drain has to claim (see [`Store::backlog_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backlog {
    /// The connection's jobs up to `end`, counted up to the limit asked for.
    pub(crate) jobs: u64,
    /// Its newest job's id when the recovery began (0 if it had none): where the backlog ends.
    pub(crate) end: i64,
}

/// The identifying part of a job that updates need.
#[derive(Debug, Clone)]
pub(crate) struct JobKey {
    pub(crate) id: i64,
    pub(crate) batch_id: BatchId,
    pub(crate) connection_id: ConnectionId,
    /// The other jobs of its coalesced group: finished or retried with it, in the same
    /// statement (empty for any other job).
    pub(crate) mates: Vec<i64>,
}

/// A dead letter as listed by the admin API.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct DeadLetterRow {
    pub(crate) id: i64,
    pub(crate) job_id: i64,
    pub(crate) batch_id: BatchId,
    pub(crate) payload_index: i64,
    pub(crate) body: Vec<u8>,
    pub(crate) status: Option<i64>,
    pub(crate) error: String,
    pub(crate) created_at: i64,
}

/// A connection's delivery summary.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct ConnectionStats {
    pub(crate) connection_id: ConnectionId,
    /// Events delivered within the retention.
    pub(crate) events_forwarded: i64,
    /// The last attempt's outcome, error and time.
    pub(crate) last_outcome: String,
    pub(crate) last_error: Option<String>,
    pub(crate) last_attempt_at: i64,
}

/// A connection's deliveries that failed and wait for another attempt: how many, and the
/// oldest one's times and last error.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct FailingJobs {
    pub(crate) failing_jobs: i64,
    pub(crate) created_at: i64,
    pub(crate) revision_id: i64,
    /// Set when the oldest failing job heads a coalesced group (only heads are retried).
    pub(crate) coalesce_head: Option<i64>,
    /// The acceptance of the group's newest batch (the head's own for a lone job).
    pub(crate) newest_in_group: i64,
    pub(crate) next_attempt_at: i64,
    pub(crate) last_error: Option<String>,
}

/// An attempt as listed by the admin API.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct AttemptRow {
    pub(crate) id: i64,
    pub(crate) job_id: i64,
    pub(crate) attempted_at: i64,
    pub(crate) outcome: String,
    pub(crate) status: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) requests: i64,
    pub(crate) latency_ms: i64,
}

/// A job just leased by a claim; its batch is read separately.
#[derive(Debug, FromRow)]
pub(crate) struct ClaimedJob {
    id: i64,
    batch_id: BatchId,
    connection_id: ConnectionId,
    revision_id: i64,
    progress: i64,
    attempts: i64,
    created_at: i64,
    lease_until: i64,
    mpid: Option<Mpid>,
    coalesce_head: Option<i64>,
}

/// The same columns, read by the SQLite writer's own connection (a claim's statements run in
/// its group commit).
impl super::direct::DirectRow for ClaimedJob {
    fn decode(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: row.get("id")?,
            batch_id: row.get("batch_id")?,
            connection_id: row.get("connection_id")?,
            revision_id: row.get("revision_id")?,
            progress: row.get("progress")?,
            attempts: row.get("attempts")?,
            created_at: row.get("created_at")?,
            lease_until: row.get("lease_until")?,
            mpid: row.get("mpid")?,
            coalesce_head: row.get("coalesce_head")?,
        })
    }
}

impl ClaimedJob {
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    pub(crate) fn coalesce_head(&self) -> Option<i64> {
        self.coalesce_head
    }

    /// Marks a job as the first of the group a claim just formed around it.
    pub(crate) fn heads_its_group(&mut self) {
        self.coalesce_head = Some(self.id);
    }

    pub(crate) fn batch_id(&self) -> BatchId {
        self.batch_id
    }

    pub(crate) fn key(&self) -> JobKey {
        JobKey {
            id: self.id,
            batch_id: self.batch_id,
            connection_id: self.connection_id.clone(),
            mates: Vec::new(),
        }
    }

    pub(crate) fn into_job(self, body: Arc<[u8]>) -> Job {
        Job {
            id: self.id,
            batch_id: self.batch_id,
            connection_id: self.connection_id,
            revision_id: self.revision_id,
            progress: self.progress,
            attempts: self.attempts,
            created_at: self.created_at,
            lease_until: self.lease_until,
            mpid: self.mpid,
            body,
            profile_consent: None,
            coalesce_head: self.coalesce_head,
            mates: Vec::new(),
            handoff: None,
        }
    }
}

impl AttemptRecord {
    /// A job ended without any request, for `reason`.
    pub(crate) fn dropped(reason: &str) -> Self {
        Self {
            attempted_at: crate::model::now_ms(),
            outcome: AttemptOutcome::Dropped,
            status: None,
            error: Some(reason.to_owned()),
            requests: 0,
            latency_ms: 0,
            events: 0,
        }
    }
}

/// `$1` the connection, `$2` now: its jobs nobody holds that wait out a backoff become due now
/// (not those still waiting out a coalescing window, which are not backing off).
/// On PostgreSQL rows another transaction has locked are skipped (they are being worked on), so
/// this waits for no one and can deadlock with no one.
const BRING_FORWARD: Sql = Sql::each(
    "UPDATE jobs SET next_attempt_at = $2 \
     WHERE connection_id = $1 AND next_attempt_at > $2 AND lease_until <= $2 \
     AND (coalesce_head IS NULL OR attempts > 0)",
    "UPDATE jobs SET next_attempt_at = $2 WHERE id = ANY(ARRAY(SELECT id FROM jobs \
     WHERE connection_id = $1 AND next_attempt_at > $2 AND lease_until <= $2 \
     AND (coalesce_head IS NULL OR attempts > 0) ORDER BY id FOR UPDATE SKIP LOCKED))",
);
/// `$1` the connection, `$2` now: one of its due jobs nobody holds, if any, that a drain will
/// be able to claim once the jobs ahead of it are done: not one whose user has an earlier job
/// waiting out a backoff (that one goes first, when its backoff is over, not during a drain).
/// A job behind its user's job in flight counts: on a connection ordered per user a claim takes
/// only each user's head, so a short claim does not mean the backlog is claimed.
const DRAIN_LEFT: Sql = Sql::shared(
    "SELECT j.id FROM jobs j WHERE j.connection_id = $1 AND j.next_attempt_at <= $2 \
     AND j.lease_until <= $2 AND NOT EXISTS (SELECT 1 FROM jobs e \
     WHERE e.connection_id = j.connection_id AND e.mpid = j.mpid AND e.mpid IS NOT NULL \
     AND e.id < j.id AND e.next_attempt_at > $2 AND e.lease_until <= $2) AND j.id <= $3 LIMIT 1",
);
/// `$1` connection: its newest job, where a recovery's backlog ends.
const LAST_JOB: Sql = Sql::shared("SELECT MAX(id) FROM jobs WHERE connection_id = $1");
/// `$1` connection, `$2` its newest job, `$3` a limit: its jobs up to that one, counted up to
/// the limit (an index walk of `jobs (connection_id, id)`, so bounded).
const COUNT_BACKLOG: Sql = Sql::shared(
    "SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE connection_id = $1 AND id <= $2 LIMIT $3) AS b",
);
const BATCH_EXISTS: Sql = Sql::shared("SELECT id FROM batches WHERE id = $1");
const SELECT_BODIES: Sql = Sql::each(
    "SELECT id, body FROM batches WHERE id IN (SELECT value FROM json_each($1))",
    "SELECT id, body FROM batches \
     WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint))",
);

const CONNECTION_STATS: Sql = Sql::shared(
    "SELECT a.connection_id, \
     CAST(COALESCE(SUM(a.events), 0) AS BIGINT) AS events_forwarded, \
     l.outcome AS last_outcome, l.error AS last_error, l.attempted_at AS last_attempt_at \
     FROM attempts a \
     JOIN attempts l ON l.id = (SELECT MAX(id) FROM attempts m WHERE m.connection_id = a.connection_id) \
     GROUP BY a.connection_id, l.outcome, l.error, l.attempted_at",
);
/// `$1` connection: its oldest job that failed at least once (none if no job failed).
const OLDEST_FAILING_JOB: Sql = Sql::shared(
    "SELECT (SELECT COUNT(*) FROM jobs WHERE connection_id = $1 AND attempts > 0) AS failing_jobs, \
     created_at, revision_id, coalesce_head, \
     COALESCE((SELECT MAX(m.created_at) FROM jobs m WHERE m.coalesce_head = j.id), created_at) \
     AS newest_in_group, next_attempt_at, last_error FROM jobs j \
     WHERE connection_id = $1 AND attempts > 0 ORDER BY id LIMIT 1",
);
const DEAD_LETTER_BODY: Sql =
    Sql::shared("SELECT body FROM dead_letters WHERE id = $1 AND connection_id = $2");
const DELETE_DEAD_LETTER: Sql = Sql::shared("DELETE FROM dead_letters WHERE id = $1");

const RELEASE_ALL_LEASES: Sql =
    Sql::shared("UPDATE jobs SET lease_until = 0 WHERE lease_until > 0");
const QUEUE_STATS: Sql = Sql::shared("SELECT COUNT(*), MIN(created_at) FROM jobs");
/// `$1` now: one job due that nobody holds, if any (through `jobs_due`).
const ANY_CLAIMABLE: Sql = Sql::shared(
    "SELECT id FROM jobs WHERE next_attempt_at <= $1 AND lease_until <= $1 \
     ORDER BY next_attempt_at LIMIT 1",
);
const SELECT_DEAD_LETTERS: Sql = Sql::shared(
    "SELECT id, job_id, batch_id, payload_index, body, \
     status, error, created_at FROM dead_letters WHERE connection_id = $1 ORDER BY id DESC LIMIT $2",
);
const SELECT_ATTEMPTS: Sql = Sql::shared(
    "SELECT id, job_id, attempted_at, outcome, status, error, requests, \
     latency_ms FROM attempts WHERE connection_id = $1 ORDER BY id DESC LIMIT $2",
);

impl Store {
    /// Frees every lease. Only safe where this process is the only node (embedded SQLite): jobs
    /// a crashed run had leased become deliverable at once instead of after the lease.
    pub(crate) async fn release_all_leases(&self) -> StoreResult<u64> {
        Ok(self.execute(RELEASE_ALL_LEASES, &[]).await?)
    }

    /// Makes a connection's jobs that wait out a backoff due now (its endpoint is back);
    /// returns how many.
    pub(crate) async fn bring_forward(
        &self,
        connection_id: &ConnectionId,
        now: i64,
    ) -> StoreResult<u64> {
        Ok(self
            .execute(BRING_FORWARD, args![connection_id, now])
            .await?)
    }

    /// The backlog a recovering connection's drain has to claim: its jobs up to its newest one
    /// (held or not, those in a coalescing window too), counted up to `count_up_to`, and that
    /// newest one. Most of an outage's jobs never waited out a backoff: the breaker held them
    /// back untried, due all along, so the jobs [`Self::bring_forward`] moved are not the
    /// backlog.
    pub(crate) async fn backlog_of(
        &self,
        connection_id: &ConnectionId,
        count_up_to: u64,
    ) -> StoreResult<Backlog> {
        let end: Option<(Option<i64>,)> =
            self.fetch_optional(LAST_JOB, args![connection_id]).await?;
        let end = end.and_then(|(id,)| id).unwrap_or(0);
        let limit = i64::try_from(count_up_to).unwrap_or(i64::MAX);
        let (jobs,): (i64,) = self
            .fetch_one(COUNT_BACKLOG, args![connection_id, end, limit])
            .await?;
        Ok(Backlog {
            jobs: u64::try_from(jobs).unwrap_or(0),
            end,
        })
    }

    /// Whether a recovering connection still has due jobs nobody holds for its drain to claim
    /// (see `DRAIN_LEFT`). Read after the drain's claim committed, so the jobs it claimed are
    /// not counted, and every job committed before this read is.
    /// Only jobs up to `backlog_end` count: under steady traffic on a connection ordered per
    /// user some user nearly always has a job queued behind one in flight, so counting the jobs
    /// accepted during the drain would keep it from ever ending.
    pub(crate) async fn drain_left(
        &self,
        connection_id: &ConnectionId,
        now: i64,
        backlog_end: i64,
    ) -> StoreResult<bool> {
        let row: Option<(i64,)> = self
            .fetch_optional(DRAIN_LEFT, args![connection_id, now, backlog_end])
            .await?;
        Ok(row.is_some())
    }

    /// Whether a claim of due jobs at `now` could lease any: some job is due and nobody holds
    /// it. A read, where a claim is a write transaction (on SQLite the writer's, in its group
    /// commit): a poller that found nothing last time asks this first. It may say yes to jobs
    /// a claim skips (a crowded or failing connection's, a user's held behind their earlier
    /// job), never no to one a claim would take.
    pub(crate) async fn anything_to_claim(&self, now: i64) -> StoreResult<bool> {
        let row: Option<(i64,)> = self.fetch_optional(ANY_CLAIMABLE, args![now]).await?;
        Ok(row.is_some())
    }

    /// Whether a batch is stored.
    pub(crate) async fn batch_exists(&self, id: BatchId) -> StoreResult<bool> {
        let row: Option<(BatchId,)> = self.fetch_optional(BATCH_EXISTS, args![id]).await?;
        Ok(row.is_some())
    }

    /// The bodies of those of `batch_ids` still kept, by id, in one query.
    pub(crate) async fn batch_bodies(
        &self,
        batch_ids: &[BatchId],
    ) -> StoreResult<HashMap<BatchId, Arc<[u8]>>> {
        if batch_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let ids = serde_json::to_string(batch_ids).unwrap_or_else(|_| "[]".to_owned());
        let rows: Vec<(BatchId, Vec<u8>)> = self.fetch_all(SELECT_BODIES, args![&ids]).await?;
        Ok(rows
            .into_iter()
            .map(|(id, body)| (id, body.into()))
            .collect())
    }

    /// Per connection: events forwarded (within the retention), and the last attempt's outcome,
    /// error and time.
    pub(crate) async fn connection_stats(&self) -> StoreResult<Vec<ConnectionStats>> {
        Ok(self.fetch_all(CONNECTION_STATS, &[]).await?)
    }

    /// The connection's failing deliveries, if any: their count and the oldest one.
    pub(crate) async fn failing_jobs(
        &self,
        connection_id: &ConnectionId,
    ) -> StoreResult<Option<FailingJobs>> {
        Ok(self
            .fetch_optional(OLDEST_FAILING_JOB, args![connection_id])
            .await?)
    }

    /// A dead letter's body, if it belongs to the connection.
    pub(crate) async fn dead_letter_body(
        &self,
        id: i64,
        connection_id: &ConnectionId,
    ) -> StoreResult<Vec<u8>> {
        let row: Option<(Vec<u8>,)> = self
            .fetch_optional(DEAD_LETTER_BODY, args![id, connection_id])
            .await?;
        row.map(|(body,)| body).ok_or(StoreError::NotFound)
    }

    pub(crate) async fn delete_dead_letter(&self, id: i64) -> StoreResult<()> {
        self.execute(DELETE_DEAD_LETTER, args![id]).await?;
        Ok(())
    }

    /// Pending jobs and the creation time of the oldest.
    pub(crate) async fn queue_stats(&self) -> StoreResult<(i64, Option<i64>)> {
        Ok(self.fetch_one(QUEUE_STATS, &[]).await?)
    }

    pub(crate) async fn dead_letters(
        &self,
        connection_id: &ConnectionId,
        limit: i64,
    ) -> StoreResult<Vec<DeadLetterRow>> {
        Ok(self
            .fetch_all(SELECT_DEAD_LETTERS, args![connection_id, limit])
            .await?)
    }

    pub(crate) async fn attempts(
        &self,
        connection_id: &ConnectionId,
        limit: i64,
    ) -> StoreResult<Vec<AttemptRow>> {
        Ok(self
            .fetch_all(SELECT_ATTEMPTS, args![connection_id, limit])
            .await?)
    }
}
