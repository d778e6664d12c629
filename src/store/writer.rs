//! The group-commit writer: the tasks that own hot-path writes. Each takes whatever commands are
//! queued on its lane (accepted batches, job updates, claims), runs them in one transaction and
//! answers each only after the commit, so durability costs one sync per group instead of one per
//! request. Measurements on this machine showed that waiting to fill a group makes things worse,
//! so a writer commits what is there, with one exception on SQLite: at a moderate, steady rate a
//! group of at most a few commands is held open briefly for the next ones ([`super::gather`]).
//!
//! Lanes: on SQLite one task takes every command (one write lock anyway), on a thread of its own
//! with a runtime of its own ([`on_own_thread`]), and on a connection it keeps, whose statements
//! that thread runs itself ([`super::direct`]). On PostgreSQL
//! ingest and delivery have lanes of their own (a task and its transactions): a group of
//! accepted batches never waits for a delivery statement (a claim scanning past a failing
//! connection's jobs, a retry update waiting for a row another node's claim holds), so a
//! failing connection cannot reach the time to a 202. Ingest has several lanes there
//! (`ingest.postgres_lanes`), each its own connection and transaction, so several commits are
//! in flight at once: one lane commits while the next group is already written on another, and
//! PostgreSQL flushes their commit records together. With one lane the node waited on its
//! commits with half a core idle (issue 16). An ingest request goes to its user's lane, or to
//! the lane with the fewest requests waiting ([`Writer::lane_for`]). Lanes of one node take
//! their locks exactly as the lanes of two nodes do, so they cannot deadlock either: see
//! [`super::group`].
//!
//! If a group's transaction fails, each command is retried in a transaction of its own, so one
//! bad command cannot fail the requests it happened to share a group with. A COMMIT that
//! reports an error is first checked: if it took effect after all, the group is answered as
//! committed, so a retry never stores a batch twice (see [`super::group::commit`]). Each lane
//! does this for its own groups.
//!
//! A lane ends when every handle to it is dropped, or when it is told to stop at shutdown
//! ([`WriterTask::stop`]): between two groups, never in the middle of one, so the group in hand
//! is committed and answered first. Then it closes the connection it kept (on SQLite the last
//! connection to close copies the WAL back and deletes it) and, on SQLite, its thread ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::gather::Gather;
use super::group::{ClaimOf, Command, Done, Failure, commit};
use super::prune_step::PruneChunk;
use super::queue::{ClaimedJob, IngestOutcome, Job, JobUpdate, NewBatch, Renewed};
use super::{Store, StoreError, StoreResult};
use crate::model::ids::{ConnectionId, Mpid};

/// Most commands committed in one transaction; bounds the latency one group adds to the next.
const MAX_GROUP: usize = 256;
/// Commands waiting for the writer; beyond this, senders wait (back-pressure on ingest).
const QUEUE_CAPACITY: usize = 8192;

/// A handle to the writer's lanes; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    /// Ingest commands: one lane on SQLite, `ingest.postgres_lanes` on PostgreSQL.
    ingest: Arc<[IngestLane]>,
    /// Delivery's commands (job updates, renewals, claims): the same lane as the ingest lane on
    /// SQLite, a lane of its own on PostgreSQL.
    delivery: mpsc::Sender<Command>,
}

/// An ingest lane's queue, and how many ingest requests sent on it wait for their answer.
#[derive(Debug)]
struct IngestLane {
    sender: mpsc::Sender<Command>,
    waiting: AtomicUsize,
}

/// Which lane a command goes to.
#[derive(Debug, Clone, Copy)]
enum Lane {
    /// The ingest lane of this index.
    Ingest(usize),
    Delivery,
}

/// The writer's lanes themselves, to stop them at shutdown. Dropping it leaves them running:
/// they end when the last [`Writer`] handle is dropped.
#[derive(Debug)]
pub(crate) struct WriterTask {
    /// Tells every lane to stop after the group it has in hand.
    stop: CancellationToken,
    /// Ends when every lane has closed its connection (and the SQLite lane's thread has ended).
    ended: tokio::task::JoinHandle<()>,
}

