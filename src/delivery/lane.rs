//! What a connection's lane decides before and after each job: how many requests may be in
//! flight (the ramp), whether its endpoint is failing (the circuit breaker), and when its next
//! request may go out under the connection's rate limit (the pacer). See [`super::breaker`] for
//! the rules; this is their shared, thread-safe home.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};

use super::breaker::{Breaker, Permit, Ramp, Transition};
use super::health::Spell;
use super::order::{Next, UserTurns};
use super::retry::{Classification, classify};
use crate::model::attempt::AttemptOutcome;
use crate::model::ids::Mpid;
use crate::store::queue::{Job, JobUpdate};

/// Requests in flight a connection starts with after its endpoint came back.
const RECOVERY_START_IN_FLIGHT: usize = 4;
/// Users a lane remembers as failing (the most recent), for the breaker's probe to avoid: a
/// bound, so a receiver refusing many users costs a little memory and a short list, not more.
const FAILED_USERS: usize = 64;

/// How much wider than `1 / rate` the pacer spaces requests: the receiver sees arrival times,
/// which network jitter moves by a little, and no one-second window there may hold more than
/// `rate` requests. 2% of a second absorbs 20 ms of jitter.
const PACING_MARGIN: f64 = 1.02;

/// One lane's breaker, ramp and count of requests in flight.
#[derive(Debug)]
pub(super) struct LaneControl {
    breaker: Mutex<Breaker>,
    ramp: Mutex<Ramp>,
    in_flight: AtomicUsize,
    slot_freed: Notify,
    /// When the last rate-limited request went out. An async lock: requests wait their turn in
    /// order (tokio's mutex is fair), each holding it while it sleeps until its moment.
    last_paced: tokio::sync::Mutex<Option<Instant>>,
    /// The connection's failing spell as this node sees it (see `super::health`).
    pub(super) spell: Mutex<Spell>,
    /// On a connection ordered per user: whose job is in flight, and which wait behind it.
    turns: Mutex<UserTurns<Job>>,
    /// On a connection ordered per user, the user of the last failure the breaker counted.
    last_failed_user: Mutex<Option<Mpid>>,
    /// On a connection ordered per user, the users whose last request failed, oldest first.
    failed_users: Mutex<VecDeque<Mpid>>,
    /// Counts the endpoint's recoveries on this node, for the requests still in flight when it
    /// came back (see [`Self::recoveries`]).
    recoveries: watch::Sender<u64>,
}

/// The breaker's settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct BreakerConfig {
    pub(super) failures: u32,
    pub(super) first_open: Duration,
    pub(super) max_open: Duration,
}

impl LaneControl {
    pub(super) fn new(breaker: BreakerConfig, max_in_flight: usize) -> Self {
        Self {
            breaker: Mutex::new(Breaker::new(
                breaker.failures,
                breaker.first_open,
                breaker.max_open,
            )),
            ramp: Mutex::new(Ramp::new(RECOVERY_START_IN_FLIGHT, max_in_flight)),
            in_flight: AtomicUsize::new(0),
            slot_freed: Notify::new(),
            last_paced: tokio::sync::Mutex::new(None),
            spell: Mutex::new(Spell::default()),
            turns: Mutex::new(UserTurns::default()),
            last_failed_user: Mutex::new(None),
            failed_users: Mutex::new(VecDeque::new()),
            recoveries: watch::Sender::new(0),
        }
    }

    /// Changes when the endpoint is found back after its breaker opened. Every request still
    /// in flight then went out while it was failing (only probes go out while the breaker is
    /// open) and has not been answered although a later one was: after a hang it would wait
    /// out the request timeout on a connection the receiver has given up on, holding its job
    /// (and a place of the ramp) for seconds, so the worker sends it again at once.
    pub(super) fn recoveries(&self) -> watch::Receiver<u64> {
        self.recoveries.subscribe()
    }

    /// The users whose last request here failed (at most [`FAILED_USERS`], the most recent).
    pub(super) fn failed_users(&self) -> Vec<Mpid> {
        lock(&self.failed_users).iter().copied().collect()
    }

