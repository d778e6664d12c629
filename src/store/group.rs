//! The SQL of one group commit.
//!
//! Statements are batched across the group where the row count is large and the outcome needs
//! no per-row answer: finished jobs are deleted, their attempts logged, and new jobs inserted
//! with one statement each per group, the rows passed as one JSON array. Each statement is a
//! round trip to the database (on SQLite, to its worker thread), so per-row statements were the
//! writer's main cost. Batches are still inserted one by one, because each needs its own answer
//! (stored, or a duplicate `source_request_id`).
//!
//! Within a group, job updates run before claims, so a job finished in this group can never be
//! claimed in it again.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::queue::{
    AttemptRecord, ClaimedJob, DeadLetter, INSERT_BATCH, INSERT_DEAD_LETTER, IngestOutcome, Job,
    JobKey, JobUpdate, NewBatch, RELEASE_JOB, RETRY_JOB,
};
use super::writer::{Command, Done};
use super::{Store, StoreResult, with_pool};
use crate::model::now_ms;

/// The statements whose SQL differs between the backends (JSON functions, row locking).
struct Dialect {
    claim: &'static str,
    upsert_profiles: &'static str,
    delete_jobs: &'static str,
    insert_attempts: &'static str,
    insert_jobs: &'static str,
}

const SQLITE: Dialect = Dialect {
    claim: super::queue::CLAIM_SQLITE,
    // `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
    upsert_profiles: "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes) \
        SELECT value ->> 'mpid', $2, $2, value ->> 'patch' FROM json_each($1) WHERE true \
        ON CONFLICT (mpid) DO UPDATE SET last_seen_at = excluded.last_seen_at, \
        user_attributes = json_patch(users.user_attributes, excluded.user_attributes)",
    delete_jobs: "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each($1))",
    insert_attempts: "INSERT INTO attempts \
        (job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events) \
        SELECT value ->> 'job_id', value ->> 'connection_id', value ->> 'attempted_at', \
        value ->> 'outcome', value ->> 'status', value ->> 'error', value ->> 'requests', \
        value ->> 'latency_ms', value ->> 'events' FROM json_each($1)",
    insert_jobs: "INSERT INTO jobs \
        (batch_id, connection_id, revision_id, created_at, next_attempt_at, lease_until) \
        SELECT value ->> 'batch_id', value ->> 'connection_id', value ->> 'revision_id', \
        value ->> 'created_at', value ->> 'created_at', $2 FROM json_each($1) \
        RETURNING id, batch_id, connection_id",
};

