//! One group commit: the commands the writer gathered, run as named steps (see [`super::steps`])
//! in one transaction, and one answer per command.
//!
//! Lock order, so that nodes sharing one PostgreSQL never deadlock: a group first changes only
//! job rows this node holds (every statement is fenced by `leased_by`; claims skip locked rows,
//! so they wait for nobody), then takes the unique keys of its batches in key order
//! ([`batch_steps::lock_order`]), then its users' profiles in MPID order. A node can wait for a job row
//! only while another node's claim of it is uncommitted, and that claim waits for nothing of
//! this node's jobs, so no cycle can form.
//!
//! The identities of the group's batches without an MPID come between the job rows and the
//! batch keys: their advisory locks in key order, taken in the same round trip as the reads
//! that follow them (see [`super::identity_read`]); on a PostgreSQL lane that round trip is the
//! batch insert's, which takes the locks and reads before any batch key, to check what the
//! group was decided against (a guess: see [`super::identity_known`]; a wrong one stores
//! nothing, and the group is decided again against the rows read). Those reads do not look for resends: the
//! batch insert finds them, and a group in which a batch the identity step resolved was one is
//! rolled back and run once more, reading the stored keys first (see [`Resends`]).
//!
//! On PostgreSQL a node commits on several lanes at once (see [`super::writer`]): ingest groups
//! (identities, batch keys, profiles, then inserting new job rows nobody else can see yet), on
//! `ingest.postgres_lanes` lanes, and delivery groups (renewals, job updates, claims: existing
//! job rows only, plus plain inserts of the attempts and dead letters they log), on one. Ingest
//! and delivery lock disjoint rows (an ingest only reads existing jobs, to leave a user's new
//! job behind its earlier one), so neither kind ever waits for the other. Two ingest lanes of
//! one node are to each other exactly what the ingest lanes of two nodes are: each group takes
//! identity locks, then batch keys, then profiles, each class in key order, so a group waits
//! only for a group that holds a lock earlier in that one order, and no cycle can form. A
//! delivery group waits only for job rows another node's delivery group holds. The same order
//! keeps a user's jobs in order across lanes: a group with a batch of a user another lane's
//! open group also has waits at that user's profile row until the other commits, and only then
//! inserts its job, which sees the earlier one and is left behind it.
//!
//! The order matters: lease renewals first, so a release in the same group wins; then job
//! updates, before claims, so a job finished in this group can never be claimed in it again;
//! then the users of batches that came without one; then the group's batches, with, on
//! PostgreSQL and when every batch was stored, the rest of the users' writes in the same
//! statement (see [`batch_steps`]); where the insert left them, the new users with their
//! profiles (rows nobody else can hold) and the identities given to them (whose advisory locks
//! the group holds, so they wait for nobody), and the known users' profiles; their jobs. A batch needs
//! its own answer (stored, or a duplicate `source_request_id`) and `RETURNING` promises no
//! order, so each batch's id is drawn before its row is inserted (in the same statement: see
//! [`batch_steps`]): the ids that come back are the batches stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::backend::{Plans, Tx, WriterConnection};
use super::batch_steps::{Inserted, ProfilesAlong};
use super::identity_steps::{Reading, Resends};
use super::prune_step::{self, PruneChunk};
use super::queue::{
    ClaimedJob, DeadLetter, IngestOutcome, Job, JobKey, JobUpdate, NewBatch, Renewed,
};
use super::steps::{self, AttemptRow, JobRow, ProfileRow, RetryRow};
use super::{Store, StoreError, StoreResult};
use super::{batch_steps, coalesce_sql, identity_sql, identity_steps};
use crate::model::consent;
use crate::model::ids::{BatchId, ConnectionId, Mpid};
use crate::model::now_ms;

/// One piece of work the writer was given, committed in a group with others.
pub(super) enum Command {
    Ingest {
        batches: Vec<NewBatch>,
        reply: oneshot::Sender<StoreResult<Vec<IngestOutcome>>>,
    },
    /// A job's update; `committed` hears when it is committed, if someone waits for that.
    Update {
        update: JobUpdate,
        committed: Option<oneshot::Sender<StoreResult<()>>>,
    },
    /// Extends the leases of jobs this node still holds (queued or in flight); answers the ids
    /// it still held.
    Renew {
        job_ids: Vec<i64>,
        reply: oneshot::Sender<StoreResult<Renewed>>,
    },
    Claim {
        limit: i64,
        of: ClaimOf,
        reply: oneshot::Sender<StoreResult<Vec<ClaimedJob>>>,
    },
    /// A retention chunk to delete in the group (see [`prune_step`]); answers the rows deleted.
    Prune {
        chunk: PruneChunk,
        reply: oneshot::Sender<StoreResult<u64>>,
    },
}

