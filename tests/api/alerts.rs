//! Auto-pause and operator alerts: a connection failing long enough is paused (its jobs wait,
//! resuming delivers them), and an operator webhook hears `connection.failing`,
//! `connection.paused`, `connection.recovered`, `dead_letter.created` (aggregated) and
//! `backlog.over_threshold`, every request signed and checked by the PyPI `standardwebhooks`
//! library.

use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{
    Received, Receiver, TestApp, batch_of, multi_node_postgres, spawn_app_on_postgres_with,
    spawn_app_with, wait_for,
};
use crate::signing::verify_all;

/// Auto-pause after 1.8 s of continuous failure.
const PAUSE_HOURS: f64 = 0.0005;

fn operator_secret() -> String {
    let key: [u8; 24] = rand::random();
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

/// A server whose operator webhook is `operator`, signed with `secret`.
async fn app_alerting(
    operator: &Receiver,
    secret: &str,
    adjust: impl FnOnce(&mut boson::Config),
) -> TestApp {
    let (url, secret) = (operator.url("/ops"), secret.to_owned());
    spawn_app_with(move |config| {
        config.delivery.circuit_breaker_failures = 2;
        config.delivery.circuit_breaker_max_open_secs = 1;
        config.operator_webhook_url = Some(url);
        config.operator_webhook_secret = Some(secret.into());
        adjust(config);
    })
    .await
}

/// The next operator event of type `kind`, skipping others; fails after 15 s.
async fn next_alert(operator: &mut Receiver, kind: &str, seen: &mut Vec<Received>) -> Received {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let request = operator
            .next_within(left)
            .await
            .unwrap_or_else(|| panic!("no {kind} alert within 15 s"));
        seen.push(request.clone());
        if request.body["type"] == kind {
            return request;
        }
    }
}

/// Every operator request carries a valid Standard Webhooks signature and the event shape.
async fn assert_signed(requests: &[Received], secret: &str) {
    for request in requests {
        let body = &request.body;
        assert!(body["type"].is_string(), "{body}");
        assert!(body["timestamp"].is_string(), "{body}");
        assert!(body["data"]["connection_id"].is_string(), "{body}");
    }
    let checks: Vec<(&Received, &str)> = requests.iter().map(|r| (r, secret)).collect();
    if let Some(results) = verify_all(&checks).await {
        for (request, result) in requests.iter().zip(results) {
            assert_eq!(result, Ok(()), "{}", request.body);
        }
    }
}

async fn patch_settings(app: &TestApp, id: &str, settings: Value) -> reqwest::Response {
    app.admin(Method::PATCH, &format!("/api/v1/connections/{id}"))
        .json(&json!({ "settings": settings }))
        .send()
        .await
        .expect("request")
}

