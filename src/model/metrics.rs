//! Per-minute figures for the dashboard's charts: what an input received and what a connection
//! forwarded, failed, dead-lettered and had waiting, per minute.
//!
//! Every node tallies its own figures and adds them to the same database rows, so each figure
//! must merge by a rule that does not care about order or repetition of nodes: counts add, the
//! backlog (a sample every node reads from the shared queue) takes the greatest, and latency is
//! a histogram of counts per bucket, which adds. Percentiles never merge, so they are computed
//! from the merged buckets when read.

use std::collections::BTreeMap;

use crate::model::ids::{ConnectionId, InputId};

/// One minute in Unix milliseconds.
pub(crate) const MINUTE_MS: i64 = 60_000;

/// Whose figures a row holds: an input's (events received) or a connection's (the rest).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Subject {
    Input(InputId),
    Connection(ConnectionId),
}

impl Subject {
    /// The id's text, as the `subject` column holds it (the prefixes tell the two apart).
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Subject::Input(id) => id.as_str(),
            Subject::Connection(id) => id.as_str(),
        }
    }
}

/// Buckets per doubling of latency: bucket bounds grow by 2^(1/4) ≈ 1.19, so a percentile read
/// from a bucket's middle is within about 9% of the true value.
const PER_DOUBLING: f64 = 4.0;

/// The last bucket: 2^40 ms (about 35 years) and beyond.
const LAST_BUCKET: u16 = 160;

/// The start of the minute holding `ms`.
pub(crate) fn minute_of(ms: i64) -> i64 {
    ms - ms.rem_euclid(MINUTE_MS)
}

/// The bucket of a latency in milliseconds: 0 below 1 ms, then bucket `b` holds
/// `[2^((b-1)/4), 2^(b/4))` ms.
pub(crate) fn bucket_of(ms: i64) -> u16 {
    if ms < 1 {
        return 0;
    }
    let b = 1.0 + ((ms as f64).log2() * PER_DOUBLING).floor();
    // Bounded above by LAST_BUCKET, so the cast cannot truncate.
    b.min(f64::from(LAST_BUCKET)) as u16
}

/// The latency a bucket stands for: the geometric middle of its bounds (0.5 ms for bucket 0).
pub(crate) fn bucket_value(bucket: u16) -> f64 {
    if bucket == 0 {
        return 0.5;
    }
    (2f64).powf((f64::from(bucket) - 0.5) / PER_DOUBLING)
}

/// A latency histogram: how many deliveries fell in each bucket (only buckets with some).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Latency {
    buckets: BTreeMap<u16, i64>,
}

impl Latency {
    /// Counts one delivery that took `ms` milliseconds.
    pub(crate) fn record(&mut self, ms: i64) {
        self.add(bucket_of(ms), 1);
    }

    /// Adds `count` deliveries to `bucket` (a stored row, or another node's tally).
    pub(crate) fn add(&mut self, bucket: u16, count: i64) {
        if count > 0 {
            *self.buckets.entry(bucket.min(LAST_BUCKET)).or_default() += count;
        }
    }

    pub(crate) fn merge(&mut self, other: &Latency) {
        for (&bucket, &count) in &other.buckets {
            self.add(bucket, count);
        }
    }

    /// Every bucket with its count, lowest first.
    pub(crate) fn buckets(&self) -> impl Iterator<Item = (u16, i64)> + '_ {
        self.buckets.iter().map(|(&b, &c)| (b, c))
    }

    pub(crate) fn count(&self) -> i64 {
        self.buckets.values().sum()
    }

    /// The latency (ms) below which a share `q` (0..=1) of deliveries fell; none without any.
    pub(crate) fn percentile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the delivery asked for, 1-based: p50 of 4 is the 2nd, p99 of 4 the 4th.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as i64).max(1);
        let mut seen = 0;
        for (&bucket, &count) in &self.buckets {
            seen += count;
            if seen >= rank {
                return Some(bucket_value(bucket));
            }
        }
        self.buckets.keys().next_back().map(|&b| bucket_value(b))
    }
}

/// One subject's figures for one minute (or several minutes merged into one step).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Events an input accepted.
    pub(crate) received: i64,
    /// Events a connection delivered (2xx).
    pub(crate) forwarded: i64,
    /// Webhook requests a connection made (every outcome).
    pub(crate) requests: i64,
    /// Requests that did not deliver: an error answer, no answer, or a refused address.
    pub(crate) failures: i64,
    /// Request bodies given up on (dead letters).
    pub(crate) dead_letters: i64,
    /// Delivery jobs waiting for the connection: the most seen in a sample.
    pub(crate) backlog: i64,
    /// Time from a batch's acceptance to its delivery, per delivered request.
    pub(crate) latency: Latency,
}

impl Figures {
    /// Merges another tally of the same subject and minute (or a later minute of one step).
    pub(crate) fn merge(&mut self, other: &Figures) {
        self.received += other.received;
        self.forwarded += other.forwarded;
        self.requests += other.requests;
        self.failures += other.failures;
        self.dead_letters += other.dead_letters;
        self.backlog = self.backlog.max(other.backlog);
        self.latency.merge(&other.latency);
    }
}

/// A chart's time axis: `points` steps of `step_ms` each, the last holding `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Axis {
    pub(crate) start_ms: i64,
    pub(crate) step_ms: i64,
    pub(crate) points: usize,
}

impl Axis {
    /// The last hour per minute (60 points) or the last day per 5 minutes (288 points).
    pub(crate) fn ending_at(now: i64, step_ms: i64, points: usize) -> Self {
        let last = now - now.rem_euclid(step_ms);
        let span = step_ms.saturating_mul(i64::try_from(points).unwrap_or(i64::MAX) - 1);
        Self {
            start_ms: last - span,
            step_ms,
            points,
        }
    }