/// Which jobs a claim takes.
#[derive(Debug)]
pub(super) enum ClaimOf {
    /// Due jobs of any connection but these (a JSON array of connection ids).
    Due { skip: String },
    /// The oldest job of this connection nobody holds, due or not (a probe), preferring users
    /// other than these (a JSON array of MPIDs whose last request failed).
    Probe {
        connection_id: ConnectionId,
        avoid: String,
    },
    /// Due jobs of this connection, oldest first (a recovering connection's drain).
    Drain(ConnectionId),
}

pub(super) enum Done {
    Ingest(Vec<IngestOutcome>, Vec<Job>),
    Update,
    Renew(Renewed),
    Claim(Vec<ClaimedJob>),
    Prune(u64),
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Ingest { .. } => "Ingest",
            Command::Update { .. } => "Update",
            Command::Renew { .. } => "Renew",
            Command::Claim { .. } => "Claim",
            Command::Prune { .. } => "Prune",
        })
    }
}

/// Why a group did not commit.
#[derive(Debug)]
pub(super) enum Failure {
    /// Nothing of the group was stored, so its commands may be run again.
    RolledBack(StoreError),
    /// The COMMIT failed and whether it took effect could not be found out.
    Unknown(StoreError),
}

/// Runs a group's commands in one transaction on the lane's `connection` and returns one `Done`
/// per command, in order. `queued` answers, at the COMMIT, whether the lane's next group is
/// already waiting: on PostgreSQL its transaction then begins with this COMMIT (see
/// [`super::pg_lane`]).
pub(super) async fn commit(
    store: &Store,
    connection: &mut WriterConnection,
    commands: &mut [Command],
    lease_ms: i64,
    node: &str,
    queued: &(dyn Fn() -> bool + Sync),
) -> Result<Vec<Done>, Failure> {
    let mut resends = Resends::FoundByInsert;
    let group = Group {
        lease_ms,
        node,
        queued,
    };
    loop {
        let kept = connection.is_kept();
        let tried = match commit_once(store, connection, commands, &group, resends).await {
            Ok(tried) => tried,
            // A kept connection the server closed or stopped answering while the lane was idle
            // (a restart, a failover, an idle timeout) fails at its BEGIN, before anything of
            // the group was sent, or at the first statement of a transaction the last COMMIT
            // began, whose work the server then dropped with the connection: start again once
            // on a fresh one, or a lone request would get the error (a group of one is not
            // retried).
            Err(error) if kept && lost_connection(&error) => {
                tracing::info!(%error, "The writer's connection was lost before its group's first answer; opening another.");
                connection.reset();
                commit_once(store, connection, commands, &group, resends)
                    .await
                    .unwrap_or_else(|error| Try::Ended(Err(rolled_back(error))))
            }
            Err(error) => Try::Ended(Err(rolled_back(error))),
        };
        match tried {
            Try::Ended(result) => return result,
            // At most once: a group that read its stored keys first never asks again.
            Try::Again => resends = Resends::Read,
        }
    }
}

/// How one try at a group ended.
enum Try {
    Ended(Result<Vec<Done>, Failure>),
    /// A batch whose identity decision wrote something turned out to be a resend (see
    /// [`Resends`]): rolled back, to be run again with the stored keys read first.
    Again,
}

/// Whether `error` says the connection itself is gone (closed by the server, a broken or
/// silent link), rather than, say, SQLite's write lock held past its busy timeout: that one is
/// not helped by another connection, only made to wait twice.
fn lost_connection(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        // PostgreSQL's classes 08 (connection exception) and 57P (operator intervention:
        // terminated by an administrator, a shutdown, a restart).
        sqlx::Error::Database(error) => error
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// What a group's tries share: its leases' length and owner, and whether the lane's next group
/// is queued.
struct Group<'a> {
    lease_ms: i64,
    node: &'a str,
    queued: &'a (dyn Fn() -> bool + Sync),
}

