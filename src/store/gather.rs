//! When a writer lane holds a small group open for more commands before committing it.
//!
//! A commit has a fixed cost whatever it carries: the WAL's fsync, the pages every batch touches
//! (the table's and its indexes' last pages, the sequence), the wake-ups of the lane and of each
//! request it answers. At saturation groups are large and that cost is shared; at a steady
//! moderate rate (3,000 requests a second, say) the lane commits almost every request alone, as
//! soon as it arrives, and pays the fixed cost per request: on this project's 2-core machine
//! ingest at 30,000 events/s cost 20–24 µs of CPU per event against 10–11 saturated.
//!
//! So a lane that has taken a group of at most [`SMALL_GROUP`] commands, at least one of them an
//! ingest request, while ingest requests arrive often enough that at least one more is expected
//! within the window, while its recent holds did gain requests ([`Gather::hold`] says why), and
//! while holding does not slow the senders down (a trial period of the other way every
//! [`TRIAL_EVERY`] periods tells, [`SLOWED`]), sleeps for the window and then takes whatever
//! else is queued. At a low rate (fewer arrivals than one a window) it never waits: a lone
//! request gains nothing by waiting, and its 202 would only come later. Nor near saturation
//! (more than [`BUSY_ARRIVALS`] expected): groups fill by themselves there. A group already
//! larger than [`SMALL_GROUP`] never waits either: it shares its commit well enough. The rate
//! is counted over the last complete period of [`PERIOD`]. Only SQLite's lane holds groups open
//! (measured there; [`super::writer`] says why PostgreSQL's lanes do not).

use std::time::{Duration, Instant};

/// A group of at most this many commands may wait for more. Commands count job updates too,
/// and requests often arrive in bursts (a sender's timer tick, a fleet of clients flushing), so
/// a group of two or three ingest requests with their connections' job updates is still a
/// small one (and the busiest window that still holds, [`BUSY_ARRIVALS`], brings up to eight
/// ingest requests). With 2, real time at 30,000 events/s committed 3.05 batches a group, 23%
/// of groups job updates alone; with 8, about 9 batches a group and almost no group of updates
/// alone, and 14% less CPU per event over five alternated runs (docs/PERFORMANCE.md, "Small
/// groups held open at a moderate rate" and "Item 3: small groups of up to eight commands held
/// open").
pub(crate) const SMALL_GROUP: usize = 8;

/// When more than this many ingest requests are expected within the window, the lane is near
/// saturation: groups fill while the previous one commits, and a closed-loop client (a fixed
/// number of requests in flight) would only be answered later, and send its next ones later.
const BUSY_ARRIVALS: f64 = 8.0;

/// The period arrivals are counted over; also how long holds that gain nothing pause.
const PERIOD: Duration = Duration::from_millis(100);

/// Holds go on while the recent ones gained at least this many ingest requests each: more than
/// the one a closed loop of two requests gains (its other request's next, which would have come
/// anyway), at most what a burst of a steady moderate rate brings (three at 30,000 events/s).
const MIN_GAIN: f64 = 2.0;

/// What a lane's holds are taken to have gained before its first: one hold that gains nothing
/// is not yet a pattern, two are.
const FIRST_GAIN: f64 = 2.0 * MIN_GAIN;

/// One period in this many is a trial of the other way (groups held or not): its arrival rate
/// against the periods' before it shows whether holding slows the senders down.
const TRIAL_EVERY: u32 = 10;

/// Holding stops when a trial period without holds took requests this many times as fast as
/// the held periods before it, and starts again when a held trial was at least 1 / this as fast
/// as the unheld periods before it. An open stream's rate does not depend on the holds; a closed
/// loop's does, and can settle where holds keep it: at sixteen requests in flight, a held group
/// gains the other half's requests, so the gain rule lets it hold, and holding keeps the rate
/// low enough (at most [`BUSY_ARRIVALS`] a window) for holds to go on, about half the rate with
/// no hold; without holds, groups fill by themselves above that (docs/PERFORMANCE.md, "Holds
/// that slow the senders").
const SLOWED: f64 = 1.25;

