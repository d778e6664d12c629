//! The in-process webhook receiver that Boson delivers to.
//!
//! It answers 200 as fast as it can (so delivery throughput measures Boson, not
//! us), and for every event it finds records end-to-end latency — receive time
//! minus the `sent_at_us` attribute the sender stamped into the event — in an
//! HDR histogram. Events are de-duplicated by their `i` attribute, since a
//! webhook forwarder with retries may legitimately deliver one twice.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Context as _, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use hdrhistogram::Histogram;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::clock::unix_micros;

/// Highest latency the histogram can hold (1 h); larger values are clamped.
const MAX_TRACKED_LATENCY_US: u64 = 3_600 * 1_000_000;

/// Counters and latencies collected by the receiver, behind one mutex.
#[derive(Debug)]
struct Stats {
    /// End-to-end latency per first delivery of an event, in microseconds.
    latency_us: Histogram<u64>,
    /// Distinct events delivered (first deliveries only).
    delivered: u64,
    /// Repeat deliveries of an event already seen.
    duplicates: u64,
    /// Events without a usable `sent_at_us`/`i` attribute (not ours, or mangled).
    unrecognized: u64,
    /// Request bodies that were not JSON.
    malformed_bodies: u64,
    /// When the most recent first delivery arrived.
    last_delivery: Option<Instant>,
    /// Indexed by the event's `i`; sized to the number of events the run sends.
    seen: Vec<bool>,
    /// Requests of this MPID are answered 500 and not counted (`--failing-user`).
    failing_mpid: Option<i64>,
    /// Requests answered 500 for it.
    failed_requests: u64,
    /// Webhook requests received, whatever they carried.
    requests: u64,
}

impl Stats {
    fn new(total_events: usize) -> Result<Self> {
        Ok(Self {
            latency_us: Histogram::new_with_bounds(1, MAX_TRACKED_LATENCY_US, 3)
                .context("creating latency histogram")?,
            delivered: 0,
            duplicates: 0,
            unrecognized: 0,
            malformed_bodies: 0,
            last_delivery: None,
            seen: vec![false; total_events],
            failing_mpid: None,
            failed_requests: 0,
            requests: 0,
        })
    }
}

type Shared = Arc<Mutex<Stats>>;

/// A running receiver; [`Receiver::stop`] shuts it down.
#[derive(Debug)]
pub(crate) struct Receiver {
    addr: SocketAddr,
    stats: Shared,
    server: JoinHandle<()>,
}

impl Receiver {
    /// Binds an ephemeral loopback port and starts serving `POST /hook`.
    pub(crate) async fn start(total_events: usize) -> Result<Self> {
        let stats: Shared = Arc::new(Mutex::new(Stats::new(total_events)?));
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding webhook receiver")?;
        let addr = listener.local_addr().context("reading receiver address")?;
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(Arc::clone(&stats));
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("boson-load: webhook receiver stopped: {e}");
            }
        });
        Ok(Self {
            addr,
            stats,
            server,
        })
    }

    /// From now on answers 500 to every request of user `mpid`, without counting its events.
    pub(crate) fn fail_user(&self, mpid: i64) {
        lock(&self.stats).failing_mpid = Some(mpid);
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Distinct events delivered so far.
    pub(crate) fn delivered(&self) -> u64 {
        lock(&self.stats).delivered
    }

    /// Which events (by their `i`) have arrived so far.
    pub(crate) fn seen(&self) -> Vec<bool> {
        lock(&self.stats).seen.clone()
    }

    /// Stops serving and summarizes everything collected.
    pub(crate) fn stop(self) -> Summary {
        self.server.abort();
        // Handlers still in flight may hold a clone of the Arc, so read
        // through the lock rather than trying to unwrap it.
        let s = lock(&self.stats);
        let latency_ms = (!s.latency_us.is_empty()).then(|| {
            let ms = |us: u64| us as f64 / 1000.0;
            Latencies {
                p50: ms(s.latency_us.value_at_quantile(0.50)),
                p99: ms(s.latency_us.value_at_quantile(0.99)),
                max: ms(s.latency_us.max()),
            }
        });
        Summary {
            delivered: s.delivered,
            duplicates: s.duplicates,
            unrecognized: s.unrecognized,
            malformed_bodies: s.malformed_bodies,
            failed_requests: s.failed_requests,
            requests: s.requests,
            last_delivery: s.last_delivery,
            latency_ms,
        }
    }
}

/// What the receiver saw over the whole run.
#[derive(Debug)]
pub(crate) struct Summary {
    pub(crate) delivered: u64,
    pub(crate) duplicates: u64,
    pub(crate) unrecognized: u64,
    pub(crate) malformed_bodies: u64,
    /// Requests answered 500 because they were the failing user's.
    pub(crate) failed_requests: u64,
    /// Webhook requests received.
    pub(crate) requests: u64,
    pub(crate) last_delivery: Option<Instant>,
    /// `None` when nothing was delivered.
    pub(crate) latency_ms: Option<Latencies>,
}

