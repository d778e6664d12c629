//! Delivery: jobs in, webhook requests out.
//!
//! Jobs reach a connection's *lane* two ways: straight from the writer when their batch commits
//! (already leased to this node, so real-time delivery costs no queue round trip), and from the
//! poller, which claims due retries and jobs nobody holds (after a restart, or while a lane was
//! crowded: then the pipeline's fan-out, asking [`Crowded`] through its hand-off, has the
//! connection's new jobs left in the table). Each lane has its own
//! bounded queue and in-flight budget, so a slow or failing endpoint only ever delays its own
//! connection. The leases of every job this node holds are renewed while it holds them.
//!
//! A failing endpoint costs almost nothing: after a few consecutive failures its connection's
//! circuit breaker opens ([`breaker`], kept per lane in [`lane`]), its jobs wait in the table and
//! only a probe request goes out now and then; when one succeeds, the waiting jobs are brought
//! forward and claimed at a pace ([`drain`], [`recovery`]), oldest first with the new jobs
//! behind them, and sent with a concurrency that ramps up. A connection set to inactive is paused the
//! same way: its jobs wait in the table, unworked, until it is active again.
//!
//! On shutdown, lanes stop taking work, queued jobs are released back to the table, and requests
//! in flight are allowed to finish until the shutdown deadline (then their jobs are released too).

pub(crate) mod alerts;
mod breaker;
mod claimed_consent;
pub(crate) mod coalesce;
mod crowded;
mod drain;
mod driver;
#[cfg(test)]
mod faults;
pub(crate) mod health;
mod lane;
pub(crate) mod merge;
mod order;
mod pass;
mod poller;
mod recovery;
#[cfg(test)]
mod restart_tests;
pub(crate) mod retry;
mod shutdown;
#[cfg(test)]
mod test_node;
pub(crate) mod webhook;
mod worker;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::DeliveryConfig;
use crate::live::LiveStream;
use crate::model::ids::{ConnectionId, Mpid};
use crate::model::now_ms;
use crate::pipeline::catalog::Catalog;
use crate::store::Store;
use crate::store::queue::{Job, JobUpdate, Renewed};
use crate::store::writer::Writer;
use crate::supervise::restarting;
use crate::telemetry::Metrics;
use breaker::Transition;
pub(crate) use crowded::Crowded;
use health::Health;
use lane::{BreakerConfig, LaneControl};
use order::Next;
use retry::Backoff;
use webhook::WebhookClient;

/// Most jobs claimed by one poll (and at most a quarter of a lane, which a lane that is not
/// crowded always has free).
const CLAIM_LIMIT: usize = 512;

/// What workers need, shared by all lanes.
#[derive(Debug)]
pub(crate) struct DeliveryContext {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) client: WebhookClient,
    pub(crate) writer: Writer,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) live: Arc<LiveStream>,
    pub(crate) backoff: Backoff,
    pub(crate) retry_window_ms: i64,
    /// Failing spells, auto-pause and operator alerts.
    pub(crate) health: Arc<Health>,
}

impl DeliveryContext {
    #[expect(
        clippy::too_many_arguments,
        reason = "each is a distinct shared service, built once at start-up"
    )]
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        store: Store,
        client: WebhookClient,
        writer: Writer,
        metrics: Arc<Metrics>,
        live: Arc<LiveStream>,
        config: &DeliveryConfig,
        health: Arc<Health>,
    ) -> Self {
        Self {
            health,
            catalog,
            client,
            writer,
            store,
            metrics,
            live,
            backoff: Backoff {
                initial: Duration::from_millis(config.initial_backoff_ms),
                max: Duration::from_secs(config.max_backoff_secs),
            },
            retry_window_ms: i64::try_from(config.retry_window_secs.saturating_mul(1000))
                .unwrap_or(i64::MAX),
        }
    }
}

