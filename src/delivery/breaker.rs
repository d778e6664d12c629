//! A connection's circuit breaker and its ramp after recovery, as pure state machines (the
//! caller passes the time), so the rules are tested without a clock or a receiver.
//!
//! Closed, requests flow. After `failures` consecutive failed requests it opens: nothing is sent,
//! the connection's jobs wait in the table (a dead endpoint then costs no requests, no retry
//! writes and no lease renewals), until a single probe request is let through. A probe that
//! succeeds closes it and reports a recovery (delivery then brings the waiting jobs forward); one
//! that fails opens it again for twice as long, up to `max_open`. A probe still unanswered after
//! that long (a hanging endpoint answers nothing until the request times out) counts as failed
//! for the schedule: the next probe goes out beside it, so a hang is found to be over within
//! the open interval, not only after the hung request's timeout.
//!
//! After a recovery the connection's concurrency starts low and doubles with each round of
//! successes (like TCP's slow start), so a receiver that just came back is not hit with the whole
//! backlog at full concurrency.

use std::time::{Duration, Instant};

/// What the breaker allows for the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Send it.
    Send,
    /// Send it as the probe: the only request until it ends.
    Probe,
    /// Send nothing now; the job waits in the table.
    Wait,
}

/// A change the caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    /// Just opened (or re-opened after a failed probe).
    Opened,
    /// A probe succeeded after the breaker had opened: the endpoint is back.
    Recovered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
        interval: Duration,
    },
    /// A probe went out at `sent` after the breaker had been open for `interval`.
    Probing {
        sent: Instant,
        interval: Duration,
    },
}

/// One connection's breaker on this node.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    state: State,
    /// Consecutive failures that open it.
    threshold: u32,
    /// How long it first stays open; doubles after each failed probe, up to `max_open`.
    first_open: Duration,
    max_open: Duration,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, first_open: Duration, max_open: Duration) -> Self {
        Self {
            state: State::Closed { failures: 0 },
            threshold: threshold.max(1),
            first_open,
            max_open: max_open.max(first_open),
        }
    }

    /// Whether the next request may go out now.
    pub(crate) fn permit(&mut self, now: Instant) -> Permit {
        match self.state {
            State::Closed { .. } => Permit::Send,
            State::Open { until, interval } if now >= until => {
                self.state = State::Probing {
                    sent: now,
                    interval,
                };
                Permit::Probe
            }
            State::Probing { sent, interval } if now >= sent + self.longer(interval) => {
                self.state = State::Probing {
                    sent: now,
                    interval: self.longer(interval),
                };
                Permit::Probe
            }
            State::Open { .. } | State::Probing { .. } => Permit::Wait,
        }
    }

    /// How long the breaker stays open after a probe that followed `interval` failed.
    fn longer(&self, interval: Duration) -> Duration {
        interval.saturating_mul(2).min(self.max_open)
    }

    /// Whether requests are held back (open, or a probe is out).
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }

    /// When a probe may go out, if the breaker is open (the next one, if a probe is out).
    pub(crate) fn probe_at(&self) -> Option<Instant> {
        match self.state {
            State::Open { until, .. } => Some(until),
            State::Probing { sent, interval } => Some(sent + self.longer(interval)),
            State::Closed { .. } => None,
        }
    }

    /// A request was answered with success (or a final refusal: the endpoint is alive).
    pub(crate) fn succeeded(&mut self) -> Transition {
        let recovered = matches!(self.state, State::Probing { .. } | State::Open { .. });
        self.state = State::Closed { failures: 0 };
        if recovered {
            Transition::Recovered
        } else {
            Transition::None
        }
    }

    /// A job ended without sending a request (released: its connection was paused meanwhile,
    /// or nothing in it was to be sent). If it was the probe, no probe is out any more: the
    /// breaker is open again, due for a probe now, so it cannot wait for an answer that never
    /// comes.
    pub(crate) fn sent_nothing(&mut self, now: Instant) {
        if let State::Probing { interval, .. } = self.state {
            self.state = State::Open {
                until: now,
                interval,
            };
        }
    }

    /// A request failed in a way worth retrying (5xx, 408, 429, timeout, no connection).
    pub(crate) fn failed(&mut self, now: Instant) -> Transition {
        match self.state {
            State::Closed { failures } if failures + 1 >= self.threshold => {
                self.open(now, self.first_open)
            }
            State::Closed { failures } => {
                self.state = State::Closed {
                    failures: failures + 1,
                };
                Transition::None
            }
            // The latest probe, or an earlier one that hung past its interval (the latest may
            // be out still): the next probe is due as long after the latest one went out as
            // after a probe that failed at once, not later because an earlier one took its time.
            State::Probing { sent, interval } => {
                let longer = self.longer(interval);
                self.state = State::Open {
                    until: (sent + longer).max(now),
                    interval: longer,
                };
                Transition::Opened
            }
            // A request sent before the breaker opened, ending now: it is open already.
            State::Open { .. } => Transition::None,
        }
    }

    fn open(&mut self, now: Instant, interval: Duration) -> Transition {
        self.state = State::Open {
            until: now + interval,
            interval,
        };
        Transition::Opened
    }
}