    /// The end of the axis (exclusive).
    pub(crate) fn end_ms(&self) -> i64 {
        self.start_ms + self.step_ms * i64::try_from(self.points).unwrap_or(0)
    }

    /// The start of each step.
    pub(crate) fn times(&self) -> Vec<i64> {
        (0..self.points)
            .map(|i| self.start_ms + self.step_ms * i64::try_from(i).unwrap_or(0))
            .collect()
    }

    /// The step a minute falls in, if on the axis.
    pub(crate) fn index_of(&self, minute_ms: i64) -> Option<usize> {
        if minute_ms < self.start_ms || minute_ms >= self.end_ms() {
            return None;
        }
        usize::try_from((minute_ms - self.start_ms) / self.step_ms).ok()
    }

    /// One subject's minutes as a series on the axis: minutes of one step merge.
    pub(crate) fn series<'a>(
        &self,
        minutes: impl IntoIterator<Item = (i64, &'a Figures)>,
    ) -> Vec<Figures> {
        let mut series = vec![Figures::default(); self.points];
        for (minute, figures) in minutes {
            if let Some(i) = self.index_of(minute) {
                series[i].merge(figures);
            }
        }
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency_of(values: &[i64]) -> Latency {
        let mut latency = Latency::default();
        for &v in values {
            latency.record(v);
        }
        latency
    }

    #[test]
    fn buckets_grow_with_latency_and_hold_their_bounds() {
        assert_eq!(bucket_of(-5), 0);
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 1);
        let mut previous = 0;
        for ms in 1..100_000 {
            let b = bucket_of(ms);
            assert!(b >= previous, "{ms} ms went to a lower bucket");
            previous = b;
            let value = bucket_value(b);
            // The bucket's middle is within one bucket's width (19%) of every value in it.
            assert!(
                (value / ms as f64 - 1.0).abs() < 0.19,
                "{ms} ms read as {value}"
            );
        }
        assert_eq!(bucket_of(i64::MAX), LAST_BUCKET);
    }

    #[test]
    fn percentiles_come_from_the_ranked_delivery() {
        assert_eq!(Latency::default().percentile(0.5), None);
        // 98 fast deliveries and 2 slow ones: p50 is fast, p99 is slow.
        let mut values = vec![10; 98];
        values.extend([5_000, 5_000]);
        let latency = latency_of(&values);
        let p50 = latency.percentile(0.5).unwrap();
        let p99 = latency.percentile(0.99).unwrap();
        assert!((p50 / 10.0 - 1.0).abs() < 0.1, "p50 {p50}");
        assert!((p99 / 5_000.0 - 1.0).abs() < 0.1, "p99 {p99}");
        // One delivery is every percentile.
        let one = latency_of(&[200]);
        assert_eq!(one.percentile(0.5), one.percentile(0.99));
    }

    #[test]
    fn merged_histograms_answer_as_if_one_node_saw_everything() {
        let a: Vec<i64> = (1..=500).map(|i| i * 3).collect();
        let b: Vec<i64> = (1..=300).map(|i| i * 17 + 1_000).collect();
        let mut merged = latency_of(&a);
        merged.merge(&latency_of(&b));
        let all: Vec<i64> = a.iter().chain(&b).copied().collect();
        let whole = latency_of(&all);
        assert_eq!(merged, whole);
        assert_eq!(merged.count(), 800);
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(merged.percentile(q), whole.percentile(q));
        }
        // Merging is order-free: b into a equals a into b.
        let mut other = latency_of(&b);
        other.merge(&latency_of(&a));
        assert_eq!(other, merged);
    }

    #[test]
    fn figures_add_counts_and_keep_the_largest_backlog() {
        let mut a = Figures {
            received: 3,
            forwarded: 2,
            requests: 4,
            failures: 1,
            dead_letters: 1,
            backlog: 7,
            latency: latency_of(&[5]),
        };
        let b = Figures {
            received: 1,
            forwarded: 5,
            requests: 1,
            failures: 0,
            dead_letters: 2,
            backlog: 4,
            latency: latency_of(&[50]),
        };
        a.merge(&b);
        assert_eq!(
            (
                a.received,
                a.forwarded,
                a.requests,
                a.failures,
                a.dead_letters,
                a.backlog
            ),
            (4, 7, 5, 1, 3, 7)
        );
        assert_eq!(a.latency.count(), 2);
    }

    #[test]
    fn an_axis_places_minutes_in_their_steps() {
        let now = 1_000 * MINUTE_MS + 42_000;
        let hour = Axis::ending_at(now, MINUTE_MS, 60);
        assert_eq!(hour.times().len(), 60);
        assert_eq!(*hour.times().last().unwrap(), 1_000 * MINUTE_MS);
        assert_eq!(hour.index_of(1_000 * MINUTE_MS), Some(59));
        assert_eq!(hour.index_of(941 * MINUTE_MS), Some(0));
        assert_eq!(hour.index_of(940 * MINUTE_MS), None);
        assert_eq!(hour.index_of(1_001 * MINUTE_MS), None);

        let day = Axis::ending_at(now, 5 * MINUTE_MS, 288);
        let one = Figures {
            received: 2,
            backlog: 3,
            ..Figures::default()
        };
        // Two minutes of one five-minute step merge into it.
        let series = day.series([(995 * MINUTE_MS, &one), (996 * MINUTE_MS, &one)]);
        assert_eq!(series.len(), 288);
        assert_eq!(series[286].received, 4);
        assert_eq!(series[286].backlog, 3);
        assert_eq!(minute_of(now), 1_000 * MINUTE_MS);
    }
}
