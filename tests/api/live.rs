//! The Live Stream as a test reads it: `GET /api/v1/live-stream` as server-sent events, item by
//! item.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

use crate::helpers::TestApp;

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
