//! One pass over a job a lane took: its delivery, then, in order, what follows from how it
//! ended: the breaker and the connection's health learn the outcome, the outcome is recorded
//! (committed), the lane's place is freed, the lanes act on the breaker's move (a failing
//! endpoint's jobs wait in the table; a recovered one's are brought forward), and on a
//! connection ordered per user the user's next job gets its turn.
//!
//! A panic anywhere in a pass is a bug, but it must not cost the job, the lane or the
//! connection. One in the delivery is the outcome "released": the job is sent again under the
//! same delivery id, and the rest of the pass runs as for any release. One after it is caught
//! around the whole pass, and what the pass had not done yet is done then: its outcome is
//! recorded (so a job already delivered is not sent again, nor, if the same bug fires each time,
//! sent again at every poll), its place freed, the breaker's move acted on and the user's turn
//! passed on. A panic inside the user's turn itself is not undone: jobs of the user it had taken
//! up may wait on this node until it restarts.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures_util::FutureExt as _;

use super::breaker::Transition;
use super::lane::{LaneControl, endpoint_answered};
use super::{HeldJob, Lanes, coalesce, worker};
use crate::model::ids::{ConnectionId, Mpid};
use crate::store::queue::{Job, JobUpdate};
use crate::supervise::panic_message;

#[cfg(test)]
use super::faults::{Point, reached};

/// The job a pass is over.
struct Pass {
    job_id: i64,
    connection_id: ConnectionId,
    mpid: Option<Mpid>,
}

/// How far a pass got, for what a panic leaves undone. Shared with the pass's future, which
/// must be `Send`, hence atomics and mutexes for what is only ever touched by one task.
#[derive(Debug, Default)]
struct Done {
    /// The delivery's outcome, until it is sent to be recorded.
    update: Slot<JobUpdate>,
    /// The breaker's move, until the lanes acted on it.
    transition: Slot<Transition>,
    /// Whether the outcome was recorded...
    recorded: Flag,
    /// ...and took the job off the queue (delivered or dead-lettered).
    finished: Flag,
    freed: Flag,
    turn_passed: Flag,
}

/// A step done.
#[derive(Debug, Default)]
struct Flag(AtomicBool);

