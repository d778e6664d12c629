//! The SQL of one group commit.
//!
//! Statements are batched across the group: finished and released jobs, their attempts, the
//! group's batches, user profiles and new jobs each take one statement (batches a few), the rows
//! passed as one JSON array or one multi-row `VALUES`. Each statement is a round trip to the
//! database (on SQLite, to its worker thread), so per-row statements were the writer's main cost.
//! A batch needs its own answer (stored, or a duplicate `source_request_id`), and `RETURNING`
//! promises no order, so batch ids are allocated first and inserted explicitly: the ids that come
//! back are the batches stored.
//!
//! Within a group, job updates run before claims, so a job finished in this group can never be
//! claimed in it again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::oneshot;

use serde::Serialize;
use sqlx::QueryBuilder;

use super::queue::{
    AttemptRecord, ClaimedJob, DeadLetter, INSERT_DEAD_LETTER, IngestOutcome, Job, JobKey,
    JobUpdate, NewBatch, RETRY_JOB,
};
use super::{Store, StoreResult, with_pool};
use crate::model::now_ms;

/// The statements whose SQL differs between the backends (JSON functions, row locking, ids).
struct Dialect {
    begin: &'static str,
    claim: &'static str,
    /// `$1` fresh batch ids, one per row.
    allocate_batch_ids: &'static str,
    /// The head of a multi-row insert with explicit ids; `VALUES` follow.
    insert_batches: &'static str,
    upsert_profiles: &'static str,
    delete_jobs: &'static str,
    release_jobs: &'static str,
    /// `$1` job ids, `$2` the new lease end, `$3` this node: released jobs (lease 0) stay
    /// released, and a lease another node has taken meanwhile stays that node's.
    renew_jobs: &'static str,
    insert_attempts: &'static str,
    insert_jobs: &'static str,
}

const SQLITE: Dialect = Dialect {
    // IMMEDIATE: the writer always writes, and `allocate_batch_ids` reads before it does; taking
    // the write lock first means no other connection can commit between that read and the insert.
    begin: "BEGIN IMMEDIATE",
    claim: super::queue::CLAIM_SQLITE,
    // The next ids after the largest ever used (AUTOINCREMENT keeps it in sqlite_sequence, also
    // for explicit ids).
    allocate_batch_ids: "WITH RECURSIVE ids(id) AS ( \
        SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'batches'), 0) + 1 \
        UNION ALL SELECT id + 1 FROM ids LIMIT $1) SELECT id FROM ids",
    insert_batches: INSERT_BATCHES,
    // `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
    upsert_profiles: "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes) \
        SELECT value ->> 'mpid', $2, $2, value ->> 'patch' FROM json_each($1) WHERE true \
        ON CONFLICT (mpid) DO UPDATE SET last_seen_at = excluded.last_seen_at, \
        user_attributes = json_patch(users.user_attributes, excluded.user_attributes)",
    delete_jobs: "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each($1))",
    release_jobs: "UPDATE jobs SET lease_until = 0 WHERE id IN (SELECT value FROM json_each($1))",
    renew_jobs: "UPDATE jobs SET lease_until = $2 \
        WHERE id IN (SELECT value FROM json_each($1)) AND lease_until > 0 AND leased_by = $3",
    insert_attempts: "INSERT INTO attempts \
        (job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events) \
        SELECT value ->> 'job_id', value ->> 'connection_id', value ->> 'attempted_at', \
        value ->> 'outcome', value ->> 'status', value ->> 'error', value ->> 'requests', \
        value ->> 'latency_ms', value ->> 'events' FROM json_each($1)",
    insert_jobs: "INSERT INTO jobs \
        (batch_id, connection_id, revision_id, created_at, next_attempt_at, lease_until, \
        leased_by) \
        SELECT value ->> 'batch_id', value ->> 'connection_id', value ->> 'revision_id', \
        value ->> 'created_at', value ->> 'created_at', value ->> 'lease_until', \
        value ->> 'leased_by' FROM json_each($1) \
        RETURNING id, batch_id, connection_id",
};