/// One try at the group on the connection as it is; the error is a BEGIN that failed (with
/// the ROLLBACK it may carry), or the connection lost in a transaction the last COMMIT began.
async fn commit_once(
    store: &Store,
    connection: &mut WriterConnection,
    commands: &mut [Command],
    group: &Group<'_>,
    resends: Resends,
) -> Result<Try, sqlx::Error> {
    let started = Instant::now();
    let plans = plans_for(commands);
    let begun_early = connection.has_begun(plans);
    let mut tx = connection.begin(store, plans).await?;
    let begun = started.elapsed();
    let steps = run_steps(&mut tx, commands, group.lease_ms, group.node, resends).await;
    let (done, stored) = match steps {
        Ok(ran) => ran,
        Err(StepsFailed::AResendWrote) => {
            tracing::debug!(
                "A resend's identity decision wrote something; running the group again."
            );
            return Ok(Try::Again);
        }
        Err(StepsFailed::Sql(error)) => {
            identity_sql::new_run_after(&error);
            if begun_early && lost_connection(&error) {
                return Err(error);
            }
            return Ok(Try::Ended(Err(rolled_back(error))));
        }
    };
    let ran = started.elapsed();
    // Asked at the COMMIT, not at the BEGIN: what arrived while the steps ran counts.
    let next = (group.queued)().then(|| plans.begin_postgres());
    let committed = tx.commit_then(next).await;
    // Where a group's time goes (`RUST_LOG=boson::store::group=debug`): the BEGIN, the steps,
    // the COMMIT with its sync (on SQLite mostly the WAL's fsync). The time to a 202 at
    // saturation is mostly these (issue 16), and `retention-bench lineup` lines slow requests
    // up with them and with maintenance (docs/PERFORMANCE.md, "Retention at any table size").
    tracing::debug!(
        commands = commands.len(),
        stored = stored.len(),
        begin_ms = ms(begun),
        steps_ms = ms(ran - begun),
        commit_ms = ms(started.elapsed() - ran),
        "Group committed."
    );
    Ok(Try::Ended(match committed {
        Ok(()) => Ok(done),
        Err(error) => settle_commit_error(store, &stored, done, error).await,
    }))
}

/// The generic plan for a group of ingests only (an ingest lane's on PostgreSQL), the server's
/// choice for any other (see [`Plans`]).
pub(super) fn plans_for(commands: &[Command]) -> Plans {
    if commands.iter().all(|c| matches!(c, Command::Ingest { .. })) {
        Plans::Generic
    } else {
        Plans::Chosen
    }
}

/// A duration in milliseconds, for the debug logs.
fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn rolled_back(error: sqlx::Error) -> Failure {
    Failure::RolledBack(error.into())
}

/// Why a group's steps stopped (the transaction is then rolled back).
enum StepsFailed {
    Sql(sqlx::Error),
    /// See [`Try::Again`].
    AResendWrote,
}

impl From<sqlx::Error> for StepsFailed {
    fn from(error: sqlx::Error) -> Self {
        StepsFailed::Sql(error)
    }
}

/// The steps of one group, in order, inside `tx`; the answers, and the ids of the batches it
/// stored.
async fn run_steps(
    tx: &mut Tx<'_>,
    commands: &mut [Command],
    lease_ms: i64,
    node: &str,
    resends: Resends,
) -> Result<(Vec<Done>, HashSet<BatchId>), StepsFailed> {
    let now = now_ms();
    let lease_until = now + lease_ms;
    let renewing = renewals(commands);
    let renewed = steps::renew_leases(tx, &renewing, lease_until, node).await?;
    coalesce_sql::renew_groups(tx, &renewing, lease_until, node).await?;
    apply_updates(tx, commands, now, node).await?;
    let mut claims = Vec::new();
    for command in commands.iter() {
        if let Command::Claim { limit, of, .. } = command {
            claims.push(match of {
                ClaimOf::Probe {
                    connection_id,
                    avoid,
                } => steps::claim_probe(tx, connection_id, avoid, now, lease_until, node).await?,
                ClaimOf::Due { skip } => {
                    steps::claim_jobs(tx, *limit, skip, now, lease_until, node).await?
                }
                ClaimOf::Drain(connection_id) => {
                    steps::claim_drain(tx, connection_id, *limit, now, lease_until, node).await?
                }
            });
            if let Some(claimed) = claims.last_mut() {
                coalesce_sql::claim_groups(tx, claimed, lease_until, node).await?;
            }
        }
    }
    let mut reading = match resends {
        Resends::FoundByInsert => Reading::Guess,
        Resends::Read => Reading::Read(resends),
    };
    // At most twice: a group decided against a guess its insert found wrong is decided again
    // against the rows that insert read, which guesses nothing.
    let (decided, insertion) = loop {
        let mut resolving: Vec<&mut NewBatch> =
            commands.iter_mut().flat_map(Command::batches_mut).collect();
        let decided = identity_steps::resolve_batches_by(tx, &mut resolving, reading).await?;
        let mut insertion = insert_batches(tx, commands, &decided, now).await?;
        match insertion.inserted.found_instead.take() {
            Some(rows) => reading = Reading::Found(rows),
            None => {
                decided.count_guess_held(tx);
                break (decided, insertion);
            }
        }
    };
    let commands = &*commands;
    let BatchesStored {
        outcomes,
        new_jobs,
        consents,
        stored,
    } = store_batches(
        tx,
        commands,
        &decided,
        insertion,
        resends,
        (lease_until, node),
    )
    .await?;
    let job_ids = steps::insert_jobs(tx, &new_jobs).await?;
    let chunks = commands.iter().filter_map(Command::prune_chunk);
    let pruned = prune_step::delete_chunks(tx, chunks).await?;
    let handed = Handed {
        job_ids: &job_ids,
        consents: &consents,
        lease_until,
    };
    let done = answers(commands, (claims, pruned), outcomes, &handed, &renewed);
    Ok((done, stored))
}

