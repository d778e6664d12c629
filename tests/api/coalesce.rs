//! Coalesced batches (`batch_window_secs`, `max_batch_bytes`): with Send as Batch and a window,
//! one user's (MPID's) batches accepted within the window go out as one request, events in
//! acceptance order and the user and device fields of the newest batch, split at the size cap;
//! a crash inside the window loses nothing and sends nothing twice.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{
    Received, Receiver, TestApp, batch_of, event, spawn_app, spawn_app_with, wait_for,
};
use crate::process::{DELIVERY, Deployment, assert_none_missing, collect};
use crate::signing::{issue_secret, verify_all};

/// Batch `seq` of user `mpid`: `events` custom events tagged `<mpid>-<seq>-<k>`, the user
/// attribute `seq` and the device brand `brand-<seq>` (to tell which batch's fields went out).
fn batch(mpid: i64, seq: usize, events: usize) -> Value {
    let mut batch = batch_of(&[]);
    batch["events"] = json!(
        (0..events)
            .map(|k| {
                let mut custom = event("custom_event");
                custom["data"]["custom_attributes"]["id"] = json!(format!("{mpid}-{seq}-{k}"));
                custom
            })
            .collect::<Vec<_>>()
    );
    batch["mpid"] = json!(mpid);
    batch["user_attributes"] = json!({"seq": seq});
    batch["device_info"] = json!({"brand": format!("brand-{seq}")});
    batch
}

