//! Retry policy as pure functions: how a webhook answer is classified, and how long to wait
//! before the next attempt (exponential, full jitter, capped, honouring `Retry-After`).

use std::time::Duration;

/// What to do after one webhook request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Classification {
    Delivered,
    /// Try again later; `after` is the receiver's `Retry-After`, if it sent one.
    Retry {
        after: Option<Duration>,
    },
    /// The receiver refused the request for good (a 4xx other than 408 and 429).
    DeadLetter,
}

/// Classifies an HTTP status (transport errors are always `Retry`).
pub(crate) fn classify(status: u16, retry_after: Option<Duration>) -> Classification {
    match status {
        200..=299 => Classification::Delivered,
        408 | 429 | 500..=599 => Classification::Retry { after: retry_after },
        // Everything else, 3xx included: redirects are not followed (a redirect could lead to a
        // private address), so a moved endpoint is a configuration error, not a passing one.
        _ => Classification::DeadLetter,
    }
}

/// Parses `Retry-After` given in seconds. (The HTTP-date form is rare for webhooks and is
/// treated as absent, which falls back to our own backoff.)
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The retry schedule.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The ceiling of the delay before attempt `attempt + 1` (attempt counts from 1).
    pub(crate) fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1).min(31))
            .unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The delay before the next attempt: full jitter over the ceiling (`unit` in [0, 1) is the
    /// random draw), but never less than what the receiver asked for with `Retry-After`.
    pub(crate) fn delay(&self, attempt: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let jittered = self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0));
        // Never retry hot: at least a tenth of the initial delay.
        let jittered = jittered.max(self.initial / 10);
        match retry_after {
            Some(asked) => asked.max(jittered),
            None => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn statuses_are_classified_like_mparticle_partners_expect() {
        assert_eq!(classify(200, None), Classification::Delivered);
        assert_eq!(classify(204, None), Classification::Delivered);
        assert_eq!(classify(408, None), Classification::Retry { after: None });
        let after = Some(Duration::from_secs(3));
        assert_eq!(classify(429, after), Classification::Retry { after });
        assert_eq!(classify(503, None), Classification::Retry { after: None });
        assert_eq!(classify(400, None), Classification::DeadLetter);
        assert_eq!(classify(404, None), Classification::DeadLetter);
        assert_eq!(classify(410, None), Classification::DeadLetter);
        assert_eq!(classify(301, None), Classification::DeadLetter);
    }

    #[test]
    fn retry_after_in_seconds_is_read() {
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    proptest! {
        #[test]
        fn the_ceiling_grows_and_stays_capped(initial_ms in 1u64..10_000, max_s in 1u64..3_600, attempt in 1u32..100) {
            let b = Backoff { initial: Duration::from_millis(initial_ms), max: Duration::from_secs(max_s) };
            prop_assert!(b.ceiling(attempt) <= b.ceiling(attempt + 1));
            prop_assert!(b.ceiling(attempt) <= b.max.max(b.initial));
        }

        #[test]
        fn the_delay_honours_retry_after_and_the_cap(attempt in 1u32..64, unit in 0.0f64..1.0, asked in proptest::option::of(0u64..10_000)) {
            let b = Backoff { initial: Duration::from_secs(1), max: Duration::from_secs(300) };
            let asked = asked.map(Duration::from_secs);
            let d = b.delay(attempt, asked, unit);
            if let Some(asked) = asked { prop_assert!(d >= asked); } else { prop_assert!(d <= b.max); }
            prop_assert!(d >= Duration::from_millis(100));
        }
    }
}
