//! Replayed batches follow the connection's delivery settings like live ones: with `ordering`
//! `per_user` a user's replayed batches reach the receiver in acceptance order, even when one
//! of them has to be retried; with Send as Batch and a window, one user's replayed batches go
//! out gathered into one request, and the dry run's sample is that request.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, batch_of, spawn_app_with, wait_for};
use crate::replay::replay;

/// Batch `seq` of user `mpid`, its one event tagged `seq`.
fn numbered(mpid: i64, seq: i64) -> Value {
    let mut batch = batch_of(&["custom_event"]);
    batch["mpid"] = json!(mpid);
    batch["events"][0]["data"]["custom_attributes"] = json!({"seq": seq.to_string()});
    batch
}

fn seqs(body: &Value) -> Vec<String> {
    body["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            e["data"]["custom_attributes"]["seq"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// Posts batches `0..n` of user `mpid` and waits until `delivered` requests went out and no job
/// is left.
async fn accepted(app: &TestApp, input: &Value, receiver: &mut Receiver, n: i64, delivered: usize) {
    for seq in 0..n {
        let status = app.post_events(input, numbered(7, seq)).await.status();
        assert_eq!(status, 202);
    }
    receiver.take(delivered).await;
    wait_for(|| async { app.count("jobs").await == 0 }).await;
}

#[tokio::test]
async fn a_users_replayed_batches_keep_acceptance_order_through_a_retry() {
    let app = spawn_app_with(|config| config.delivery.initial_backoff_ms = 300).await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"ordering": "per_user"});
    let (input, connection) = app.pipeline(&receiver.url("/hook"), settings).await;
    accepted(&app, &input, &mut receiver, 4, 4).await;

    // The first replayed request fails: the user's later ones must wait for its retry.
    receiver.script(&[(503, None)]);
    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 0, "to_ms": 9_999_999_999_999_i64, "source": "batches",
               "rate_per_second": 1000, "dry_run": false}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let got = receiver.take(5).await;
    assert_eq!(got[0].answered, 503);
    let delivered: Vec<Vec<String>> = got
        .iter()
        .filter(|r| r.answered < 300)
        .map(|r| seqs(&r.body))
        .collect();
    assert_eq!(delivered, [["0"], ["1"], ["2"], ["3"]]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_users_replayed_batches_are_gathered_and_the_dry_run_shows_that_request() {
    let app = spawn_app_with(|_| {}).await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"send_as_batch": true, "batch_window_secs": 1});
    let (input, connection) = app.pipeline(&receiver.url("/hook"), settings).await;
    accepted(&app, &input, &mut receiver, 3, 1).await;
    let range = json!({"from_ms": 0, "to_ms": 9_999_999_999_999_i64, "source": "batches",
                       "rate_per_second": 1000});

    let mut dry = range.clone();
    dry["dry_run"] = json!(true);
    let answer: Value = replay(&app, &connection, dry).await.json().await.unwrap();
    assert_eq!(answer["batches"], 3, "{answer}");
    assert_eq!(answer["requests"], 1, "{answer}");
    assert_eq!(seqs(&answer["sample"][0]), ["0", "1", "2"], "{answer}");

    let mut real = range;
    real["dry_run"] = json!(false);
    assert_eq!(replay(&app, &connection, real).await.status(), 202);
    let got = receiver.next().await;
    assert_eq!(seqs(&got.body), ["0", "1", "2"]);
    assert_eq!(
        got.body, answer["sample"][0],
        "the dry run showed what went"
    );
    assert!(
        receiver
            .next_within(Duration::from_millis(1500))
            .await
            .is_none()
    );
    app.stop().await.unwrap();
}