impl Flag {
    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What a step left for a later one.
#[derive(Debug)]
struct Slot<T>(Mutex<Option<T>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<T> Slot<T> {
    fn put(&self, value: T) {
        *self.lock() = Some(value);
    }

    fn take(&self) -> Option<T> {
        self.lock().take()
    }

    fn is_full(&self) -> bool {
        self.lock().is_some()
    }

    /// `f` of what the slot holds, left in it.
    fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.lock().as_ref().map(f)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Lanes {
    /// Works `job`, which holds one of `control`'s places, and settles how it ended (see the
    /// module docs). At the shutdown deadline the pass stops without an outcome: the job is
    /// released by `shutdown::finish_passes`, to be sent again under the same delivery id.
    pub(super) async fn pass(self: Arc<Self>, job: Job, control: Arc<LaneControl>) {
        let pass = Pass {
            job_id: job.id,
            connection_id: job.connection_id.clone(),
            mpid: job.mpid,
        };
        let done = Done::default();
        let settled = AssertUnwindSafe(self.work_and_settle(job, &pass, &control, &done));
        if let Err(panic) = settled.catch_unwind().await {
            tracing::error!(
                job_id = pass.job_id,
                panic = panic_message(panic.as_ref()),
                "A delivery pass panicked after its delivery; the rest of the pass is done now."
            );
            self.finish_panicked(&pass, &control, &done).await;
        }
    }

    async fn work_and_settle(
        self: &Arc<Self>,
        job: Job,
        pass: &Pass,
        control: &LaneControl,
        done: &Done,
    ) {
        let update = tokio::select! {
            // A pass that has just ended keeps its outcome, deadline or not.
            biased;
            update = self.work(job, control) => update,
            // Dropping `work` counts the requests it delivered.
            () = self.overdue.cancelled() => return,
        };
        // Kept where a panic from here on finds it, to be recorded all the same.
        done.update.put(update);
        done.update
            .with(|update| self.learn(pass, control, update, done));
        // The place is free only once the outcome is committed (see `Writer::update`). A user's
        // next job goes only once this one has left the table for sure.
        let finished = self.record_for(pass, done).await;
        #[cfg(test)]
        reached(Point::Recorded);
        control.free_slot();
        done.freed.set();
        #[cfg(test)]
        reached(Point::Freed);
        self.act_on_breaker(pass, done);
        self.pass_turn(pass, control, finished, done).await;
    }

    /// The breaker and the connection's health learn how the pass's delivery ended.
    fn learn(&self, pass: &Pass, control: &LaneControl, update: &JobUpdate, done: &Done) {
        let transition = control.ended(update, pass.mpid, Instant::now());
        done.transition.put(transition);
        #[cfg(test)]
        reached(Point::Settling);
        let answered = endpoint_answered(update);
        let health = &self.ctx.health;
        health.observe(
            &pass.connection_id,
            update,
            answered,
            transition,
            &control.spell,
        );
    }

    /// Delivers one job and answers the outcome to record. A panic in the delivery (a bug) is
    /// the outcome "released": the job is sent again under the same delivery id.
    async fn work(&self, job: Job, control: &LaneControl) -> JobUpdate {
        let job_id = job.id;
        let lease = HeldJob {
            lanes: self,
            job_id,
        };
        let ctx = &self.ctx;
        let delivery = async move {
            #[cfg(test)]
            reached(Point::Working);
            if ctx.catalog.is_paused(&job.connection_id) {
                // Set to inactive after the job was queued: it waits in the table, unworked (a
                // job already past this point finishes its pass, like a request in flight).
                JobUpdate::Release { job_id: job.id }
            } else if job.is_coalesced() {
                coalesce::work(ctx, &job, &lease, control).await
            } else {
                worker::work(ctx, job, &lease, control).await
            }
        };
        AssertUnwindSafe(delivery)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                tracing::error!(
                    job_id,
                    panic = panic_message(panic.as_ref()),
                    "Delivering a job panicked; it is released to be tried again."
                );
                JobUpdate::Release { job_id }
            })
    }

    /// Records the outcome the pass left in `done`, if any; whether it was recorded and took
    /// the job off the queue (then the user's next job may go).
    async fn record_for(&self, pass: &Pass, done: &Done) -> bool {
        let Some(update) = done.update.take() else {
            return false;
        };
        let finished = matches!(update, JobUpdate::Finished { .. });
        let recorded = self.record(pass.job_id, update).await;
        done.recorded.set();
        if recorded && finished {
            done.finished.set();
        }
        recorded && finished
    }

    /// Acts on the breaker's move the pass left in `done`, if any.
    fn act_on_breaker(self: &Arc<Self>, pass: &Pass, done: &Done) {
        if let Some(transition) = done.transition.take() {
            self.breaker_moved(&pass.connection_id, transition);
        }
    }

    /// Passes the user's turn on (a connection ordered per user), once.
    async fn pass_turn(&self, pass: &Pass, control: &LaneControl, finished: bool, done: &Done) {
        if let Some(mpid) = pass.mpid
            && !done.turn_passed.is_set()
        {
            done.turn_passed.set();
            self.next_turn(control, &pass.connection_id, mpid, pass.job_id, finished)
                .await;
        }
    }

    /// What a pass that panicked after its delivery left undone, in the pass's order. Its
    /// outcome, if not recorded yet, is recorded now; one whose recording itself panicked may or
    /// may not be committed, so the job is released (a release finds a recorded job gone, or
    /// already released, and changes nothing), after its user's turn is given back (a released
    /// job may be claimed again at once, and must not find its own turn still taken). The
    /// breaker's move comes last, so that were it the step that panics, and panics again,
    /// everything else is done.
    async fn finish_panicked(self: &Arc<Self>, pass: &Pass, control: &LaneControl, done: &Done) {
        if !done.recorded.is_set() {
            if done.update.is_full() {
                self.record_for(pass, done).await;
            } else {
                // Its recording panicked, committed or not.
                self.pass_turn(pass, control, false, done).await;
                self.release(pass.job_id).await;
            }
        }
        if !done.freed.is_set() {
            control.free_slot();
        }
        let finished = done.finished.is_set();
        self.pass_turn(pass, control, finished, done).await;
        self.act_on_breaker(pass, done);
    }
}

#[cfg(test)]
#[path = "pass_tests.rs"]
mod tests;
