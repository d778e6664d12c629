//! The Live Stream as a test reads it: `GET /api/v1/live-stream` as server-sent events, item by
//! item.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, batch_of, spawn_app};

/// The Live Stream of one node as server-sent events, read item by item.
pub struct LiveStream {
    response: reqwest::Response,
    buffer: String,
}

impl LiveStream {
    /// Opens `GET /api/v1/live-stream?{query}`; the node publishes to it from the moment the
    /// answer's headers arrive.
    pub async fn open(node: &TestApp, query: &str) -> Self {
        let response = node
            .admin(Method::GET, &format!("/api/v1/live-stream?{query}"))
            .send()
            .await
            .expect("live stream");
        assert_eq!(response.status(), 200);
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next item within `wait`, if one comes.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(item) = self.buffered_item() {
                return Some(item);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .ok()?
                .expect("live stream chunk")?;
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// Takes the first complete `item` event off the buffer (keep-alive comments are skipped).
    fn buffered_item(&mut self) -> Option<Value> {
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            let data = event.lines().find_map(|line| line.strip_prefix("data:"));
            if event.lines().any(|line| line == "event: item")
                && let Some(data) = data
            {
                return Some(serde_json::from_str(data.trim()).expect("item JSON"));
            }
        }
        None
    }

    /// Whether an item saying "filtered by status" arrives within `wait`.
    pub async fn shows_filtered_by_status(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while let Some(item) = self
            .next_within(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            if item["outcome"] == "filtered" && item["setting"] == "status" {
                return true;
            }
        }
        false
    }
}

/// Reads items until one matches `wanted`, within a few seconds.
async fn find(live: &mut LiveStream, wanted: impl Fn(&Value) -> bool) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(item) = live
        .next_within(deadline.saturating_duration_since(Instant::now()))
        .await
    {
        if wanted(&item) {
            return Some(item);
        }
    }
    None
}

#[tokio::test]
async fn a_stream_opened_after_traffic_starts_with_it_each_item_named() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let batch = batch_of(&["custom_event", "screen_view", "commerce_event"]);
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    receiver.take(3).await;

    // Opened after the events were delivered: they come from the node's history, in the order
    // they were recorded, where a delivery may come before the inbound items of its own batch
    // (the request's handler reports those after the commit, while delivery starts at once).
    let mut live = LiveStream::open(&app, "").await;
    let mut missing = vec![
        ("inbound", "Clicked"),
        ("inbound", "Home"),
        ("inbound", "purchase"),
        ("outbound", "Clicked"),
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !missing.is_empty() {
        let Some(item) = live
            .next_within(deadline.saturating_duration_since(Instant::now()))
            .await
        else {
            break;
        };
        missing
            .retain(|(direction, name)| item["direction"] != *direction || item["name"] != *name);
    }
    assert!(missing.is_empty(), "no items for {missing:?}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_retrying_event_says_why_and_when_it_is_tried_next() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None)]);
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut live = LiveStream::open(&app, "direction=outbound").await;
    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    let retrying = find(&mut live, |i| i["outcome"] == "retrying")
        .await
        .expect("a retrying item");
    assert_eq!(retrying["status"], 503, "{retrying}");
    assert_eq!(retrying["name"], "Clicked", "{retrying}");
    assert!(
        retrying["error"]
            .as_str()
            .unwrap_or_default()
            .contains("503"),
        "{retrying}"
    );
    let next = retrying["next_attempt_at"]
        .as_i64()
        .expect("next_attempt_at");
    assert!(next >= retrying["at"].as_i64().unwrap(), "{retrying}");
    receiver.next().await;
    receiver.next().await;
    app.stop().await.unwrap();
}