    /// Remembers whether `user`'s last request failed.
    fn note_user(&self, user: Mpid, failed: bool) {
        let mut users = lock(&self.failed_users);
        users.retain(|u| *u != user);
        if failed {
            if users.len() == FAILED_USERS {
                users.pop_front();
            }
            users.push_back(user);
        }
    }

    /// A job of `mpid` taken off the lane: `Some` if it may go now (see [`UserTurns::admit`]).
    pub(super) fn admit(&self, mpid: Mpid, job: Job) -> Option<Job> {
        let id = job.id;
        lock(&self.turns).admit(mpid, id, job)
    }

    /// A user's job ended (see [`UserTurns::ended`]).
    pub(super) fn turn_ended(&self, mpid: Mpid, id: i64, finished: bool) -> Next<Job> {
        lock(&self.turns).ended(mpid, id, finished)
    }

    /// Waits until a request may go out under a limit of `rate` per second (no wait without a
    /// limit). Requests are spaced evenly, at least `PACING_MARGIN / rate` apart counted from
    /// when each actually left, so however late a timer fires, no second holds more than `rate`.
    pub(super) async fn pace(&self, rate: Option<u32>) {
        let Some(rate) = rate.filter(|r| *r > 0) else {
            return;
        };
        let mut last = self.last_paced.lock().await;
        if let Some(at) = *last {
            let spacing = Duration::from_secs_f64(PACING_MARGIN / f64::from(rate));
            tokio::time::sleep_until((at + spacing).into()).await;
        }
        *last = Some(Instant::now());
    }

    /// Waits until one more request may be in flight, and takes that place.
    pub(super) async fn take_slot(&self) {
        loop {
            let freed = self.slot_freed.notified();
            let limit = lock(&self.ramp).limit();
            let taken = self
                .in_flight
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < limit).then_some(n + 1)
                });
            if taken.is_ok() {
                return;
            }
            freed.await;
        }
    }

    /// Gives back a place taken by [`Self::take_slot`].
    pub(super) fn free_slot(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.slot_freed.notify_one();
    }

    /// Whether the next job may be sent now (see [`Breaker::permit`]).
    pub(super) fn permit(&self, now: Instant) -> Permit {
        lock(&self.breaker).permit(now)
    }

    /// Whether the breaker is open and its probe may go out.
    pub(super) fn probe_due(&self, now: Instant) -> bool {
        lock(&self.breaker)
            .probe_at()
            .is_some_and(|probe_at| probe_at <= now)
    }

    /// Records how a job sent through this lane ended (its place is freed separately, once the
    /// outcome is committed). `user` is the job's MPID on a connection ordered per user: there
    /// one user's failures in a row count as one, so a receiver that refuses one user's
    /// requests holds back only that user (whose later batches wait anyway), while an endpoint
    /// that fails every user still opens the breaker.
    pub(super) fn ended(&self, update: &JobUpdate, user: Option<Mpid>, now: Instant) -> Transition {
        let answered = endpoint_answered(update);
        if let (Some(user), Some(worked)) = (user, answered) {
            self.note_user(user, !worked);
        }
        match answered {
            Some(false) if user.is_some() => {
                let mut last = lock(&self.last_failed_user);
                if *last == user {
                    return Transition::None;
                }
                *last = user;
                drop(last);
                lock(&self.breaker).failed(now)
            }
            Some(true) => {
                *lock(&self.last_failed_user) = None;
                let transition = lock(&self.breaker).succeeded();
                let mut ramp = lock(&self.ramp);
                if transition == Transition::Recovered {
                    ramp.restart();
                    self.recoveries.send_modify(|count| *count += 1);
                } else {
                    ramp.succeeded();
                }
                transition
            }
            Some(false) => lock(&self.breaker).failed(now),
            None => {
                lock(&self.breaker).sent_nothing(now);
                Transition::None
            }
        }
    }
}

