//! What a settings change would have done: `POST /api/v1/connections/{id}/dry-run` runs the last
//! 100 events of the connection's input through the filter under the current settings and under
//! the proposed ones, without saving anything. And what a failing connection waits for: the
//! oldest failing delivery's next attempt and the time it will be given up.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, batch_of, spawn_app, spawn_app_with, wait_for};

async fn dry_run(app: &TestApp, connection: &Value, settings: Value) -> reqwest::Response {
    let path = format!(
        "/api/v1/connections/{}/dry-run",
        connection["id"].as_str().unwrap()
    );
    app.admin(reqwest::Method::POST, &path)
        .json(&json!({ "settings": settings }))
        .send()
        .await
        .unwrap()
}

/// Posts `n` batches of `types` and waits until all their requests reached the receiver.
async fn delivered(
    app: &TestApp,
    input: &Value,
    receiver: &mut Receiver,
    n: usize,
    types: &[&str],
) {
    for _ in 0..n {
        assert_eq!(app.post_events(input, batch_of(types)).await.status(), 202);
    }
    receiver.take(n).await;
}

#[tokio::test]
async fn a_dry_run_compares_the_current_and_the_proposed_settings_event_by_event() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    delivered(
        &app,
        &input,
        &mut receiver,
        3,
        &["custom_event", "screen_view"],
    )
    .await;

    let proposed = json!({"data_filter": {"rules": [
        {"event_type": "custom_event", "event_name": "Clicked", "send": false},
        {"event_type": "screen_view", "event_name": "Home", "attribute": "marker", "send": false},
    ]}});
    let answer = dry_run(&app, &connection, proposed).await;
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["events"], 6, "{answer}");
    assert_eq!(
        answer["before"],
        json!({"forwarded": 6, "filtered": 0, "attribute_removed": 0,
               "user_attributes_removed": 0, "identities_removed": 0})
    );
    assert_eq!(
        answer["after"],
        json!({"forwarded": 3, "filtered": 3, "attribute_removed": 3,
               "user_attributes_removed": 0, "identities_removed": 0})
    );
    assert_eq!(answer["changed"], 6);
    let items = answer["items"].as_array().unwrap();
    assert_eq!(items.len(), 6);
    let clicked = items
        .iter()
        .find(|i| i["event_type"] == "custom_event")
        .unwrap();
    assert_eq!(clicked["event_name"], "Clicked");
    assert_eq!(clicked["before"], json!({"outcome": "forwarded"}));
    assert_eq!(
        clicked["after"],
        json!({"outcome": "filtered", "reason": "data_filter: custom_event \"Clicked\""})
    );
    let home = items
        .iter()
        .find(|i| i["event_type"] == "screen_view")
        .unwrap();
    assert_eq!(
        home["after"],
        json!({"outcome": "attribute_removed", "reason": "data_filter: marker"})
    );

    // Nothing was saved: the connection still forwards everything.
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let stored = app.read(&path).await;
    assert_eq!(stored["settings"]["data_filter"]["rules"], json!([]));
    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    assert_eq!(receiver.next().await.event_types(), ["custom_event"]);
    app.stop().await.unwrap();
}

