//! The pure part of a replay: what a request asks for, the settings a replay's jobs use, and
//! what a range of stored batches would send under them.

use serde_json::Value;

use crate::model::data_filter::{DataFilter, DataFilterRule, DataPoint};
use crate::model::event_type::EventType;
use crate::model::ids::{BatchId, ConnectionId, Mpid};
use crate::model::settings::{ConnectionSettings, Ordering, WebhookSettings};
use crate::pipeline::catalog::Route;
use crate::pipeline::{Handoff, fanout, filter};

/// Bodies a dry run shows.
pub(crate) const SAMPLE_SIZE: usize = 5;

/// Where a replay reads what it sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The batch log: each batch is filtered again with the connection's current settings.
    Batches,
    /// The dead letters: the stored request bodies, as they were.
    DeadLetters,
}

impl Source {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "batches" => Some(Self::Batches),
            "dead_letters" => Some(Self::DeadLetters),
            _ => None,
        }
    }

    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Batches => "batches",
            Self::DeadLetters => "dead_letters",
        }
    }
}

/// The connection's settings, restricted to `event_types` (if given), paced at `rate`. Every
/// other type is turned off by a Data Filter rule placed first, so the ordinary filter does the
/// restriction and the events that remain are treated exactly as the connection treats them.
pub(crate) fn replay_settings(
    current: &ConnectionSettings,
    event_types: Option<&[EventType]>,
    rate: u32,
) -> ConnectionSettings {
    let mut settings = current.clone();
    settings.rate_limit_per_second = Some(rate);
    if let Some(kept) = event_types {
        let off = EventType::ALL
            .into_iter()
            .filter(|t| !kept.contains(t))
            .map(|t| DataFilterRule {
                point: DataPoint::EventType(t),
                send: false,
            });
        let rules: Vec<DataFilterRule> = off
            .chain(settings.data_filter.rules().iter().cloned())
            .collect();
        settings.data_filter = DataFilter::new(settings.data_filter.send_new_data_points, rules);
    }
    settings
}

/// What a stored batch would send under some settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sends {
    pub(crate) events: i64,
    pub(crate) bodies: Vec<Vec<u8>>,
    /// Each body's events, as their indexes in the stored batch.
    pub(crate) event_indexes: Vec<Vec<usize>>,
    /// The batch's user (its MPID, unless missing or 0), as ingest reads it.
    pub(crate) user: Option<Mpid>,
}

/// A replayed job is never handed to a worker at once: it waits in the table for a poller.
#[derive(Debug)]
struct LeftInTable;

impl Handoff for LeftInTable {
    fn takes_now(&self, _: &ConnectionId) -> bool {
        false
    }
}

/// The user a replayed batch's job carries and how long it is gathered (ms; 0: not), decided
/// by the rule a live batch's job follows ([`fanout::jobs_for`]) under the replay's settings:
/// the user where they order per user or gather a user's batches, a window only with a user.
pub(crate) fn job_shape(
    settings: &ConnectionSettings,
    connection_id: &ConnectionId,
    revision_id: i64,
    user: Option<Mpid>,
) -> (Option<Mpid>, i64) {
    let route = Route {
        connection_id: connection_id.clone(),
        revision_id,
        reads_consent: false,
        per_user: settings.ordering == Ordering::PerUser,
        window_ms: settings.batch_window_ms(),
    };
    fanout::jobs_for(&[route], user, &LeftInTable)
        .pop()
        .map_or((None, 0), |job| (job.mpid, job.window_ms))
}

/// What one stored batch (its parsed `document`) sends, deciding consent rules on `consent`
/// as the worker will (see `Store::consent_for`).
pub(crate) fn sends(
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: BatchId,
    document: &Value,
    consent: Option<&Value>,
) -> Sends {
    let plan = filter::plan(settings, webhook, batch_id, document, consent);
    Sends {
        events: plan
            .payloads
            .iter()
            .map(|p| i64::try_from(p.event_count).unwrap_or(0))
            .sum(),
        event_indexes: plan
            .payloads
            .iter()
            .map(|p| p.event_indexes.clone())
            .collect(),
        bodies: plan.payloads.into_iter().map(|p| p.body).collect(),
        user: fanout::user_of(document),
    }
}

