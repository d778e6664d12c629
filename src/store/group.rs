//! One group commit: the commands the writer gathered, run as named steps (see [`super::steps`])
//! in one transaction, and one answer per command.
//!
//! The order matters: lease renewals first, so a release in the same group wins; then job
//! updates, before claims, so a job finished in this group can never be claimed in it again;
//! then the group's batches, the profiles of their users and their jobs. A batch needs its own
//! answer (stored, or a duplicate `source_request_id`) and `RETURNING` promises no order, so
//! batch ids are allocated first and inserted explicitly: the ids that come back are the
//! batches stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::queue::{ClaimedJob, DeadLetter, IngestOutcome, Job, JobKey, JobUpdate, NewBatch};
use super::steps::{self, AttemptRow, JobRow, ProfileRow, RetryRow};
use super::{Store, StoreResult};
use crate::model::ids::{BatchId, ConnectionId, Mpid};
use crate::model::now_ms;

/// One piece of work the writer was given, committed in a group with others.
pub(super) enum Command {
    Ingest {
        batches: Vec<NewBatch>,
        reply: oneshot::Sender<StoreResult<Vec<IngestOutcome>>>,
    },
    Update(JobUpdate),
    /// Extends the leases of jobs this node still holds (queued or in flight); answers the ids
    /// it still held.
    Renew {
        job_ids: Vec<i64>,
        reply: oneshot::Sender<StoreResult<Vec<i64>>>,
    },
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
    Renew(Vec<i64>),
    Claim(Vec<ClaimedJob>),
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Ingest { .. } => "Ingest",
            Command::Update(_) => "Update",
            Command::Renew { .. } => "Renew",
            Command::Claim { .. } => "Claim",
        })
    }
}

/// Runs a group's commands in one transaction and returns one `Done` per command, in order.
pub(super) async fn commit(
    store: &Store,
    commands: &[Command],
    lease_ms: i64,
    node: &str,
) -> StoreResult<Vec<Done>> {
    let now = now_ms();
    let lease_until = now + lease_ms;
    let mut tx = store.begin().await?;

    let renewed = steps::renew_leases(&mut tx, &renewals(commands), lease_until, node).await?;
    apply_updates(&mut tx, commands, now, node).await?;
    let mut claims = Vec::new();
    for command in commands {
        if let Command::Claim { limit, skip, .. } = command {
            claims.push(steps::claim_jobs(&mut tx, *limit, skip, now, lease_until, node).await?);
        }
    }
    let batches: Vec<&NewBatch> = commands.iter().flat_map(Command::batches).collect();
    let ids = steps::allocate_batch_ids(&mut tx, batches.len()).await?;
    let rows: Vec<(BatchId, &NewBatch)> = ids.iter().copied().zip(batches).collect();
    let stored = steps::insert_batches(&mut tx, &rows).await?;
    let (outcomes, new_jobs) = settle_batches(commands, &ids, &stored, lease_until, node);
    steps::upsert_profiles(&mut tx, &profile_rows(commands, &outcomes), now).await?;
    let job_ids = steps::insert_jobs(&mut tx, &new_jobs).await?;
    tx.commit().await?;

    Ok(answers(commands, claims, outcomes, &job_ids, &renewed))
}

impl Command {
    /// The batches of an ingest command (none for others).
    fn batches(&self) -> &[NewBatch] {
        match self {
            Command::Ingest { batches, .. } => batches,
            _ => &[],
        }
    }
}

/// Every job id the group's renewals name.
fn renewals(commands: &[Command]) -> Vec<i64> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::Renew { job_ids, .. } => Some(job_ids),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