/// A connection's lane: its queue, and what decides how fast it is emptied.
#[derive(Debug, Clone)]
struct Lane {
    jobs: mpsc::Sender<Job>,
    control: Arc<LaneControl>,
}

/// The running delivery service.
#[derive(Debug)]
struct Lanes {
    ctx: Arc<DeliveryContext>,
    lanes: Mutex<HashMap<ConnectionId, Lane>>,
    max_in_flight: usize,
    breaker: BreakerConfig,
    /// Jobs a lane holds beyond those in flight; a job offered to a full lane is released.
    capacity: usize,
    /// Connections whose lanes have fewer than a quarter of their places free: the writer
    /// leaves their new jobs in the table and the poller skips them, until half the places are
    /// free again (the gap keeps a lane at the boundary from flapping). Shared with the writer.
    crowded: Arc<Crowded>,
    /// Jobs this node holds, queued or in flight, with the end of each one's lease (Unix ms).
    held: Mutex<HashMap<i64, i64>>,
    /// The drains after a recovery (see `recovery`).
    drains: recovery::Drains,
    /// A request may take this long: a job whose lease ends sooner is renewed before its next
    /// request (see [`HeldJob::confirm`]).
    request_timeout_ms: i64,
    tracker: TaskTracker,
    cancel: CancellationToken,
    /// The shutdown deadline: passes still running then are cut off (see [`run`]).
    overdue: CancellationToken,
    /// Wakes the poller before its interval is up: a user's job finished, so the user's next
    /// job (left in the table, not leased, when it was accepted behind it) may go now.
    poll_now: Notify,
}

/// Runs delivery until `cancel` fires, then drains as described in the module docs, but only
/// until `overdue` (the shutdown deadline): the jobs still held then, whose requests have not
/// ended, are released to the table through the writer (which still runs), so a restart or
/// another node sends them again, under the same delivery id. If such a request was in fact
/// answered just then, its events arrive twice; receivers de-duplicate by delivery id. A
/// release the writer cannot commit before the process ends leaves the job leased: a restart on
/// SQLite frees it, and on PostgreSQL its lease runs out.
pub(crate) async fn run(
    ctx: Arc<DeliveryContext>,
    config: DeliveryConfig,
    mut committed: mpsc::UnboundedReceiver<Vec<Job>>,
    crowded: Arc<Crowded>,
    cancel: CancellationToken,
    overdue: CancellationToken,
) {
    let lanes = Arc::new(Lanes {
        ctx,
        lanes: Mutex::new(HashMap::new()),
        max_in_flight: config.max_in_flight_per_connection,
        breaker: BreakerConfig {
            failures: config.circuit_breaker_failures,
            first_open: Duration::from_millis(config.initial_backoff_ms),
            max_open: Duration::from_secs(config.circuit_breaker_max_open_secs),
        },
        capacity: config.lane_capacity,
        crowded,
        held: Mutex::new(HashMap::new()),
        drains: recovery::Drains::default(),
        request_timeout_ms: i64::try_from(config.request_timeout_secs.saturating_mul(1000))
            .unwrap_or(i64::MAX),
        tracker: TaskTracker::new(),
        cancel: cancel.clone(),
        overdue: overdue.clone(),
        poll_now: Notify::new(),
    });
    // Each restarted after a panic (see `supervise`).
    let poll_every = Duration::from_millis(config.poll_interval_ms);
    let poller = tokio::spawn(restarting("delivery poller", cancel.clone(), {
        let lanes = Arc::clone(&lanes);
        move || poller::poll(Arc::clone(&lanes), poll_every)
    }));
    let health = tokio::spawn(restarting("connection health", cancel.clone(), {
        let (health, cancel) = (Arc::clone(&lanes.ctx.health), cancel.clone());
        move || Arc::clone(&health).run(cancel.clone())
    }));
    // Three renewals per lease: one lost or late renewal does not let a lease run out. It runs
    // until the last request in flight has ended, also during shutdown.
    let renewing = CancellationToken::new();
    let renew_every = Duration::from_secs(config.lease_secs) / 3;
    let renewer = tokio::spawn(restarting("lease renewer", renewing.clone(), {
        let (lanes, renewing) = (Arc::clone(&lanes), renewing.clone());
        move || poller::renew_leases(Arc::clone(&lanes), renew_every, renewing.clone())
    }));
    let mut handoffs = 0..;
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            jobs = committed.recv() => match jobs {
                Some(jobs) => {
                    let handoff = handoffs.next();
                    for mut job in jobs {
                        job.handoff = handoff;
                        lanes.offer(job).await;
                    }
                }
                None => break,
            },
        }
    }
    // Jobs committed but not yet handed over stay leased; give them back.
    committed.close();
    while let Ok(jobs) = committed.try_recv() {
        for job in jobs {
            lanes.release(job.id).await;
        }
    }
    let _ = poller.await;
    let _ = health.await;
    lanes.tracker.close();
    shutdown::finish_passes(&lanes, &overdue).await;
    // Dead letters of the requests that were still in flight when the health task said its last.
    lanes.ctx.health.announce_remaining().await;
    renewing.cancel();
    let _ = renewer.await;
    tracing::info!("Delivery stopped.");
}