impl WriterTask {
    /// Stops every lane once the group it is committing, if any, is committed and answered;
    /// commands still queued are not committed (their senders get [`StoreError::WriterStopped`]).
    /// Waits until the lanes have closed their connections and the SQLite lane's thread has
    /// ended, for at most `within`; answers whether they did. Lanes still running then are
    /// aborted where they are tasks; SQLite's thread is left to the process's exit (its open
    /// transaction, if any, rolls back).
    pub(crate) async fn stop(mut self, within: Duration) -> bool {
        self.stop.cancel();
        let ended = tokio::time::timeout(within, &mut self.ended).await.is_ok();
        if !ended {
            self.ended.abort();
        }
        ended
    }
}

/// Counts an ingest request as waiting on its lane until it is dropped (answered, failed or
/// given up on).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn on(lane: &'a IngestLane) -> Self {
        lane.waiting.fetch_add(1, Ordering::Relaxed);
        Self(&lane.waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Writer {
    /// Starts the writer, with `ingest_lanes` ingest lanes on PostgreSQL (at least one; SQLite
    /// has one lane for everything, which holds a small group open for up to `gather` when
    /// commands arrive at a moderate rate: [`super::gather`]). The jobs of committed batches
    /// that were to be leased are leased to this node for `lease` and sent on `committed`, so
    /// they can be delivered at once without a claim round trip.
    pub(crate) fn spawn(
        store: Store,
        lease: Duration,
        committed: mpsc::UnboundedSender<Vec<Job>>,
        ingest_lanes: usize,
        gather: Duration,
    ) -> (Self, WriterTask) {
        // Every lane names its leases alike: they are one node.
        let node = uuid::Uuid::now_v7().to_string();
        let stop = CancellationToken::new();
        let postgres = matches!(store, Store::Postgres(_));
        // SQLite: one lane for everything; PostgreSQL: delivery's, then the ingest lanes.
        let count = if postgres { 1 + ingest_lanes.max(1) } else { 1 };
        let mut lanes = std::iter::repeat_n((store, committed), count).map(|(store, committed)| {
            let (sender, rx) = mpsc::channel(QUEUE_CAPACITY);
            let node = node.clone();
            let stop = stop.clone();
            let task = if postgres {
                // Not held open on PostgreSQL: measured on SQLite only, and there a held request
                // would count as waiting on its lane and steer others to another lane, and the
                // delivery lane's updates are waited for one by one (a closed loop).
                let gather = Duration::ZERO;
                tokio::spawn(run(store, lease, node, rx, committed, stop, gather))
            } else {
                on_own_thread(store, lease, node, rx, committed, stop, gather)
            };
            (sender, task)
        });
        let Some((delivery, delivery_task)) = lanes.next() else {
            unreachable!("at least one lane is made");
        };
        if !postgres {
            let ingest = IngestLane {
                sender: delivery.clone(),
                waiting: AtomicUsize::new(0),
            };
            let ingest = Arc::from([ingest]);
            let task = WriterTask {
                stop,
                ended: delivery_task,
            };
            return (Self { ingest, delivery }, task);
        }
        let mut tasks = vec![AbortOnDropHandle::new(delivery_task)];
        let mut ingest = Vec::new();
        for (sender, task) in lanes {
            tasks.push(AbortOnDropHandle::new(task));
            ingest.push(IngestLane {
                sender,
                waiting: AtomicUsize::new(0),
            });
        }
        // One handle for all: it ends when every lane has, and aborting it aborts them (the
        // handles abort their tasks when dropped).
        let task = tokio::spawn(async move {
            for task in tasks {
                let _ = task.await;
            }
        });
        let ingest = Arc::from(ingest);
        (Self { ingest, delivery }, WriterTask { stop, ended: task })
    }

    /// The ingest lane for a request. A request whose first batch names its user goes to that
    /// user's lane, so two lanes of this node never hold the same user's profile row at once: a
    /// group that upserts a profile another lane's open group has locked waits for that commit,
    /// and with 64 users spread over every lane that made 4 lanes slower than one
    /// (docs/PERFORMANCE.md, "PostgreSQL ingest lanes"). Other requests go to the lane with the
    /// fewest requests waiting (the first of those, so a quiet node commits on one lane).
    fn lane_for(&self, batches: &[NewBatch]) -> usize {
        let lanes = self.ingest.len();
        if let Some(profile) = batches.first().and_then(|batch| batch.profile.as_ref()) {
            let lanes = u64::try_from(lanes).unwrap_or(1).max(1);
            // A sender's MPIDs, or Boson's (each a random step past the one before), end in
            // random bits; their remainder spreads users evenly.
            return usize::try_from(profile.mpid.get().unsigned_abs() % lanes).unwrap_or(0);
        }
        self.ingest
            .iter()
            .enumerate()
            .min_by_key(|(_, lane)| lane.waiting.load(Ordering::Relaxed))
            .map_or(0, |(index, _)| index)
    }

    /// A writer whose commands come out of the returned receiver instead of being committed,
    /// so a test sees what is sent to the writer and answers it itself.
    #[cfg(test)]
    pub(super) fn into_channel() -> (Self, mpsc::Receiver<Command>) {
        let (delivery, rx) = mpsc::channel(QUEUE_CAPACITY);
        let ingest = Arc::from([IngestLane {
            sender: delivery.clone(),
            waiting: AtomicUsize::new(0),
        }]);
        (Self { ingest, delivery }, rx)
    }

    /// Answers once every command sent on any lane before it is committed (or has failed).
    pub(crate) async fn flush(&self) -> StoreResult<()> {
        let lanes = (0..self.ingest.len())
            .map(Lane::Ingest)
            .chain([Lane::Delivery]);
        let barriers = futures_util::future::join_all(lanes.map(|lane| self.barrier(lane))).await;
        barriers.into_iter().collect()
    }

    /// An empty command on `lane`, answered when the commands before it are.
    async fn barrier(&self, lane: Lane) -> StoreResult<()> {
        let (reply, answer) = oneshot::channel();
        let batches = Vec::new();
        self.send(lane, Command::Ingest { batches, reply }).await?;
        answer.await.map_err(|_| closed())?.map(drop)
    }

    /// Stores an ingest request's batches atomically; answers after the commit.
    pub(crate) async fn ingest(&self, batches: Vec<NewBatch>) -> StoreResult<Vec<IngestOutcome>> {
        let index = self.lane_for(&batches);
        let lane = self.ingest.get(index).ok_or_else(closed)?;
        let _waiting = Waiting::on(lane);
        let (reply, answer) = oneshot::channel();
        self.send(Lane::Ingest(index), Command::Ingest { batches, reply })
            .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Records the outcome of work on a job; answers once it is committed. Delivery waits for
    /// this before it sends another request in the job's place, so a node that dies or stalls
    /// leaves at most its in-flight limit of requests sent but not recorded.
    pub(crate) async fn update(&self, update: JobUpdate) -> StoreResult<()> {
        let (reply, answer) = oneshot::channel();
        self.send(
            Lane::Delivery,
            Command::Update {
                update,
                committed: Some(reply),
            },
        )
        .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Queues a job update without waiting for its commit (giving a job back unworked: if it is
    /// lost, the job is only taken up again after its lease).
    pub(crate) async fn update_later(&self, update: JobUpdate) -> StoreResult<()> {
        self.send(
            Lane::Delivery,
            Command::Update {
                update,
                committed: None,
            },
        )
        .await
    }

    /// Extends the leases of `job_ids` by the lease time from now, where this node still holds
    /// them; answers those ids. The others are no longer this node's to deliver.
    pub(crate) async fn renew(&self, job_ids: Vec<i64>) -> StoreResult<Renewed> {
        let (reply, answer) = oneshot::channel();
        self.send(Lane::Delivery, Command::Renew { job_ids, reply })
            .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Leases up to `limit` due, unleased jobs to this node, except jobs of the `skip` connections.
    pub(crate) async fn claim(
        &self,
        limit: i64,
        skip: Vec<ConnectionId>,
    ) -> StoreResult<Vec<ClaimedJob>> {
        let (reply, answer) = oneshot::channel();
        let skip = serde_json::to_string(&skip).unwrap_or_else(|_| "[]".to_owned());
        self.send(
            Lane::Delivery,
            Command::Claim {
                limit,
                of: ClaimOf::Due { skip },
                reply,
            },
        )
        .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Leases the oldest job of `connection_id` nobody holds to this node, due or not: the
    /// request that probes whether a failing endpoint is back. A job of a user in `avoid`
    /// (failed recently) goes only if no other user's job is there.
    pub(crate) async fn claim_probe(
        &self,
        connection_id: ConnectionId,
        avoid: &[Mpid],
    ) -> StoreResult<Vec<ClaimedJob>> {
        let (reply, answer) = oneshot::channel();
        let avoid: Vec<i64> = avoid.iter().map(|mpid| mpid.get()).collect();
        self.send(
            Lane::Delivery,
            Command::Claim {
                limit: 1,
                of: ClaimOf::Probe {
                    connection_id,
                    avoid: serde_json::to_string(&avoid).unwrap_or_else(|_| "[]".to_owned()),
                },
                reply,
            },
        )
        .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Leases up to `limit` of `connection_id`'s due jobs nobody holds to this node, in the
    /// order they were accepted: a recovering connection's backlog, then what queued behind it.
    pub(crate) async fn claim_drain(
        &self,
        connection_id: ConnectionId,
        limit: i64,
    ) -> StoreResult<Vec<ClaimedJob>> {
        let (reply, answer) = oneshot::channel();
        self.send(
            Lane::Delivery,
            Command::Claim {
                limit,
                of: ClaimOf::Drain(connection_id),
                reply,
            },
        )
        .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Deletes a retention chunk inside a group commit, sharing its commit; answers the rows
    /// deleted once committed. A chunk that fails fails alone: the group is retried command by
    /// command, as for any other failing command.
    pub(crate) async fn prune_chunk(&self, chunk: PruneChunk) -> StoreResult<u64> {
        let (reply, answer) = oneshot::channel();
        // Maintenance, not ingest: on PostgreSQL it keeps off the ingest lane (the server sends
        // chunks to the writer on SQLite only, where there is one lane).
        self.send(Lane::Delivery, Command::Prune { chunk, reply })
            .await?;
        answer.await.map_err(|_| closed())?
    }

    /// Whether the writer task is still running (ingest cannot succeed without it).
    pub(crate) fn is_running(&self) -> bool {
        self.ingest.iter().all(|lane| !lane.sender.is_closed()) && !self.delivery.is_closed()
    }

    async fn send(&self, lane: Lane, command: Command) -> StoreResult<()> {
        let lane = match lane {
            Lane::Ingest(index) => &self.ingest.get(index).ok_or_else(closed)?.sender,
            Lane::Delivery => &self.delivery,
        };
        lane.send(command).await.map_err(|_| closed())
    }
}

fn closed() -> StoreError {
    StoreError::WriterStopped
}

/// One lane's task: commits what is queued on it, group by group, until every handle is dropped
/// or `stop` is cancelled, then closes its connection. `node` is this process's name on the
/// leases it takes (each run is a node of its own).
async fn run(
    store: Store,
    lease: Duration,
    node: String,
    mut rx: mpsc::Receiver<Command>,
    committed: mpsc::UnboundedSender<Vec<Job>>,
    stop: CancellationToken,
    gather: Duration,
) {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let mut connection = store.writer_connection();
    let mut group = Vec::with_capacity(MAX_GROUP);
    let mut gather = Gather::new(gather, std::time::Instant::now());
    loop {
        let idle = std::time::Instant::now();
        // Only here, between groups: a group once taken is committed and answered.
        let received = tokio::select! {
            biased;
            () = stop.cancelled() => {
                tracing::debug!("Writer stopped: shutdown.");
                break;
            }
            received = rx.recv_many(&mut group, MAX_GROUP) => received,
        };
        if received == 0 {
            tracing::debug!("Writer stopped: every handle was dropped.");
            break;
        }
        let waited = idle.elapsed();
        let taken = ingests(&group);
        let now = std::time::Instant::now();
        gather.taken(taken, now);
        let held = if let Some(window) = gather.hold(group.len(), taken, now) {
            let held = std::time::Instant::now();
            let added = hold_open(&mut rx, &mut group, window, &stop).await;
            let arrived = ingests(&group[group.len() - added..]);
            gather.held(arrived, std::time::Instant::now());
            held.elapsed()
        } else {
            Duration::ZERO
        };
        // How long the lane waited for this group (none: it was queued while the last one
        // committed) and held it open, beside the group's own times ("Group committed.").
        tracing::debug!(
            commands = group.len(),
            waited_us = waited.as_micros(),
            held_us = held.as_micros(),
            "Group taken."
        );
        #[cfg(test)]
        take_the_group_a_test_asked_for(&mut rx, &mut group).await;
        let queued = || !rx.is_empty();
        let result = commit(
            &store,
            &mut connection,
            &mut group,
            lease_ms,
            &node,
            &queued,
        )
        .await;
        if result.is_err() {
            // Whatever failed may have been the kept connection itself: the next transaction
            // starts on a fresh one.
            connection.reset();
        }
        match result {
            Ok(done) => answer(std::mem::take(&mut group), done, &committed),
            Err(Failure::RolledBack(error)) if group.len() > 1 => {
                tracing::warn!(%error, commands = group.len(), "Group commit failed; retrying its commands one by one.");
                for mut command in std::mem::take(&mut group) {
                    let one = std::slice::from_mut(&mut command);
                    let result =
                        commit(&store, &mut connection, one, lease_ms, &node, &|| false).await;
                    if result.is_err() {
                        connection.reset();
                    }
                    settle(command, result.map_err(Failure::into_error), &committed);
                }
            }
            Err(failure) => {
                // A group of one gets the error itself. So does a group whose COMMIT may or may
                // not have taken effect: running it again could store its batches twice, so its
                // requests are refused (a client retrying with its `source_request_id` is
                // de-duplicated) and its job updates are redone after their leases.
                let error = failure.into_error();
                tracing::warn!(%error, commands = group.len(), "Group commit failed.");
                for command in std::mem::take(&mut group) {
                    settle(command, Err(clone_error(&error)), &committed);
                }
            }
        }
    }
    // Closed, not dropped: a dropped connection is closed later on its database thread, which
    // a process exiting meanwhile cuts short, leaving the WAL behind.
    connection.close().await;
}

/// The ingest requests among `commands`.
fn ingests(commands: &[Command]) -> usize {
    commands
        .iter()
        .filter(|command| matches!(command, Command::Ingest { .. }))
        .count()
}

/// Holds a small group open for `window`, then adds what was queued meanwhile
/// ([`super::gather`]); answers how many commands it added. One sleep rather than a wake-up per
/// arrival: the lane's thread wakes once. A shutdown ends the wait and adds nothing (commands
/// still queued at a stop are not committed, [`WriterTask::stop`]); the group in hand is still
/// committed.
async fn hold_open(
    rx: &mut mpsc::Receiver<Command>,
    group: &mut Vec<Command>,
    window: Duration,
    stop: &CancellationToken,
) -> usize {
    tokio::select! {
        biased;
        () = stop.cancelled() => return 0,
        () = tokio::time::sleep(window) => {}
    }
    let before = group.len();
    while group.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(command) => group.push(command),
            Err(_) => break,
        }
    }
    group.len() - before
}

/// Test-only: waits until `group` holds as many commands as a test asked for
/// ([`super::faults::group_next`]), so commands sent together commit together.
#[cfg(test)]
async fn take_the_group_a_test_asked_for(
    rx: &mut mpsc::Receiver<Command>,
    group: &mut Vec<Command>,
) {
    let want = super::faults::take_group_size().min(MAX_GROUP);
    while group.len() < want {
        if rx.recv_many(group, want - group.len()).await == 0 {
            break;
        }
    }
}

/// Runs the SQLite lane on a thread of its own, with a current-thread runtime of its own, which
/// runs the group's statements itself ([`super::direct`]), as the bare group-commit program's
/// writer does. On a shared Tokio worker a group's SQLite work (and its waits for the write
/// lock and the WAL's fsync) would hold a worker the server's requests need; when the lane
/// still waited on sqlx's thread for each statement, each of those wake-ups waited for a worker
/// busy parsing requests, and a blocked worker stalled every commit.
/// Returns a task that ends when the thread has, its connection closed (the lane stops as
/// [`run`] does: every handle dropped, or `stop`).
fn on_own_thread(
    store: Store,
    lease: Duration,
    node: String,
    rx: mpsc::Receiver<Command>,
    committed: mpsc::UnboundedSender<Vec<Job>>,
    stop: CancellationToken,
    gather: Duration,
) -> tokio::task::JoinHandle<()> {
    let (ended, end) = oneshot::channel::<()>();
    #[cfg(test)]
    let faults = super::faults::slot();
    let lane = move || {
        #[cfg(test)]
        super::faults::adopt(faults);
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => {
                runtime.block_on(run(store, lease, node, rx, committed, stop, gather));
                drop(runtime);
            }
            // Every ingest then fails with `WriterStopped` (the receiver is gone), which the
            // readiness check reports.
            Err(error) => tracing::error!(%error, "The writer's runtime could not start."),
        }
        // Also sent (as a dropped sender) if the thread never started or panicked.
        let _ = ended.send(());
    };
    let thread = std::thread::Builder::new()
        .name("boson-writer".to_owned())
        .spawn(lane)
        .inspect_err(|error| tracing::error!(%error, "The writer's thread could not start."))
        .ok();
    tokio::spawn(async move {
        let _ = end.await;
        // The thread has nothing left to do but return; joined off the runtime's workers all
        // the same, so that the lane is known to be gone when this task ends.
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    })
}

impl Failure {
    fn into_error(self) -> StoreError {
        match self {
            Failure::RolledBack(error) | Failure::Unknown(error) => error,
        }
    }
}

/// A group's error, for each of its commands (sqlx errors cannot be cloned).
fn clone_error(error: &StoreError) -> StoreError {
    let detail = match error {
        StoreError::Database(error) => error.to_string(),
        other => other.to_string(),
    };
    StoreError::Database(sqlx::Error::Protocol(detail))
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
        (Command::Renew { reply, .. }, Ok(Some(Done::Renew(renewed)))) => {
            let _ = reply.send(Ok(renewed));
        }
        (Command::Ingest { reply, .. }, Err(e)) => {
            let _ = reply.send(Err(e));
        }
        (Command::Claim { reply, .. }, Err(e)) => {
            let _ = reply.send(Err(e));
        }
        (Command::Renew { reply, .. }, Err(error)) => {
            let _ = reply.send(Err(error));
        }
        (Command::Prune { reply, .. }, Ok(Some(Done::Prune(deleted)))) => {
            let _ = reply.send(Ok(deleted));
        }
        (Command::Prune { reply, .. }, Err(error)) => {
            let _ = reply.send(Err(error));
        }
        (
            Command::Update {
                committed: Some(reply),
                ..
            },
            Ok(_),
        ) => {
            let _ = reply.send(Ok(()));
        }
        (Command::Update { update, committed }, Err(error)) => {
            tracing::warn!(%error, ?update, "Job update failed; the job will be retried after its lease.");
            if let Some(reply) = committed {
                let _ = reply.send(Err(error));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty ingest command (a barrier), as `Writer::flush` sends.
    fn command() -> Command {
        let (reply, _answer) = oneshot::channel();
        Command::Ingest {
            batches: Vec::new(),
            reply,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_held_open_takes_what_arrives_within_the_window() {
        let (sender, mut rx) = mpsc::channel(8);
        let mut group = vec![command()];
        tokio::spawn(async move {
            // Tokio's timer counts whole milliseconds.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = sender.send(command()).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
            // After the window: left for the next group.
            let _ = sender.send(command()).await;
        });
        let window = Duration::from_millis(5);
        let added = hold_open(&mut rx, &mut group, window, &CancellationToken::new()).await;
        assert_eq!((added, group.len()), (1, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_ends_the_hold_and_keeps_the_group() {
        let (sender, mut rx) = mpsc::channel(8);
        // Queued, but a stop commits only the group in hand.
        sender.send(command()).await.expect("queued");
        let mut group = vec![command()];
        let stop = CancellationToken::new();
        stop.cancel();
        let start = tokio::time::Instant::now();
        hold_open(&mut rx, &mut group, Duration::from_secs(10), &stop).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "no wait once stopped");
        assert_eq!(group.len(), 1, "the group in hand is still committed");
    }
}
