//! Logging setup and Boson's metrics.
//!
//! Metrics live in a `prometheus_client::Registry` owned by the app rather than in a global
//! recorder: each `run` has its own, so tests that start several servers in one process read
//! their own counts, and there is no global mutable state (house style rule 5).

pub(crate) mod minutes;

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{ConnectionId, InputId};
use crate::model::metrics::Subject;
use crate::model::now_ms;
use minutes::MinuteTally;

/// Installs the tracing subscriber: `RUST_LOG`-style filtering (default `info`), and JSON lines
/// when `BOSON_LOG_FORMAT=json`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let json = std::env::var("BOSON_LOG_FORMAT").is_ok_and(|f| f == "json");
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Ids are label values as the strings they are. Labels hold the ids themselves, not copies
/// of their text: building a label set to count one delivery then costs no allocation.
macro_rules! id_label_values {
    ($($id:ty),*) => {
        $(
            impl EncodeLabelValue for $id {
                fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                    EncodeLabelValue::encode(&self.as_str(), encoder)
                }
            }
        )*
    };
}

id_label_values!(InputId, ConnectionId);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputLabels {
    input: InputId,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    input: InputId,
    endpoint: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    input: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    connection: ConnectionId,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    connection: ConnectionId,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConsentReadLabels {
    by: &'static str,
}

/// Boson's metrics. Label values are input and connection ids and fixed reasons, all bounded.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    events_accepted: Family<InputLabels, Counter>,
    ingest_requests: Family<EndpointLabels, Counter>,
    events_rejected: Family<RejectLabels, Counter>,
    deliveries: Family<DeliveryLabels, Counter>,
    events_delivered: Family<ConnectionLabels, Counter>,
    consent_reads: Family<ConsentReadLabels, Counter>,
    delivery_latency: Histogram,
    queue_depth: Gauge,
    oldest_pending_age: Gauge<f64, AtomicU64>,
    /// Per-minute figures for the dashboard's charts, until flushed to the database.
    minutes: MinuteTally,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("boson");
        let events_accepted = Family::<InputLabels, Counter>::default();
        registry.register(
            "events_accepted",
            "Events accepted (committed) by input",
            events_accepted.clone(),
        );
        let ingest_requests = Family::<EndpointLabels, Counter>::default();
        registry.register(
            "ingest_requests",
            "SDK upload requests by input and endpoint (web_v3, web_legacy)",
            ingest_requests.clone(),
        );
        let events_rejected = Family::<RejectLabels, Counter>::default();
        registry.register(
            "events_rejected",
            "Ingest requests refused, by input (or `unknown`) and reason",
            events_rejected.clone(),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "deliveries",
            "Webhook requests by connection and outcome (delivered, retry, dead_letter)",
            deliveries.clone(),
        );
        let events_delivered = Family::<ConnectionLabels, Counter>::default();
        registry.register(
            "events_delivered",
            "Events delivered by connection",
            events_delivered.clone(),
        );
        let consent_reads = Family::<ConsentReadLabels, Counter>::default();
        registry.register(
            "consent_reads",
            "Profile consent reads for the consent rules: one per claim of jobs (claim), or one \
             per job worked without the consent its commit or claim carries (job)",
            consent_reads.clone(),
        );
        // 1 ms … ~16 s: real-time delivery on loopback sits at the low end, retries at the top.
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 15);
        let delivery_latency = Histogram::new(buckets);
        registry.register(
            "delivery_latency_seconds",
            "Time from a batch's acceptance to its successful webhook delivery",
            delivery_latency.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register("queue_depth", "Delivery jobs pending", queue_depth.clone());
        let oldest_pending_age = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "queue_oldest_pending_age_seconds",
            "Age of the oldest pending delivery job",
            oldest_pending_age.clone(),
        );
        Self {
            registry,
            events_accepted,
            ingest_requests,
            events_rejected,
            deliveries,
            events_delivered,
            consent_reads,
            delivery_latency,
            queue_depth,
            oldest_pending_age,
            minutes: MinuteTally::default(),
        }
    }

    /// The per-minute figures not yet written.
    pub(crate) fn minutes(&self) -> &MinuteTally {
        &self.minutes
    }

    pub(crate) fn accepted(&self, input: &InputId, events: usize) {
        let labels = InputLabels {
            input: input.clone(),
        };
        self.events_accepted
            .get_or_create(&labels)
            .inc_by(events as u64);
        let received = i64::try_from(events).unwrap_or(i64::MAX);
        self.minutes
            .update(Subject::Input(input.clone()), now_ms(), |f| {
                f.received += received;
            });
    }

    pub(crate) fn ingest_request(&self, input: &InputId, endpoint: &'static str) {
        let labels = EndpointLabels {
            input: input.clone(),
            endpoint,
        };
        self.ingest_requests.get_or_create(&labels).inc();
    }

    pub(crate) fn rejected(&self, input: Option<&InputId>, reason: &'static str) {
        let labels = RejectLabels {
            input: input.map_or("unknown", InputId::as_str).to_owned(),
            reason,
        };
        self.events_rejected.get_or_create(&labels).inc();
    }

    pub(crate) fn delivery(&self, connection: &ConnectionId, outcome: AttemptOutcome) {
        let labels = DeliveryLabels {
            connection: connection.clone(),
            outcome: outcome.as_str(),
        };
        self.deliveries.get_or_create(&labels).inc();
        if outcome == AttemptOutcome::DeadLetter {
            self.minutes
                .update(Subject::Connection(connection.clone()), now_ms(), |f| {
                    f.dead_letters += 1;
                });
        }
    }

    /// Counts a read of profile consent for the consent rules: `claim` for a claim's one query,
    /// `job` for a job reading its own (the cost the carried consent avoids).
    pub(crate) fn consent_read(&self, by: &'static str) {
        self.consent_reads
            .get_or_create(&ConsentReadLabels { by })
            .inc();
    }

    /// Records a webhook request that did not deliver (an error answer, no answer, or an
    /// address refused), for the charts' failures.
    pub(crate) fn request_failed(&self, connection: &ConnectionId) {
        self.minutes
            .update(Subject::Connection(connection.clone()), now_ms(), |f| {
                f.requests += 1;
                f.failures += 1;
            });
    }

    /// Records delivered requests of one job, all in the minute holding `at_ms`: together they
    /// carried `events` events, and each was delivered `ages_ms` after its batch was accepted.
    /// Counted together, not per request: each count is a labelled lookup, and real-time
    /// delivery makes a request per event.
    pub(crate) fn delivered(
        &self,
        connection: &ConnectionId,
        events: usize,
        ages_ms: &[i64],
        at_ms: i64,
    ) {
        if ages_ms.is_empty() {
            return;
        }
        let requests = ages_ms.len() as u64;
        let labels = DeliveryLabels {
            connection: connection.clone(),
            outcome: AttemptOutcome::Delivered.as_str(),
        };
        self.deliveries.get_or_create(&labels).inc_by(requests);
        let labels = ConnectionLabels {
            connection: connection.clone(),
        };
        self.events_delivered
            .get_or_create(&labels)
            .inc_by(events as u64);
        for &age_ms in ages_ms {
            self.delivery_latency.observe(age_ms as f64 / 1000.0);
        }
        let forwarded = i64::try_from(events).unwrap_or(i64::MAX);
        self.minutes
            .update(Subject::Connection(connection.clone()), at_ms, |f| {
                f.requests += i64::try_from(requests).unwrap_or(i64::MAX);
                f.forwarded += forwarded;
                for &age_ms in ages_ms {
                    f.latency.record(age_ms);
                }
            });
    }

    /// Renders the Prometheus text format, with the queue gauges set from the given reading.
    pub(crate) fn render(&self, depth: i64, oldest_created_at: Option<i64>) -> String {
        self.queue_depth.set(depth);
        let age =
            oldest_created_at.map_or(0.0, |t| (now_ms().saturating_sub(t)).max(0) as f64 / 1000.0);
        self.oldest_pending_age.set(age);
        let mut out = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(%error, "Encoding metrics failed.");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_delivered_requests_count_one_by_one() {
        let metrics = Metrics::new();
        let connection = ConnectionId::new();
        let at = now_ms();
        metrics.delivered(&connection, 3, &[5, 1_500, 20], at);
        metrics.delivered(&connection, 1, &[7], at);
        metrics.delivered(&connection, 0, &[], at);
        let text = metrics.render(0, None);
        let deliveries = format!(
            "boson_deliveries_total{{connection=\"{}\",outcome=\"delivered\"}} 4",
            connection.as_str()
        );
        let events = format!(
            "boson_events_delivered_total{{connection=\"{}\"}} 4",
            connection.as_str()
        );
        assert!(text.contains(&deliveries), "{text}");
        assert!(text.contains(&events), "{text}");
        assert!(
            text.contains("boson_delivery_latency_seconds_count 4"),
            "{text}"
        );
        let minutes = metrics.minutes().take();
        assert_eq!(minutes.len(), 1);
        let figures = &minutes[0].2;
        assert_eq!((figures.requests, figures.forwarded), (4, 4));
    }
}