impl Lanes {
    /// Hands a leased job to its connection's lane, or releases it if the lane is full.
    ///
    /// A job this node already holds (queued or in flight) is not queued twice: the poller can
    /// claim it again when its lease runs out while it waits, and that claim only renews the lease.
    async fn offer(self: &Arc<Self>, job: Job) {
        if !self.hold(job.id, job.lease_until) {
            return;
        }
        let connection_id = job.connection_id.clone();
        let lane = self.lane(&connection_id).jobs;
        let sent = lane.try_send(job);
        if self.is_crowded(lane.capacity()) {
            self.crowded.set(&connection_id, true);
        }
        if let Err(error) = sent {
            let (mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job)) =
                error;
            self.release(job.id).await;
        }
    }

    /// Records that this node holds a job until `lease_until`; false if it already did (a claim
    /// of a job it holds only extended the lease).
    fn hold(&self, job_id: i64, lease_until: i64) -> bool {
        let mut held = self.held();
        match held.entry(job_id) {
            Entry::Occupied(mut entry) => {
                let until = entry.get_mut();
                *until = (*until).max(lease_until);
                false
            }
            Entry::Vacant(entry) => {
                entry.insert(lease_until);
                true
            }
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<i64, i64>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Applies a renewal of the leases on `asked`: the renewed ones get their new end, and the
    /// others are let go: another node claimed them after this one stalled past their lease, or
    /// they are gone. Nothing more is sent for those, and a queued one is skipped when its lane
    /// reaches it.
    fn renewed(&self, asked: &[i64], renewed: &Renewed) {
        let still: HashSet<i64> = renewed.job_ids.iter().copied().collect();
        let mut held = self.held();
        let mut lost = 0;
        for id in asked {
            if still.contains(id) {
                // Only jobs still held: one finished meanwhile is not taken up again.
                if let Some(until) = held.get_mut(id) {
                    *until = (*until).max(renewed.lease_until);
                }
            } else if held.remove(id).is_some() {
                lost += 1;
            }
        }
        if lost > 0 {
            tracing::warn!(
                jobs = lost,
                "Leases lost to another node; this node stops delivering those jobs."
            );
        }
    }

    /// Whether this node still holds a job (renewals drop the jobs it lost).
    fn holds(&self, job_id: i64) -> bool {
        self.held().contains_key(&job_id)
    }

    /// When this node's lease on a job ends, if it holds the job.
    fn lease_of(&self, job_id: i64) -> Option<i64> {
        self.held().get(&job_id).copied()
    }

    fn forget(&self, job_id: i64) {
        self.held().remove(&job_id);
    }

    /// Records a job's outcome (committed when this returns) and lets go of it; false if it
    /// could not be recorded.
    async fn record(&self, job_id: i64, update: JobUpdate) -> bool {
        let recorded = self.ctx.writer.update(update).await;
        if let Err(error) = &recorded {
            tracing::warn!(job_id, %error, "Could not record a job update; the job is retried after its lease.");
        }
        self.forget(job_id);
        recorded.is_ok()
    }

    /// Gives a job back unworked, without waiting for the commit.
    async fn release(&self, job_id: i64) {
        let update = JobUpdate::Release { job_id };
        if let Err(error) = self.ctx.writer.update_later(update).await {
            tracing::warn!(job_id, %error, "Could not release a job; it is taken up again after its lease.");
        }
        self.forget(job_id);
    }

    /// Unmarks crowded lanes that have room again. A lane normally does this itself as it takes
    /// jobs, but an offer can mark a lane crowded just after it took its last one (the offer
    /// read the lane's free places before the lane emptied); nothing would ever unmark it then,
    /// because its jobs would all wait in the table, so the poller checks before each claim.
    fn uncrowd_roomy_lanes(&self) {
        let crowded = self.crowded.snapshot();
        if crowded.is_empty() {
            return;
        }
        let roomy: Vec<ConnectionId> = {
            let lanes = self
                .lanes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            crowded
                .into_iter()
                .filter(|id| {
                    lanes
                        .get(id)
                        .is_none_or(|lane| self.is_roomy(lane.jobs.capacity()))
                })
                .collect()
        };
        for id in roomy {
            self.crowded.set(&id, false);
        }
    }

    /// Whether a lane with `free` places left is crowded (see `Lanes::crowded`)...
    fn is_crowded(&self, free: usize) -> bool {
        free < self.capacity / 4
    }

    /// ...and whether a crowded one has room again.
    fn is_roomy(&self, free: usize) -> bool {
        free >= self.capacity / 2
    }

    /// Connections whose jobs the poller leaves in the table: those crowded here, the failing
    /// and paused (inactive) ones, and those draining a backlog (their drain claims them).
    fn not_to_claim(&self) -> Vec<ConnectionId> {
        let mut skip: Vec<ConnectionId> = self.crowded.snapshot().into_iter().collect();
        skip.extend(self.crowded.failing());
        skip.extend(self.crowded.draining());
        skip.extend(self.ctx.catalog.paused_connections());
        skip
    }

    fn claim_limit(&self) -> usize {
        CLAIM_LIMIT.min(self.capacity / 4)
    }

    fn lane(self: &Arc<Self>, connection_id: &ConnectionId) -> Lane {
        let mut lanes = self
            .lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lane) = lanes.get(connection_id) {
            return lane.clone();
        }
        let (sender, receiver) = mpsc::channel(self.capacity);
        let lane = Lane {
            jobs: sender,
            control: Arc::new(LaneControl::new(self.breaker, self.max_in_flight)),
        };
        lanes.insert(connection_id.clone(), lane.clone());
        self.tracker.spawn(Arc::clone(self).drive_lane(
            connection_id.clone(),
            receiver,
            Arc::clone(&lane.control),
        ));
        lane
    }

    /// The connections whose breaker is open and whose probe may go out now, each with the
    /// users whose requests failed recently there (the probe avoids them).
    fn due_probes(&self) -> Vec<(ConnectionId, Vec<Mpid>)> {
        let now = Instant::now();
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, lane)| lane.control.probe_due(now))
            .map(|(id, lane)| (id.clone(), lane.control.failed_users()))
            .collect()
    }

    /// Acts on what a job's outcome did to its connection's breaker.
    fn breaker_moved(self: &Arc<Self>, connection_id: &ConnectionId, transition: Transition) {
        match transition {
            Transition::None => {}
            Transition::Opened => {
                tracing::warn!(connection = %connection_id, "Endpoint failing: its deliveries wait until a probe request succeeds.");
                self.crowded.set_failing(connection_id, true);
            }
            Transition::Recovered => {
                tracing::info!(connection = %connection_id, "Endpoint back: its waiting deliveries are resumed.");
                self.recovered(connection_id);
            }
        }
    }

    /// A job of a connection ordered per user ended without being worked (released, or lost
    /// to another node): the jobs of its user waiting behind it go back to the table.
    async fn turn_ended(&self, control: &LaneControl, job: &Job, finished: bool) {
        if let Some(mpid) = job.mpid {
            self.next_turn(control, &job.connection_id, mpid, job.id, finished)
                .await;
        }
    }

    /// After user `mpid`'s job `id` ended (`finished`: it left the queue): queues the user's
    /// next waiting job, or releases those that waited (the ended one is still pending). A
    /// next job the lane has no room for is released, and those behind it with it.
    async fn next_turn(
        &self,
        control: &LaneControl,
        connection_id: &ConnectionId,
        mpid: Mpid,
        id: i64,
        finished: bool,
    ) {
        let mut ended = (id, finished);
        loop {
            match control.turn_ended(mpid, ended.0, ended.1) {
                Next::Nothing => {
                    // Its next job, if any, is in the table: claim it now, not at the next
                    // poll. Wake-ups coalesce: at most one extra claim per poll round.
                    if ended.1 {
                        self.poll_now.notify_one();
                        self.wake_drains();
                    }
                    return;
                }
                Next::Release(waiting) => {
                    for job in waiting {
                        self.release(job.id).await;
                    }
                    return;
                }
                Next::Go(job) => {
                    let sender = self
                        .lane_map()
                        .get(connection_id)
                        .map(|lane| lane.jobs.clone());
                    let Some(sender) = sender else { return };
                    match sender.try_send(job) {
                        Ok(()) => return,
                        Err(
                            mpsc::error::TrySendError::Full(job)
                            | mpsc::error::TrySendError::Closed(job),
                        ) => {
                            ended = (job.id, false);
                            self.release(job.id).await;
                        }
                    }
                }
            }
        }
    }

    fn lane_map(&self) -> std::sync::MutexGuard<'_, HashMap<ConnectionId, Lane>> {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// This node's lease on one job, as a worker sees it.
