//! Replay by time range: a dry run counts what a replay would send under the current settings;
//! a real one re-delivers the batch log (or re-sends dead letters) at a capped rate, shows its
//! progress, and can be cancelled.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Received, Receiver, TestApp, batch_of, spawn_app, wait_for};
use crate::rate_limit::busiest_second;

pub(crate) async fn replay(app: &TestApp, connection: &Value, body: Value) -> reqwest::Response {
    let path = format!(
        "/api/v1/connections/{}/replay",
        connection["id"].as_str().unwrap()
    );
    app.admin(reqwest::Method::POST, &path)
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn progress(app: &TestApp, replay_id: &Value) -> Value {
    app.read(&format!("/api/v1/replays/{replay_id}")).await
}

/// Posts `n` batches of `types`, waits until their `requests` are delivered once, and dates
/// batch `i` (in id order) at `(i + 1) * 1000` ms so ranges can pick them.
async fn logged_batches(
    app: &TestApp,
    input: &Value,
    receiver: &mut Receiver,
    (n, requests): (usize, usize),
    types: &[&str],
) -> Vec<Received> {
    for _ in 0..n {
        assert_eq!(app.post_events(input, batch_of(types)).await.status(), 202);
    }
    let got = receiver.take(requests).await;
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    app.execute("UPDATE batches SET received_at = id * 1000")
        .await;
    got
}

fn delivery_ids(requests: &[Received]) -> Vec<String> {
    requests
        .iter()
        .map(|r| {
            r.headers["x-boson-delivery-id"]
                .to_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_dry_run_counts_the_range_under_the_current_settings() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    logged_batches(
        &app,
        &input,
        &mut receiver,
        (4, 4),
        &["custom_event", "screen_view"],
    )
    .await;
    // Changed after the batches were delivered: the dry run follows today's settings.
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let patched = app
        .admin(reqwest::Method::PATCH, &path)
        .json(&json!({"settings": {"send_screen_views": false}}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);

    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 2000, "to_ms": 3000, "source": "batches", "dry_run": true}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["batches"], 2, "{answer}");
    assert_eq!(answer["events"], 2, "{answer}");
    assert_eq!(answer["requests"], 2, "{answer}");
    let sample = answer["sample"].as_array().unwrap();
    assert_eq!(sample.len(), 2, "{answer}");
    for body in sample {
        let types: Vec<&str> = body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["custom_event"], "{body}");
    }
    // A dry run sends and stores nothing.
    assert!(
        receiver
            .next_within(Duration::from_millis(300))
            .await
            .is_none()
    );
    assert_eq!(app.count("replays").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_dry_run_restricted_to_event_types_counts_only_those() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    logged_batches(
        &app,
        &input,
        &mut receiver,
        (2, 4),
        &["custom_event", "screen_view"],
    )
    .await;
    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 0, "to_ms": 9000, "source": "batches",
               "event_types": ["screen_view"], "dry_run": true}),
    )
    .await;
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["batches"], 2, "{answer}");
    assert_eq!(answer["events"], 2, "{answer}");
    assert_eq!(
        answer["sample"][0]["events"][0]["event_type"],
        "screen_view"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_replay_redelivers_the_range_at_the_rate_and_finishes() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let first = logged_batches(&app, &input, &mut receiver, (8, 8), &["custom_event"]).await;

    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 2000, "to_ms": 7000, "source": "batches",
               "rate_per_second": 3, "dry_run": false}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let replay_id = response.json::<Value>().await.unwrap()["replay_id"].clone();
    let got = receiver.take(6).await;
    let busiest = busiest_second(&got.iter().map(|r| r.at).collect::<Vec<_>>());
    assert!(busiest <= 3, "{busiest} requests within one second");
    // New jobs, so new delivery ids: a receiver deduplicating by id still takes the replay.
    let earlier = delivery_ids(&first);
    assert!(delivery_ids(&got).iter().all(|id| !earlier.contains(id)));
    // Batch 1 and 8 lie outside the range.
    assert!(
        receiver
            .next_within(Duration::from_millis(700))
            .await
            .is_none()
    );
    wait_for(|| async { progress(&app, &replay_id).await["status"] == "done" }).await;
    let done = progress(&app, &replay_id).await;
    assert_eq!(done["batches"], 6, "{done}");
    assert_eq!(done["requests"], 6, "{done}");
    // The replay's settings are a revision of its own: the connection's are untouched.
    let path = format!("/api/v1/connections/{}", connection["id"].as_str().unwrap());
    let now = app.read(&path).await;
    assert_eq!(now["settings"], connection["settings"]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_replay_stops_early() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    logged_batches(&app, &input, &mut receiver, (10, 10), &["custom_event"]).await;
    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 0, "to_ms": 20000, "source": "batches",
               "rate_per_second": 2, "dry_run": false}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let replay_id = response.json::<Value>().await.unwrap()["replay_id"].clone();
    receiver.take(1).await;
    let path = format!("/api/v1/replays/{replay_id}/cancel");
    let cancelled = app
        .admin(reqwest::Method::POST, &path)
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 200);
    // Already enqueued jobs may still go; the rest never does.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut more = 0;
    while receiver
        .next_within(Duration::from_millis(300))
        .await
        .is_some()
    {
        more += 1;
    }
    assert!(more <= 2, "{more} requests after the cancel");
    let state = progress(&app, &replay_id).await;
    assert_eq!(state["status"], "cancelled", "{state}");
    assert!(state["batches"].as_i64().unwrap() < 10, "{state}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn dead_letters_are_sent_again_once_the_receiver_recovers() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    receiver.script(&[(400, None), (400, None)]);
    for _ in 0..2 {
        let batch = batch_of(&["custom_event"]);
        assert_eq!(app.post_events(&input, batch).await.status(), 202);
    }
    receiver.take(2).await;
    wait_for(|| async { app.count("dead_letters").await == 2 }).await;

    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 0, "to_ms": now + 1000, "source": "dead_letters",
               "rate_per_second": 5, "dry_run": false}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let replay_id = response.json::<Value>().await.unwrap()["replay_id"].clone();
    let again = receiver.take(2).await;
    assert!(
        again
            .iter()
            .all(|r| r.events()[0]["event_type"] == "custom_event")
    );
    wait_for(|| async { progress(&app, &replay_id).await["status"] == "done" }).await;
    let done = progress(&app, &replay_id).await;
    assert_eq!(done["sent"], 2, "{done}");
    assert_eq!(app.count("dead_letters").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn bad_replay_requests_are_refused_naming_the_field() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let (_, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let cases = [
        (
            json!({"from_ms": 5, "to_ms": 1, "source": "batches", "dry_run": true}),
            "from_ms",
        ),
        (
            json!({"from_ms": 1, "to_ms": 5, "source": "elsewhere", "dry_run": true}),
            "source",
        ),
        (
            json!({"from_ms": 1, "to_ms": 5, "source": "batches", "event_types": ["nope"], "dry_run": true}),
            "event_types",
        ),
        (
            json!({"from_ms": 1, "to_ms": 5, "source": "batches", "rate_per_second": 0, "dry_run": false}),
            "rate_per_second",
        ),
    ];
    for (body, field) in cases {
        let response = replay(&app, &connection, body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let answer: Value = response.json().await.unwrap();
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(field),
            "{answer}"
        );
    }
    let missing = json!({"id": "conn_00000000000000000000000000"});
    let response = replay(
        &app,
        &missing,
        json!({"from_ms": 1, "to_ms": 5, "source": "batches", "dry_run": true}),
    )
    .await;
    assert_eq!(response.status(), 404);
    assert_eq!(app.count("replays").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_replay_running_at_shutdown_keeps_its_progress_and_resumes_after_a_restart() {
    let mut app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    logged_batches(&app, &input, &mut receiver, (6, 6), &["custom_event"]).await;
    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 0, "to_ms": 10_000, "source": "batches",
               "rate_per_second": 1, "dry_run": false}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let replay_id = response.json::<Value>().await.unwrap()["replay_id"].clone();
    receiver.next().await;
    app.shut_down().await.unwrap();

    // Stopped cleanly: still running, its lease given back (so a restart resumes it at once,
    // not after the lease), and its cursor where its totals say it got.
    let row = |column: &str| format!("SELECT {column} FROM replays WHERE id = {replay_id}");
    let running =
        format!("SELECT COUNT(*) FROM replays WHERE id = {replay_id} AND status = 'running'");
    assert_eq!(app.query_i64(&running).await, 1);
    assert_eq!(app.query_i64(&row("lease_until")).await, 0);
    let enqueued = app.query_i64(&row("batches")).await;
    assert!((1..6).contains(&enqueued), "{enqueued} of 6 batches");
    let cursor = app.query_i64(&row("cursor_id")).await;
    let behind = app
        .query_i64(&format!(
            "SELECT COUNT(*) FROM batches WHERE id <= {cursor}"
        ))
        .await;
    assert_eq!(behind, enqueued, "the cursor matches the totals");

    let app = app.restart(|_| {}).await;
    wait_for(|| async { progress(&app, &replay_id).await["status"] == "done" }).await;
    let done = progress(&app, &replay_id).await;
    assert_eq!(done["batches"], 6, "each batch once: {done}");
    let mut replayed = 1;
    while receiver
        .next_within(Duration::from_millis(1500))
        .await
        .is_some()
    {
        replayed += 1;
    }
    assert_eq!(replayed, 6, "each batch delivered once by the replay");
    app.stop().await.unwrap();
}

/// A batch pruned (here: deleted) after the replay read its page but before its turn: its job
/// would have no batch, so none is created and the progress counts it as expired.
#[tokio::test]
async fn a_batch_deleted_before_its_turn_is_counted_expired_and_gets_no_job() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    logged_batches(&app, &input, &mut receiver, (3, 3), &["custom_event"]).await;

    let response = replay(
        &app,
        &connection,
        json!({"from_ms": 0, "to_ms": 10_000, "source": "batches",
               "rate_per_second": 1, "dry_run": false}),
    )
    .await;
    assert_eq!(response.status(), 202);
    let replay_id = response.json::<Value>().await.unwrap()["replay_id"].clone();
    // The first batch goes at once; the last one's turn comes two seconds later.
    receiver.next().await;
    app.execute("DELETE FROM batches WHERE id = (SELECT MAX(id) FROM batches)")
        .await;
    wait_for(|| async { progress(&app, &replay_id).await["status"] == "done" }).await;
    let done = progress(&app, &replay_id).await;
    assert_eq!(done["batches"], 2, "{done}");
    assert_eq!(done["expired"], 1, "{done}");
    wait_for(|| async { app.count("jobs").await == 0 }).await;
    assert_eq!(receiver.take(1).await.len(), 1);
    assert!(
        receiver
            .next_within(Duration::from_millis(500))
            .await
            .is_none()
    );
    assert_eq!(app.count("dead_letters").await, 0);
    app.stop().await.unwrap();
}