/// End-to-end latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latencies {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

/// Locks the stats, tolerating poison: a panicked handler can't leave the
/// counters in a state worse than "one request's worth missing".
fn lock(stats: &Shared) -> MutexGuard<'_, Stats> {
    stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One event's identity and stamp, parsed outside the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    /// The run-wide index `i`.
    pub(crate) index: Option<usize>,
    pub(crate) sent_at_us: u64,
}

/// The stamps of a webhook body's events, in order (`None` for an event without ours), or
/// `None` if the body is not JSON.
pub(crate) fn read_stamps(body: &[u8]) -> Option<Vec<Option<Stamp>>> {
    let batch = serde_json::from_slice::<Batch>(body).ok()?;
    Some(batch.stamps())
}

impl Batch {
    fn stamps(&self) -> Vec<Option<Stamp>> {
        self.events.iter().map(Event::stamp).collect()
    }
}

async fn hook(State(stats): State<Shared>, body: Bytes) -> StatusCode {
    // Take the time before parsing so parse cost isn't charged to Boson.
    let now_us = unix_micros();
    let now = Instant::now();
    lock(&stats).requests += 1;

    let Ok(batch) = serde_json::from_slice::<Batch>(&body) else {
        lock(&stats).malformed_bodies += 1;
        // Still 200: a 4xx/5xx would make Boson retry and distort the numbers.
        return StatusCode::OK;
    };

    let mut s = lock(&stats);
    if batch.mpid.is_some() && batch.mpid == s.failing_mpid {
        s.failed_requests += 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    for stamp in batch.stamps() {
        let Some(Stamp { index, sent_at_us }) = stamp else {
            s.unrecognized += 1;
            continue;
        };
        if let Some(i) = index
            && let Some(seen) = s.seen.get_mut(i)
        {
            if *seen {
                s.duplicates += 1;
                continue;
            }
            *seen = true;
        }
        s.delivered += 1;
        s.last_delivery = Some(now);
        // Clamp rather than drop: a stamp slightly in the future (clock step)
        // or absurdly old still counts as a delivery.
        let latency = now_us
            .saturating_sub(sent_at_us)
            .clamp(1, MAX_TRACKED_LATENCY_US);
        s.latency_us.saturating_record(latency);
    }
    StatusCode::OK
}

/// The part of Boson's webhook body (`{"events": [...], …}`) the receiver reads. Typed
/// rather than a `serde_json::Value`: serde skips every other key without building it, which
/// keeps the receiver's CPU (shared with Boson on the benchmark machine) small, as a real
/// receiver's would be.
#[derive(Debug, Deserialize)]
struct Batch {
    #[serde(default)]
    events: Vec<Event>,
    #[serde(default)]
    mpid: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
struct Event {
    #[serde(default)]
    data: Data,
}

#[derive(Debug, Default, Deserialize)]
struct Data {
    #[serde(default)]
    custom_attributes: Attributes,
}

#[derive(Debug, Default, Deserialize)]
struct Attributes {
    sent_at_us: Option<Attribute>,
    i: Option<Attribute>,
}

/// We send attributes as strings (as mParticle does), but accept numbers too.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Attribute {
    Text(String),
    Number(u64),
    Other(serde::de::IgnoredAny),
}

impl Attribute {
    fn as_u64(&self) -> Option<u64> {
        match self {
            Attribute::Text(s) => s.parse().ok(),
            Attribute::Number(n) => Some(*n),
            Attribute::Other(_) => None,
        }
    }
}

impl Event {
    fn stamp(&self) -> Option<Stamp> {
        let attrs = &self.data.custom_attributes;
        Some(Stamp {
            sent_at_us: attrs.sent_at_us.as_ref()?.as_u64()?,
            index: attrs
                .i
                .as_ref()
                .and_then(Attribute::as_u64)
                .and_then(|i| usize::try_from(i).ok()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stamps(body: &serde_json::Value) -> Vec<(Option<usize>, u64)> {
        let batch: Batch = serde_json::from_value(body.clone()).unwrap();
        batch
            .events
            .iter()
            .filter_map(Event::stamp)
            .map(|s| (s.index, s.sent_at_us))
            .collect()
    }

    fn event(i: &str, sent_at_us: &serde_json::Value) -> serde_json::Value {
        json!({ "event_type": "custom_event",
                "data": { "custom_attributes": { "i": i, "sent_at_us": sent_at_us, "other": "x" } } })
    }

    #[test]
    fn reads_stamps_as_strings_or_numbers() {
        let batch =
            json!({ "batch_id": 1, "events": [event("1", &json!("10")), event("2", &json!(20))] });
        assert_eq!(stamps(&batch), [(Some(1), 10), (Some(2), 20)]);
    }

    #[test]
    fn skips_events_without_a_stamp() {
        let body = json!({ "events": [{ "data": { "event_name": "session_start" } },
                                      event("x", &json!("5"))] });
        assert_eq!(stamps(&body), [(None, 5)]);
    }
}