const POSTGRES: Dialect = Dialect {
    begin: "BEGIN",
    claim: super::queue::CLAIM_POSTGRES,
    allocate_batch_ids: "SELECT nextval(sequence) \
        FROM (SELECT pg_get_serial_sequence('batches', 'id') AS sequence) AS s, \
        generate_series(1, $1)",
    insert_batches: concat!(
        "INSERT INTO batches (id, input_id, source_request_id, received_at, event_count, body) ",
        "OVERRIDING SYSTEM VALUE "
    ),
    upsert_profiles: "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes) \
        SELECT mpid, $2, $2, patch::text FROM jsonb_to_recordset($1::jsonb) AS x(mpid bigint, patch jsonb) \
        ON CONFLICT (mpid) DO UPDATE SET last_seen_at = excluded.last_seen_at, \
        user_attributes = jsonb_strip_nulls(users.user_attributes::jsonb || excluded.user_attributes::jsonb)::text",
    delete_jobs: "DELETE FROM jobs WHERE id IN \
        (SELECT jsonb_array_elements_text($1::jsonb)::bigint)",
    release_jobs: "UPDATE jobs SET lease_until = 0 WHERE id IN \
        (SELECT jsonb_array_elements_text($1::jsonb)::bigint)",
    renew_jobs: "UPDATE jobs SET lease_until = $2 WHERE id IN \
        (SELECT jsonb_array_elements_text($1::jsonb)::bigint) AND lease_until > 0 \
        AND leased_by = $3",
    insert_attempts: "INSERT INTO attempts \
        (job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events) \
        SELECT job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events \
        FROM jsonb_to_recordset($1::jsonb) AS x(job_id bigint, connection_id text, \
        attempted_at bigint, outcome text, status bigint, error text, requests bigint, \
        latency_ms bigint, events bigint)",
    insert_jobs: "INSERT INTO jobs \
        (batch_id, connection_id, revision_id, created_at, next_attempt_at, lease_until, \
        leased_by) \
        SELECT batch_id, connection_id, revision_id, created_at, created_at, lease_until, \
        leased_by FROM jsonb_to_recordset($1::jsonb) AS x(batch_id bigint, connection_id text, \
        revision_id bigint, created_at bigint, lease_until bigint, leased_by text) \
        RETURNING id, batch_id, connection_id",
};

/// One piece of work the writer was given, committed in a group with others.
pub(super) enum Command {
    Ingest {
        batches: Vec<NewBatch>,
        reply: oneshot::Sender<StoreResult<Vec<IngestOutcome>>>,
    },
    Update(JobUpdate),
    /// Extends the leases of jobs this node still holds (queued or in flight).
    Renew(Vec<i64>),
    Claim {
        limit: i64,
        /// JSON array of connection ids to skip.
        skip: String,
        reply: oneshot::Sender<StoreResult<Vec<ClaimedJob>>>,
    },
}

pub(super) enum Done {
    Ingest(Vec<IngestOutcome>, Vec<Job>),
    Update,
    Claim(Vec<ClaimedJob>),
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Ingest { .. } => "Ingest",
            Command::Update(_) => "Update",
            Command::Renew(_) => "Renew",
            Command::Claim { .. } => "Claim",
        })
    }
}

const INSERT_BATCHES: &str =
    "INSERT INTO batches (id, input_id, source_request_id, received_at, event_count, body) ";
/// A duplicate `source_request_id` inserts nothing, so its id is missing from the answer.
const ON_CONFLICT_RETURNING_ID: &str =
    " ON CONFLICT (input_id, source_request_id) DO NOTHING RETURNING id";
/// The largest multi-row insert. Chunks are powers of two, so a handful of distinct statements
/// (each prepared once per connection) cover every group size.
const MAX_INSERT_ROWS: usize = 64;

#[derive(Serialize)]
struct AttemptRow<'a> {
    job_id: i64,
    connection_id: &'a str,
    attempted_at: i64,
    outcome: &'a str,
    status: Option<i64>,
    error: Option<&'a str>,
    requests: i64,
    latency_ms: i64,
    events: i64,
}