#[tokio::test]
async fn a_connection_failing_long_enough_is_paused_and_resuming_delivers_its_jobs() {
    let mut operator = Receiver::start().await;
    let secret = operator_secret();
    let app = app_alerting(&operator, &secret, |_| {}).await;
    let mut hook = Receiver::start().await;
    hook.script(&[(503, None); 10_000]);
    let (input, connection) = app
        .pipeline(
            &hook.url("/hook"),
            json!({"auto_pause_after_hours": PAUSE_HOURS}),
        )
        .await;
    let id = connection["id"].as_str().unwrap().to_owned();
    assert_eq!(
        connection["settings"]["auto_pause_after_hours"],
        PAUSE_HOURS
    );
    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );

    let mut seen = Vec::new();
    let failing = next_alert(&mut operator, "connection.failing", &mut seen).await;
    assert_eq!(failing.body["data"]["connection_id"], id.as_str());
    assert_eq!(failing.body["data"]["input_name"], "custom_feed input");
    assert_eq!(failing.body["data"]["output_name"], "hook");
    assert!(
        failing.body["data"]["last_error"]
            .as_str()
            .unwrap()
            .contains("503")
    );
    let since = failing.body["data"]["since_ms"].as_i64().expect("since_ms");
    let paused = next_alert(&mut operator, "connection.paused", &mut seen).await;
    assert_eq!(paused.body["data"]["connection_id"], id.as_str());
    assert_eq!(paused.body["data"]["since_ms"], since);
    let shown = app.read(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(shown["settings"]["status"], "paused");

    // The endpoint is back, but the connection is paused: a batch accepted now waits too.
    while hook.next_within(Duration::from_millis(200)).await.is_some() {}
    hook.clear_script();
    assert_eq!(
        app.post_events(&input, batch_of(&["screen_view"]))
            .await
            .status(),
        202
    );
    hook.expect_silence().await;
    assert_eq!(app.count("jobs").await, 2, "both jobs wait in the table");

    let resumed = patch_settings(&app, &id, json!({"status": "active"})).await;
    assert_eq!(resumed.status(), 200);
    let mut types: Vec<String> = Vec::new();
    while types.len() < 2 {
        types.extend(hook.next().await.event_types());
    }
    types.sort();
    assert_eq!(types, ["custom_event", "screen_view"]);
    let recovered = next_alert(&mut operator, "connection.recovered", &mut seen).await;
    assert_eq!(recovered.body["data"]["connection_id"], id.as_str());
    assert_signed(&seen, &secret).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn dead_letters_are_announced_at_most_once_per_window_with_a_count() {
    let mut operator = Receiver::start().await;
    let secret = operator_secret();
    let app = app_alerting(&operator, &secret, |config| {
        config.alerts.window_secs = 2;
    })
    .await;
    let hook = Receiver::start().await;
    hook.script(&[(400, None); 8]);
    let (input, connection) = app.pipeline(&hook.url("/hook"), json!({})).await;
    for _ in 0..8 {
        assert_eq!(
            app.post_events(&input, batch_of(&["custom_event"]))
                .await
                .status(),
            202
        );
    }
    let mut seen = Vec::new();
    let mut alerts = Vec::new();
    let mut count = 0;
    while count < 8 {
        let alert = next_alert(&mut operator, "dead_letter.created", &mut seen).await;
        assert_eq!(alert.body["data"]["connection_id"], connection["id"]);
        count += alert.body["data"]["count"].as_i64().expect("count");
        alerts.push(alert);
    }
    assert_eq!(count, 8, "each dead letter counted once");
    for pair in alerts.windows(2) {
        let apart = pair[1].at - pair[0].at;
        // One window apart, less what the sending of the first may have been late by.
        assert!(
            apart >= Duration::from_millis(1500),
            "alerts {apart:?} apart"
        );
    }
    assert!(
        operator
            .next_within(Duration::from_millis(2500))
            .await
            .is_none()
    );
    assert_signed(&seen, &secret).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_backlog_over_the_threshold_is_announced() {
    let mut operator = Receiver::start().await;
    let secret = operator_secret();
    let app = app_alerting(&operator, &secret, |config| {
        config.alerts.backlog_threshold = 2;
        config.alerts.backlog_check_secs = 1;
    })
    .await;
    let hook = Receiver::start().await;
    hook.script(&[(503, None); 10_000]);
    let (input, connection) = app.pipeline(&hook.url("/hook"), json!({})).await;
    for _ in 0..4 {
        assert_eq!(
            app.post_events(&input, batch_of(&["custom_event"]))
                .await
                .status(),
            202
        );
    }
    let mut seen = Vec::new();
    let alert = next_alert(&mut operator, "backlog.over_threshold", &mut seen).await;
    assert_eq!(alert.body["data"]["connection_id"], connection["id"]);
    assert_eq!(alert.body["data"]["jobs"], 4);
    assert_eq!(alert.body["data"]["threshold"], 2);
    assert_signed(&seen, &secret).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn without_an_operator_url_nothing_is_sent_and_pausing_still_works() {
    let app = spawn_app_with(|config| {
        config.delivery.circuit_breaker_failures = 2;
        config.delivery.circuit_breaker_max_open_secs = 1;
        config.alerts.window_secs = 1;
        config.alerts.backlog_threshold = 1;
        config.alerts.backlog_check_secs = 1;
    })
    .await;
    let mut hook = Receiver::start().await;
    hook.script(&[(400, None), (503, None)]);
    hook.script(&[(503, None); 10_000]);
    let (input, connection) = app
        .pipeline(
            &hook.url("/hook"),
            json!({"auto_pause_after_hours": PAUSE_HOURS}),
        )
        .await;
    let id = connection["id"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        assert_eq!(
            app.post_events(&input, batch_of(&["custom_event"]))
                .await
                .status(),
            202
        );
    }
    let path = format!("/api/v1/connections/{id}");
    wait_for(|| async { app.read(&path).await["settings"]["status"] == "paused" }).await;
    // Everything that reached the one receiver there is was a delivery, never an alert.
    while let Some(request) = hook.next_within(Duration::from_millis(300)).await {
        assert_eq!(request.path, "/hook");
        assert!(request.body.get("type").is_none(), "{}", request.body);
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn auto_pause_after_hours_must_be_positive_or_null() {
    let app = spawn_app_with(|_| {}).await;
    let (_, connection) = app.pipeline("http://127.0.0.1:9/hook", json!({})).await;
    let id = connection["id"].as_str().unwrap();
    assert!(connection["settings"]["auto_pause_after_hours"].is_null());
    for bad in [json!(0), json!(-1), json!("2"), json!(true)] {
        let response = patch_settings(&app, id, json!({"auto_pause_after_hours": bad})).await;
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("auto_pause_after_hours"),
            "{bad}: {message}"
        );
    }
    let ok = patch_settings(&app, id, json!({"auto_pause_after_hours": 0.25})).await;
    assert_eq!(ok.status(), 200);
    let shown = app.read(&format!("/api/v1/connections/{id}")).await;
    assert_eq!(shown["settings"]["auto_pause_after_hours"], 0.25);
    let cleared = patch_settings(&app, id, json!({"auto_pause_after_hours": null})).await;
    assert_eq!(cleared.status(), 200);
    // `paused` is Boson's to set, not an operator's.
    let paused = patch_settings(&app, id, json!({"status": "paused"})).await;
    assert_eq!(paused.status(), 400);
    let body: Value = paused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`status`"),
        "{body}"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn two_nodes_on_one_database_send_each_transition_once() {
    let Some(server) = multi_node_postgres("alerts_two_nodes").await else {
        return;
    };
    let mut operator = Receiver::start().await;
    let secret = operator_secret();
    let (url, key) = (operator.url("/ops"), secret.clone());
    let alerting = move |config: &mut boson::Config| {
        config.delivery.circuit_breaker_failures = 2;
        config.delivery.circuit_breaker_max_open_secs = 1;
        config.operator_webhook_url = Some(url);
        config.operator_webhook_secret = Some(key.into());
    };
    let first = spawn_app_on_postgres_with(&server, alerting.clone()).await;
    let second = first.second_node(alerting).await;
    let mut hook = Receiver::start().await;
    hook.script(&[(503, None); 10_000]);
    let (input, connection) = first
        .pipeline(
            &hook.url("/hook"),
            json!({"auto_pause_after_hours": PAUSE_HOURS}),
        )
        .await;
    let id = connection["id"].as_str().unwrap().to_owned();
    // The second node learns of the new connection from PostgreSQL's notice.
    let path = format!("/api/v1/connections/{id}");
    wait_for(|| async { second.read(&path).await["id"] == id.as_str() }).await;
    for node in [&first, &second, &first, &second] {
        let accepted = node.post_events(&input, batch_of(&["custom_event"])).await;
        assert_eq!(accepted.status(), 202);
    }
    let mut seen = Vec::new();
    next_alert(&mut operator, "connection.paused", &mut seen).await;
    while let Some(more) = operator.next_within(Duration::from_secs(2)).await {
        seen.push(more);
    }
    let kinds: Vec<&str> = seen
        .iter()
        .map(|r| r.body["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["connection.failing", "connection.paused"]);

    while hook.next_within(Duration::from_millis(200)).await.is_some() {}
    hook.clear_script();
    let resumed = patch_settings(&second, &id, json!({"status": "active"})).await;
    assert_eq!(resumed.status(), 200);
    let mut delivered = 0;
    while delivered < 4 {
        delivered += hook.next().await.events().len();
    }
    let recovered = next_alert(&mut operator, "connection.recovered", &mut seen).await;
    assert_eq!(recovered.body["data"]["connection_id"], id.as_str());
    assert!(operator.next_within(Duration::from_secs(2)).await.is_none());
    assert_signed(&seen, &secret).await;
    second.stop().await.unwrap();
    first.stop().await.unwrap();
}

#[tokio::test]
async fn alerts_still_queued_at_shutdown_are_sent_before_the_server_stops() {
    let mut operator = Receiver::start().await;
    // The first alert's first try fails: the task pauses before its retry, the second waits.
    operator.script(&[(503, None)]);
    let secret = operator_secret();
    let app = app_alerting(&operator, &secret, |_| {}).await;
    let hook = Receiver::start().await;
    hook.script(&[(400, None); 2]);
    let mut connections = Vec::new();
    for _ in 0..2 {
        let (input, connection) = app.pipeline(&hook.url("/hook"), json!({})).await;
        assert_eq!(
            app.post_events(&input, batch_of(&["custom_event"]))
                .await
                .status(),
            202
        );
        connections.push(connection["id"].clone());
    }
    // A dead letter is counted for its alert before it is stored, so once both are listed
    // both are counted, whether or not a tick has announced them yet.
    for connection in &connections {
        let path = format!(
            "/api/v1/connections/{}/dead-letters",
            connection.as_str().unwrap()
        );
        wait_for(|| async {
            let letters = app.read(&path).await;
            letters["items"].as_array().is_some_and(|l| !l.is_empty())
        })
        .await;
    }
    let refused = operator.next().await;
    assert_eq!(refused.answered, 503);
    app.stop().await.unwrap();

    // Everything the operator heard, the refused try included; the server is gone, so no
    // more can come.
    let mut seen = vec![refused];
    while let Some(request) = operator.next_within(Duration::from_millis(200)).await {
        seen.push(request);
    }
    let announced: Vec<&Value> = seen
        .iter()
        .filter(|r| r.answered == 200 && r.body["type"] == "dead_letter.created")
        .map(|r| &r.body["data"]["connection_id"])
        .collect();
    for connection in &connections {
        assert!(
            announced.contains(&connection),
            "no accepted alert for {connection}: {announced:?}"
        );
    }
    assert_signed(&seen, &secret).await;
}