/// The events a stored request body carries (an `events` array, else the one event it is).
pub(crate) fn events_in_body(body: &[u8]) -> i64 {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => value
            .get("events")
            .and_then(Value::as_array)
            .map_or(1, |events| i64::try_from(events.len()).unwrap_or(0)),
        Err(_) => 1,
    }
}

/// A dry run's answer, added up one batch (or dead letter) at a time.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    pub(crate) batches: i64,
    pub(crate) events: i64,
    pub(crate) requests: i64,
    pub(crate) sample: Vec<Value>,
}

impl Tally {
    /// Counts one batch that sends `events` in `bodies`.
    pub(crate) fn add(&mut self, events: i64, bodies: Vec<Vec<u8>>) {
        self.add_batch(events);
        self.add_requests(bodies);
    }

    /// Counts one batch of `events` (its requests are counted as they go).
    pub(crate) fn add_batch(&mut self, events: i64) {
        self.batches += 1;
        self.events += events;
    }

    /// Counts requests in the order they go, the first ones kept as the sample.
    pub(crate) fn add_requests(&mut self, bodies: Vec<Vec<u8>>) {
        self.requests += i64::try_from(bodies.len()).unwrap_or(0);
        for body in bodies {
            if self.sample.len() == SAMPLE_SIZE {
                break;
            }
            self.sample.push(shown(&body));
        }
    }
}

/// A body as JSON, or as text when it is not JSON.
fn shown(body: &[u8]) -> Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// How long `requests` take at `rate` per second.
pub(crate) fn spacing(requests: i64, rate: i64) -> std::time::Duration {
    let requests = u32::try_from(requests.max(0)).unwrap_or(u32::MAX);
    let rate = u32::try_from(rate.max(1)).unwrap_or(u32::MAX);
    std::time::Duration::from_secs(1) * requests / rate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(types: &[&str]) -> Value {
        let events: Vec<Value> = types
            .iter()
            .map(|t| serde_json::json!({"event_type": t, "data": {"event_name": "x", "screen_name": "s"}}))
            .collect();
        serde_json::json!({"mpid": 1, "events": events})
    }

    fn webhook() -> WebhookSettings {
        serde_json::from_value(serde_json::json!({"url": "https://example.com/hook"})).unwrap()
    }

    #[test]
    fn restricting_to_event_types_drops_the_others_and_keeps_the_rest() {
        let current = ConnectionSettings::from_json(serde_json::json!({})).unwrap();
        let settings = replay_settings(&current, Some(&[EventType::ScreenView]), 5);
        let sent = sends(
            &settings,
            &webhook(),
            BatchId::new(1),
            &batch(&["custom_event", "screen_view"]),
            None,
        );
        assert_eq!(sent.events, 1);
        let body: Value = serde_json::from_slice(&sent.bodies[0]).unwrap();
        assert_eq!(body["events"][0]["event_type"], "screen_view");
        assert_eq!(settings.rate_limit_per_second, Some(5));
    }

    #[test]
    fn the_restriction_survives_a_round_trip_through_the_store_text() {
        let current = ConnectionSettings::from_json(serde_json::json!({})).unwrap();
        let settings = replay_settings(&current, Some(&[EventType::CustomEvent]), 2);
        let text = serde_json::to_string(&settings).unwrap();
        assert_eq!(ConnectionSettings::from_json_str(&text).unwrap(), settings);
    }

    #[test]
    fn the_tally_caps_its_sample() {
        let mut tally = Tally::default();
        for _ in 0..4 {
            tally.add(2, vec![b"{}".to_vec(), b"{}".to_vec()]);
        }
        assert_eq!((tally.batches, tally.events, tally.requests), (4, 8, 8));
        assert_eq!(tally.sample.len(), SAMPLE_SIZE);
    }

    #[test]
    fn spacing_follows_the_rate() {
        assert_eq!(spacing(3, 2), std::time::Duration::from_millis(1500));
        assert_eq!(spacing(0, 2), std::time::Duration::ZERO);
    }
}
