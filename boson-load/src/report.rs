//! The single JSON line printed on stdout.
//!
//! Field names and order are the tool's output contract: scripts compare runs
//! by parsing this line, so keep it stable. Everything human-oriented goes to
//! stderr instead.

use serde::Serialize;

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
    pub(crate) send_as_batch: bool,
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
