//! The Live Stream: events as they arrive per input, and what each connection did with each of
//! them (forwarded with status and latency, filtered naming the setting, failed, retrying).
//! An in-memory broadcast with no history: when nobody watches, nothing is built or sent.

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::model::ids::{BatchId, ConnectionId, InputId, Mpid};
use crate::model::settings::SettingName;

/// Items buffered per watcher; a watcher that falls further behind skips ahead (and is told).
const CAPACITY: usize = 4096;

/// Whether an item is an event arriving at an input or what a connection did with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Direction {
    Inbound,
    Outbound,
}

/// What a connection did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Forwarded,
    /// Dropped by a setting (named in the item).
    Filtered,
    /// Given up on (dead-lettered).
    Failed,
    /// Will be tried again.
    Retrying,
}

/// One Live Stream entry.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LiveItem {
    pub(crate) direction: Direction,
    pub(crate) at: i64,
    pub(crate) input_id: InputId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) connection_id: Option<ConnectionId>,
    pub(crate) batch_id: BatchId,
    /// Position of the event in its batch.
    pub(crate) index: usize,
    pub(crate) event_type: String,
    /// As a string: MPIDs exceed JavaScript's exact integer range.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "as_string")]
    pub(crate) mpid: Option<Mpid>,
    /// The event itself (inbound only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event: Option<Value>,
    /// Outbound only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<Outcome>,
    /// The setting that filtered the event.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "setting_name"
    )]
    pub(crate) setting: Option<SettingName>,
    /// The rule within the setting that filtered the event, as shown after `filtered`:
    /// `data_filter: custom_event "Coupon Viewed"`, `consent: ccpa`, `sampling 50%`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// What a setting changed in a forwarded event: `attribute removed (data_filter: coupon_code)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) latency_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// The broadcast every ingest and delivery path publishes to.
#[derive(Debug)]
pub(crate) struct LiveStream {
    sender: broadcast::Sender<LiveItem>,
}

impl Default for LiveStream {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(CAPACITY).0,
        }
    }
}

impl LiveStream {
    /// Whether anyone watches; publishers check this before building items.
    pub(crate) fn watched(&self) -> bool {
        self.sender.receiver_count() > 0
    }

    pub(crate) fn publish(&self, item: LiveItem) {
        // No watcher is not an error: the item simply goes nowhere.
        let _ = self.sender.send(item);
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<LiveItem> {
        self.sender.subscribe()
    }
}

fn as_string<S: serde::Serializer>(mpid: &Option<Mpid>, serializer: S) -> Result<S::Ok, S::Error> {
    match mpid {
        Some(mpid) => serializer.serialize_str(&mpid.to_string()),
        None => serializer.serialize_none(),
    }
}

fn setting_name<S: serde::Serializer>(
    setting: &Option<SettingName>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match setting {
        Some(setting) => serializer.serialize_str(setting.as_str()),
        None => serializer.serialize_none(),
    }
}

/// The event type of an event document.
pub(crate) fn event_type_of(event: &Value) -> String {
    event
        .get("event_type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The dashboard reads these items: typed ids must leave the JSON as it always was (ids as
    /// strings, the batch id a number, the MPID a decimal string).
    #[test]
    fn items_keep_their_json() {
        let item = LiveItem {
            direction: Direction::Outbound,
            at: 1_700_000_000_000,
            input_id: InputId::trusted("inp_0192d3b4c5e67f8091a2b3c4d5e6f708"),
            connection_id: Some(ConnectionId::trusted(
                "conn_0192d3b4c5e67f8091a2b3c4d5e6f709",
            )),
            batch_id: BatchId::new(42),
            index: 3,
            event_type: "custom_event".into(),
            mpid: Some(Mpid::new(i64::MAX)),
            event: None,
            outcome: Some(Outcome::Filtered),
            setting: Some(SettingName::Status),
            reason: None,
            note: None,
            status: None,
            latency_ms: None,
            error: None,
        };
        assert_eq!(
            serde_json::to_string(&item).expect("serialise"),
            concat!(
                r#"{"direction":"outbound","at":1700000000000,"#,
                r#""input_id":"inp_0192d3b4c5e67f8091a2b3c4d5e6f708","#,
                r#""connection_id":"conn_0192d3b4c5e67f8091a2b3c4d5e6f709","batch_id":42,"#,
                r#""index":3,"event_type":"custom_event","mpid":"9223372036854775807","#,
                r#""outcome":"filtered","setting":"status"}"#
            )
        );
        let inbound = LiveItem {
            direction: Direction::Inbound,
            connection_id: None,
            mpid: None,
            event: Some(json!({"event_type": "custom_event"})),
            outcome: None,
            setting: None,
            ..item
        };
        let value = serde_json::to_value(&inbound).expect("serialise");
        assert!(value.get("connection_id").is_none() && value.get("mpid").is_none());
    }
}
