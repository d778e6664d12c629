//! The cap on events per batch (`ingest.max_events_per_batch`, default 1,000) on every ingest
//! route: a batch over it is refused with 400 and mParticle's error body, and nothing of the
//! request is stored; a batch at the cap is accepted.

use std::io::Write;

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::helpers::{Receiver, TestApp, spawn_app};

/// The default cap.
const CAP: usize = 1000;

/// A batch of `n` small custom events (small, so even 1,001 stay far below the body limit).
fn batch_with(n: usize) -> Value {
    let events: Vec<Value> = (0..n)
        .map(|i| json!({"event_type": "custom_event", "data": {"event_name": format!("e{i}"), "custom_event_type": "other"}}))
        .collect();
    json!({"environment": "development", "mpid": 42, "events": events})
}

/// Asserts a refusal for too many events, and that nothing was stored or sent.
async fn assert_refused(app: &TestApp, receiver: &mut Receiver, response: reqwest::Response) {
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("JSON error body");
    assert_eq!(body["errors"][0]["code"], "BAD_REQUEST", "{body}");
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("1001 events") && message.contains("at most 1000"),
        "{message}"
    );
    assert_eq!(app.count("batches").await, 0, "a refused batch was stored");
    assert_eq!(app.count("jobs").await, 0, "a refused batch was queued");
    receiver.expect_silence().await;
}

#[tokio::test]
async fn an_events_api_batch_over_the_cap_is_refused_and_one_at_it_accepted() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    let refused = app.post_events(&input, batch_with(CAP + 1)).await;
    assert_refused(&app, &mut receiver, refused).await;

    let accepted = app.post_events(&input, batch_with(CAP)).await;
    assert_eq!(accepted.status(), 202);
    assert_eq!(receiver.take(1).await[0].events().len(), CAP);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_bulk_request_with_one_batch_over_the_cap_stores_none_of_its_batches() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let bulk = json!([batch_with(1), batch_with(CAP + 1), batch_with(2)]);
    let response = app
        .post_raw(&input, "/v2/bulkevents", bulk.to_string())
        .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("[1].events"), "names the batch: {message}");
    assert_eq!(app.count("batches").await, 0);
    receiver.expect_silence().await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_web_sdk_batch_over_the_cap_is_refused() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline_for("web", &receiver.url("/hook"), json!({}))
        .await;
    let key = input["api_key"].as_str().unwrap();
    let response = app
        .client
        .post(format!("{}/v3/JS/{key}/events", app.base))
        .header("content-type", "text/plain;charset=UTF-8")
        .body(batch_with(CAP + 1).to_string())
        .send()
        .await
        .unwrap();
    assert_refused(&app, &mut receiver, response).await;
    app.stop().await.unwrap();
}

/// A mobile upload of `n` custom-event messages, gzip and signed as the SDKs do.
async fn mobile_upload(app: &TestApp, input: &Value, n: usize) -> reqwest::Response {
    let key = input["api_key"].as_str().unwrap();
    let messages: Vec<Value> = (0..n)
        .map(|i| json!({"dt": "e", "id": format!("m{i}"), "sid": "S1", "ct": 1_700_000_000_000i64 + i as i64, "n": "Tapped", "et": "Other"}))
        .collect();
    let body =
        json!({"dt": "h", "id": "4f5f2c1e-0000-4000-8000-000000000009", "ct": 1_700_000_000_000i64,
                      "mpid": "42", "di": {"dp": "Android"}, "msgs": messages})
        .to_string();
    // Signed now: the server refuses a Date far from its clock.
    let date = httpdate::fmt_http_date(std::time::SystemTime::now());
    let mut mac =
        Hmac::<Sha256>::new_from_slice(input["api_secret"].as_str().unwrap().as_bytes()).unwrap();
    mac.update(format!("POST\n{date}\n/v2/{key}/events").as_bytes());
    mac.update(body.as_bytes());
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(body.as_bytes()).unwrap();
    app.client
        .post(format!("{}/v2/{key}/events", app.base))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .header("date", date)
        .header("x-mp-signature", hex::encode(mac.finalize().into_bytes()))
        .body(gzip.finish().unwrap())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_mobile_upload_over_the_cap_is_refused() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline_for(
            "android",
            &receiver.url("/hook"),
            json!({"send_as_batch": true}),
        )
        .await;
    let refused = mobile_upload(&app, &input, CAP + 1).await;
    assert_refused(&app, &mut receiver, refused).await;
    assert_eq!(mobile_upload(&app, &input, 3).await.status(), 202);
    assert_eq!(receiver.take(1).await[0].events().len(), 3);
    app.stop().await.unwrap();
}
