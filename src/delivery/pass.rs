//! One pass over a job a lane took: its delivery, then, in order, what follows from how it
//! ended: the breaker and the connection's health learn the outcome, the outcome is recorded
//! (committed), the lane's place is freed, and on a connection ordered per user the user's next
//! job gets its turn.
//!
//! A panic anywhere in a pass is a bug, but it must not cost the job or the lane: it is caught
//! around the whole pass, and what the pass had not done yet is done then. The job is released,
//! to be sent again under the same delivery id, the place is freed, and the user's waiting jobs
//! go back to the table. Caught only around the delivery, a panic after it left the job held
//! (its lease renewed until the node stopped) and the lane a place short for good.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures_util::FutureExt as _;

use super::lane::{LaneControl, endpoint_answered};
use super::{HeldJob, Lanes, coalesce, worker};
use crate::model::ids::{ConnectionId, Mpid};
use crate::store::queue::{Job, JobUpdate};

#[cfg(test)]
use super::faults::{Point, reached};

/// The steps of a pass done so far, for what a panic leaves undone.
#[derive(Debug, Default)]
struct Done {
    recorded: AtomicBool,
    freed: AtomicBool,
    turn_passed: AtomicBool,
}

impl Done {
    fn mark(flag: &AtomicBool) {
        flag.store(true, Ordering::Release);
    }

    fn is(flag: &AtomicBool) -> bool {
        flag.load(Ordering::Acquire)
    }
}

impl Lanes {
    /// Works `job`, which holds one of `control`'s places, and settles how it ended (see the
    /// module docs). At the shutdown deadline the pass stops without an outcome: the job is
    /// released by `shutdown::finish_passes`, to be sent again under the same delivery id.
    pub(super) async fn pass(self: Arc<Self>, job: Job, control: Arc<LaneControl>) {
        let (job_id, connection_id, mpid) = (job.id, job.connection_id.clone(), job.mpid);
        let done = Done::default();
        let pass = AssertUnwindSafe(self.work_and_settle(job, &control, &done));
        if pass.catch_unwind().await.is_err() {
            tracing::error!(
                job_id,
                "A delivery pass panicked; its job is released to be tried again."
            );
            self.finish_panicked(&control, &connection_id, mpid, job_id, &done)
                .await;
        }
    }

    async fn work_and_settle(self: &Arc<Self>, job: Job, control: &LaneControl, done: &Done) {
        let (job_id, connection_id, mpid) = (job.id, job.connection_id.clone(), job.mpid);
        let update = tokio::select! {
            // A pass that has just ended keeps its outcome, deadline or not.
            biased;
            update = self.work(job, control) => update,
            // Dropping `work` counts the requests it delivered.
            () = self.overdue.cancelled() => return,
        };
        #[cfg(test)]
        reached(Point::Settling);
        let transition = control.ended(&update, mpid, Instant::now());
        let finished = matches!(update, JobUpdate::Finished { .. });
        let answered = endpoint_answered(&update);
        let health = &self.ctx.health;
        health.observe(
            &connection_id,
            &update,
            answered,
            transition,
            &control.spell,
        );
        // The place is free only once the outcome is committed (see `Writer::update`). A user's
        // next job goes only once this one has left the table for sure.
        let finished = self.record(job_id, update).await && finished;
        Done::mark(&done.recorded);
        #[cfg(test)]
        reached(Point::Recorded);
        control.free_slot();
        Done::mark(&done.freed);
        #[cfg(test)]
        reached(Point::Freed);
        self.breaker_moved(&connection_id, transition);
        if let Some(mpid) = mpid {
            self.next_turn(control, &connection_id, mpid, job_id, finished)
                .await;
        }
        Done::mark(&done.turn_passed);
    }

    /// Delivers one job and answers the outcome to record.
    async fn work(&self, job: Job, control: &LaneControl) -> JobUpdate {
        #[cfg(test)]
        reached(Point::Working);
        let lease = HeldJob {
            lanes: self,
            job_id: job.id,
        };
        let ctx = &self.ctx;
        if ctx.catalog.is_paused(&job.connection_id) {
            // Set to inactive after the job was queued: it waits in the table, unworked (a job
            // already past this point finishes its pass, like a request in flight).
            JobUpdate::Release { job_id: job.id }
        } else if job.is_coalesced() {
            coalesce::work(ctx, &job, &lease, control).await
        } else {
            worker::work(ctx, job, &lease, control).await
        }
    }

    /// What a pass that panicked left undone. Each step is safe whatever the pass had done of
    /// it: a release finds a recorded job gone or already released, and a user's turn that has
    /// passed does not pass twice. Its waiting jobs go back to the table even if the job was
    /// finished: the claims bring them back in order.
    async fn finish_panicked(
        &self,
        control: &LaneControl,
        connection_id: &ConnectionId,
        mpid: Option<Mpid>,
        job_id: i64,
        done: &Done,
    ) {
        if !Done::is(&done.recorded) {
            self.release(job_id).await;
        }
        if !Done::is(&done.freed) {
            control.free_slot();
        }
        if let Some(mpid) = mpid
            && !Done::is(&done.turn_passed)
        {
            self.next_turn(control, connection_id, mpid, job_id, false)
                .await;
        }
    }
}

#[cfg(test)]
#[path = "pass_tests.rs"]
mod tests;