/// The Data Filter's user-attribute and identity rules strip the batch's fields, not events: the
/// dry run names what each batch would lose.
#[tokio::test]
async fn a_dry_run_reports_the_user_attributes_and_identities_it_would_strip() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut batch = batch_of(&["custom_event"]);
    batch["user_attributes"] = json!({"$Age": 30, "plan": "pro"});
    batch["user_identities"] = json!({"email": "a@example.com", "customer_id": "c1"});
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    receiver.take(1).await;

    let proposed = json!({"data_filter": {"rules": [
        {"user_attribute": "$Age", "send": false},
        {"identity_type": "email", "send": false},
    ]}});
    let answer = dry_run(&app, &connection, proposed).await;
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["before"]["user_attributes_removed"], 0, "{answer}");
    assert_eq!(answer["after"]["user_attributes_removed"], 1, "{answer}");
    assert_eq!(answer["after"]["identities_removed"], 1, "{answer}");
    let user_data = answer["user_data"].as_array().unwrap();
    assert_eq!(user_data.len(), 1, "{answer}");
    assert_eq!(
        user_data[0]["after"],
        json!({"user_attributes": ["$Age"], "identity_types": ["email"]})
    );
    assert_eq!(
        user_data[0]["before"],
        json!({"user_attributes": [], "identity_types": []})
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_dry_run_reads_only_the_last_100_events_of_the_input() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    // 30 batches of screen views, then 35 of custom events and screen views: the newest 100
    // events are the 70 of the later batches and 30 screen views.
    delivered(&app, &input, &mut receiver, 30, &["screen_view"]).await;
    delivered(
        &app,
        &input,
        &mut receiver,
        35,
        &["custom_event", "screen_view"],
    )
    .await;
    let answer: Value = dry_run(&app, &connection, json!({"send_screen_views": false}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["events"], 100, "{answer}");
    assert_eq!(answer["after"]["filtered"], 65, "{answer}");
    assert_eq!(answer["after"]["forwarded"], 35, "{answer}");
    let reason = answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["event_type"] == "screen_view")
        .unwrap()["after"]["reason"]
        .clone();
    assert_eq!(reason, "send_screen_views");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_dry_run_refuses_invalid_settings_naming_the_field() {
    let app = spawn_app().await;
    let (_, connection) = app.pipeline("http://127.0.0.1:9/hook", json!({})).await;
    let bad = dry_run(
        &app,
        &connection,
        json!({"data_filter": {"rules": [{"identity_type": "nope", "send": false}]}}),
    )
    .await;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("data_filter.rules[0].identity_type"),
        "{body}"
    );
    let bad = dry_run(
        &app,
        &connection,
        json!({"forwarding_rules": {"user_sample_percent": 0}}),
    )
    .await;
    assert_eq!(bad.status(), 400);
    let missing = app
        .admin(
            reqwest::Method::POST,
            "/api/v1/connections/conn_0190a0a0000070008000000000000000/dry-run",
        )
        .json(&json!({"settings": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_failing_connection_shows_its_next_attempt_and_when_it_gives_up() {
    let app = spawn_app_with(|config| {
        config.delivery.retry_window_secs = 3600;
        config.delivery.initial_backoff_ms = 60_000;
        config.delivery.max_backoff_secs = 120;
    })
    .await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None)]);
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    assert_eq!(app.read(&path).await["retrying"], Value::Null);

    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    assert_eq!(receiver.next().await.answered, 503);
    wait_for(|| async {
        app.query_i64("SELECT COUNT(*) FROM jobs WHERE attempts > 0")
            .await
            == 1
    })
    .await;
    let created = app.query_i64("SELECT MIN(created_at) FROM jobs").await;
    let next = app.query_i64("SELECT MIN(next_attempt_at) FROM jobs").await;
    let retrying = app.read(&path).await["retrying"].clone();
    assert_eq!(retrying["failing_jobs"], 1, "{retrying}");
    assert_eq!(retrying["next_attempt_at"], next, "{retrying}");
    assert_eq!(retrying["gives_up_at"], created + 3_600_000, "{retrying}");
    assert!(
        retrying["last_error"].as_str().unwrap().contains("503"),
        "{retrying}"
    );
    assert!(
        receiver
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    app.stop().await.unwrap();
}

/// A coalesced group is first sent when its batch window ends, and the worker counts its retry
/// window from there (or from its newest batch, if later): the dashboard's "gives up at" must
/// say the same, not the head's acceptance plus the retry window.
#[tokio::test]
async fn a_failing_coalesced_group_gives_up_when_the_worker_will() {
    let app = spawn_app_with(|config| {
        config.delivery.retry_window_secs = 3600;
        config.delivery.initial_backoff_ms = 60_000;
        config.delivery.max_backoff_secs = 120;
    })
    .await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None)]);
    let settings = json!({"send_as_batch": true, "batch_window_secs": 2});
    let (input, connection) = app.pipeline(&receiver.url("/hook"), settings).await;
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    for _ in 0..2 {
        let mut batch = batch_of(&["custom_event"]);
        batch["mpid"] = json!(77);
        assert_eq!(app.post_events(&input, batch).await.status(), 202);
    }
    assert_eq!(receiver.next().await.answered, 503);
    wait_for(|| async {
        app.query_i64("SELECT COUNT(*) FROM jobs WHERE attempts > 0")
            .await
            == 2
    })
    .await;
    let head = app.query_i64("SELECT MIN(created_at) FROM jobs").await;
    let newest = app.query_i64("SELECT MAX(created_at) FROM jobs").await;
    let retrying = app.read(&path).await["retrying"].clone();
    // The group waits as one: both its jobs count as failing.
    assert_eq!(retrying["failing_jobs"], 2, "{retrying}");
    let window_end = (head + 2_000).max(newest);
    assert_eq!(
        retrying["gives_up_at"],
        window_end + 3_600_000,
        "{retrying}"
    );
    app.stop().await.unwrap();
}
