//! The pace at which a recovering connection's backlog is claimed, as a pure rule (the caller
//! passes the time), so it is tested without a clock or a database.
//!
//! When a failing endpoint comes back, its waiting jobs are brought forward. Claimed all at
//! once, they were sent at full speed within a second or two, and that burst of requests and
//! job updates took the CPU and the writer from the healthy connections (their p99 rose 2–4×).
//! Instead the backlog is claimed at a rate: at first the rate that would spread it over
//! [`SPREAD`], never below [`MIN_RATE`], then doubling every [`SPREAD`], so a backlog that keeps
//! growing (new jobs queue behind it while it drains) is still caught up with. A 30 s outage at
//! 500 events/s (15,000 jobs, 500 more each second) is claimed in about 4.3 s, inside the 10 s
//! target, and a smaller backlog is spread over a few seconds rather than sent in one burst.

use std::time::{Duration, Instant};

/// The time over which a backlog's first rate would claim it whole.
pub(crate) const SPREAD: Duration = Duration::from_secs(5);
/// The least rate, jobs per second: a small backlog still goes quickly.
pub(crate) const MIN_RATE: f64 = 200.0;
/// A backlog is counted up to this many jobs; a larger one drains as fast. Its first rate,
/// 40,000 jobs a second, is more than a lane delivers (send as batch, one request a job:
/// about 13,600 a second on the project's 2-core machine), so counting further (an index walk
/// per job) would change nothing but the time the drain starts.
pub(crate) const COUNTED_BACKLOG: u64 = 200_000;
/// How often a draining connection claims.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// One connection's drain on this node: how much it may have claimed by when.
#[derive(Debug, Clone)]
pub(crate) struct Drain {
    started: Instant,
    /// Jobs per second at the start.
    rate: f64,
    /// Jobs claimed so far.
    claimed: u64,
}

impl Drain {
    /// A drain of `backlog` jobs starting `now`.
    pub(crate) fn new(backlog: u64, now: Instant) -> Self {
        let spread = backlog as f64 / SPREAD.as_secs_f64();
        Self {
            started: now,
            rate: spread.max(MIN_RATE),
            claimed: 0,
        }
    }

    /// How many jobs may be claimed by `now` in all: the rate's integral since the start, plus
    /// one tick's worth so the first claim goes at once.
    fn allowed_by(&self, now: Instant) -> f64 {
        let t = now.saturating_duration_since(self.started).as_secs_f64();
        let doubling = SPREAD.as_secs_f64();
        // ∫₀ᵗ rate · 2^(s/doubling) ds
        let ramped = self.rate * doubling / std::f64::consts::LN_2 * ((t / doubling).exp2() - 1.0);
        ramped + self.rate * TICK.as_secs_f64()
    }

    /// How many jobs to claim now, at most `room` (what the lane can take).
    pub(crate) fn allowance(&self, now: Instant, room: usize) -> usize {
        let left = (self.allowed_by(now) - self.claimed as f64).max(0.0);
        // Non-negative and finite, so the cast only drops the fraction.
        let left = left.min(1e12) as usize;
        left.min(room)
    }

    /// Records a claim that asked for `asked` jobs and got `got`; true when it found fewer due
    /// jobs than it asked for, so the backlog may be claimed. Only may: on a connection ordered
    /// per user a claim takes only each user's head, so the caller asks the store whether any
    /// due job is left before it ends the drain.
    pub(crate) fn claimed(&mut self, asked: usize, got: usize) -> bool {
        self.claimed += got as u64;
        got < asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Simulates a drain claiming every tick: `backlog` jobs at the start, `arriving` more per
    /// second (queued behind it); the time until a claim finds nothing left, and the most
    /// claimed in any one second.
    fn simulate(backlog: u64, arriving: f64, room: usize) -> (Duration, u64) {
        let start = Instant::now();
        let mut drain = Drain::new(backlog, start);
        let mut waiting = backlog as f64;
        let mut per_tick = Vec::new();
        let mut now = start;
        loop {
            now += TICK;
            waiting += arriving * TICK.as_secs_f64();
            let asked = drain.allowance(now, room);
            if asked == 0 {
                per_tick.push(0);
                continue;
            }
            let got = asked.min(waiting as usize);
            waiting -= got as f64;
            per_tick.push(got as u64);
            if drain.claimed(asked, got) {
                break;
            }
            assert!(now - start < Duration::from_secs(600), "never drained");
        }
        let ticks_per_second = (1.0 / TICK.as_secs_f64()) as usize;
        let busiest = per_tick
            .windows(ticks_per_second.min(per_tick.len()))
            .map(|w| w.iter().sum())
            .max()
            .unwrap_or(0);
        (now - start, busiest)
    }

    #[test]
    fn a_30_s_outage_at_500_events_a_second_drains_within_10_s() {
        let (took, _) = simulate(15_000, 500.0, 512);
        assert!(took < Duration::from_secs(6), "took {took:?}");
    }

    #[test]
    fn a_backlog_is_spread_over_seconds_not_sent_in_one_burst() {
        // 2,000 jobs (20 s of a connection's 100 batches a second): at full speed they left in
        // well under a second; paced, no second claims more than about half of them.
        let (took, busiest) = simulate(2_000, 100.0, 512);
        assert!(took >= Duration::from_secs(3), "took only {took:?}");
        assert!(busiest <= 1_100, "{busiest} jobs claimed in one second");
    }

    #[test]
    fn the_first_claim_goes_at_once_and_a_lane_without_room_claims_nothing() {
        let now = Instant::now();
        let drain = Drain::new(10_000, now);
        assert!(drain.allowance(now, 512) > 0);
        assert_eq!(drain.allowance(now + Duration::from_secs(1), 0), 0);
    }

    proptest! {
        /// Whatever the backlog and the arrivals (up to the least rate), the drain ends, and
        /// never claims more by a time than the ramp allows.
        #[test]
        fn every_backlog_drains_and_claims_stay_under_the_ramp(
            backlog in 0u64..100_000,
            arriving in 0.0f64..MIN_RATE,
            room in 256usize..1024,
        ) {
            let (took, _) = simulate(backlog, arriving, room);
            prop_assert!(took < Duration::from_secs(60), "took {:?}", took);
        }

        #[test]
        fn the_allowance_never_exceeds_what_the_rate_allows(
            backlog in 0u64..100_000,
            steps in proptest::collection::vec(1u64..500, 1..50),
        ) {
            let start = Instant::now();
            let mut drain = Drain::new(backlog, start);
            let mut now = start;
            let mut total = 0u64;
            for step in steps {
                now += Duration::from_millis(step);
                let asked = drain.allowance(now, usize::MAX);
                drain.claimed(asked, asked);
                total += asked as u64;
                prop_assert!(total as f64 <= drain.allowed_by(now) + 1.0);
            }
        }
    }
}
