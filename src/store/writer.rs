//! The group-commit writer: one task that owns hot-path writes. It takes whatever commands are
//! queued (accepted batches, job updates, claims), runs them in one transaction and answers each
//! only after the commit, so durability costs one sync per group instead of one per request.
//! Measurements on this machine showed that waiting to fill a group makes things worse, so the
//! writer never waits: it commits what is there.
//!
//! If a group's transaction fails, each command is retried in a transaction of its own, so one
//! bad command cannot fail the requests it happened to share a group with.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::queue::{
    AttemptRecord, CLAIM_POSTGRES, CLAIM_SQLITE, ClaimedJob, DELETE_JOB, DeadLetter,
    INSERT_ATTEMPT, INSERT_BATCH, INSERT_DEAD_LETTER, INSERT_JOB, IngestOutcome, Job, JobKey,
    JobUpdate, NewBatch, RELEASE_JOB, RETRY_JOB,
};
use super::{Store, StoreError, StoreResult, with_pool};
use crate::model::now_ms;

/// Most commands committed in one transaction; bounds the latency one group adds to the next.
const MAX_GROUP: usize = 256;
/// Commands waiting for the writer; beyond this, senders wait (back-pressure on ingest).
const QUEUE_CAPACITY: usize = 8192;

enum Command {
    Ingest {
        batches: Vec<NewBatch>,
        reply: oneshot::Sender<StoreResult<Vec<IngestOutcome>>>,
    },
    Update(JobUpdate),
    Claim {
        limit: i64,
        /// JSON array of connection ids to skip.
        skip: String,
        reply: oneshot::Sender<StoreResult<Vec<ClaimedJob>>>,
    },
}

enum Done {
    Ingest(Vec<IngestOutcome>, Vec<Job>),
    Update,
    Claim(Vec<ClaimedJob>),
}

/// A handle to the writer task; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    commands: mpsc::Sender<Command>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Ingest { .. } => "Ingest",
            Command::Update(_) => "Update",
            Command::Claim { .. } => "Claim",
        })
    }
}

impl Writer {
    /// Starts the writer. Jobs created by committed batches are sent on `committed`, already leased
    /// to this node for `lease`, so they can be delivered at once without a claim round trip.
    pub(crate) fn spawn(
        store: Store,
        lease: Duration,
        committed: mpsc::UnboundedSender<Vec<Job>>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (commands, rx) = mpsc::channel(QUEUE_CAPACITY);
        let task = tokio::spawn(run(store, lease, rx, committed));
        (Self { commands }, task)
    }

    /// Stores an ingest request's batches atomically; answers after the commit.
    pub(crate) async fn ingest(&self, batches: Vec<NewBatch>) -> StoreResult<Vec<IngestOutcome>> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Ingest { batches, reply }).await?;
        answer.await.map_err(|_| closed())?
    }

    /// Records the outcome of work on a job. Not awaited to commit: a lost update only means the
    /// job is delivered again after its lease, which receivers de-duplicate by delivery id.
    pub(crate) async fn update(&self, update: JobUpdate) -> StoreResult<()> {
        self.send(Command::Update(update)).await
    }

    /// Leases up to `limit` due, unleased jobs to this node, except jobs of the `skip` connections.
    pub(crate) async fn claim(
        &self,
        limit: i64,
        skip: Vec<String>,
    ) -> StoreResult<Vec<ClaimedJob>> {
        let (reply, answer) = oneshot::channel();
        let skip = serde_json::to_string(&skip).unwrap_or_else(|_| "[]".to_owned());
        self.send(Command::Claim { limit, skip, reply }).await?;
        answer.await.map_err(|_| closed())?
    }

    /// Whether the writer task is still running (ingest cannot succeed without it).
    pub(crate) fn is_running(&self) -> bool {
        !self.commands.is_closed()
    }

    async fn send(&self, command: Command) -> StoreResult<()> {
        self.commands.send(command).await.map_err(|_| closed())
    }
}

fn closed() -> StoreError {
    StoreError::Database(sqlx::Error::PoolClosed)
}

async fn run(
    store: Store,
    lease: Duration,
    mut rx: mpsc::Receiver<Command>,
    committed: mpsc::UnboundedSender<Vec<Job>>,
) {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let mut group = Vec::with_capacity(MAX_GROUP);
    while rx.recv_many(&mut group, MAX_GROUP).await > 0 {
        match commit(&store, &group, lease_ms).await {
            Ok(done) => answer(std::mem::take(&mut group), done, &committed),
            Err(error) if group.len() > 1 => {
                tracing::warn!(%error, commands = group.len(), "Group commit failed; retrying its commands one by one.");
                for command in std::mem::take(&mut group) {
                    let result = commit(&store, std::slice::from_ref(&command), lease_ms).await;
                    settle(command, result, &committed);
                }
            }
            Err(error) => {
                for command in std::mem::take(&mut group) {
                    settle(
                        command,
                        Err(StoreError::Database(sqlx::Error::Protocol(
                            error.to_string(),
                        ))),
                        &committed,
                    );
                }
            }
        }
    }
    tracing::debug!("Writer stopped: every handle was dropped.");
}

