//! The single JSON line printed on stdout.
//!
//! Field names and order are the tool's output contract: scripts compare runs
//! by parsing this line, so keep it stable. Everything human-oriented goes to
//! stderr instead.

use serde::Serialize;

use crate::payload::{Identities, Payload};
use crate::receiver::Latencies;

#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) batches: u64,
    pub(crate) concurrency: u64,
    /// `null` for closed-loop runs.
    pub(crate) offered_events_per_s: Option<f64>,
    pub(crate) accepted_events_per_s: f64,
    pub(crate) delivered_events_per_s: f64,
    /// Batches not answered 202.
    pub(crate) errors: u64,
    /// Distinct events that reached the webhook receiver.
    pub(crate) delivered: u64,
    pub(crate) latency_ms: LatencyReport,
    pub(crate) peak_rss_mb: Option<f64>,
    /// Boson's CPU time (user + system) from the first send until every event was delivered,
    /// per event: ingest, storage and delivery together.
    pub(crate) cpu_us_per_event: Option<f64>,
    /// The part of `cpu_us_per_event` spent while the batches were being sent (all of ingest,
    /// and the deliveries that kept up).
    pub(crate) sending_cpu_us_per_event: Option<f64>,
    /// The part spent after the last batch was answered, until every event was delivered (the
    /// deliveries that fell behind); 0-ish with `--ingest-only`.
    pub(crate) draining_cpu_us_per_event: Option<f64>,
    /// `--ingest-only`: no connection, acceptance alone.
    pub(crate) ingest_only: bool,
    /// `--payload`: the batches' shape.
    pub(crate) payload: Payload,
    /// `--identities`: whom the batches named.
    pub(crate) identities: Identities,
    pub(crate) send_as_batch: bool,
    /// Whether the output signed its requests (`--sign`).
    pub(crate) signed: bool,
    /// Whether the connection had the Data Filter and forwarding rules of `--rules`.
    pub(crate) rules: bool,
    /// Whether every batch stated consent (`--consent`, or `--rules`).
    pub(crate) consent: bool,
    /// Whether the connection kept each user's batches in order (`--per-user`).
    pub(crate) per_user: bool,
    /// `--batch-window-secs`: the connection's coalescing window (0: none).
    pub(crate) batch_window_secs: u32,
    /// `--users`: how many users the batches came from (`null`: one per batch).
    pub(crate) users: Option<u64>,
    /// `--failing-user`: requests of the first user answered 500 (its events are not in
    /// `delivered` or the latency).
    pub(crate) failed_requests: Option<u64>,
    /// Webhook requests the receiver got per event delivered.
    pub(crate) requests_per_event: Option<f64>,
    /// `--nodes`: Boson processes sharing the database, the batches spread over them, each
    /// user's to every node (`peak_rss_mb` is then the largest node's, the CPU figures all
    /// nodes' together).
    pub(crate) nodes: u64,
}

/// Always an object, with `null` values when nothing was delivered, so
/// consumers can read `.latency_ms.p99` without checking the shape.
#[derive(Debug, Serialize)]
pub(crate) struct LatencyReport {
    pub(crate) p50: Option<f64>,
    pub(crate) p99: Option<f64>,
    pub(crate) max: Option<f64>,
}

impl From<Option<Latencies>> for LatencyReport {
    fn from(l: Option<Latencies>) -> Self {
        Self {
            p50: l.map(|l| round(l.p50, 3)),
            p99: l.map(|l| round(l.p99, 3)),
            max: l.map(|l| round(l.max, 3)),
        }
    }
}

impl Report {
    /// Rounds the floating-point fields so the line stays readable.
    pub(crate) fn rounded(mut self) -> Self {
        self.offered_events_per_s = self.offered_events_per_s.map(|r| round(r, 1));
        self.accepted_events_per_s = round(self.accepted_events_per_s, 1);
        self.delivered_events_per_s = round(self.delivered_events_per_s, 1);
        self.peak_rss_mb = self.peak_rss_mb.map(|mb| round(mb, 1));
        self.cpu_us_per_event = self.cpu_us_per_event.map(|us| round(us, 2));
        self.sending_cpu_us_per_event = self.sending_cpu_us_per_event.map(|us| round(us, 2));
        self.draining_cpu_us_per_event = self.draining_cpu_us_per_event.map(|us| round(us, 2));
        self.requests_per_event = self.requests_per_event.map(|r| round(r, 4));
        self
    }

    pub(crate) fn to_json_line(&self) -> String {
        // Serializing plain numbers, options and bools cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

/// `count / seconds`, or 0 when no time elapsed.
pub(crate) fn per_second(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// Nearest-rank percentiles of a set of milliseconds, `null` when empty.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Spread {
    pub(crate) p50: Option<f64>,
    pub(crate) p99: Option<f64>,
    pub(crate) max: Option<f64>,
}

impl Spread {
    /// Nearest-rank percentiles, rounded to 0.1 ms.
    pub(crate) fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let n = values.len();
            let at = ((p * n as f64).ceil() as usize).clamp(1, n.max(1)) - 1;
            values.get(at).map(|v| round(*v, 1))
        };
        Self {
            p50: rank(0.50),
            p99: rank(0.99),
            max: rank(1.0),
        }
    }
}

/// `numerator / denominator` to two decimals, `null` when either is missing or the
/// denominator is zero.
pub(crate) fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 => Some(round(n / d, 2)),
        _ => None,
    }
}

/// A duration in milliseconds.
pub(crate) fn ms(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let spread = Spread::of((1..=200).map(f64::from).collect());
        assert_eq!(
            (spread.p50, spread.p99, spread.max),
            (Some(100.0), Some(198.0), Some(200.0))
        );
        assert!(Spread::of(Vec::new()).p99.is_none());
    }

    #[test]
    fn a_ratio_needs_both_values() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), None), None);
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
    }
}