/// One lane's arrival count and the rule for holding a group open.
#[derive(Debug)]
pub(crate) struct Gather {
    /// How long a small group is held open; zero never holds one.
    window: Duration,
    /// Start of the period being counted.
    since: Instant,
    /// Ingest requests taken in the period being counted.
    counted: usize,
    /// Ingest requests a second over the last complete period.
    rate: f64,
    /// What the recent holds gained: ingest requests that arrived while a group was held, a
    /// mean that weighs each hold as much as all before it together.
    gained: f64,
    /// When the last hold ended (`None`: none yet).
    last_hold: Option<Instant>,
    /// Whether groups may be held outside trials (see [`SLOWED`]).
    holding: bool,
    /// Whether the period being counted is a trial of the other way.
    trial: bool,
    /// Periods ended since the last trial ended.
    since_trial: u32,
    /// The sum of the rates of the periods since the last trial.
    rates_since_trial: f64,
    /// Their mean, when a trial starts: what it is compared with (one period alone varies
    /// too much: an open stream's sender that fell behind catches up in a burst).
    before_trial: f64,
    /// Holds in the period being counted.
    holds: u32,
}

impl Gather {
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        Self {
            window,
            since: now,
            counted: 0,
            rate: 0.0,
            gained: FIRST_GAIN,
            last_hold: None,
            holding: true,
            trial: false,
            since_trial: 0,
            rates_since_trial: 0.0,
            before_trial: 0.0,
            holds: 0,
        }
    }

    /// Counts `ingests`, the ingest requests among the commands taken at `now` (the arrivals a
    /// held group waits for; delivery's commands follow from them).
    pub(crate) fn taken(&mut self, ingests: usize, now: Instant) {
        let elapsed = now.saturating_duration_since(self.since);
        if elapsed >= PERIOD {
            // Commands of this take arrived during the period that just ended.
            let rate = (self.counted + ingests) as f64 / elapsed.as_secs_f64();
            self.period_ended(rate);
            self.counted = 0;
            self.since = now;
        } else {
            self.counted += ingests;
        }
    }

    /// Ends a period that took requests at `rate`: judges a trial that ends, or starts one
    /// every [`TRIAL_EVERY`] periods.
    fn period_ended(&mut self, rate: f64) {
        if self.trial {
            self.trial = false;
            self.since_trial = 0;
            if self.holding {
                // A period without holds: were the senders faster?
                self.holding = rate <= self.before_trial * SLOWED;
            } else {
                // A held period, if it held at all (near saturation it does not): were the
                // senders not much slower?
                self.holding = self.holds > 0 && rate * SLOWED >= self.before_trial;
            }
        } else {
            self.since_trial += 1;
            self.rates_since_trial += rate;
            // The trial is the next period, the tenth since the last trial began.
            if self.since_trial + 1 >= TRIAL_EVERY {
                self.trial = true;
                self.before_trial = self.rates_since_trial / f64::from(self.since_trial);
                self.rates_since_trial = 0.0;
            }
        }
        self.holds = 0;
        self.rate = rate;
    }

    /// How long to hold a group of `commands`, `ingests` of them ingest requests, open before
    /// committing it, if at all. A group without an ingest request is never held: delivery
    /// waits for each job update's commit before it goes on with the job (a closed loop, which a
    /// hold only slows: when updates were held too, real time closed loop delivered 33,300 and
    /// 37,100 events/s in two runs against 41,500 and 41,800 without holding).
    ///
    /// Nor is a group held while the recent holds gained less than [`MIN_GAIN`] ingest requests
    /// each: a sender whose requests are all in the held group sends nothing more until they are
    /// answered (a closed loop: a server-side feed posting one request at a time, or a few),
    /// and holding it only slows it down. Held regardless, such a feed with one request in
    /// flight was accepted at 16,700–19,900 events/s against 30,100–44,600 not held, and with
    /// four at 17,300–17,700 against 56,100–64,700 (docs/PERFORMANCE.md). A period without a
    /// hold tries one again, so holds resume when they gain.
    pub(crate) fn hold(&self, commands: usize, ingests: usize, now: Instant) -> Option<Duration> {
        let expected = self.rate * self.window.as_secs_f64();
        let tried_lately = self
            .last_hold
            .is_some_and(|at| now.saturating_duration_since(at) < PERIOD);
        (!self.window.is_zero()
            && self.holding != self.trial
            && ingests > 0
            && commands <= SMALL_GROUP
            && (1.0..=BUSY_ARRIVALS).contains(&expected)
            && (self.gained >= MIN_GAIN || !tried_lately))
            .then_some(self.window)
    }

    /// Counts a hold that ended at `now` having gained `arrived` ingest requests (which
    /// [`taken`](Self::taken) counts as arrivals too).
    pub(crate) fn held(&mut self, arrived: usize, now: Instant) {
        // Counted before `taken` may end the period: the hold was decided in that period.
        self.holds += 1;
        self.taken(arrived, now);
        self.gained = (self.gained + arrived as f64) / 2.0;
        self.last_hold = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(1);

    /// A lane that took one command every `gap` for half a second (five periods: before the
    /// first trial).
    fn steady(gap: Duration, window: Duration) -> Gather {
        let start = Instant::now();
        let mut gather = Gather::new(window, start);
        let mut at = start;
        while at < start + PERIOD * 5 {
            at += gap;
            gather.taken(1, at);
        }
        gather
    }

    #[test]
    fn a_lane_that_just_started_commits_at_once() {
        let gather = Gather::new(WINDOW, Instant::now());
        assert_eq!(gather.hold(1, 1, Instant::now()), None);
    }

    #[test]
    fn at_a_low_rate_a_group_is_committed_at_once() {
        // 50 requests a second (500 events/s): 0.05 expected within a millisecond.
        let gather = steady(Duration::from_millis(20), WINDOW);
        assert_eq!(gather.hold(1, 1, Instant::now()), None);
    }

    #[test]
    fn at_a_moderate_rate_a_small_group_waits_for_more() {
        // 3,000 requests a second: 3 expected within a millisecond.
        let gather = steady(Duration::from_micros(333), WINDOW);
        assert_eq!(gather.hold(1, 1, Instant::now()), Some(WINDOW));
        assert_eq!(gather.hold(SMALL_GROUP, 1, Instant::now()), Some(WINDOW));
    }

    #[test]
    fn at_a_moderate_rate_a_burst_with_job_updates_waits_for_more() {
        // 3,000 requests a second, taken three at a time (as a sender that ticks every
        // millisecond sends them) with the updates of three delivered jobs: committed at once,
        // every burst paid a commit of its own.
        let gather = steady(Duration::from_micros(333), WINDOW);
        assert_eq!(gather.hold(6, 3, Instant::now()), Some(WINDOW));
    }

    #[test]
    fn holds_that_gain_nothing_stop() {
        // A sender with its requests all in the held group sends nothing more until they are
        // answered (a closed loop): holding only makes it slower.
        let mut gather = steady(Duration::from_micros(333), WINDOW);
        let mut now = Instant::now();
        assert!(gather.hold(1, 1, now).is_some());
        gather.held(0, now);
        assert!(
            gather.hold(1, 1, now).is_some(),
            "one empty hold is not yet a pattern"
        );
        gather.held(0, now);
        now += Duration::from_millis(1);
        assert_eq!(gather.hold(1, 1, now), None);
    }

    #[test]
    fn holds_that_gain_one_request_each_stop() {
        // Two requests in a closed loop: while one commits the other's next arrives, and a hold
        // gains just that one, which would have come anyway, a little later than it.
        let mut gather = steady(Duration::from_micros(333), WINDOW);
        let now = Instant::now();
        gather.held(1, now);
        gather.held(1, now);
        assert_eq!(gather.hold(1, 1, now), None);
    }

    #[test]
    fn holds_that_gain_requests_go_on() {
        let mut gather = steady(Duration::from_micros(333), WINDOW);
        let now = Instant::now();
        for _ in 0..10 {
            assert!(gather.hold(3, 3, now).is_some());
            gather.held(3, now);
        }
    }

    #[test]
    fn after_empty_holds_a_hold_is_tried_again_a_period_later() {
        let mut gather = steady(Duration::from_micros(333), WINDOW);
        let now = Instant::now();
        gather.held(0, now);
        gather.held(0, now);
        assert_eq!(gather.hold(1, 1, now + PERIOD / 2), None);
        // Past a period without a hold, one is tried: its gain decides whether holds resume.
        let later = now + PERIOD;
        assert!(gather.hold(1, 1, later).is_some());
        gather.held(3, later);
        assert!(gather.hold(1, 1, later).is_some());
    }

    /// Runs `periods` periods from `at` at `rate` ingest requests a second, two at a time,
    /// each pair held when the rule allows (and then gaining two); the time after.
    fn run(gather: &mut Gather, from: Instant, periods: u32, rate: u32) -> Instant {
        let steps = rate / 10 / 2;
        for step in 1..=periods * steps {
            // The last step of each period at its exact end, which ends it.
            let at = from + PERIOD * step / steps;
            if gather.hold(2, 2, at).is_some() {
                gather.held(2, at);
            } else {
                gather.taken(2, at);
            }
        }
        from + PERIOD * periods
    }

    #[test]
    fn holds_stop_when_senders_go_faster_without_them() {
        // A closed loop held at 5,000 requests a second (5 a window: held), which a trial
        // period without holds shows going twice as fast.
        let start = Instant::now();
        let mut gather = Gather::new(WINDOW, start);
        let at = run(&mut gather, start, TRIAL_EVERY - 1, 5_000);
        assert_eq!(gather.hold(2, 2, at), None, "a trial: no hold");
        let at = run(&mut gather, at, 1, 10_000);
        let at = run(&mut gather, at, 1, 5_000);
        assert_eq!(gather.hold(2, 2, at), None, "holding slowed the senders");
        // The next trial, held, near saturation, holds nothing: no change.
        let at = run(&mut gather, at, TRIAL_EVERY - 2, 10_000);
        let at = run(&mut gather, at, 1, 10_000);
        let at = run(&mut gather, at, 1, 8_000);
        assert_eq!(gather.hold(2, 2, at), None, "a trial that held nothing");
        // The next one holds, and the senders are much slower (5,000 against 8,000): no change.
        let at = run(&mut gather, at, TRIAL_EVERY - 2, 8_000);
        let at = run(&mut gather, at, 1, 5_000);
        let at = run(&mut gather, at, 1, 5_000);
        assert_eq!(gather.hold(2, 2, at), None, "a trial that slowed them");
        // The next one holds, and the senders are as fast: holds resume.
        let at = run(&mut gather, at, TRIAL_EVERY - 2, 5_000);
        let at = run(&mut gather, at, 1, 5_000);
        assert!(gather.hold(2, 2, at).is_some(), "holding did not slow them");
    }

    #[test]
    fn holds_go_on_when_senders_are_no_faster_without_them() {
        // An open stream: the trial without holds takes requests a little faster (5,500
        // against 5,000), less than `SLOWED` times as fast.
        let start = Instant::now();
        let mut gather = Gather::new(WINDOW, start);
        let at = run(&mut gather, start, TRIAL_EVERY - 1, 5_000);
        assert_eq!(gather.hold(2, 2, at), None, "a trial: no hold");
        let at = run(&mut gather, at, 1, 5_500);
        assert!(gather.hold(2, 2, at).is_some());
    }

    #[test]
    fn a_group_larger_than_small_never_waits() {
        let gather = steady(Duration::from_micros(333), WINDOW);
        assert_eq!(gather.hold(SMALL_GROUP + 1, 1, Instant::now()), None);
    }

    #[test]
    fn near_saturation_a_group_is_committed_at_once() {
        // 20,000 commands a second: 20 expected within a millisecond.
        let gather = steady(Duration::from_micros(50), WINDOW);
        assert_eq!(gather.hold(1, 1, Instant::now()), None);
    }

    #[test]
    fn a_group_of_delivery_commands_alone_never_waits() {
        let gather = steady(Duration::from_micros(333), WINDOW);
        assert_eq!(gather.hold(1, 0, Instant::now()), None);
        assert_eq!(gather.hold(2, 1, Instant::now()), Some(WINDOW));
    }

    #[test]
    fn a_zero_window_never_waits() {
        let gather = steady(Duration::from_micros(50), Duration::ZERO);
        assert_eq!(gather.hold(1, 1, Instant::now()), None);
    }

    #[test]
    fn when_arrivals_stop_the_rate_falls_and_groups_commit_at_once() {
        let mut gather = steady(Duration::from_micros(333), WINDOW);
        assert!(gather.hold(1, 1, Instant::now()).is_some());
        // One lone command after a silence: the period that ends with it is long, so its rate
        // (what arrived in it, over its length) is far below one a window.
        gather.taken(1, Instant::now() + Duration::from_secs(2));
        assert_eq!(gather.hold(1, 1, Instant::now()), None);
    }
}
