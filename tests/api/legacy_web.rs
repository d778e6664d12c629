//! The older Web SDKs' endpoints over HTTP: the legacy per-event upload, kit forwarding
//! statistics, and the config answer an operator steers through the input's settings.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, spawn_app};

async fn post(app: &TestApp, path: &str, body: &str) -> reqwest::Response {
    app.client
        .post(format!("{}{path}", app.base))
        .header("content-type", "text/plain;charset=UTF-8")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn forwarding_statistics_are_counted_per_kit_and_never_forwarded() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app
        .pipeline_for("web", &receiver.url("/hook"), json!({}))
        .await;
    let key = input["api_key"].as_str().unwrap();
    let report = |kit: i64| json!({"mid": kit, "esid": 1, "n": "Viewed", "attrs": {}, "sdk": "2.18.1", "dt": 4, "et": 1, "dbg": true, "ct": 1, "eec": 0});

    assert_eq!(
        post(
            &app,
            &format!("/v1/JS/{key}/Forwarding"),
            &report(160).to_string()
        )
        .await
        .status(),
        202
    );
    let batch = json!({"uuid": "u-1", "data": [report(160), report(82), report(160)]});
    assert_eq!(
        post(
            &app,
            &format!("/v2/JS/{key}/Forwarding"),
            &batch.to_string()
        )
        .await
        .status(),
        202
    );
    assert_eq!(
        post(
            &app,
            &format!("/v2/JS/{key}/Forwarding"),
            "{\"data\": [{\"mid\": \"x\"}]}"
        )
        .await
        .status(),
        400
    );
    receiver.expect_silence().await;
    assert_eq!(app.count("batches").await, 0, "statistics are not events");

    let stats: Value = app
        .admin(
            Method::GET,
            &format!(
                "/api/v1/inputs/{}/forwarding-stats",
                input["id"].as_str().unwrap()
            ),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let counts: Vec<(i64, i64)> = stats["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["module_id"].as_i64().unwrap(),
                i["events"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, vec![(82, 1), (160, 3)]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn bad_legacy_uploads_are_refused_and_store_nothing() {
    let app = spawn_app().await;
    let web = app.create_input("web").await;
    let ios = app.create_input("ios").await;
    let key = web["api_key"].as_str().unwrap();
    let event = json!({"n": "x", "dt": 4, "et": 1, "mpid": "5"}).to_string();
    assert_eq!(
        post(&app, &format!("/v2/JS/{key}/Events"), "{nope")
            .await
            .status(),
        400
    );
    let unknown = json!({"n": "x", "dt": 99}).to_string();
    let refused = post(&app, &format!("/v2/JS/{key}/Events"), &unknown).await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("dt"),
        "{body}"
    );
    assert_eq!(
        post(
            &app,
            &format!("/v2/JS/{}/Events", ios["api_key"].as_str().unwrap()),
            &event
        )
        .await
        .status(),
        403
    );
    assert_eq!(
        post(&app, "/v2/JS/nobody/Events", &event).await.status(),
        403
    );
    assert_eq!(app.count("batches").await, 0);
    assert_eq!(
        post(&app, &format!("/v2/JS/{key}/Events"), &event)
            .await
            .status(),
        202
    );
    assert_eq!(app.count("batches").await, 1);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_web_config_answer_carries_the_inputs_flags_and_hosts() {
    let app = spawn_app().await;
    let settings = json!({"web_flags": {"eventsV3": "100", "eventBatchingIntervalMillis": "5000"},
                          "web_hosts": {"v3SecureServiceUrl": "cdp.example.com/v3/JS/", "identityUrl": "cdp.example.com/identity/v1/"}});
    let input = app
        .create(
            "/api/v1/inputs",
            json!({"name": "old shop", "platform": "web", "settings": settings}),
        )
        .await;
    let config: Value = app
        .client
        .get(format!(
            "{}/JS/v2/{}/config?env=1",
            app.base,
            input["api_key"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        config["flags"],
        json!({"eventsV3": "100", "eventBatchingIntervalMillis": "5000"})
    );
    assert_eq!(config["v3SecureServiceUrl"], "cdp.example.com/v3/JS/");
    assert_eq!(config["identityUrl"], "cdp.example.com/identity/v1/");

    for bad in [
        json!({"web_hosts": {"v3SecureServiceUrl": "https://cdp.example.com/v3/JS/"}}),
        json!({"web_hosts": {"homepage": "x/"}}),
    ] {
        let response = app
            .admin(Method::POST, "/api/v1/inputs")
            .json(&json!({"name": "x", "platform": "web", "settings": bad}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
    }
    app.stop().await.unwrap();
}
