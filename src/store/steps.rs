//! The steps of a group commit, each one statement (or a few) inside the writer's transaction.
//! [`super::group::commit`] runs them in order; each is tested on its own on both backends.
//!
//! Rows travel as one JSON array parameter per step (the batches: see [`super::batch_steps`]):
//! each statement is a round trip to the database (on SQLite, to its worker thread), so per-row
//! statements were the writer's main cost. Dead letters, which are rare and carry bodies, go
//! row by row.
//!
//! On SQLite a statement that reads fields of object rows (`value ->> 'job_id'`) walks them with
//! `jsonb_each`, which gives each row as SQLite's binary JSON: `json_each` gave it as text,
//! rendered again for every `value` the statement names and parsed again by its `->>`, which
//! was about 10% of the instructions of real-time delivery (a job and an attempt per batch).
//! The values the statements read are the same.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use super::backend::{Sql, Tx, args, json};
use super::queue::{AttemptRecord, ClaimedJob, DeadLetter, JobKey};
use crate::model::consent;
use crate::model::ids::{BatchId, ConnectionId, Mpid};

/// A job row to insert.
#[derive(Debug, Serialize)]
pub(super) struct JobRow<'a> {
    pub(super) batch_id: BatchId,
    pub(super) connection_id: &'a ConnectionId,
    pub(super) revision_id: i64,
    pub(super) created_at: i64,
    /// 0 for a job left in the table for a poller.
    pub(super) lease_until: i64,
    pub(super) leased_by: Option<&'a str>,
    /// Set on a connection that keeps each user's batches in order, or gathers them.
    pub(super) mpid: Option<Mpid>,
    /// When it may first be claimed: at once, or at the end of its coalescing window.
    pub(super) next_attempt_at: i64,
    /// `Some(0)` for a job gathered with its user's others (see migration 0019).
    pub(super) coalesce_head: Option<i64>,
}

/// An attempt row to insert.
#[derive(Debug, Serialize)]
pub(super) struct AttemptRow<'a> {
    job_id: i64,
    connection_id: &'a ConnectionId,
    attempted_at: i64,
    outcome: &'a str,
    status: Option<i64>,
    error: Option<&'a str>,
    requests: i64,
    latency_ms: i64,
    events: i64,
}

impl<'a> AttemptRow<'a> {
    pub(super) fn new(job: &'a JobKey, attempt: &'a AttemptRecord) -> Self {
        Self {
            job_id: job.id,
            connection_id: &job.connection_id,
            attempted_at: attempt.attempted_at,
            outcome: attempt.outcome.as_str(),
            status: attempt.status,
            error: attempt.error.as_deref(),
            requests: attempt.requests,
            latency_ms: attempt.latency_ms,
            events: attempt.events,
        }
    }
}

/// A user's attributes as the group's stored batches change them (a JSON merge patch), and the
/// consent purposes they state (the later batch's over the earlier's).
#[derive(Debug, Serialize)]
pub(super) struct ProfileRow {
    pub(super) mpid: Mpid,
    pub(super) patch: serde_json::Map<String, serde_json::Value>,
    pub(super) consent: serde_json::Map<String, serde_json::Value>,
}

/// A retry to record: the job keeps its place with its progress, and waits.
#[derive(Debug, Serialize)]
pub(super) struct RetryRow<'a> {
    pub(super) job_id: i64,
    pub(super) progress: i64,
    pub(super) attempts: i64,
    pub(super) next_attempt_at: i64,
    pub(super) error: Option<&'a str>,
}

// Fencing: every statement that changes a job a node worked on names the node (`leased_by`),
// so a node that stalled past its lease cannot finish, retry, release or renew a job another
// node has claimed since.
//
// On PostgreSQL a statement naming its rows by id says `id = ANY(ARRAY(SELECT …))`, not
// `id IN (SELECT …)`: the planner guesses 100 ids from a JSON array and reads `IN` as a hash
// semi-join, which it judged cheaper as a sequential scan of all of `jobs` than 100 primary-key
// lookups. With a failing connection's thousands of waiting jobs in the table, every renewal,
// finish, retry and claim then read all of them (11.6 million rows in 30 s on three nodes, the
// jobs a few thousand). An array is one value: the plan is an index scan of the ids given.