fn answer(group: Vec<Command>, done: Vec<Done>, committed: &mpsc::UnboundedSender<Vec<Job>>) {
    for (command, done) in group.into_iter().zip(done) {
        settle(command, Ok(vec![done]), committed);
    }
}

/// Sends one command's reply (and hands its new jobs to delivery).
fn settle(
    command: Command,
    result: StoreResult<Vec<Done>>,
    committed: &mpsc::UnboundedSender<Vec<Job>>,
) {
    let done = result.map(|mut d| d.pop());
    match (command, done) {
        (Command::Ingest { reply, .. }, Ok(Some(Done::Ingest(outcomes, jobs)))) => {
            if !jobs.is_empty() {
                // The receiver lives as long as delivery runs; if it is gone the jobs stay leased
                // in the table and a later run delivers them.
                let _ = committed.send(jobs);
            }
            let _ = reply.send(Ok(outcomes));
        }
        (Command::Claim { reply, .. }, Ok(Some(Done::Claim(jobs)))) => {
            let _ = reply.send(Ok(jobs));
        }
        (Command::Ingest { reply, .. }, Err(e)) => {
            let _ = reply.send(Err(e));
        }
        (Command::Claim { reply, .. }, Err(e)) => {
            let _ = reply.send(Err(e));
        }
        (Command::Update(update), Err(error)) => {
            tracing::warn!(%error, ?update, "Job update failed; the job will be retried after its lease.");
        }
        _ => {}
    }
}

/// Runs the commands in one transaction.
async fn commit(store: &Store, commands: &[Command], lease_ms: i64) -> StoreResult<Vec<Done>> {
    let claim_sql = if store.is_embedded() {
        CLAIM_SQLITE
    } else {
        CLAIM_POSTGRES
    };
    let now = now_ms();
    let mut done = Vec::with_capacity(commands.len());
    with_pool!(store, pool => {
        let mut tx = pool.begin().await?;
        for command in commands {
            match command {
                Command::Ingest { batches, .. } => {
                    let mut outcomes = Vec::with_capacity(batches.len());
                    let mut jobs = Vec::new();
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
                        for route in &batch.routes {
                            let (job_id,): (i64,) = sqlx::query_as(INSERT_JOB)
                                .bind(batch_id)
                                .bind(&route.connection_id)
                                .bind(route.revision_id)
                                .bind(batch.received_at)
                                .bind(now + lease_ms)
                                .fetch_one(&mut *tx)
                                .await?;
                            jobs.push(Job {
                                id: job_id,
                                batch_id,
                                connection_id: route.connection_id.clone(),
                                revision_id: route.revision_id,
                                progress: 0,
                                attempts: 0,
                                created_at: batch.received_at,
                                body: Arc::clone(&batch.body),
                            });
                        }
                        outcomes.push(IngestOutcome::Stored { batch_id });
                    }
                    done.push(Done::Ingest(outcomes, jobs));
                }
                Command::Update(update) => {
                    let (job, attempt, dead): (&JobKey, Option<&AttemptRecord>, &[DeadLetter]) = match update {
                        JobUpdate::Finished { job, attempt, dead } => {
                            sqlx::query(DELETE_JOB).bind(job.id).execute(&mut *tx).await?;
                            (job, Some(attempt), dead)
                        }
                        JobUpdate::Retry { job, progress, attempts, next_attempt_at, attempt, dead } => {
                            sqlx::query(RETRY_JOB)
                                .bind(job.id).bind(progress).bind(attempts).bind(next_attempt_at)
                                .bind(&attempt.error)
                                .execute(&mut *tx).await?;
                            (job, Some(attempt), dead)
                        }
                        JobUpdate::Release { job_id } => {
                            sqlx::query(RELEASE_JOB).bind(job_id).execute(&mut *tx).await?;
                            done.push(Done::Update);
                            continue;
                        }
                    };
                    for letter in dead {
                        sqlx::query(INSERT_DEAD_LETTER)
                            .bind(job.id).bind(job.batch_id).bind(&job.connection_id)
                            .bind(letter.payload_index).bind(&letter.body).bind(letter.status)
                            .bind(&letter.error).bind(now)
                            .execute(&mut *tx).await?;
                    }
                    if let Some(a) = attempt {
                        sqlx::query(INSERT_ATTEMPT)
                            .bind(job.id).bind(&job.connection_id).bind(a.attempted_at).bind(a.outcome)
                            .bind(a.status).bind(&a.error).bind(a.requests).bind(a.latency_ms)
                            .execute(&mut *tx).await?;
                    }
                    done.push(Done::Update);
                }
                Command::Claim { limit, skip, .. } => {
                    let jobs: Vec<ClaimedJob> = sqlx::query_as(claim_sql)
                        .bind(now + lease_ms).bind(now).bind(*limit).bind(skip)
                        .fetch_all(&mut *tx).await?;
                    done.push(Done::Claim(jobs));
                }
            }
        }
        tx.commit().await?;
    });
    Ok(done)
}