/// What storing a group's batches leaves to the steps after it.
struct BatchesStored<'a> {
    /// Each command's outcomes, in order.
    outcomes: Vec<Vec<IngestOutcome>>,
    /// The job rows of the stored batches.
    new_jobs: Vec<JobRow<'a>>,
    /// The consent of the users whose jobs read it (see [`hands_over_consent`]).
    consents: HashMap<Mpid, Arc<serde_json::Value>>,
    /// The ids of the batches stored.
    stored: HashSet<BatchId>,
}

/// A group's batch insert, and what it leaves to [`store_batches`].
struct Insertion {
    inserted: Inserted,
    /// The new users' profile rows and the known users', as the group's batches give them if
    /// every batch is stored.
    fresh: Vec<ProfileRow>,
    profiles: Vec<ProfileRow>,
    /// Whether the users' consent is handed over (see [`hands_over_consent`]).
    handing: bool,
    now: i64,
}

/// Inserts the group's batches, with, on PostgreSQL, the new users, identities and device
/// pointers their decisions made and the profiles of the other users, as every batch stored
/// gives them (see [`batch_steps::insert_batches_with_profiles`]); at `now`.
async fn insert_batches(
    tx: &mut Tx<'_>,
    commands: &[Command],
    decided: &identity_steps::Decided,
    now: i64,
) -> Result<Insertion, StepsFailed> {
    let batches: Vec<&NewBatch> = commands.iter().flat_map(Command::batches).collect();
    let (fresh, profiles) = decided.split_profiles(profile_rows(commands, None));
    let handing = hands_over_consent(commands);
    let along = ProfilesAlong {
        rows: &profiles,
        new_users: identity_steps::Writing::of(decided, &fresh),
        guessed: decided.guessed.as_ref(),
        now,
        consent: handing,
    };
    let inserted = batch_steps::insert_batches_with_profiles(tx, &batches, along).await?;
    Ok(Insertion {
        inserted,
        fresh,
        profiles,
        handing,
        now,
    })
}

/// Settles the group's batches as `insertion` stored them, and makes the users' writes it left
/// (a group holding a resend, or SQLite), for the stored batches only. With the group's leases'
/// end and owner.
async fn store_batches<'a>(
    tx: &mut Tx<'_>,
    commands: &'a [Command],
    decided: &identity_steps::Decided,
    insertion: Insertion,
    resends: Resends,
    (lease_until, node): (i64, &'a str),
) -> Result<BatchesStored<'a>, StepsFailed> {
    let Insertion {
        inserted:
            Inserted {
                ids,
                stored,
                written,
                found_instead: _,
            },
        mut fresh,
        mut profiles,
        handing,
        now,
    } = insertion;
    if resends == Resends::FoundByInsert && decided.a_resend_wrote(&ids, &stored) {
        return Err(StepsFailed::AResendWrote);
    }
    let (outcomes, new_jobs) = settle_batches(commands, &ids, &stored, lease_until, node);
    let consents = match written {
        Some(consents) => consents,
        None => {
            if stored.len() < ids.len() {
                (fresh, profiles) = decided.split_profiles(profile_rows(commands, Some(&outcomes)));
            }
            write_users(tx, decided, (&fresh, &profiles), now, handing).await?
        }
    };
    Ok(BatchesStored {
        outcomes,
        new_jobs,
        consents,
        stored,
    })
}