fn ids(request: &Received) -> Vec<String> {
    request
        .events()
        .iter()
        .map(|e| {
            e["data"]["custom_attributes"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

async fn windowed(app: &TestApp, receiver: &Receiver, settings: Value) -> (Value, Value) {
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook(&receiver.url("/coalesced")).await;
    app.connect(&input, &output, settings).await;
    (input, output)
}

async fn post(app: &TestApp, input: &Value, batch: Value) {
    assert_eq!(app.post_events(input, batch).await.status(), 202);
}

#[tokio::test]
async fn one_users_batches_within_the_window_go_as_one_request_with_the_newest_fields() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"send_as_batch": true, "batch_window_secs": 2});
    let (input, _) = windowed(&app, &receiver, settings).await;
    for seq in 0..3 {
        post(&app, &input, batch(11, seq, 2)).await;
    }
    post(&app, &input, batch(22, 0, 1)).await;
    // Nothing goes before the window is over.
    assert!(receiver.next_within(Duration::from_secs(1)).await.is_none());
    let mut got = receiver.take(2).await;
    got.sort_by_key(|r| r.body["mpid"].as_i64());
    let (user, other) = (&got[0], &got[1]);
    assert_eq!(user.body["mpid"], 11);
    assert_eq!(
        ids(user),
        ["11-0-0", "11-0-1", "11-1-0", "11-1-1", "11-2-0", "11-2-1"]
    );
    assert_eq!(user.body["user_attributes"], json!({"seq": 2}));
    assert_eq!(user.body["device_info"]["brand"], "brand-2");
    assert_eq!(ids(other), ["22-0-0"]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn without_a_window_each_batch_is_its_own_request() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = windowed(&app, &receiver, json!({"send_as_batch": true})).await;
    for seq in 0..3 {
        post(&app, &input, batch(11, seq, 1)).await;
    }
    let got = receiver.take(3).await;
    let mut all: Vec<String> = got.iter().flat_map(ids).collect();
    all.sort();
    assert_eq!(all, ["11-0-0", "11-1-0", "11-2-0"]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_size_cap_splits_a_window_into_requests_in_order_and_a_larger_batch_goes_alone() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"send_as_batch": true, "batch_window_secs": 1, "max_batch_bytes": 2048});
    let (input, _) = windowed(&app, &receiver, settings).await;
    let mut expected = Vec::new();
    for seq in 0..8 {
        // Batch 5 alone is larger than the cap.
        let mut b = batch(11, seq, if seq == 5 { 12 } else { 2 });
        expected.extend(ids_of_batch(&b));
        b["user_attributes"]["pad"] = json!("x".repeat(300));
        post(&app, &input, b).await;
    }
    let mut got = Vec::new();
    while let Some(request) = receiver.next_within(Duration::from_secs(5)).await {
        got.push(request);
    }
    assert!(got.len() >= 3, "split into several requests: {}", got.len());
    let mut arrived = Vec::new();
    for request in &got {
        let events = ids(request);
        if events.iter().any(|id| id.starts_with("11-5-")) {
            assert!(events.iter().all(|id| id.starts_with("11-5-")), "alone");
        } else {
            assert!(request.raw.len() <= 2048, "{} bytes", request.raw.len());
        }
        arrived.extend(events);
    }
    assert_eq!(arrived, expected, "every event once, in acceptance order");
    app.stop().await.unwrap();
}

fn ids_of_batch(batch: &Value) -> Vec<String> {
    batch["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["data"]["custom_attributes"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_coalesced_body_verifies_with_the_reference_library() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"send_as_batch": true, "batch_window_secs": 1});
    let (input, output) = windowed(&app, &receiver, settings).await;
    let secret = issue_secret(&app, output["id"].as_str().unwrap()).await;
    for seq in 0..3 {
        post(&app, &input, batch(11, seq, 2)).await;
    }
    let got = receiver.take(1).await;
    assert_eq!(got[0].events().len(), 6);
    let Some(results) = verify_all(&[(&got[0], secret.as_str())]).await else {
        return;
    };
    assert_eq!(results, [Ok(())]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn both_settings_refuse_bad_values_naming_the_field() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook("https://example.com/hook").await;
    let bad = [
        json!({"batch_window_secs": 3601}),
        json!({"batch_window_secs": -1}),
        json!({"batch_window_secs": "2"}),
        json!({"batch_window_secs": 1.5}),
        json!({"max_batch_bytes": 1023}),
        json!({"max_batch_bytes": 10_485_761}),
        json!({"max_batch_bytes": null}),
    ];
    for settings in bad {
        let field = settings.as_object().unwrap().keys().next().unwrap().clone();
        let response = app
            .admin(Method::POST, "/api/v1/connections")
            .json(
                &json!({"input_id": input["id"], "output_id": output["id"], "settings": settings}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{settings}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&field), "{settings}: {message}");
    }
    let ok = json!({"send_as_batch": true, "batch_window_secs": 3600, "max_batch_bytes": 1024});
    let connection = app.connect(&input, &output, ok).await;
    assert_eq!(connection["settings"]["batch_window_secs"], 3600);
    app.stop().await.unwrap();
}

/// Killed inside the window (SIGKILL) and restarted: every accepted event arrives, once.
#[tokio::test]
async fn a_crash_inside_the_window_loses_nothing_and_sends_nothing_twice() {
    let mut receiver = Receiver::start().await;
    let mut deployment = Deployment::new().await;
    let boson = deployment.start().await;
    let settings = json!({"send_as_batch": true, "batch_window_secs": 2});
    let input = boson.pipeline_with(&receiver.url("/hook"), settings).await;
    let mut expected = HashSet::new();
    for seq in 0..4 {
        for mpid in [1, 2, 3] {
            let b = batch(mpid, seq, 2);
            expected.extend(ids_of_batch(&b));
            assert_eq!(boson.post_batch(&input, &b).await.unwrap(), 202);
        }
    }
    boson.sigkill();
    assert!(
        receiver
            .next_within(Duration::from_millis(100))
            .await
            .is_none(),
        "nothing went before the window ended"
    );
    let boson = deployment.start().await;
    let deliveries = collect(&mut receiver, &expected, DELIVERY).await;
    assert_none_missing(&deliveries, &expected);
    assert!(receiver.next_within(Duration::from_secs(3)).await.is_none());
    let twice: Vec<_> = deliveries.copies.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert_eq!(deliveries.requests.len(), 3, "one request per user");
    drop(boson);
}

/// A group is first sent when its window ends, so a retry window shorter than the batch window
/// must count from there: counted from acceptance, the group's first failure would already be
/// past it and dead-letter everything.
#[tokio::test]
async fn a_retry_window_shorter_than_the_batch_window_still_retries_the_group() {
    let app = spawn_app_with(|config| {
        config.delivery.retry_window_secs = 1;
        config.delivery.initial_backoff_ms = 100;
    })
    .await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None)]);
    let settings = json!({"send_as_batch": true, "batch_window_secs": 2});
    let (input, _) = windowed(&app, &receiver, settings).await;
    for seq in 0..2 {
        post(&app, &input, batch(11, seq, 1)).await;
    }
    let failed = receiver
        .next_within(Duration::from_secs(5))
        .await
        .expect("the first try");
    assert_eq!(failed.answered, 503);
    let delivered = receiver
        .next_within(Duration::from_secs(5))
        .await
        .expect("the group was retried, not dead-lettered");
    assert_eq!(delivered.answered, 200);
    assert_eq!(ids(&delivered), ["11-0-0", "11-1-0"]);
    assert_eq!(
        delivered.headers["x-boson-delivery-id"], failed.headers["x-boson-delivery-id"],
        "the same delivery id"
    );
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    assert_eq!(app.count("dead_letters").await, 0);
    app.stop().await.unwrap();
}