impl<'a> AttemptRow<'a> {
    fn new(job: &'a JobKey, attempt: &'a AttemptRecord) -> Self {
        Self {
            job_id: job.id,
            connection_id: &job.connection_id,
            attempted_at: attempt.attempted_at,
            outcome: attempt.outcome,
            status: attempt.status,
            error: attempt.error.as_deref(),
            requests: attempt.requests,
            latency_ms: attempt.latency_ms,
            events: attempt.events,
        }
    }
}

#[derive(Serialize)]
struct JobRow<'a> {
    batch_id: i64,
    connection_id: &'a str,
    revision_id: i64,
    created_at: i64,
    /// 0 for a job left in the table for the poller.
    lease_until: i64,
    leased_by: Option<&'a str>,
}

/// Serialises rows for a JSON-array parameter (plain data: this cannot fail).
fn json<T: Serialize>(rows: &T) -> String {
    serde_json::to_string(rows).unwrap_or_else(|_| "[]".to_owned())
}

/// Runs a group's commands in one transaction and returns one `Done` per command, in order.
pub(super) async fn commit(
    store: &Store,
    commands: &[Command],
    lease_ms: i64,
    node: &str,
) -> StoreResult<Vec<Done>> {
    let dialect = if store.is_embedded() {
        &SQLITE
    } else {
        &POSTGRES
    };
    let now = now_ms();
    let mut done: Vec<Option<Done>> = commands.iter().map(|_| None).collect();
    with_pool!(store, pool => {
        let mut tx = pool.begin_with(dialect.begin).await?;

        // 1. Lease renewals first, so a release in the same group wins. Then job updates:
        //    finished and released jobs and all attempts in bulk; retries and dead letters
        //    (rare) row by row.
        let renewed: Vec<i64> = commands
            .iter()
            .filter_map(|c| match c { Command::Renew(ids) => Some(ids), _ => None })
            .flatten()
            .copied()
            .collect();
        if !renewed.is_empty() {
            sqlx::query(dialect.renew_jobs).bind(json(&renewed)).bind(now + lease_ms).bind(node)
                .execute(&mut *tx).await?;
        }
        let mut finished = Vec::new();
        let mut released = Vec::new();
        let mut attempts = Vec::new();
        let mut letters: Vec<(&JobKey, &DeadLetter)> = Vec::new();
        for (slot, command) in done.iter_mut().zip(commands) {
            let Command::Update(update) = command else { continue };
            match update {
                JobUpdate::Finished { job, attempt, dead } => {
                    finished.push(job.id);
                    attempts.push(AttemptRow::new(job, attempt));
                    letters.extend(dead.iter().map(|d| (job, d)));
                }
                JobUpdate::Retry { job, progress, attempts: tries, next_attempt_at, attempt, dead } => {
                    sqlx::query(RETRY_JOB)
                        .bind(job.id).bind(*progress).bind(*tries).bind(*next_attempt_at)
                        .bind(&attempt.error)
                        .execute(&mut *tx).await?;
                    attempts.push(AttemptRow::new(job, attempt));
                    letters.extend(dead.iter().map(|d| (job, d)));
                }
                JobUpdate::Release { job_id } => released.push(*job_id),
            }
            *slot = Some(Done::Update);
        }
        if !finished.is_empty() {
            sqlx::query(dialect.delete_jobs).bind(json(&finished)).execute(&mut *tx).await?;
        }
        if !released.is_empty() {
            sqlx::query(dialect.release_jobs).bind(json(&released)).execute(&mut *tx).await?;
        }
        if !attempts.is_empty() {
            sqlx::query(dialect.insert_attempts).bind(json(&attempts)).execute(&mut *tx).await?;
        }
        for (job, letter) in letters {
            sqlx::query(INSERT_DEAD_LETTER)
                .bind(job.id).bind(job.batch_id).bind(&job.connection_id)
                .bind(letter.payload_index).bind(&letter.body).bind(letter.status)
                .bind(&letter.error).bind(now)
                .execute(&mut *tx).await?;
        }

        // 2. Claims, then every batch of the group in a few statements, then all their jobs.
        for (slot, command) in done.iter_mut().zip(commands) {
            if let Command::Claim { limit, skip, .. } = command {
                let jobs: Vec<ClaimedJob> = sqlx::query_as(dialect.claim)
                    .bind(now + lease_ms).bind(now).bind(*limit).bind(skip).bind(node)
                    .fetch_all(&mut *tx).await?;
                *slot = Some(Done::Claim(jobs));
            }
        }
        let batches: Vec<&NewBatch> = commands
            .iter()
            .filter_map(|c| match c { Command::Ingest { batches, .. } => Some(batches), _ => None })
            .flatten()
            .collect();
        let mut stored = HashSet::with_capacity(batches.len());
        let ids: Vec<i64> = if batches.is_empty() {
            Vec::new()
        } else {
            sqlx::query_scalar(dialect.allocate_batch_ids)
                .bind(i64::try_from(batches.len()).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx).await?
        };
        if ids.len() != batches.len() {
            return Err(sqlx::Error::Protocol(format!(
                "asked for {} batch ids, got {}", batches.len(), ids.len()
            )).into());
        }
        let mut rows = ids.iter().copied().zip(batches.iter().copied());
        for size in chunk_sizes(batches.len()) {
            let mut insert = QueryBuilder::new(dialect.insert_batches);
            insert.push_values(rows.by_ref().take(size), |mut row, (id, batch)| {
                row.push_bind(id)
                    .push_bind(&batch.input_id)
                    .push_bind(&batch.source_request_id)
                    .push_bind(batch.received_at)
                    .push_bind(batch.event_count)
                    .push_bind(&*batch.body);
            });
            insert.push(ON_CONFLICT_RETURNING_ID);
            let inserted: Vec<i64> = insert.build_query_scalar().fetch_all(&mut *tx).await?;
            stored.extend(inserted);
        }
        let lease_until = now + lease_ms;
        let (outcomes, new_jobs) = settle_batches(commands, &ids, &stored, lease_until, node);
        let profiles = profile_rows(commands, &outcomes);
        if !profiles.is_empty() {
            sqlx::query(dialect.upsert_profiles).bind(json(&profiles)).bind(now).execute(&mut *tx).await?;
        }
        // Jobs to be leased are leased to this node (delivery gets them straight from the
        // writer); the others wait in the table for a poller.
        let rows: Vec<(i64, i64, String)> = if new_jobs.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as(dialect.insert_jobs)
                .bind(json(&new_jobs))
                .fetch_all(&mut *tx).await?
        };
        let job_ids: HashMap<(i64, &str), i64> = rows
            .iter()
            .map(|(id, batch_id, connection)| ((*batch_id, connection.as_str()), *id))
            .collect();
        for ((slot, command), outcomes) in done.iter_mut().zip(commands).zip(outcomes) {
            if let Command::Ingest { batches, .. } = command {
                let jobs = jobs_of(batches, &outcomes, &job_ids);
                *slot = Some(Done::Ingest(outcomes, jobs));
            }
        }
        tx.commit().await?;
    });
    Ok(done
        .into_iter()
        .map(|d| d.unwrap_or(Done::Update))
        .collect())
}