/// The new users' rows (`fresh`), the identities and devices `decided` gives, then the known
/// users' `profiles`, each in statements of their own; with `handing`, answers the users'
/// consent as stored.
async fn write_users(
    tx: &mut Tx<'_>,
    decided: &identity_steps::Decided,
    (fresh, profiles): (&[ProfileRow], &[ProfileRow]),
    now: i64,
    handing: bool,
) -> Result<HashMap<Mpid, Arc<serde_json::Value>>, sqlx::Error> {
    let mut consents = identity_steps::write(tx, decided, fresh, now, handing).await?;
    if handing {
        consents.extend(steps::upsert_profiles_returning_consent(tx, profiles, now).await?);
    } else {
        steps::upsert_profiles(tx, profiles, now).await?;
    }
    Ok(consents)
}

/// A COMMIT that reported an error may have taken effect all the same: the connection can drop
/// after the server committed. Running the group's commands again would then store its batches
/// twice, so the database is asked first. A transaction is all or nothing, so one batch it
/// stored tells. A group that stored no batch only renewed, updated or claimed jobs, which may
/// be done again (job updates are fenced; at worst an attempt is logged twice).
async fn settle_commit_error(
    store: &Store,
    stored: &HashSet<BatchId>,
    done: Vec<Done>,
    error: sqlx::Error,
) -> Result<Vec<Done>, Failure> {
    let Some(&probe) = stored.iter().next() else {
        return Err(rolled_back(error));
    };
    for pause in [0, 100, 400] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        match store.batch_exists(probe).await {
            Ok(true) => {
                tracing::warn!(%error, "COMMIT reported an error but had committed; the group is answered as stored.");
                return Ok(done);
            }
            Ok(false) => return Err(rolled_back(error)),
            Err(check) => {
                tracing::warn!(%check, "Could not find out whether a failed COMMIT took effect.")
            }
        }
    }
    Err(Failure::Unknown(error.into()))
}

impl Command {
    /// The batches of an ingest command (none for others).
    fn batches(&self) -> &[NewBatch] {
        match self {
            Command::Ingest { batches, .. } => batches,
            _ => &[],
        }
    }

    /// The chunk a prune command deletes.
    fn prune_chunk(&self) -> Option<&PruneChunk> {
        match self {
            Command::Prune { chunk, .. } => Some(chunk),
            _ => None,
        }
    }

    /// The batches of an ingest command, to be given their users.
    fn batches_mut(&mut self) -> &mut [NewBatch] {
        match self {
            Command::Ingest { batches, .. } => batches,
            _ => &mut [],
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
    tx: &mut Tx<'_>,
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
        let Command::Update { update, .. } = command else {
            continue;
        };
        match update {
            JobUpdate::Finished { job, attempt, dead } => {
                finished.push(job.id);
                finished.extend(&job.mates);
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
                // A coalesced group waits as one: its mates keep the same place and time.
                for &job_id in std::iter::once(&job.id).chain(&job.mates) {
                    retries.push(RetryRow {
                        job_id,
                        progress: *progress,
                        attempts: *tries,
                        next_attempt_at: *next_attempt_at,
                        error: attempt.error.as_deref(),
                    });
                }
                attempts.push(AttemptRow::new(job, attempt));
                letters.extend(dead.iter().map(|d| (job, d)));
            }
            JobUpdate::Release { job_id } => released.push(*job_id),
        }
    }
    steps::retry_jobs(tx, &retries, node).await?;
    steps::delete_jobs(tx, &finished, node).await?;
    steps::release_jobs(tx, &released, node).await?;
    coalesce_sql::release_groups(tx, &released, node).await?;
    steps::insert_attempts(tx, &attempts).await?;
    steps::insert_dead_letters(tx, &letters, now).await
}

/// Whether a batch of the group has a user and a job to hand over whose rules read consent:
/// then the profile upsert answers the merged consent, which the job carries to delivery.
fn hands_over_consent(commands: &[Command]) -> bool {
    commands.iter().flat_map(Command::batches).any(|batch| {
        batch.profile.is_some() && batch.jobs.iter().any(|job| job.leased && job.reads_consent)
    })
}

/// What the group's ingest commands hand to delivery: the new jobs' ids and the consent of the
/// users whose jobs read it; and the lease end the group gives (new jobs and renewals alike).
struct Handed<'a> {
    job_ids: &'a [(i64, BatchId, ConnectionId, i64)],
    consents: &'a HashMap<Mpid, Arc<serde_json::Value>>,
    lease_until: i64,
}