/// `batch_window_secs` switched off and on again on a connection ordered per user: the batch
/// accepted without a window may not be overtaken by a later windowed one of its user (it
/// must not be gathered into the group of the user's earlier windowed batch).
#[tokio::test]
async fn a_window_switched_off_and_on_keeps_a_users_batches_in_acceptance_order() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let on = json!({"send_as_batch": true, "ordering": "per_user", "batch_window_secs": 2});
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook(&receiver.url("/ordered")).await;
    let connection = app.connect(&input, &output, on).await;
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    post(&app, &input, batch(11, 0, 1)).await;
    set_window(&app, &path, 0).await;
    post(&app, &input, batch(11, 1, 1)).await;
    set_window(&app, &path, 2).await;
    post(&app, &input, batch(11, 2, 1)).await;
    let mut arrived = Vec::new();
    while arrived.len() < 3 {
        let request = receiver
            .next_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("only {arrived:?} arrived"));
        arrived.extend(ids(&request));
    }
    assert_eq!(arrived, ["11-0-0", "11-1-0", "11-2-0"]);
    app.stop().await.unwrap();
}

async fn set_window(app: &TestApp, connection: &str, secs: u32) {
    let response = app
        .admin(Method::PATCH, connection)
        .json(&json!({"settings": {"batch_window_secs": secs}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// A group's retry filters its batches again, and a consent statement stored since can drop
/// what it would have sent: the retry starts where the failed request did, repeats nothing
/// delivered and skips nothing, and the group still finishes under its delivery ids.
#[tokio::test]
async fn a_coalesced_retry_that_filters_differently_neither_skips_nor_repeats() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    // The first request is taken, the second refused for 2 s.
    receiver.script(&[(200, None), (503, Some("2"))]);
    let settings = json!({"send_as_batch": true, "batch_window_secs": 1, "max_batch_bytes": 1024,
                          "forwarding_rules": {"gdpr_purposes": ["marketing"]}});
    let (input, _) = windowed(&app, &receiver, settings).await;
    let marketing = |consented: bool| json!({"gdpr": {"marketing": {"consented": consented, "timestamp_unixtime_ms": 1}}});
    for seq in 0..3 {
        let mut b = batch(11, seq, 1);
        b["user_attributes"]["pad"] = json!("x".repeat(500));
        b["consent_state"] = marketing(true);
        post(&app, &input, b).await;
    }
    let first = receiver.next().await;
    let refused = receiver.next().await;
    assert_eq!((first.answered, refused.answered), (200, 503));
    assert_eq!(ids(&first), ["11-0-0"]);
    assert_eq!(ids(&refused), ["11-1-0"]);
    let id = |r: &Received| {
        r.headers["x-boson-delivery-id"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let head = id(&first).trim_end_matches("-0").to_owned();
    assert_eq!(id(&refused), format!("{head}-1"));
    // Withdrawn while the group waits for its retry: its last two batches are filtered now.
    let mut withdrawn = batch(11, 3, 1);
    withdrawn["consent_state"] = marketing(false);
    post(&app, &input, withdrawn).await;
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    receiver.expect_silence().await;
    assert_eq!(app.count("dead_letters").await, 0);
    // Given again: the user's next batch goes, as a group of its own, under its own ids.
    let mut given = batch(11, 4, 1);
    given["consent_state"] = marketing(true);
    post(&app, &input, given).await;
    let next = receiver.next().await;
    assert_eq!(ids(&next), ["11-4-0"]);
    assert_ne!(id(&next), format!("{head}-0"));
    app.stop().await.unwrap();
}