/// How many requests a connection may have in flight: the configured most, except right after
/// a recovery, when it starts at `start` and doubles each time that many requests succeeded.
#[derive(Debug, Clone)]
pub(crate) struct Ramp {
    limit: usize,
    max: usize,
    start: usize,
    /// Successes since the limit last grew.
    successes: usize,
}

impl Ramp {
    pub(crate) fn new(start: usize, max: usize) -> Self {
        let max = max.max(1);
        Self {
            limit: max,
            max,
            start: start.clamp(1, max),
            successes: 0,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Starts again from `start` (after a recovery).
    pub(crate) fn restart(&mut self) {
        self.limit = self.start;
        self.successes = 0;
    }

    /// A request succeeded: after `limit` successes the limit doubles, up to the most.
    pub(crate) fn succeeded(&mut self) {
        if self.limit >= self.max {
            return;
        }
        self.successes += 1;
        if self.successes >= self.limit {
            self.limit = (self.limit * 2).min(self.max);
            self.successes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(5);

    fn breaker() -> Breaker {
        Breaker::new(3, FIRST, MAX)
    }

    #[test]
    fn it_opens_after_the_threshold_of_consecutive_failures_only() {
        let now = Instant::now();
        let mut b = breaker();
        assert_eq!(b.failed(now), Transition::None);
        assert_eq!(b.failed(now), Transition::None);
        assert_eq!(
            b.succeeded(),
            Transition::None,
            "a success resets the count"
        );
        assert_eq!(b.failed(now), Transition::None);
        assert_eq!(b.failed(now), Transition::None);
        assert_eq!(b.permit(now), Permit::Send);
        assert_eq!(b.failed(now), Transition::Opened);
        assert_eq!(b.permit(now), Permit::Wait);
        assert_eq!(b.probe_at(), Some(now + FIRST));
    }

    #[test]
    fn one_probe_goes_out_when_the_open_time_is_over_and_its_success_recovers() {
        let now = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            b.failed(now);
        }
        assert_eq!(b.permit(now + FIRST / 2), Permit::Wait);
        assert_eq!(b.permit(now + FIRST), Permit::Probe);
        assert_eq!(b.permit(now + FIRST), Permit::Wait, "one probe at a time");
        assert_eq!(b.succeeded(), Transition::Recovered);
        assert!(!b.is_open());
        assert_eq!(b.permit(now + FIRST), Permit::Send);
    }

    #[test]
    fn a_probe_that_sent_nothing_lets_the_next_probe_go() {
        let now = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            b.failed(now);
        }
        assert_eq!(b.permit(now + FIRST), Permit::Probe);
        assert_eq!(
            b.probe_at(),
            Some(now + 3 * FIRST),
            "a probe is out: the next waits"
        );
        b.sent_nothing(now + FIRST);
        assert_eq!(b.probe_at(), Some(now + FIRST), "due again at once");
        assert_eq!(b.permit(now + FIRST), Permit::Probe);
        b.sent_nothing(now + FIRST);
        b.succeeded();
        b.sent_nothing(now + FIRST);
        assert_eq!(b.permit(now + FIRST), Permit::Send, "closed stays closed");
    }

    #[test]
    fn a_probe_left_unanswered_does_not_hold_back_the_next_one() {
        // A hanging endpoint answers nothing until the request times out (10 s by default):
        // the probe out then must not keep the breaker from finding the endpoint back sooner.
        let now = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            b.failed(now);
        }
        let first = now + FIRST;
        assert_eq!(b.permit(first), Permit::Probe);
        assert_eq!(
            b.permit(first + FIRST),
            Permit::Wait,
            "one probe per interval"
        );
        // Unanswered for as long as a failed probe would have kept the breaker open.
        let second = first + 2 * FIRST;
        assert_eq!(b.probe_at(), Some(second));
        assert_eq!(b.permit(second), Permit::Probe);
        // The next one waits twice as long again, up to the most.
        assert_eq!(b.probe_at(), Some(second + 4 * FIRST));
        assert_eq!(b.permit(second + 4 * FIRST), Permit::Probe);
        assert_eq!(b.probe_at(), Some(second + 4 * FIRST + MAX));
        // The latest probe succeeds while the earlier ones still hang: the endpoint is back,
        // and an earlier one timing out afterwards counts as one failure of a closed breaker.
        assert_eq!(b.succeeded(), Transition::Recovered);
        assert_eq!(b.failed(second + 5 * FIRST), Transition::None);
        assert_eq!(b.permit(second + 5 * FIRST), Permit::Send);
    }

    #[test]
    fn a_failed_probe_doubles_the_open_time_up_to_the_most() {
        let mut now = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            b.failed(now);
        }
        let mut open_for = Vec::new();
        for _ in 0..5 {
            let until = b.probe_at().expect("open");
            open_for.push(until - now);
            now = until;
            assert_eq!(b.permit(now), Permit::Probe);
            assert_eq!(b.failed(now), Transition::Opened);
        }
        let secs: Vec<u64> = open_for.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 5, 5]);
    }

    #[test]
    fn the_ramp_doubles_after_each_round_of_successes() {
        let mut ramp = Ramp::new(2, 16);
        assert_eq!(ramp.limit(), 16, "full concurrency until a recovery");
        ramp.restart();
        let mut limits = vec![ramp.limit()];
        for _ in 0..40 {
            ramp.succeeded();
            limits.push(ramp.limit());
        }
        limits.dedup();
        assert_eq!(limits, [2, 4, 8, 16]);
    }

    proptest! {
        /// However requests end (or hang), an open breaker lets probes out one per interval
        /// at most: a probe while another is unanswered only once that one has been out for
        /// twice the first open time; and it never sends otherwise.
        #[test]
        fn an_open_breaker_lets_out_one_probe_per_interval_at_most(
            steps in proptest::collection::vec((0u8..3, 0u64..1500), 1..200)
        ) {
            let mut now = Instant::now();
            let mut b = breaker();
            // When the latest probe went out, while it is unanswered.
            let mut probe_out: Option<Instant> = None;
            for (kind, after_ms) in steps {
                now += Duration::from_millis(after_ms);
                match kind {
                    0 => match b.permit(now) {
                        Permit::Probe => {
                            if let Some(sent) = probe_out {
                                prop_assert!(now - sent >= 2 * FIRST, "{:?} apart", now - sent);
                            }
                            probe_out = Some(now);
                        }
                        Permit::Send => prop_assert!(!b.is_open()),
                        Permit::Wait => prop_assert!(b.is_open()),
                    },
                    1 => { b.succeeded(); probe_out = None; }
                    _ => { if b.failed(now) == Transition::Opened { probe_out = None; } }
                }
            }
        }
    }
}