/// Whether a job's requests found the endpoint working (delivered, or refused for good: it is
/// up and answering), failing (an answer worth retrying, or none), or made no request.
pub(super) fn endpoint_answered(update: &JobUpdate) -> Option<bool> {
    let attempt = match update {
        JobUpdate::Finished { attempt, .. } | JobUpdate::Retry { attempt, .. } => attempt,
        JobUpdate::Release { .. } => return None,
    };
    if attempt.requests == 0 {
        return None;
    }
    Some(match (update, attempt.outcome) {
        (JobUpdate::Retry { .. }, _) => false,
        (_, AttemptOutcome::Delivered) => true,
        // Dead-lettered: alive if the last request got a final 4xx, failing if the retry window
        // ran out on errors.
        _ => attempt.status.is_some_and(|status| {
            u16::try_from(status)
                .is_ok_and(|status| classify(status, None) == Classification::DeadLetter)
        }),
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{BatchId, ConnectionId};
    use crate::store::queue::{AttemptRecord, JobKey};

    fn failed() -> JobUpdate {
        let mut attempt = AttemptRecord::dropped("receiver answered 500");
        attempt.outcome = AttemptOutcome::Retry;
        attempt.requests = 1;
        attempt.status = Some(500);
        JobUpdate::Retry {
            job: JobKey {
                id: 1,
                batch_id: BatchId::new(1),
                connection_id: ConnectionId::trusted("conn_a"),
                mates: Vec::new(),
            },
            progress: 0,
            attempts: 1,
            next_attempt_at: 0,
            attempt,
            dead: Vec::new(),
        }
    }

    fn lane() -> LaneControl {
        let breaker = BreakerConfig {
            failures: 3,
            first_open: Duration::from_secs(1),
            max_open: Duration::from_secs(10),
        };
        LaneControl::new(breaker, 8)
    }

    #[test]
    fn one_users_failures_in_a_row_never_open_the_breaker() {
        let lane = lane();
        let now = Instant::now();
        for _ in 0..10 {
            let moved = lane.ended(&failed(), Some(Mpid::new(7)), now);
            assert_eq!(moved, Transition::None);
        }
        assert_eq!(lane.permit(now), Permit::Send);
    }

    #[test]
    fn the_users_whose_last_request_failed_are_remembered_for_the_probe() {
        let lane = lane();
        let now = Instant::now();
        for user in [1, 2, 3, 2] {
            lane.ended(&failed(), Some(Mpid::new(user)), now);
        }
        assert_eq!(
            lane.failed_users(),
            [Mpid::new(1), Mpid::new(3), Mpid::new(2)]
        );
        let mut delivered = failed();
        if let JobUpdate::Retry { attempt, .. } = &mut delivered {
            attempt.outcome = AttemptOutcome::Delivered;
            attempt.status = Some(200);
        }
        let delivered = match delivered {
            JobUpdate::Retry {
                job, attempt, dead, ..
            } => JobUpdate::Finished { job, attempt, dead },
            other => other,
        };
        lane.ended(&delivered, Some(Mpid::new(3)), now);
        assert_eq!(lane.failed_users(), [Mpid::new(1), Mpid::new(2)]);
        // Unordered jobs name no user; a bounded list keeps the most recent.
        lane.ended(&failed(), None, now);
        for user in 100..100 + i64::try_from(FAILED_USERS).unwrap() {
            lane.ended(&failed(), Some(Mpid::new(user)), now);
        }
        let users = lane.failed_users();
        assert_eq!(users.len(), FAILED_USERS);
        assert_eq!(users[0], Mpid::new(100));
    }

    #[test]
    fn failures_of_several_users_or_unordered_jobs_do() {
        let now = Instant::now();
        let lane = lane();
        let moved: Vec<Transition> = (1..=3)
            .map(|user| lane.ended(&failed(), Some(Mpid::new(user)), now))
            .collect();
        assert_eq!(moved.last(), Some(&Transition::Opened));
        let lane = self::lane();
        let moved: Vec<Transition> = (0..3).map(|_| lane.ended(&failed(), None, now)).collect();
        assert_eq!(moved.last(), Some(&Transition::Opened));
    }
}