/// One answer per command, in order: claims get their jobs, prunes the rows they deleted,
/// renewals the jobs still held, ingest commands their outcomes and the leased jobs to hand to
/// delivery.
fn answers(
    commands: &[Command],
    (claims, pruned): (Vec<Vec<ClaimedJob>>, Vec<u64>),
    outcomes: Vec<Vec<IngestOutcome>>,
    handed: &Handed<'_>,
    renewed: &HashSet<i64>,
) -> Vec<Done> {
    // Only the jobs the insert leased: one left in the table behind its user's earlier job
    // waits for a claim.
    let job_ids: HashMap<(BatchId, &ConnectionId), i64> = handed
        .job_ids
        .iter()
        .filter(|(.., lease_until)| *lease_until > 0)
        .map(|(id, batch_id, connection, _)| ((*batch_id, connection), *id))
        .collect();
    let mut claims = claims.into_iter();
    let mut pruned = pruned.into_iter();
    commands
        .iter()
        .zip(outcomes)
        .map(|(command, outcomes)| match command {
            Command::Ingest { batches, .. } => {
                let jobs = jobs_of(batches, &outcomes, &job_ids, handed);
                Done::Ingest(outcomes, jobs)
            }
            Command::Claim { .. } => Done::Claim(claims.next().unwrap_or_default()),
            Command::Prune { .. } => Done::Prune(pruned.next().unwrap_or_default()),
            Command::Renew { job_ids, .. } => Done::Renew(Renewed {
                job_ids: job_ids
                    .iter()
                    .copied()
                    .filter(|id| renewed.contains(id))
                    .collect(),
                lease_until: handed.lease_until,
            }),
            Command::Update { .. } => Done::Update,
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
                        mpid: job.mpid,
                        next_attempt_at: batch.received_at.saturating_add(job.window_ms),
                        coalesce_head: (job.window_ms > 0).then_some(0),
                    }));
                    IngestOutcome::Stored { batch_id }
                })
                .collect()
        })
        .collect();
    (outcomes, jobs)
}

/// One profile update per user of the group's stored batches (each command's `outcomes`;
/// `None`: every batch stored), later batches' attributes and consent purposes over earlier
/// ones. (One row per user: PostgreSQL cannot update a row twice in one statement.)
fn profile_rows(commands: &[Command], outcomes: Option<&[Vec<IngestOutcome>]>) -> Vec<ProfileRow> {
    // Sorted by MPID so concurrent group commits (several nodes) lock users in one order.
    let mut by_user: BTreeMap<Mpid, ProfileRow> = BTreeMap::new();
    for (k, command) in commands.iter().enumerate() {
        let Command::Ingest { batches, .. } = command else {
            continue;
        };
        for (i, batch) in batches.iter().enumerate() {
            let stored = outcomes.is_none_or(|all| {
                let outcome = all.get(k).and_then(|command| command.get(i));
                matches!(outcome, Some(IngestOutcome::Stored { .. }))
            });
            if let (Some(update), true) = (&batch.profile, stored) {
                let row = by_user.entry(update.mpid).or_insert_with(|| ProfileRow {
                    mpid: update.mpid,
                    patch: serde_json::Map::new(),
                    consent: serde_json::Map::new(),
                });
                row.patch.extend(update.patch.clone());
                consent::merge(&mut row.consent, &update.consent);
            }
        }
    }
    by_user.into_values().collect()
}

/// The leased jobs created for an ingest command's stored batches (the others wait in the
/// table).
fn jobs_of(
    batches: &[NewBatch],
    outcomes: &[IngestOutcome],
    ids: &HashMap<(BatchId, &ConnectionId), i64>,
    handed: &Handed<'_>,
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (batch, outcome) in batches.iter().zip(outcomes) {
        let IngestOutcome::Stored { batch_id } = *outcome else {
            continue;
        };
        let consent = batch
            .profile
            .as_ref()
            .and_then(|profile| handed.consents.get(&profile.mpid));
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
                lease_until: handed.lease_until,
                mpid: job.mpid,
                body: Arc::clone(&batch.body),
                profile_consent: consent.filter(|_| job.reads_consent).cloned(),
                coalesce_head: None,
                mates: Vec::new(),
                handoff: None,
            });
        }
    }
    jobs
}