/// Each ingest command's outcomes, given the ids allocated to the group's batches in order and
/// the ids the insert returned, and the job rows of the stored batches: leased to `node` until
/// `lease_until` where the job is to be leased, else left in the table.
fn settle_batches<'a>(
    commands: &'a [Command],
    ids: &[i64],
    stored: &HashSet<i64>,
    lease_until: i64,
    node: &'a str,
) -> (Vec<Vec<IngestOutcome>>, Vec<JobRow<'a>>) {
    let mut ids = ids.iter();
    let mut jobs = Vec::new();
    let outcomes = commands
        .iter()
        .map(|command| {
            let Command::Ingest { batches, .. } = command else {
                return Vec::new();
            };
            batches
                .iter()
                .zip(ids.by_ref())
                .map(|(batch, &batch_id)| {
                    if !stored.contains(&batch_id) {
                        return IngestOutcome::Duplicate;
                    }
                    jobs.extend(batch.jobs.iter().map(|job| JobRow {
                        batch_id,
                        connection_id: &job.connection_id,
                        revision_id: job.revision_id,
                        created_at: batch.received_at,
                        lease_until: if job.leased { lease_until } else { 0 },
                        leased_by: job.leased.then_some(node),
                    }));
                    IngestOutcome::Stored { batch_id }
                })
                .collect()
        })
        .collect();
    (outcomes, jobs)
}

