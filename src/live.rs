//! The Live Stream: events as they arrive per input, and what each connection did with each of
//! them (forwarded with status and latency, filtered naming the setting, failed, retrying).
//! An in-memory broadcast per node, with the last [`HISTORY`] items kept so a page opened now
//! shows recent traffic. Keeping history costs building items when nobody watches, so unwatched
//! items are kept at most [`HISTORY_PER_SECOND`] a second: under load the history is a sample,
//! and publishers skip building items once a second's share is taken.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::model::ids::{BatchId, ConnectionId, InputId, Mpid};
use crate::model::settings::SettingName;

/// Items buffered per watcher; a watcher that falls further behind skips ahead (and is told).
const CAPACITY: usize = 4096;
/// Items kept for a watcher who connects later.
pub(crate) const HISTORY: usize = 300;
/// Items a second the history takes while nobody watches.
const HISTORY_PER_SECOND: i64 = 100;

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
    /// What tells the event apart from others of its type: the event name, screen name, commerce
    /// action, or the changed attribute or identity (see [`name_of`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
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
    /// When a `retrying` event is tried next (milliseconds since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) next_attempt_at: Option<i64>,
}

/// The broadcast every ingest and delivery path publishes to, and the recent history.
#[derive(Debug)]
pub(crate) struct LiveStream {
    sender: broadcast::Sender<LiveItem>,
    /// The last [`HISTORY`] items. Publishing and subscribing both hold this lock, so a new
    /// watcher gets each item exactly once: in its snapshot or from the broadcast.
    history: Mutex<VecDeque<LiveItem>>,
    /// The second (since the epoch) the unwatched share counts, and how much of it is taken.
    share_second: AtomicI64,
    share_taken: AtomicI64,
}

impl Default for LiveStream {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(CAPACITY).0,
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
            share_second: AtomicI64::new(0),
            share_taken: AtomicI64::new(0),
        }
    }
}

impl LiveStream {
    /// Whether an item built now would be kept: someone watches, or the history still takes
    /// items this second. Publishers check this before building items.
    pub(crate) fn watched(&self) -> bool {
        self.sender.receiver_count() > 0 || self.share_left(now_second())
    }

    fn share_left(&self, second: i64) -> bool {
        self.share_second.load(Ordering::Relaxed) != second
            || self.share_taken.load(Ordering::Relaxed) < HISTORY_PER_SECOND
    }

    /// Takes one unit of this second's unwatched share, if any is left. Racing publishers may
    /// overshoot the share by a few items; it bounds work, not correctness.
    fn take_share(&self) -> bool {
        let second = now_second();
        if self.share_second.swap(second, Ordering::Relaxed) != second {
            self.share_taken.store(0, Ordering::Relaxed);
        }
        self.share_taken.fetch_add(1, Ordering::Relaxed) < HISTORY_PER_SECOND
    }

    pub(crate) fn publish(&self, item: LiveItem) {
        let watched = self.sender.receiver_count() > 0;
        if !watched && !self.take_share() {
            return;
        }
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history.len() == HISTORY {
            history.pop_front();
        }
        history.push_back(item.clone());
        // No watcher is not an error: the item is kept in the history only.
        let _ = self.sender.send(item);
    }

    /// The recent history, oldest first, and the items published after it.
    pub(crate) fn subscribe(&self) -> (Vec<LiveItem>, broadcast::Receiver<LiveItem>) {
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        (history.iter().cloned().collect(), self.sender.subscribe())
    }
}

