//! A connection's recovery on this node: when its endpoint is back, its waiting jobs are
//! brought forward and claimed at the pace [`super::drain`] sets, oldest first, while its new
//! jobs wait in the table behind them (the connection is *draining*, see [`super::Crowded`]).
//! The drain ends when a claim found fewer due jobs than it asked for and the store then has
//! none left of the backlog (the jobs up to the newest one when the recovery began) that the
//! drain could claim later: on a connection ordered per user a claim takes
//! only each user's head, so a short claim alone does not mean the backlog is claimed. From
//! then on new jobs are handed over at once again. A job accepted just before that moment but
//! committed just after it waits for the poller, so it can arrive after a later one: the
//! backlog always goes before the new jobs, the new ones among themselves only almost always in
//! order.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use super::Lanes;
use super::drain::{COUNTED_BACKLOG, Drain, TICK};
use crate::model::ids::ConnectionId;
use crate::model::now_ms;
use crate::store::queue::Backlog;

impl Lanes {
    /// The endpoint of `connection_id` is back: starts its drain. It is marked draining before
    /// it stops being failing, so no new job is handed over in between, ahead of the backlog.
    pub(super) fn recovered(self: &Arc<Self>, connection_id: &ConnectionId) {
        let generation = self.next_drain(connection_id);
        self.crowded.set_draining(connection_id, true);
        self.crowded.set_failing(connection_id, false);
        let (lanes, id) = (Arc::clone(self), connection_id.clone());
        self.tracker.spawn(async move {
            if let Err(error) = lanes.ctx.store.bring_forward(&id, now_ms()).await {
                tracing::warn!(connection = %id, %error, "Could not bring waiting deliveries forward; they keep their backoff.");
            }
            // Jobs accepted from now on wait behind the backlog but are not part of it.
            let backlog = match lanes.ctx.store.backlog_of(&id, COUNTED_BACKLOG).await {
                Ok(backlog) => backlog,
                Err(error) => {
                    tracing::warn!(connection = %id, %error, "Could not tell the backlog; the drain starts at its least rate and ends at its first short claim.");
                    Backlog { jobs: 0, end: 0 }
                }
            };
            lanes.drain(&id, backlog, generation).await;
            if lanes.current_drain(&id) == Some(generation) {
                lanes.crowded.set_draining(&id, false);
            }
        });
    }

    /// Claims a connection's due jobs tick by tick, as many as the pace and the lane's room
    /// allow, until none is left to claim. Stops early if the endpoint fails
    /// again (the breaker holds the jobs back then), the connection is paused, a newer recovery
    /// took over, or delivery stops.
    async fn drain(
        self: &Arc<Self>,
        connection_id: &ConnectionId,
        backlog: Backlog,
        generation: u64,
    ) {
        let mut drain = Drain::new(backlog.jobs, Instant::now());
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => return,
                () = tokio::time::sleep(TICK) => {}
                () = self.drains.wake.notified() => {}
            }
            if self.current_drain(connection_id) != Some(generation)
                || self.crowded.is_failing(connection_id)
                || self.ctx.catalog.is_paused(connection_id)
            {
                return;
            }
            let free = self.lane(connection_id).jobs.capacity();
            let room = free
                .saturating_sub(self.capacity / 4)
                .min(self.claim_limit());
            let asked = drain.allowance(Instant::now(), room);
            if asked == 0 {
                continue;
            }
            let claimed = self
                .ctx
                .writer
                .claim_drain(
                    connection_id.clone(),
                    i64::try_from(asked).unwrap_or(i64::MAX),
                )
                .await;
            let mut jobs = match super::poller::with_bodies(self, claimed).await {
                Ok(jobs) => jobs,
                Err(error) => {
                    tracing::warn!(connection = %connection_id, %error, "Claiming a recovering connection's jobs failed.");
                    continue;
                }
            };
            // Into the lane in the order of acceptance (`RETURNING` keeps no order).
            jobs.sort_unstable_by_key(|job| job.id);
            let got = jobs.len();
            for job in jobs {
                self.offer(job).await;
            }
            if drain.claimed(asked, got) && !self.drain_left(connection_id, backlog.end).await {
                tracing::info!(connection = %connection_id, "Recovered connection's backlog claimed; new deliveries go at once again.");
                return;
            }
        }
    }

    /// Whether the store still has due jobs of the connection for the drain to claim. If it
    /// cannot tell, the drain ends: the poller then claims what is left.
    async fn drain_left(&self, connection_id: &ConnectionId, backlog_end: i64) -> bool {
        match self
            .ctx
            .store
            .drain_left(connection_id, now_ms(), backlog_end)
            .await
        {
            Ok(left) => left,
            Err(error) => {
                tracing::warn!(connection = %connection_id, %error, "Could not tell whether a recovering connection's backlog is claimed; the poller takes what is left.");
                false
            }
        }
    }

    /// Wakes the draining connections' drains before their tick: a user's job finished, so on a
    /// connection ordered per user that user's next job may be claimed now.
    pub(super) fn wake_drains(&self) {
        self.drains.wake.notify_waiters();
    }

    /// Starts a new drain generation for a connection (a later recovery supersedes an earlier
    /// drain still running).
    fn next_drain(&self, connection_id: &ConnectionId) -> u64 {
        let mut drains = self.drains();
        let generation = drains.get(connection_id).map_or(1, |g| g + 1);
        drains.insert(connection_id.clone(), generation);
        generation
    }

    fn current_drain(&self, connection_id: &ConnectionId) -> Option<u64> {
        self.drains().get(connection_id).copied()
    }

    fn drains(&self) -> MutexGuard<'_, HashMap<ConnectionId, u64>> {
        self.drains
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The drains running on this node.
#[derive(Debug, Default)]
pub(super) struct Drains {
    /// Each connection's latest drain generation (a later recovery supersedes an earlier one).
    generations: Mutex<HashMap<ConnectionId, u64>>,
    /// Wakes every waiting drain at once (see [`Lanes::wake_drains`]).
    wake: Notify,
}
