//! The Events API: what is accepted, what is refused (with mParticle's status and body), and
//! that a refused request stores nothing.

use serde_json::{Value, json};

use crate::helpers::{ALL_EVENT_TYPES, Receiver, TestApp, batch_of, spawn_app};

async fn error_body(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

fn message(body: &Value) -> String {
    body["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Asserts nothing was stored and nothing was sent.
async fn assert_nothing_stored(app: &TestApp, receiver: &mut Receiver) {
    assert_eq!(
        app.count("batches").await,
        0,
        "a refused request stored a batch"
    );
    assert_eq!(
        app.count("jobs").await,
        0,
        "a refused request queued a delivery"
    );
    receiver.expect_silence().await;
}

#[tokio::test]
async fn an_accepted_batch_reaches_the_webhook_in_mparticles_outbound_shape() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("custom_feed").await;
    let output = app
        .create(
            "/api/v1/outputs",
            json!({"name": "h", "kind": "webhook", "settings": {"url": receiver.url("/hook"), "authorization_header": "Bearer s3cret"}}),
        )
        .await;
    app.connect(&input, &output, json!({})).await;

    let response = app.post_events(&input, batch_of(&["custom_event"])).await;
    assert_eq!(response.status(), 202);
    assert_eq!(
        response.text().await.unwrap(),
        "",
        "202 carries an empty body like mParticle's"
    );

    let got = receiver.take(1).await.remove(0);
    assert_eq!(got.headers["content-type"], "application/json");
    assert_eq!(got.headers["authorization"], "Bearer s3cret");
    assert!(got.headers.contains_key("x-boson-delivery-id"));
    let body = &got.body;
    assert_eq!(body["schema_version"], 2);
    assert_eq!(body["mpid"], 42);
    assert!(body["batch_id"].is_i64());
    assert!(body["timestamp_unixtime_ms"].is_i64());
    assert!(body["message_id"].is_string());
    assert_eq!(body["source_info"]["channel"], "server_to_server");
    assert_eq!(
        body["user_identities"],
        json!([
            {"identity_type": "customer_id", "identity": "c-1", "timestamp_unixtime_ms": body["timestamp_unixtime_ms"]},
            {"identity_type": "email", "identity": "a@example.com", "timestamp_unixtime_ms": body["timestamp_unixtime_ms"]},
        ])
    );
    assert_eq!(
        body["user_attributes"],
        json!({"$firstname": "Ada", "tier": ["gold"]})
    );
    assert_eq!(got.event_types(), vec!["custom_event"]);
    assert_eq!(body["events"][0]["data"]["event_name"], "Clicked");
    assert!(
        body.get("mp_deviceid").is_none(),
        "Include MP DeviceId is off by default"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn every_event_type_is_accepted_and_keeps_every_field() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"send_as_batch": true, "include_user_identity_change_events": true,
                          "include_user_attribute_change_events": true});
    let (input, _) = app.pipeline(&receiver.url("/hook"), settings).await;
    let mut batch = batch_of(ALL_EVENT_TYPES);
    batch["schema_version"] = json!(2);
    batch["a_key_from_the_future"] = json!({"kept": [1, 2]});
    batch["events"][0]["data"]["an_event_key_from_the_future"] = json!("kept too");
    assert_eq!(app.post_events(&input, batch.clone()).await.status(), 202);

    let got = receiver.take(1).await.remove(0);
    assert_eq!(got.event_types(), ALL_EVENT_TYPES);
    assert_eq!(got.body["a_key_from_the_future"], json!({"kept": [1, 2]}));
    for (sent, received) in batch["events"].as_array().unwrap().iter().zip(got.events()) {
        for (key, value) in sent["data"].as_object().unwrap() {
            assert_eq!(
                &received["data"][key], value,
                "{} lost data.{key}",
                sent["event_type"]
            );
        }
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn mparticles_sample_batches_are_accepted() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    for file in [
        "mparticle.inbound.eventsapi.sample.json",
        "api-evangelist.mparticle-eventsapi-sample.json",
    ] {
        let text =
            std::fs::read_to_string(format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        // Both samples carry the same source_request_id; give each its own so neither is a replay.
        let mut sample: Value = serde_json::from_str(&text).unwrap();
        sample["source_request_id"] = json!(file);
        let response = app.post_events(&input, sample).await;
        let (status, body) = error_body(response).await;
        assert_eq!(status, 202, "{file}: {body}");
        receiver.next().await;
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn bulk_requests_store_every_batch() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    let bulk = json!([
        batch_of(&["custom_event"]),
        batch_of(&["screen_view", "session_start"])
    ]);
    let response = app
        .post_raw(&input, "/v2/bulkevents", bulk.to_string())
        .await;
    assert_eq!(response.status(), 202);
    let mut counts: Vec<usize> = receiver
        .take(2)
        .await
        .iter()
        .map(|r| r.events().len())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![1, 2]);
    assert_eq!(app.count("batches").await, 2);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_retried_request_with_the_same_source_request_id_is_stored_once() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut batch = batch_of(&["custom_event"]);
    batch["source_request_id"] = json!("req-123");
    for _ in 0..3 {
        assert_eq!(app.post_events(&input, batch.clone()).await.status(), 202);
    }
    receiver.take(1).await;
    assert_eq!(app.count("batches").await, 1);

    // Another input may use the same id: de-duplication is per input.
    let other = app.create_input("custom_feed").await;
    assert_eq!(app.post_events(&other, batch).await.status(), 202);
    assert_eq!(app.count("batches").await, 2);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn duplicates_inside_and_across_bulk_requests_are_stored_once() {
    // One bulk request is stored in a few multi-row inserts (70 batches: 64, 4 and 2 rows); each
    // batch must still learn whether it was stored or a duplicate, and only stored ones delivered.
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let numbered = |n: usize, request: Option<&str>| {
        let mut batch = batch_of(&["custom_event"]);
        batch["events"][0]["data"]["custom_attributes"]["n"] = json!(n);
        if let Some(request) = request {
            batch["source_request_id"] = json!(request);
        }
        batch
    };
    assert_eq!(
        app.post_events(&input, numbered(1000, Some("earlier")))
            .await
            .status(),
        202
    );
    receiver.take(1).await;

    let bulk: Vec<Value> = (0..70)
        .map(|n| match n {
            0 => numbered(n, Some("earlier")),
            1 | 2 => numbered(n, Some("twice")),
            _ => numbered(n, None),
        })
        .collect();
    let response = app
        .post_raw(&input, "/v2/bulkevents", Value::Array(bulk).to_string())
        .await;
    assert_eq!(response.status(), 202);

    let mut delivered: Vec<u64> = receiver
        .take(68)
        .await
        .iter()
        .map(|r| {
            r.events()[0]["data"]["custom_attributes"]["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    delivered.sort_unstable();
    let expected: Vec<u64> = std::iter::once(1).chain(3..70).collect();
    assert_eq!(delivered, expected);
    assert_eq!(app.count("batches").await, 69);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn credentials_are_checked_like_mparticle() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let url = format!("{}/v2/events", app.base);
    let body = batch_of(&["custom_event"]).to_string();

    let none = app
        .client
        .post(&url)
        .body(body.clone())
        .send()
        .await
        .unwrap();
    let (status, json) = error_body(none).await;
    assert_eq!(status, 401);
    assert_eq!(json["errors"][0]["code"], "UNAUTHORIZED");

    let wrong_secret = app
        .client
        .post(&url)
        .basic_auth(input["api_key"].as_str().unwrap(), Some("nope"));
    let (status, json) = error_body(wrong_secret.body(body.clone()).send().await.unwrap()).await;
    assert_eq!(status, 403);
    assert_eq!(json["errors"][0]["code"], "FORBIDDEN");

    let unknown_key = app
        .client
        .post(&url)
        .basic_auth("nobody", Some("x"))
        .body(body.clone());
    assert_eq!(unknown_key.send().await.unwrap().status(), 403);
    let not_basic = app.client.post(&url).bearer_auth("abc").body(body);
    assert_eq!(not_basic.send().await.unwrap().status(), 403);

    assert_nothing_stored(&app, &mut receiver).await;
    assert!(app.metrics().await.contains("reason=\"unauthorized\""));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn malformed_and_invalid_batches_are_refused_naming_the_field() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;

    let (status, body) =
        error_body(app.post_raw(&input, "/v2/events", "{\"events\": [").await).await;
    assert_eq!(status, 400);
    assert_eq!(body["errors"][0]["code"], "BAD_REQUEST");
    assert!(message(&body).contains("not valid JSON"), "{body}");

    let cases: Vec<(Value, &str)> = vec![
        (json!({"events": [{"data": {}}]}), "events[0].event_type"),
        (
            json!({"events": [{"event_type": "teleport", "data": {}}]}),
            "events[0].event_type",
        ),
        (
            json!({"events": [{"event_type": "custom_event", "data": {"custom_event_type": "other"}}]}),
            "events[0].data.event_name",
        ),
        (json!({"events": "nope"}), "events"),
        (json!({"mpid": "not-a-number"}), "mpid"),
        (
            json!({"user_identities": {"customer_id": 7}}),
            "user_identities.customer_id",
        ),
        (
            json!({"user_identities": {"shoe_size": "44"}}),
            "user_identities.shoe_size",
        ),
        (
            json!({"user_attributes": {"nested": {"a": 1}}}),
            "user_attributes.nested",
        ),
        (json!({"environment": "staging"}), "environment"),
        (
            json!({"events": [{"event_type": "screen_view", "data": {"timestamp_unixtime_ms": "yesterday"}}]}),
            "events[0].data.timestamp_unixtime_ms",
        ),
        (json!([1, 2]), "batch"),
        // The profile keeps these as JSON, which PostgreSQL cannot hold with a NUL.
        (
            json!({"mpid": 5, "user_attributes": {"plan": "a\u{0}"}}),
            "user_attributes.plan",
        ),
        (
            json!({"mpid": 5, "consent_state": {"gdpr": {"m\u{0}": {"consented": true}}}}),
            "consent_state.gdpr",
        ),
    ];
    for (batch, field) in cases {
        let (status, body) = error_body(app.post_events(&input, batch.clone()).await).await;
        assert_eq!(status, 400, "{batch}");
        assert!(
            message(&body).contains(field),
            "{batch}: message {body} does not name {field}"
        );
    }
    // One bad batch in a bulk request refuses the whole request.
    let bulk = json!([batch_of(&["custom_event"]), {"events": [{"data": {}}]}]);
    let (status, body) = error_body(
        app.post_raw(&input, "/v2/bulkevents", bulk.to_string())
            .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        message(&body).contains("[1].events[0].event_type"),
        "{body}"
    );
    let (status, _) = error_body(
        app.post_raw(&input, "/v2/bulkevents", batch_of(&[]).to_string())
            .await,
    )
    .await;
    assert_eq!(status, 400, "bulkevents wants an array");

    assert_nothing_stored(&app, &mut receiver).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn oversized_requests_are_refused_with_413() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let mut batch = batch_of(&["custom_event"]);
    batch["events"][0]["data"]["custom_attributes"]["padding"] = json!("x".repeat(300 * 1024));
    let (status, body) = error_body(app.post_events(&input, batch).await).await;
    assert_eq!(status, 413);
    assert!(message(&body).contains("262144"), "{body}");

    let too_many: Vec<Value> = (0..101).map(|_| json!({})).collect();
    let (status, body) = error_body(
        app.post_raw(&input, "/v2/bulkevents", Value::from(too_many).to_string())
            .await,
    )
    .await;
    assert_eq!(status, 400);
    assert!(message(&body).contains("at most 100"), "{body}");

    assert_nothing_stored(&app, &mut receiver).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_count_accepted_and_rejected_events() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    app.post_events(&input, batch_of(&["custom_event", "screen_view"]))
        .await;
    app.post_events(&input, json!({"events": 1})).await;
    receiver.take(2).await;
    let metrics = app.metrics().await;
    let id = input["id"].as_str().unwrap();
    let conn = connection["id"].as_str().unwrap();
    assert!(
        metrics.contains(&format!("boson_events_accepted_total{{input=\"{id}\"}} 2")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "boson_events_rejected_total{{input=\"{id}\",reason=\"invalid_batch\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "boson_deliveries_total{{connection=\"{conn}\",outcome=\"delivered\"}} 2"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("boson_delivery_latency_seconds_count 2"),
        "{metrics}"
    );
    assert!(metrics.contains("boson_queue_depth"), "{metrics}");
    assert!(
        metrics.contains("boson_queue_oldest_pending_age_seconds"),
        "{metrics}"
    );
    app.stop().await.unwrap();
}

/// serde_json's reserved key as a key of the batch itself, after another key
/// (so the request's own parse takes it as an ordinary key), must be refused as it is anywhere
/// inside the batch: stored, the sorted body starts with it and reads back as the text it holds.
#[tokio::test]
async fn a_batch_with_serde_jsons_reserved_key_at_its_top_level_is_refused() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    for path in ["/v2/events", "/v2/bulkevents"] {
        let batch = r#"{"events": [], "$serde_json::private::RawValue": "1"}"#;
        let body = if path == "/v2/events" {
            batch.to_owned()
        } else {
            format!("[{batch}]")
        };
        let (status, answer) = error_body(app.post_raw(&input, path, body).await).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert!(
            message(&answer).contains("$serde_json::private::RawValue"),
            "{answer}"
        );
    }
    assert_nothing_stored(&app, &mut receiver).await;
    app.stop().await.unwrap();
}
