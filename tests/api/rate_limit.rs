//! A connection's `rate_limit_per_second`: the receiver never sees more than that many requests
//! in any one-second window, and nothing is dropped to get there.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{Receiver, batch_of, spawn_app};

/// The most requests that arrived within any one second.
fn busiest_second(arrivals: &[std::time::Instant]) -> usize {
    let mut sorted = arrivals.to_vec();
    sorted.sort();
    (0..sorted.len())
        .map(|i| {
            sorted[i..]
                .iter()
                .take_while(|at| at.duration_since(sorted[i]) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn no_second_holds_more_requests_than_the_limit() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline(
            &receiver.url("/limited"),
            json!({"rate_limit_per_second": 20}),
        )
        .await;
    // Real time: one request per event, 70 of them, all due at once.
    for _ in 0..2 {
        let batch = batch_of(&["custom_event"; 35]);
        assert_eq!(app.post_events(&input, batch).await.status(), 202);
    }
    let got = receiver.take(70).await;
    let arrivals: Vec<_> = got.iter().map(|r| r.at).collect();
    let busiest = busiest_second(&arrivals);
    assert!(busiest <= 20, "{busiest} requests within one second");
    assert!(
        busiest >= 15,
        "paced near the limit, not far below: {busiest}"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_rate_limit_of_zero_is_refused() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook("https://example.com/hook").await;
    let response = app
        .admin(reqwest::Method::POST, "/api/v1/connections")
        .json(&json!({"input_id": input["id"], "output_id": output["id"],
                      "settings": {"rate_limit_per_second": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rate_limit_per_second"),
        "{body}"
    );
    app.stop().await.unwrap();
}
