//! What a connection's lane decides before and after each job: how many requests may be in
//! flight (the ramp), whether its endpoint is failing (the circuit breaker), and when its next
//! request may go out under the connection's rate limit (the pacer). See [`super::breaker`] for
//! the rules; this is their shared, thread-safe home.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::breaker::{Breaker, Permit, Ramp, Transition};
use super::health::Spell;
use super::retry::{Classification, classify};
use crate::model::attempt::AttemptOutcome;
use crate::store::queue::JobUpdate;

/// Requests in flight a connection starts with after its endpoint came back.
const RECOVERY_START_IN_FLIGHT: usize = 4;

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
        }
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
    /// outcome is committed).
    pub(super) fn ended(&self, update: &JobUpdate, now: Instant) -> Transition {
        match endpoint_answered(update) {
            Some(true) => {
                let transition = lock(&self.breaker).succeeded();
                let mut ramp = lock(&self.ramp);
                if transition == Transition::Recovered {
                    ramp.restart();
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