const POSTGRES: Dialect = Dialect {
    claim: super::queue::CLAIM_POSTGRES,
    upsert_profiles: "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes) \
        SELECT mpid, $2, $2, patch::text FROM jsonb_to_recordset($1::jsonb) AS x(mpid bigint, patch jsonb) \
        ON CONFLICT (mpid) DO UPDATE SET last_seen_at = excluded.last_seen_at, \
        user_attributes = jsonb_strip_nulls(users.user_attributes::jsonb || excluded.user_attributes::jsonb)::text",
    delete_jobs: "DELETE FROM jobs WHERE id IN \
        (SELECT jsonb_array_elements_text($1::jsonb)::bigint)",
    insert_attempts: "INSERT INTO attempts \
        (job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events) \
        SELECT job_id, connection_id, attempted_at, outcome, status, error, requests, latency_ms, events \
        FROM jsonb_to_recordset($1::jsonb) AS x(job_id bigint, connection_id text, \
        attempted_at bigint, outcome text, status bigint, error text, requests bigint, \
        latency_ms bigint, events bigint)",
    insert_jobs: "INSERT INTO jobs \
        (batch_id, connection_id, revision_id, created_at, next_attempt_at, lease_until) \
        SELECT batch_id, connection_id, revision_id, created_at, created_at, $2 \
        FROM jsonb_to_recordset($1::jsonb) AS x(batch_id bigint, connection_id text, \
        revision_id bigint, created_at bigint) \
        RETURNING id, batch_id, connection_id",
};

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
) -> StoreResult<Vec<Done>> {
    let dialect = if store.is_embedded() {
        &SQLITE
    } else {
        &POSTGRES
    };
    let now = now_ms();
    let mut done: Vec<Option<Done>> = commands.iter().map(|_| None).collect();
    with_pool!(store, pool => {
        let mut tx = pool.begin().await?;

        // 1. Job updates: finished jobs and their attempts in bulk, the rarer kinds row by row.
        let mut finished = Vec::new();
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
                JobUpdate::Release { job_id } => {
                    sqlx::query(RELEASE_JOB).bind(*job_id).execute(&mut *tx).await?;
                }
            }
            *slot = Some(Done::Update);
        }
        if !finished.is_empty() {
            sqlx::query(dialect.delete_jobs).bind(json(&finished)).execute(&mut *tx).await?;
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

        // 2. Batches row by row, then all their jobs in one statement; and claims.
        let mut outcomes: Vec<Vec<IngestOutcome>> = commands.iter().map(|_| Vec::new()).collect();
        let mut new_jobs = Vec::new();
        for ((slot, command), outcomes) in done.iter_mut().zip(commands).zip(&mut outcomes) {
            match command {
                Command::Ingest { batches, .. } => {
                    for batch in batches {
                        let id: Option<(i64,)> = sqlx::query_as(INSERT_BATCH)
                            .bind(&batch.input_id)
                            .bind(&batch.source_request_id)
                            .bind(batch.received_at)
                            .bind(batch.event_count)
                            .bind(&*batch.body)
                            .fetch_optional(&mut *tx)
                            .await?;
                        let Some((batch_id,)) = id else {
                            outcomes.push(IngestOutcome::Duplicate);
                            continue;
                        };
                        new_jobs.extend(batch.routes.iter().map(|route| JobRow {
                            batch_id,
                            connection_id: &route.connection_id,
                            revision_id: route.revision_id,
                            created_at: batch.received_at,
                        }));
                        outcomes.push(IngestOutcome::Stored { batch_id });
                    }
                }
                Command::Claim { limit, skip, .. } => {
                    let jobs: Vec<ClaimedJob> = sqlx::query_as(dialect.claim)
                        .bind(now + lease_ms).bind(now).bind(*limit).bind(skip)
                        .fetch_all(&mut *tx).await?;
                    *slot = Some(Done::Claim(jobs));
                }
                Command::Update(_) => {}
            }
        }
        let profiles = profile_rows(commands, &outcomes);
        if !profiles.is_empty() {
            sqlx::query(dialect.upsert_profiles).bind(json(&profiles)).bind(now).execute(&mut *tx).await?;
        }
        let mut job_ids: HashMap<(i64, String), i64> = HashMap::with_capacity(new_jobs.len());
        if !new_jobs.is_empty() {
            // New jobs are leased to this node: delivery gets them straight from the writer.
            let rows: Vec<(i64, i64, String)> = sqlx::query_as(dialect.insert_jobs)
                .bind(json(&new_jobs)).bind(now + lease_ms)
                .fetch_all(&mut *tx).await?;
            job_ids.extend(rows.into_iter().map(|(id, batch_id, connection)| ((batch_id, connection), id)));
        }
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

/// The jobs created for an ingest command's stored batches.
fn jobs_of(
    batches: &[NewBatch],
    outcomes: &[IngestOutcome],
    ids: &HashMap<(i64, String), i64>,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (batch, outcome) in batches.iter().zip(outcomes) {
        let IngestOutcome::Stored { batch_id } = *outcome else {
            continue;
        };
        for route in &batch.routes {
            let Some(&id) = ids.get(&(batch_id, route.connection_id.clone())) else {
                continue;
            };
            jobs.push(Job {
                id,
                batch_id,
                connection_id: route.connection_id.clone(),
                revision_id: route.revision_id,
                progress: 0,
                attempts: 0,
                created_at: batch.received_at,
                body: Arc::clone(&batch.body),
            });
        }
    }
    jobs
}