/// Records what workers reported: finished jobs leave the queue, retries wait, released jobs
/// are claimable again; every attempt is logged and every request given up on kept.
///
/// Each change to a job is fenced by `node`: it applies only while the job is still this node's
/// (the attempt and dead letters are logged either way, since the requests were made).
async fn apply_updates(
    tx: &mut super::backend::Tx,
    commands: &[Command],
    now: i64,
    node: &str,
) -> Result<(), sqlx::Error> {
    let mut finished = Vec::new();
    let mut released = Vec::new();
    let mut retries = Vec::new();
    let mut attempts = Vec::new();
    let mut letters: Vec<(&JobKey, &DeadLetter)> = Vec::new();
    for command in commands {
        let Command::Update(update) = command else {
            continue;
        };
        match update {
            JobUpdate::Finished { job, attempt, dead } => {
                finished.push(job.id);
                attempts.push(AttemptRow::new(job, attempt));
                letters.extend(dead.iter().map(|d| (job, d)));
            }
            JobUpdate::Retry {
                job,
                progress,
                attempts: tries,
                next_attempt_at,
                attempt,
                dead,
            } => {
                retries.push(RetryRow {
                    job_id: job.id,
                    progress: *progress,
                    attempts: *tries,
                    next_attempt_at: *next_attempt_at,
                    error: attempt.error.as_deref(),
                });
                attempts.push(AttemptRow::new(job, attempt));
                letters.extend(dead.iter().map(|d| (job, d)));
            }
            JobUpdate::Release { job_id } => released.push(*job_id),
        }
    }
    steps::retry_jobs(tx, &retries, node).await?;
    steps::delete_jobs(tx, &finished, node).await?;
    steps::release_jobs(tx, &released, node).await?;
    steps::insert_attempts(tx, &attempts).await?;
    steps::insert_dead_letters(tx, &letters, now).await
}

/// One answer per command, in order: claims get their jobs, renewals the jobs still held,
/// ingest commands their outcomes and the leased jobs to hand to delivery.
fn answers(
    commands: &[Command],
    claims: Vec<Vec<ClaimedJob>>,
    outcomes: Vec<Vec<IngestOutcome>>,
    job_ids: &[(i64, BatchId, ConnectionId)],
    renewed: &HashSet<i64>,
) -> Vec<Done> {
    let job_ids: HashMap<(BatchId, &ConnectionId), i64> = job_ids
        .iter()
        .map(|(id, batch_id, connection)| ((*batch_id, connection), *id))
        .collect();
    let mut claims = claims.into_iter();
    commands
        .iter()
        .zip(outcomes)
        .map(|(command, outcomes)| match command {
            Command::Ingest { batches, .. } => {
                let jobs = jobs_of(batches, &outcomes, &job_ids);
                Done::Ingest(outcomes, jobs)
            }
            Command::Claim { .. } => Done::Claim(claims.next().unwrap_or_default()),
            Command::Renew { job_ids, .. } => Done::Renew(
                job_ids
                    .iter()
                    .copied()
                    .filter(|id| renewed.contains(id))
                    .collect(),
            ),
            Command::Update(_) => Done::Update,
        })
        .collect()
}

/// Each ingest command's outcomes, given the ids allocated to the group's batches in order and
/// the ids the insert returned, and the job rows of the stored batches: leased to `node` until
/// `lease_until` where the job is to be leased, else left in the table.
fn settle_batches<'a>(
    commands: &'a [Command],
    ids: &[BatchId],
    stored: &HashSet<BatchId>,
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

/// One profile update per user of the group's stored batches, later batches' attributes over
/// earlier ones. (One row per user: PostgreSQL cannot update a row twice in one statement.)
fn profile_rows(commands: &[Command], outcomes: &[Vec<IngestOutcome>]) -> Vec<ProfileRow> {
    // Sorted by MPID so concurrent group commits (several nodes) lock users in one order.
    let mut by_user: BTreeMap<Mpid, serde_json::Map<String, serde_json::Value>> = BTreeMap::new();
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
    ids: &HashMap<(BatchId, &ConnectionId), i64>,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (batch, outcome) in batches.iter().zip(outcomes) {
        let IngestOutcome::Stored { batch_id } = *outcome else {
            continue;
        };
        for job in batch.jobs.iter().filter(|job| job.leased) {
            let Some(&id) = ids.get(&(batch_id, &job.connection_id)) else {
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
