//! `send_alias_requests` (issue 14 item 8): a connection with it on receives the input's alias
//! requests in mParticle's alias request shape, once each; connections without it (the default)
//! receive none, and no client batch can pass itself off as an alias request.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Received, Receiver, TestApp, spawn_app};

fn alias_body(request_id: &str) -> Value {
    json!({"request_type": "alias", "request_id": request_id, "environment": "development",
           "api_key": "k",
           "data": {"source_mpid": "1111", "destination_mpid": "2222",
                    "start_unixtime_ms": 1_795_247_490_283_i64, "end_unixtime_ms": 1_795_247_499_283_i64,
                    "device_application_stamp": "das-1", "scope": "mpid"}})
}

async fn web_alias(app: &TestApp, input: &Value, body: &Value) -> reqwest::Response {
    let key = input["api_key"].as_str().unwrap();
    app.client
        .post(format!("{}/v1/identity/{key}/Alias", app.base))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Every request until the receiver has been quiet for a moment, by path.
async fn received_by_path(receiver: &mut Receiver) -> BTreeMap<String, Vec<Received>> {
    let mut got: BTreeMap<String, Vec<Received>> = BTreeMap::new();
    while let Some(request) = receiver.next_within(Duration::from_millis(1500)).await {
        got.entry(request.path.clone()).or_default().push(request);
    }
    got
}

#[tokio::test]
async fn alias_requests_go_once_to_the_connections_that_send_them() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("web").await;
    let aliases = app.create_webhook(&receiver.url("/aliases")).await;
    app.connect(&input, &aliases, json!({"send_alias_requests": true}))
        .await;
    let default = app.create_webhook(&receiver.url("/default")).await;
    app.connect(&input, &default, json!({})).await;

    assert_eq!(
        web_alias(&app, &input, &alias_body("r-1")).await.status(),
        202
    );
    // The SDK retries a request whose answer it did not get: the same request id again.
    assert_eq!(
        web_alias(&app, &input, &alias_body("r-1")).await.status(),
        202
    );

    let got = received_by_path(&mut receiver).await;
    assert!(
        !got.contains_key("/default"),
        "default connection got {got:?}"
    );
    let sent = &got["/aliases"];
    assert_eq!(sent.len(), 1, "{sent:?}");
    let body = &sent[0].body;
    assert_eq!(body["request_type"], "alias");
    assert_eq!(body["request_id"], "r-1");
    assert_eq!(body["environment"], "development");
    // As the events' `mpid`: numbers, not the strings the Web SDK sends.
    assert_eq!(body["data"]["source_mpid"], 1111);
    assert_eq!(body["data"]["destination_mpid"], 2222);
    assert_eq!(body["data"]["start_unixtime_ms"], 1_795_247_490_283_i64);
    assert_eq!(body["data"]["end_unixtime_ms"], 1_795_247_499_283_i64);
    assert_eq!(body["data"]["scope"], "mpid");
    assert!(
        body.get("api_key").is_none(),
        "the input's key is not forwarded"
    );
    assert!(body.get("events").is_none());
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_cannot_pass_itself_off_as_an_alias_request() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline(&receiver.url("/hook"), json!({"send_as_batch": true}))
        .await;
    let batch = json!({"request_type": "alias", "mpid": 7,
                       "events": [{"event_type": "custom_event",
                                   "data": {"event_name": "Clicked", "custom_event_type": "other"}}]});
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    let request = receiver.next().await;
    assert_eq!(request.events().len(), 1, "{:?}", request.body);
    assert!(
        request.body.get("request_type").is_none(),
        "{:?}",
        request.body
    );
    app.stop().await.unwrap();
}
