//! A connection's circuit breaker and its ramp after recovery, as pure state machines (the
//! caller passes the time), so the rules are tested without a clock or a receiver.
//!
//! Closed, requests flow. After `failures` consecutive failed requests it opens: nothing is sent,
//! the connection's jobs wait in the table (a dead endpoint then costs no requests, no retry
//! writes and no lease renewals), until a single probe request is let through. A probe that
//! succeeds closes it and reports a recovery (delivery then brings the waiting jobs forward); one
//! that fails opens it again for twice as long, up to `max_open`.
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
    Closed { failures: u32 },
    Open { until: Instant, interval: Duration },
    Probing { interval: Duration },
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
                self.state = State::Probing { interval };
                Permit::Probe
            }
            State::Open { .. } | State::Probing { .. } => Permit::Wait,
        }
    }

    /// Whether requests are held back (open, or a probe is out).
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }

    /// When a probe may go out, if the breaker is open.
    pub(crate) fn probe_at(&self) -> Option<Instant> {
        match self.state {
            State::Open { until, .. } => Some(until),
            _ => None,
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
        if let State::Probing { interval } = self.state {
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
            State::Probing { interval } => {
                let longer = interval.saturating_mul(2).min(self.max_open);
                self.open(now, longer)
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
        assert_eq!(b.probe_at(), None, "a probe is out");
        b.sent_nothing(now + FIRST);
        assert_eq!(b.probe_at(), Some(now + FIRST), "due again at once");
        assert_eq!(b.permit(now + FIRST), Permit::Probe);
        b.sent_nothing(now + FIRST);
        b.succeeded();
        b.sent_nothing(now + FIRST);
        assert_eq!(b.permit(now + FIRST), Permit::Send, "closed stays closed");
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
        /// However requests end, at most one probe is out while the breaker is open, and it
        /// never sends while open before its time.
        #[test]
        fn an_open_breaker_lets_out_one_probe_at_most(
            steps in proptest::collection::vec((0u8..3, 0u64..3000), 1..200)
        ) {
            let start = Instant::now();
            let mut b = breaker();
            let mut probes_out = 0;
            for (kind, at_ms) in steps {
                let now = start + Duration::from_millis(at_ms);
                match kind {
                    0 => match b.permit(now) {
                        Permit::Probe => {
                            probes_out += 1;
                            prop_assert_eq!(probes_out, 1);
                        }
                        Permit::Send => prop_assert!(!b.is_open()),
                        Permit::Wait => prop_assert!(b.is_open()),
                    },
                    1 => { b.succeeded(); probes_out = 0; }
                    _ => { if b.failed(now) == Transition::Opened { probes_out = 0; } }
                }
            }
        }
    }
}
