//! The group-commit writer: one task that owns hot-path writes. It takes whatever commands are
//! queued (accepted batches, job updates, claims), runs them in one transaction and answers each
//! only after the commit, so durability costs one sync per group instead of one per request.
//! Measurements on this machine showed that waiting to fill a group makes things worse, so the
//! writer never waits: it commits what is there.
//!
//! If a group's transaction fails, each command is retried in a transaction of its own, so one
//! bad command cannot fail the requests it happened to share a group with.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::group::commit;
use super::queue::{ClaimedJob, IngestOutcome, Job, JobUpdate, NewBatch};
use super::{Store, StoreError, StoreResult};

/// Most commands committed in one transaction; bounds the latency one group adds to the next.
const MAX_GROUP: usize = 256;
/// Commands waiting for the writer; beyond this, senders wait (back-pressure on ingest).
const QUEUE_CAPACITY: usize = 8192;

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
            Command::Renew(_) => "Renew",
            Command::Claim { .. } => "Claim",
        })
    }
}

/// Connections whose delivery queues on this node are crowded. Their new jobs are stored
/// unleased, for the poller to claim once there is room, instead of being handed over only to be
/// released again (a write per job, competing with ingest for the writer). Delivery keeps the
/// set current.
#[derive(Debug, Default)]
pub(crate) struct Crowded {
    connections: RwLock<HashSet<String>>,
    /// The set's size, so the common case (nothing crowded) takes no lock.
    len: AtomicUsize,
}

impl Crowded {
    pub(crate) fn contains(&self, connection_id: &str) -> bool {
        self.len.load(Ordering::Acquire) > 0 && self.read().contains(connection_id)
    }

    /// Marks or unmarks a connection as crowded.
    pub(crate) fn set(&self, connection_id: &str, crowded: bool) {
        let mut connections = self
            .connections
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if crowded {
            connections.insert(connection_id.to_owned());
        } else {
            connections.remove(connection_id);
        }
        self.len.store(connections.len(), Ordering::Release);
    }

    pub(crate) fn snapshot(&self) -> HashSet<String> {
        if self.len.load(Ordering::Acquire) == 0 {
            return HashSet::new();
        }
        self.read().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<String>> {
        self.connections
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Writer {
    /// Starts the writer. Jobs created by committed batches are sent on `committed`, already leased
    /// to this node for `lease`, so they can be delivered at once without a claim round trip;
    /// except jobs of `crowded` connections, which stay unleased in the table.
    pub(crate) fn spawn(
        store: Store,
        lease: Duration,
        committed: mpsc::UnboundedSender<Vec<Job>>,
        crowded: Arc<Crowded>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (commands, rx) = mpsc::channel(QUEUE_CAPACITY);
        let task = tokio::spawn(run(store, lease, rx, committed, crowded));
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

    /// Extends the leases of `job_ids` by the lease time from now, unless they were released.
    /// Not awaited to commit: a lost renewal only risks what renewing prevents.
    pub(crate) async fn renew(&self, job_ids: Vec<i64>) -> StoreResult<()> {
        self.send(Command::Renew(job_ids)).await
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
    StoreError::WriterStopped
}

async fn run(
    store: Store,
    lease: Duration,
    mut rx: mpsc::Receiver<Command>,
    committed: mpsc::UnboundedSender<Vec<Job>>,
    crowded: Arc<Crowded>,
) {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    // This process's name on the leases it takes (each run is a node of its own).
    let node = uuid::Uuid::now_v7().to_string();
    let mut group = Vec::with_capacity(MAX_GROUP);
    while rx.recv_many(&mut group, MAX_GROUP).await > 0 {
        let crowded = crowded.snapshot();
        match commit(&store, &group, lease_ms, &crowded, &node).await {
            Ok(done) => answer(std::mem::take(&mut group), done, &committed),
            Err(error) if group.len() > 1 => {
                tracing::warn!(%error, commands = group.len(), "Group commit failed; retrying its commands one by one.");
                for command in std::mem::take(&mut group) {
                    let one = std::slice::from_ref(&command);
                    let result = commit(&store, one, lease_ms, &crowded, &node).await;
                    settle(command, result, &committed);
                }
            }
            Err(error) => {
                // A group of one: its command gets the error itself.
                if let Some(command) = group.pop() {
                    settle(command, Err(error), &committed);
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
        (Command::Renew(ids), Err(error)) => {
            tracing::warn!(%error, jobs = ids.len(), "Renewing leases failed; they are renewed again soon.");
        }
        (Command::Update(update), Err(error)) => {
            tracing::warn!(%error, ?update, "Job update failed; the job will be retried after its lease.");
        }
        _ => {}
    }
}