/// Splits `rows` into insert chunks: as many of the largest as fit, then the remainder's binary
/// digits (45 rows: 32, 8, 4, 1).
fn chunk_sizes(rows: usize) -> impl Iterator<Item = usize> {
    let full = std::iter::repeat_n(MAX_INSERT_ROWS, rows / MAX_INSERT_ROWS);
    let rest = rows % MAX_INSERT_ROWS;
    let digits = (0..MAX_INSERT_ROWS.trailing_zeros())
        .rev()
        .map(|bit| 1 << bit)
        .filter(move |size| rest & size != 0);
    full.chain(digits)
}

#[derive(Serialize)]
struct ProfileRow {
    mpid: i64,
    patch: serde_json::Map<String, serde_json::Value>,
}

/// One profile update per user of the group's stored batches, later batches' attributes over
/// earlier ones. (One row per user: PostgreSQL cannot update a row twice in one statement.)
fn profile_rows(commands: &[Command], outcomes: &[Vec<IngestOutcome>]) -> Vec<ProfileRow> {
    // Sorted by MPID so concurrent group commits (several nodes) lock users in one order.
    let mut by_user: std::collections::BTreeMap<i64, serde_json::Map<String, serde_json::Value>> =
        std::collections::BTreeMap::new();
    for (command, outcomes) in commands.iter().zip(outcomes) {
        let Command::Ingest { batches, .. } = command else {
            continue;
        };
        for (batch, outcome) in batches.iter().zip(outcomes) {
            if let (Some(update), IngestOutcome::Stored { .. }) = (&batch.profile, outcome) {
                by_user
                    .entry(update.mpid)
                    .or_default()
                    .extend(update.patch.clone());
            }
        }
    }
    by_user
        .into_iter()
        .map(|(mpid, patch)| ProfileRow { mpid, patch })
        .collect()
}

/// The leased jobs created for an ingest command's stored batches (the others wait in the
/// table).
fn jobs_of(
    batches: &[NewBatch],
    outcomes: &[IngestOutcome],
    ids: &HashMap<(i64, &str), i64>,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (batch, outcome) in batches.iter().zip(outcomes) {
        let IngestOutcome::Stored { batch_id } = *outcome else {
            continue;
        };
        for job in batch.jobs.iter().filter(|job| job.leased) {
            let Some(&id) = ids.get(&(batch_id, job.connection_id.as_str())) else {
                continue;
            };
            jobs.push(Job {
                id,
                batch_id,
                connection_id: job.connection_id.clone(),
                revision_id: job.revision_id,
                progress: 0,
                attempts: 0,
                created_at: batch.received_at,
                body: Arc::clone(&batch.body),
            });
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_row_with_few_distinct_sizes() {
        assert_eq!(chunk_sizes(0).count(), 0);
        assert_eq!(chunk_sizes(45).collect::<Vec<_>>(), [32, 8, 4, 1]);
        assert_eq!(chunk_sizes(200).collect::<Vec<_>>(), [64, 64, 64, 8]);
        for rows in 0..1000 {
            let sizes: Vec<usize> = chunk_sizes(rows).collect();
            assert_eq!(sizes.iter().sum::<usize>(), rows);
            assert!(
                sizes
                    .iter()
                    .all(|s| s.is_power_of_two() && *s <= MAX_INSERT_ROWS)
            );
        }
    }
}