pub(crate) struct HeldJob<'a> {
    lanes: &'a Lanes,
    job_id: i64,
}

impl HeldJob<'_> {
    /// Whether the job's next request may go out: this node still holds the job, and its lease
    /// outlasts the request. A lease ending sooner (the node stalled, or renewals were late) is
    /// renewed first, and a renewal that finds the job gone or taken by another node lets it go,
    /// so after a stall the only requests sent twice are those already on the wire.
    pub(crate) async fn confirm(&self) -> bool {
        let Some(until) = self.lanes.lease_of(self.job_id) else {
            return false;
        };
        if until.saturating_sub(now_ms()) > self.lanes.request_timeout_ms {
            return true;
        }
        let asked = [self.job_id];
        match self.lanes.ctx.writer.renew(asked.to_vec()).await {
            Ok(renewed) => {
                self.lanes.renewed(&asked, &renewed);
                self.lanes.holds(self.job_id)
            }
            Err(error) => {
                tracing::warn!(job_id = self.job_id, %error, "Could not renew a short lease; the job waits for its lease to end.");
                false
            }
        }
    }
}

/// Sends one stored request body again (a dead letter replayed from the admin API); the
/// receiver's status if it accepted it, else why not.
pub(crate) async fn replay(
    client: &WebhookClient,
    output: &crate::pipeline::output::Output,
    delivery_id: &str,
    body: Vec<u8>,
) -> Result<u16, String> {
    match client.post(output, delivery_id, body.into()).await {
        Ok(answer) if (200..300).contains(&answer.status) => Ok(answer.status),
        Ok(answer) => Err(format!("the receiver answered {}", answer.status)),
        Err(error) => Err(error.to_string()),
    }
}
