//! An output's `custom_headers`: sent with every request, checked when saved (a 400 naming the
//! field, nothing stored), and never allowed to override what Boson sends itself.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, batch_of, spawn_app};

#[tokio::test]
async fn custom_headers_go_with_every_request_and_follow_a_change() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("custom_feed").await;
    let output = app
        .create(
            "/api/v1/outputs",
            json!({"name": "h", "kind": "webhook", "settings": {
                "url": receiver.url("/hook"),
                "custom_headers": {"X-Api-Key": "k-123", "x-tenant": "shop 1"},
            }}),
        )
        .await;
    assert_eq!(
        output["settings"]["custom_headers"],
        json!({"X-Api-Key": "k-123", "x-tenant": "shop 1"})
    );
    app.connect(&input, &output, json!({})).await;
    app.post_events(&input, batch_of(&["custom_event", "screen_view"]))
        .await;
    for request in receiver.take(2).await {
        assert_eq!(request.headers["x-api-key"], "k-123");
        assert_eq!(request.headers["x-tenant"], "shop 1");
        assert_eq!(request.headers["content-type"], "application/json");
    }

    let path = format!("/api/v1/outputs/{}", output["id"].as_str().unwrap());
    let saved = app
        .admin(Method::PATCH, &path)
        .json(&json!({"settings": {"custom_headers": {"X-Api-Key": "k-456"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status(), 200);
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let after = receiver.take(1).await;
    assert_eq!(after[0].headers["x-api-key"], "k-456");
    assert!(after[0].headers.get("x-tenant").is_none());
    app.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_or_reserved_custom_headers_are_refused_naming_the_field() {
    let app = spawn_app().await;
    let output = app.create_webhook("http://127.0.0.1:9/hook").await;
    let path = format!("/api/v1/outputs/{}", output["id"].as_str().unwrap());
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    let refused = [
        json!({"Content-Type": "text/plain"}),
        json!({"content-length": "1"}),
        json!({"Host": "example.com"}),
        json!({"Webhook-Signature": "v1,forged"}),
        json!({"webhook-id": "x"}),
        json!({"X-Boson-Delivery-Id": "x"}),
        json!({"Authorization": "Bearer x"}),
        json!({"Transfer-Encoding": "chunked"}),
        json!({"bad name": "v"}),
        json!({"X-A": "a\r\nInjected: yes"}),
        json!({"X-A": "caf\u{e9}"}),
        json!({"X-A": "v".repeat(4097)}),
        json!({"X-A": "1", "x-a": "2"}),
        Value::Object(many),
    ];
    for headers in refused {
        let settings = json!({"url": "http://127.0.0.1:9/hook", "custom_headers": headers});
        let created = app
            .admin(Method::POST, "/api/v1/outputs")
            .json(&json!({"name": "h", "kind": "webhook", "settings": settings}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 400, "created with {headers}");
        let body: Value = created.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("`custom_headers"), "{headers}: {body}");

        let patched = app
            .admin(Method::PATCH, &path)
            .json(&json!({"settings": {"custom_headers": headers}}))
            .send()
            .await
            .unwrap();
        assert_eq!(patched.status(), 400, "patched with {headers}");
    }
    assert_eq!(app.count("outputs").await, 1, "nothing half stored");
    let stored: Value = app
        .admin(Method::GET, &path)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stored["settings"]["custom_headers"], json!({}), "{stored}");

    let wrong_type = app
        .admin(Method::PATCH, &path)
        .json(&json!({"settings": {"custom_headers": {"X-A": 1}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_type.status(), 400);
    let body: Value = wrong_type.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("`custom_headers.X-A`"),
        "{body}"
    );
    app.stop().await.unwrap();
}