/// `$1` job ids, `$2` the new lease end, `$3` this node: released jobs (lease 0) stay released,
/// and a lease another node has taken meanwhile stays that node's. Returns the ids renewed.
const RENEW_JOBS: Sql = Sql::each(
    "UPDATE jobs SET lease_until = $2 \
     WHERE id IN (SELECT value FROM json_each($1)) AND lease_until > 0 AND leased_by = $3 \
     RETURNING id",
    "UPDATE jobs SET lease_until = $2 WHERE id = ANY(ARRAY( \
     SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND lease_until > 0 \
     AND leased_by = $3 RETURNING id",
);
/// `$1` job ids, `$2` this node.
const DELETE_JOBS: Sql = Sql::each(
    "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each($1)) AND leased_by = $2",
    "DELETE FROM jobs WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) \
     AND leased_by = $2",
);
/// `$1` job ids, `$2` this node.
const RELEASE_JOBS: Sql = Sql::each(
    "UPDATE jobs SET lease_until = 0 \
     WHERE id IN (SELECT value FROM json_each($1)) AND leased_by = $2",
    "UPDATE jobs SET lease_until = 0 WHERE id = ANY(ARRAY( \
     SELECT jsonb_array_elements_text($1::jsonb)::bigint)) AND leased_by = $2",
);
/// `$1` the retries as a JSON array of `RetryRow`s, `$2` this node.
const RETRY_JOBS: Sql = Sql::each(
    "UPDATE jobs SET progress = r.progress, attempts = r.attempts, \
     next_attempt_at = r.next_attempt_at, lease_until = 0, last_error = r.error \
     FROM (SELECT value ->> 'job_id' AS job_id, value ->> 'progress' AS progress, \
     value ->> 'attempts' AS attempts, value ->> 'next_attempt_at' AS next_attempt_at, \
     value ->> 'error' AS error FROM jsonb_each($1)) AS r \
     WHERE jobs.id = r.job_id AND jobs.leased_by = $2",
    "UPDATE jobs SET progress = r.progress, attempts = r.attempts, \
     next_attempt_at = r.next_attempt_at, lease_until = 0, last_error = r.error \
     FROM jsonb_to_recordset($1::jsonb) AS r(job_id bigint, progress bigint, attempts bigint, \
     next_attempt_at bigint, error text) \
     WHERE jobs.id = r.job_id AND jobs.leased_by = $2 AND jobs.id = ANY(ARRAY( \
     SELECT (x ->> 'job_id')::bigint FROM jsonb_array_elements($1::jsonb) AS x))",
);
const INSERT_ATTEMPTS: Sql = Sql::each(
    "INSERT INTO attempts \
     (job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events) \
     SELECT value ->> 'job_id', value ->> 'connection_id', value ->> 'attempted_at', \
     value ->> 'outcome', value ->> 'status', value ->> 'error', value ->> 'requests', \
     value ->> 'latency_ms', value ->> 'events' FROM jsonb_each($1)",
    "INSERT INTO attempts \
     (job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events) \
     SELECT job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, \
     events FROM jsonb_to_recordset($1::jsonb) AS x(job_id bigint, connection_id text, \
     attempted_at bigint, outcome text, status bigint, error text, requests bigint, \
     latency_ms bigint, events bigint)",
);
const INSERT_DEAD_LETTER: Sql = Sql::shared(
    "INSERT INTO dead_letters \
     (job_id, batch_id, connection_id, payload_index, body, status, error, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
);
/// Per-user ordering, part of every claim: a job with a user may go only while no earlier job
/// of that user and connection is in the table (in flight here or on another node, waiting
/// out a backoff, or waiting its own turn). A job without one (`mpid` NULL) is unordered.
macro_rules! user_is_free {
    () => {
        "(j.mpid IS NULL OR NOT EXISTS (SELECT 1 FROM jobs e WHERE e.connection_id = j.connection_id \
         AND e.mpid = j.mpid AND e.mpid IS NOT NULL AND e.id < j.id))"
    };
}
/// The columns a claim answers (see `ClaimedJob`).
macro_rules! claimed_columns {
    () => {
        " RETURNING id, batch_id, connection_id, revision_id, progress, attempts, created_at, \
         lease_until, mpid, coalesce_head"
    };
}
/// `$1` lease end, `$2` now, `$3` limit, `$4` a JSON array of connection ids to skip (their
/// lanes are full on this node, their breaker is open, they are paused or draining), `$5` this
/// node. On PostgreSQL `SKIP LOCKED` lets several nodes claim side by side without waiting on
/// each other's rows.
///
/// On PostgreSQL a skipped connection's jobs are never read: the claim walks the connections
/// that have jobs (`c`: one `jobs_connection` probe each, a loose index scan), drops the
/// skipped ones, and takes up to the limit of each remaining connection's due jobs in due order
/// through `jobs_connection_due` (its order exactly, so every plan uses it); the rows are then
/// locked in due order, the limit over all connections. Each connection offers twice the limit:
/// `SKIP LOCKED` applies only to the candidates, and while another node's claim of the same
/// connection's first jobs is uncommitted this claim takes the ones after them (with several
/// such claims at once it may come out short until its next poll; it never waits). Walking `jobs_due` and filtering instead
/// read every due job of a failing connection (thousands, all due: they are released as its
/// breaker turns them away) on every poll of every node. SQLite keeps that walk: its planner
/// would rather build a temporary index or a Bloom filter from the whole table for the join,
/// and one process's in-memory walk is what the quiet SQLite runs met the 1.2× target with.
/// What it may take, `next_attempt_at <= $2 AND lease_until <= $2`, is what the poller's read
/// before a claim (`queue::ANY_CLAIMABLE`) looks for: the two must not drift apart.
const CLAIM_JOBS: Sql = Sql::each(
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $5 WHERE id IN \
         (SELECT id FROM jobs j WHERE next_attempt_at <= $2 AND lease_until <= $2 \
          AND connection_id NOT IN (SELECT value FROM json_each($4)) AND ",
        user_is_free!(),
        " ORDER BY next_attempt_at, id LIMIT $3)",
        claimed_columns!()
    ),
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $5 WHERE id = ANY(ARRAY( \
         SELECT k.id FROM jobs k WHERE k.id = ANY(ARRAY( \
         WITH RECURSIVE c(id) AS ( \
         (SELECT connection_id FROM jobs ORDER BY connection_id LIMIT 1) UNION ALL \
         SELECT (SELECT n.connection_id FROM jobs n WHERE n.connection_id > c.id \
         ORDER BY n.connection_id LIMIT 1) FROM c WHERE c.id IS NOT NULL) \
         SELECT d.id FROM c CROSS JOIN LATERAL (SELECT j.id FROM jobs j \
         WHERE j.connection_id = c.id AND j.next_attempt_at <= $2 AND j.lease_until <= $2 AND ",
        user_is_free!(),
        " ORDER BY j.next_attempt_at, j.id LIMIT 2 * $3) AS d WHERE c.id IS NOT NULL \
         AND c.id NOT IN (SELECT jsonb_array_elements_text($4::jsonb)))) \
         AND k.next_attempt_at <= $2 AND k.lease_until <= $2 \
         ORDER BY k.next_attempt_at, k.id LIMIT $3 FOR UPDATE SKIP LOCKED))",
        claimed_columns!()
    ),
);
/// `$1` lease end, `$2` now, `$3` the connection, `$4` this node, `$5` a JSON array of MPIDs
/// that failed recently: the connection's oldest job nobody holds, due or not (a circuit
/// breaker's probe: the endpoint may be back before the job's backoff is over), of a user not
/// in `$5`. On a connection ordered per user the oldest job is often a user's the receiver
/// keeps refusing; probing with it would keep every other user waiting. If there is none,
/// [`CLAIM_PROBE`] takes the oldest of any user. Each walks `jobs_connection` in id order and
/// stops at the first job it can take (ordering by "avoided first" sorted all of the
/// connection's jobs, on PostgreSQL after a sequential scan of the table).
const CLAIM_PROBE_AVOIDING: Sql = Sql::each(
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $4 WHERE id = \
         (SELECT id FROM jobs j WHERE connection_id = $3 AND lease_until <= $2 \
          AND (j.mpid IS NULL OR j.mpid NOT IN (SELECT value FROM json_each($5))) AND ",
        user_is_free!(),
        " ORDER BY id LIMIT 1)",
        claimed_columns!()
    ),
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $4 WHERE id = \
         (SELECT id FROM jobs j WHERE connection_id = $3 AND lease_until <= $2 \
          AND (j.mpid IS NULL \
          OR j.mpid NOT IN (SELECT jsonb_array_elements_text($5::jsonb)::bigint)) AND ",
        user_is_free!(),
        " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)",
        claimed_columns!()
    ),
);
/// `$1` lease end, `$2` now, `$3` the connection, `$4` this node: the connection's oldest job
/// nobody holds, due or not (see [`CLAIM_PROBE_AVOIDING`]).
const CLAIM_PROBE: Sql = Sql::each(
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $4 WHERE id = \
         (SELECT id FROM jobs j WHERE connection_id = $3 AND lease_until <= $2 AND ",
        user_is_free!(),
        " ORDER BY id LIMIT 1)",
        claimed_columns!()
    ),
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $4 WHERE id = \
         (SELECT id FROM jobs j WHERE connection_id = $3 AND lease_until <= $2 AND ",
        user_is_free!(),
        " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)",
        claimed_columns!()
    ),
);
/// `$1` lease end, `$2` now, `$3` limit, `$4` the connection, `$5` this node: a recovering
/// connection's due jobs in the order they were accepted (id order: its backlog, brought
/// forward, then the jobs accepted since, which wait behind it), through `jobs_connection`.
const CLAIM_DRAIN: Sql = Sql::each(
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $5 WHERE id IN \
         (SELECT id FROM jobs j WHERE connection_id = $4 AND next_attempt_at <= $2 \
          AND lease_until <= $2 AND ",
        user_is_free!(),
        " ORDER BY id LIMIT $3)",
        claimed_columns!()
    ),
    concat!(
        "UPDATE jobs SET lease_until = $1, leased_by = $5 WHERE id = ANY(ARRAY( \
         SELECT id FROM jobs j WHERE connection_id = $4 AND next_attempt_at <= $2 \
          AND lease_until <= $2 AND ",
        user_is_free!(),
        " ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED))",
        claimed_columns!()
    ),
);
// `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
// Consent merges per purpose (a stated purpose replaces the stored one whole). SQLite's
// json_patch merges at every depth, so the stated purposes are first patched to `null`
// (removed), then patched in; PostgreSQL's `||` is shallow, so it merges each regulation.
macro_rules! upsert_profiles_sqlite {
    () => {
        "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes, consent) \
         SELECT value ->> 'mpid', $2, $2, value ->> 'patch', value ->> 'consent' \
         FROM jsonb_each($1) WHERE true \
         ON CONFLICT (mpid) DO UPDATE SET last_seen_at = excluded.last_seen_at, \
         user_attributes = json_patch(users.user_attributes, excluded.user_attributes), \
         consent = json_patch(json_patch(users.consent, json_object( \
         'gdpr', json((SELECT json_group_object(key, NULL) \
         FROM json_each(excluded.consent, '$.gdpr'))), \
         'ccpa', json((SELECT json_group_object(key, NULL) \
         FROM json_each(excluded.consent, '$.ccpa'))))), excluded.consent)"
    };
}
/// PostgreSQL's upsert of the profile rows in parameter `$rows` at time `$now`, the rows kept by
/// `$filter` (a `WHERE`, or nothing); also the tail of the batch insert's statement
/// (`super::batch_steps`). The consent merge is skipped when the batch states none or, as an SDK
/// sends its whole consent state with every upload, exactly the text stored (equal texts are
/// equal states; both are usually `jsonb`'s output, and a mismatch only costs the merge): the
/// merge parses the stored and the stated text twice each, about 10 µs a user, a third of the
/// upsert of 30 users in `pgbench` (issue 16, item 2). A stored `{}` reads as every regulation
/// empty (`consent::state`), as the merge would have written it.
macro_rules! upsert_profiles_postgres {
    ($rows:literal, $now:literal, $filter:expr) => {
        concat!(
            "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes, consent) \
         SELECT mpid, ",
            $now,
            ", ",
            $now,
            ", patch::text, consent::text FROM jsonb_to_recordset(",
            $rows,
            "::jsonb) AS x(mpid bigint, patch jsonb, consent jsonb) ",
            $filter,
            " ON CONFLICT (mpid) DO UPDATE SET last_seen_at = excluded.last_seen_at, \
         user_attributes = jsonb_strip_nulls(users.user_attributes::jsonb \
         || excluded.user_attributes::jsonb)::text, \
         consent = CASE WHEN excluded.consent IN ('{}', users.consent) THEN users.consent \
         ELSE jsonb_build_object( \
         'gdpr', COALESCE(users.consent::jsonb -> 'gdpr', '{}'::jsonb) \
         || COALESCE(excluded.consent::jsonb -> 'gdpr', '{}'::jsonb), \
         'ccpa', COALESCE(users.consent::jsonb -> 'ccpa', '{}'::jsonb) \
         || COALESCE(excluded.consent::jsonb -> 'ccpa', '{}'::jsonb))::text END"
        )
    };
}
pub(super) use upsert_profiles_postgres;
const UPSERT_PROFILES: Sql = Sql::each(
    upsert_profiles_sqlite!(),
    upsert_profiles_postgres!("$1", "$2", ""),
);
/// The same, answering each user's consent as merged (for jobs handed to delivery with it).
const UPSERT_PROFILES_RETURNING_CONSENT: Sql = Sql::each(
    concat!(upsert_profiles_sqlite!(), " RETURNING mpid, consent"),
    concat!(
        upsert_profiles_postgres!("$1", "$2", ""),
        " RETURNING mpid, consent"
    ),
);
/// A job with a user whose earlier job of the same connection is still in the table is not
/// leased (`lease_until` 0): it waits for a claim, which takes it only once the earlier one is
/// gone. Jobs of one user inserted by the same statement do not see each other here; the lane
/// they are handed to sends them one at a time.
const INSERT_JOBS: Sql = Sql::each(
    "INSERT INTO jobs (batch_id, connection_id, revision_id, created_at, next_attempt_at, \
     lease_until, leased_by, mpid, coalesce_head) \
     SELECT x.batch_id, x.connection_id, x.revision_id, x.created_at, x.next_attempt_at, \
     CASE WHEN x.mpid IS NOT NULL AND EXISTS (SELECT 1 FROM jobs e \
     WHERE e.connection_id = x.connection_id AND e.mpid = x.mpid) THEN 0 ELSE x.lease_until END, \
     x.leased_by, x.mpid, x.coalesce_head FROM (SELECT value ->> 'batch_id' AS batch_id, \
     value ->> 'connection_id' AS connection_id, value ->> 'revision_id' AS revision_id, \
     value ->> 'created_at' AS created_at, value ->> 'lease_until' AS lease_until, \
     value ->> 'leased_by' AS leased_by, value ->> 'mpid' AS mpid, \
     value ->> 'next_attempt_at' AS next_attempt_at, value ->> 'coalesce_head' AS coalesce_head \
     FROM jsonb_each($1)) AS x \
     RETURNING id, batch_id, connection_id, lease_until",
    "INSERT INTO jobs (batch_id, connection_id, revision_id, created_at, next_attempt_at, \
     lease_until, leased_by, mpid, coalesce_head) \
     SELECT x.batch_id, x.connection_id, x.revision_id, x.created_at, x.next_attempt_at, \
     CASE WHEN x.mpid IS NOT NULL AND EXISTS (SELECT 1 FROM jobs e \
     WHERE e.connection_id = x.connection_id AND e.mpid = x.mpid) THEN 0 ELSE x.lease_until END, \
     x.leased_by, x.mpid, x.coalesce_head FROM jsonb_to_recordset($1::jsonb) AS x(batch_id bigint, \
     connection_id text, revision_id bigint, created_at bigint, lease_until bigint, \
     leased_by text, mpid bigint, next_attempt_at bigint, coalesce_head bigint) \
     RETURNING id, batch_id, connection_id, lease_until",
);

/// Extends the leases `node` still holds on `job_ids` to `lease_until`; returns the ids it
/// still held (the others were released, finished, or claimed by another node).
pub(super) async fn renew_leases(
    tx: &mut Tx<'_>,
    job_ids: &[i64],
    lease_until: i64,
    node: &str,
) -> Result<HashSet<i64>, sqlx::Error> {
    if job_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let ids = json(job_ids);
    let renewed = tx
        .fetch_ids(RENEW_JOBS, args![ids.as_str(), lease_until, node])
        .await?;
    Ok(renewed.into_iter().collect())
}

/// Removes the finished jobs `node` holds from the queue.
pub(super) async fn delete_jobs(
    tx: &mut Tx<'_>,
    job_ids: &[i64],
    node: &str,
) -> Result<u64, sqlx::Error> {
    fenced(tx, DELETE_JOBS, job_ids, node).await
}

/// Gives the jobs `node` holds back unworked: claimable again at once.
pub(super) async fn release_jobs(
    tx: &mut Tx<'_>,
    job_ids: &[i64],
    node: &str,
) -> Result<u64, sqlx::Error> {
    fenced(tx, RELEASE_JOBS, job_ids, node).await
}

/// Runs `sql` (`$1` job ids as a JSON array, `$2` the node) on the jobs `node` holds; returns
/// how many it changed.
async fn fenced(
    tx: &mut Tx<'_>,
    sql: Sql,
    job_ids: &[i64],
    node: &str,
) -> Result<u64, sqlx::Error> {
    if job_ids.is_empty() {
        return Ok(0);
    }
    tx.execute(sql, args![json(job_ids).as_str(), node]).await
}

/// Records retries of jobs `node` holds, in one statement: progress, attempts, when to try
/// again and why; the lease is let go. Returns how many jobs it changed.
pub(super) async fn retry_jobs(
    tx: &mut Tx<'_>,
    retries: &[RetryRow<'_>],
    node: &str,
) -> Result<u64, sqlx::Error> {
    if retries.is_empty() {
        return Ok(0);
    }
    tx.execute(RETRY_JOBS, args![json(retries).as_str(), node])
        .await
}

/// Appends to the attempt log.
pub(super) async fn insert_attempts(
    tx: &mut Tx<'_>,
    attempts: &[AttemptRow<'_>],
) -> Result<(), sqlx::Error> {
    if !attempts.is_empty() {
        tx.execute(INSERT_ATTEMPTS, args![json(attempts).as_str()])
            .await?;
    }
    Ok(())
}

/// Keeps requests given up on, for inspection and replay.
pub(super) async fn insert_dead_letters(
    tx: &mut Tx<'_>,
    letters: &[(&JobKey, &DeadLetter)],
    now: i64,
) -> Result<(), sqlx::Error> {
    for (job, letter) in letters {
        let args = args![
            job.id,
            job.batch_id,
            &job.connection_id,
            letter.payload_index,
            letter.body.as_slice(),
            letter.status,
            &letter.error,
            now
        ];
        tx.execute(INSERT_DEAD_LETTER, args).await?;
    }
    Ok(())
}

/// Leases up to `limit` due, unleased jobs to `node` until `lease_until`, skipping the
/// connections in `skip` (a JSON array of ids).
pub(super) async fn claim_jobs(
    tx: &mut Tx<'_>,
    limit: i64,
    skip: &str,
    now: i64,
    lease_until: i64,
    node: &str,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    tx.fetch_all(CLAIM_JOBS, args![lease_until, now, limit, skip, node])
        .await
}

/// Leases `connection_id`'s oldest job nobody holds to `node`, due or not (a probe), one of a
/// user not in `avoid` (a JSON array of MPIDs) if there is one.
pub(super) async fn claim_probe(
    tx: &mut Tx<'_>,
    connection_id: &ConnectionId,
    avoid: &str,
    now: i64,
    lease_until: i64,
    node: &str,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    if avoid != "[]" {
        let avoiding = tx
            .fetch_all(
                CLAIM_PROBE_AVOIDING,
                args![lease_until, now, connection_id, node, avoid],
            )
            .await?;
        if !avoiding.is_empty() {
            return Ok(avoiding);
        }
    }
    tx.fetch_all(CLAIM_PROBE, args![lease_until, now, connection_id, node])
        .await
}

/// Leases up to `limit` of `connection_id`'s due, unleased jobs to `node`, oldest first (a
/// recovering connection's drain).
pub(super) async fn claim_drain(
    tx: &mut Tx<'_>,
    connection_id: &ConnectionId,
    limit: i64,
    now: i64,
    lease_until: i64,
    node: &str,
) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    tx.fetch_all(
        CLAIM_DRAIN,
        args![lease_until, now, limit, connection_id, node],
    )
    .await
}

/// Merges each user's attribute patch and stated consent into their profile and marks them
/// seen at `now` (creating the user if new). One row per user: PostgreSQL cannot update a row
/// twice in one statement.
pub(super) async fn upsert_profiles(
    tx: &mut Tx<'_>,
    profiles: &[ProfileRow],
    now: i64,
) -> Result<(), sqlx::Error> {
    if !profiles.is_empty() {
        tx.execute(UPSERT_PROFILES, args![json(profiles).as_str(), now])
            .await?;
    }
    Ok(())
}

/// [`upsert_profiles`], answering each user's consent as the upsert left it (every regulation
/// present), so the jobs handed over with the commit need not read it again.
pub(super) async fn upsert_profiles_returning_consent(
    tx: &mut Tx<'_>,
    profiles: &[ProfileRow],
    now: i64,
) -> Result<HashMap<Mpid, Arc<serde_json::Value>>, sqlx::Error> {
    if profiles.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(Mpid, String)> = tx
        .fetch_all(
            UPSERT_PROFILES_RETURNING_CONSENT,
            args![json(profiles).as_str(), now],
        )
        .await?;
    Ok(consents_of(rows))
}

/// The users' consent as an upsert answered it, `(mpid, consent as stored)` rows.
pub(super) fn consents_of(
    rows: impl IntoIterator<Item = (Mpid, String)>,
) -> HashMap<Mpid, Arc<serde_json::Value>> {
    rows.into_iter()
        .map(|(mpid, stored)| (mpid, Arc::new(consent::state(&stored))))
        .collect()
}

/// Inserts jobs; returns `(job id, batch id, connection id, lease end)` of each (a lease end of
/// 0: left in the table, to be claimed).
pub(super) async fn insert_jobs(
    tx: &mut Tx<'_>,
    jobs: &[JobRow<'_>],
) -> Result<Vec<(i64, BatchId, ConnectionId, i64)>, sqlx::Error> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    tx.fetch_all(INSERT_JOBS, args![json(jobs).as_str()]).await
}

#[cfg(test)]
#[path = "steps_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "steps_scan_tests.rs"]
mod scan_tests;