fn now_second() -> i64 {
    crate::model::now_ms().div_euclid(1000)
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

/// What tells an event apart from others of its type, for the Live Stream's rows: a custom
/// event's name, a screen view's screen name, a commerce event's product or promotion action (or
/// "impression"), the attribute a user attribute change sets, the identity type an identity
/// change changes. `None` for types without one (session start, opt out...).
pub(crate) fn name_of(event: &Value) -> Option<String> {
    let data = event.get("data")?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    match event.get("event_type").and_then(Value::as_str)? {
        "custom_event" => text(data.get("event_name")),
        "screen_view" => text(data.get("screen_name")),
        "commerce_event" => text(data.pointer("/product_action/action"))
            .or_else(|| text(data.pointer("/promotion_action/action")))
            .or_else(|| {
                data.get("product_impressions")
                    .map(|_| "impression".to_owned())
            })
            .or_else(|| text(data.get("event_name"))),
        "user_attribute_change" => text(data.get("user_attribute_name")),
        "user_identity_change" => text(data.pointer("/new/identity_type"))
            .or_else(|| text(data.pointer("/old/identity_type"))),
        _ => text(data.get("event_name")),
    }
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
            name: None,
            mpid: Some(Mpid::new(i64::MAX)),
            event: None,
            outcome: Some(Outcome::Filtered),
            setting: Some(SettingName::Status),
            reason: None,
            note: None,
            status: None,
            latency_ms: None,
            error: None,
            next_attempt_at: None,
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

    fn inbound(index: usize) -> LiveItem {
        LiveItem {
            direction: Direction::Inbound,
            at: 1,
            input_id: InputId::trusted("inp_0192d3b4c5e67f8091a2b3c4d5e6f708"),
            connection_id: None,
            batch_id: BatchId::new(1),
            index,
            event_type: "custom_event".into(),
            name: None,
            mpid: None,
            event: None,
            outcome: None,
            setting: None,
            reason: None,
            note: None,
            status: None,
            latency_ms: None,
            error: None,
            next_attempt_at: None,
        }
    }

    /// A watcher who connects late gets the last `HISTORY` items, oldest first, then the news.
    #[test]
    fn a_late_watcher_gets_the_recent_history_then_news() {
        let live = LiveStream::default();
        let watcher = live.subscribe().1;
        for index in 0..HISTORY + 5 {
            live.publish(inbound(index));
        }
        drop(watcher);
        let (history, mut news) = live.subscribe();
        let indexes: Vec<usize> = history.iter().map(|i| i.index).collect();
        assert_eq!(indexes, (5..HISTORY + 5).collect::<Vec<_>>());
        live.publish(inbound(999));
        assert_eq!(news.try_recv().expect("news").index, 999);
    }

    /// Unwatched, the history takes a bounded share a second, so publishers can stop building.
    #[test]
    fn unwatched_the_history_takes_a_bounded_share() {
        let live = LiveStream::default();
        for index in 0..1000 {
            if live.watched() {
                live.publish(inbound(index));
            }
        }
        let kept = live.subscribe().0.len();
        // Two seconds' shares at most, if the loop straddled a second.
        assert!(
            kept > 0 && kept <= 2 * HISTORY_PER_SECOND as usize,
            "{kept}"
        );
    }

    #[test]
    fn rows_are_named_by_what_tells_events_apart() {
        let cases = [
            (
                json!({"event_type": "custom_event", "data": {"event_name": "Signed Up"}}),
                Some("Signed Up"),
            ),
            (
                json!({"event_type": "screen_view", "data": {"screen_name": "Home"}}),
                Some("Home"),
            ),
            (
                json!({"event_type": "commerce_event", "data": {"product_action": {"action": "purchase"}}}),
                Some("purchase"),
            ),
            (
                json!({"event_type": "commerce_event", "data": {"promotion_action": {"action": "view"}}}),
                Some("view"),
            ),
            (
                json!({"event_type": "commerce_event", "data": {"product_impressions": []}}),
                Some("impression"),
            ),
            (
                json!({"event_type": "user_attribute_change", "data": {"user_attribute_name": "tier"}}),
                Some("tier"),
            ),
            (
                json!({"event_type": "user_identity_change", "data": {"new": {"identity_type": "email"}}}),
                Some("email"),
            ),
            (json!({"event_type": "session_start", "data": {}}), None),
            (json!({"event_type": "custom_event"}), None),
        ];
        for (event, name) in cases {
            assert_eq!(name_of(&event).as_deref(), name, "{event}");
        }
    }
}
