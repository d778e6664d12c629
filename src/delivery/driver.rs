//! A lane's driver: the task that takes its connection's jobs off the lane's queue, one at a
//! time, and starts a pass for each (see [`super::pass`]) as the lane's control allows: in
//! turn per user, within the in-flight budget, and none while the breaker is open (then the
//! job goes back to the table to wait).
//!
//! The driver runs as long as its lane, and a panic must not end it: the lane's queue would
//! then be closed, and every job offered to it released, claimed again and released again at
//! every poll, while the jobs queued at the time were held (their leases renewed) until the
//! node stopped. Taking up one job is therefore caught on its own. A job a panic caught half
//! taken up is given back: its place freed if it had one, its user's turn passed on, and the
//! job released to be claimed again. The queue, outside the caught part, goes on being read.
//!
//! A user's job that leaves the lane unworked (given back so, lost to another node, or turned
//! away by its breaker) takes with it the user's later jobs of the same hand-off (see
//! [`Fence`]), as it takes those waiting their turn: they follow it through the table, in order.
//!
//! Two limits stand. A panic inside the user's turn itself (`next_turn`) is not undone, as in a
//! pass. And the release of what is left queued at shutdown is not guarded: the jobs a panic
//! there leaves stay leased, as a release the writer cannot commit before the process ends
//! does (a restart on SQLite frees them; on PostgreSQL their leases run out).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt as _;
use tokio::sync::mpsc;

use super::Lanes;
use super::breaker::Permit;
use super::lane::LaneControl;
use super::order::Fence;
use crate::model::ids::{ConnectionId, Mpid};
use crate::store::queue::Job;
use crate::supervise::panic_message;

#[cfg(test)]
use super::faults::{Point, reached};

/// Whether the driver goes on after a job.
enum Flow {
    Next,
    Stop,
}

/// How far taking up one job got, for what a panic leaves undone.
struct TakingUp {
    job_id: i64,
    mpid: Option<Mpid>,
    handoff: Option<u64>,
    /// Whether it holds one of the lane's places.
    has_place: bool,
    /// Whether it was handed on, to a pass (with its place) or to wait its user's turn: where it
    /// went, it is looked after.
    handed_on: bool,
}

impl Lanes {
    /// Drives `connection_id`'s lane until shutdown (or its queue closes), then releases what
    /// is left queued.
    pub(super) async fn drive_lane(
        self: Arc<Self>,
        connection_id: ConnectionId,
        mut jobs: mpsc::Receiver<Job>,
        control: Arc<LaneControl>,
    ) {
        let mut fence = Fence::default();
        loop {
            let job = tokio::select! {
                // Shutdown first: a lane whose queue is never empty would otherwise go on
                // taking jobs after it, half the time at each turn.
                biased;
                () = self.cancel.cancelled() => break,
                job = jobs.recv() => match job { Some(job) => job, None => break },
            };
            let mut progress = TakingUp {
                job_id: job.id,
                mpid: job.mpid,
                handoff: job.handoff,
                has_place: false,
                handed_on: false,
            };
            let mut lane = Driving {
                queue: &jobs,
                control: &control,
                fence: &mut fence,
            };
            let taken = AssertUnwindSafe(self.take_up(job, &mut lane, &mut progress))
                .catch_unwind()
                .await;
            match taken {
                Ok(Flow::Next) => {}
                Ok(Flow::Stop) => break,
                Err(panic) => {
                    tracing::error!(
                        connection = %connection_id,
                        job_id = progress.job_id,
                        panic = panic_message(panic.as_ref()),
                        "Taking up a job panicked; it is released to be tried again."
                    );
                    self.give_back(&connection_id, &mut lane, &progress).await;
                }
            }
        }
        jobs.close();
        while let Ok(job) = jobs.try_recv() {
            self.turn_ended(&control, &job, false).await;
            self.release(job.id).await;
        }
    }

    /// Takes up one job off the lane: starts its pass, or has it wait its user's turn, or gives
    /// it back to the table (behind a job of its user that left, lost to another node, breaker
    /// open, or shutdown).
    async fn take_up(
        self: &Arc<Self>,
        job: Job,
        lane: &mut Driving<'_>,
        progress: &mut TakingUp,
    ) -> Flow {
        let control = lane.control;
        if lane.fence.holds_back(job.mpid, job.id, job.handoff) {
            self.turn_ended(control, &job, false).await;
            self.release(job.id).await;
            return Flow::Next;
        }
        if !self.holds(job.id) {
            // Lost to another node while it waited here (see `Lanes::renewed`).
            lane.left_unworked(progress);
            self.turn_ended(control, &job, false).await;
            return Flow::Next;
        }
        let job = match job.mpid {
            Some(mpid) => match control.admit(mpid, job) {
                Some(job) => job,
                None => {
                    // Waits behind its user's job in flight (see `order`).
                    progress.handed_on = true;
                    return Flow::Next;
                }
            },
            None => job,
        };
        let connection_id = &job.connection_id;
        if self.is_roomy(lane.queue.capacity()) && self.crowded.contains(connection_id) {
            self.crowded.set(connection_id, false);
        }
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => {
                self.turn_ended(control, &job, false).await;
                self.release(job.id).await;
                return Flow::Stop;
            }
            () = control.take_slot() => progress.has_place = true,
        }
        #[cfg(test)]
        reached(Point::TakingUp);
        if control.permit(Instant::now()) == Permit::Wait {
            control.free_slot();
            progress.has_place = false;
            self.crowded.set_failing(connection_id, true);
            lane.left_unworked(progress);
            self.turn_ended(control, &job, false).await;
            self.release(job.id).await;
            return Flow::Next;
        }
        self.tracker
            .spawn(Arc::clone(self).pass(job, Arc::clone(control)));
        progress.handed_on = true;
        Flow::Next
    }

    /// What a panic while taking up a job left undone: its place is freed, its user's turn
    /// passed on and the job released, unless it was handed on. Passing the turn again is
    /// harmless (a turn that is not the job's changes nothing), and the release is skipped if
    /// the job is no longer held (released already, or lost to another node).
    async fn give_back(
        &self,
        connection_id: &ConnectionId,
        lane: &mut Driving<'_>,
        progress: &TakingUp,
    ) {
        if progress.handed_on {
            return;
        }
        if progress.has_place {
            lane.control.free_slot();
        }
        lane.left_unworked(progress);
        if let Some(mpid) = progress.mpid {
            self.next_turn(lane.control, connection_id, mpid, progress.job_id, false)
                .await;
        }
        if self.holds(progress.job_id) {
            self.release(progress.job_id).await;
        }
    }
}

/// A lane as its driver sees it while it takes up a job.
struct Driving<'a> {
    queue: &'a mpsc::Receiver<Job>,
    control: &'a Arc<LaneControl>,
    fence: &'a mut Fence,
}

impl Driving<'_> {
    /// The job `progress` is about leaves the lane unworked: its user's later jobs of the same
    /// hand-off follow it.
    fn left_unworked(&mut self, progress: &TakingUp) {
        if let Some(mpid) = progress.mpid {
            self.fence.left(mpid, progress.job_id, progress.handoff);
        }
    }
}
