//! Alias requests: the Web SDK's route (`/Alias`, plain JSON) takes only web inputs' keys; the
//! mobile route (`/alias`, gzip, signed over the default path) only iOS and Android inputs' keys
//! with a valid signature; stored aliases are pruned after the retention.

use std::io::Write;

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::forwarding::{boson_now_ms, wait_for_rows};
use crate::helpers::{TestApp, spawn_app, spawn_app_with};

const DAY_MS: i64 = 86_400_000;

fn alias_body() -> Value {
    json!({"request_type": "alias", "request_id": "r-1", "environment": "development", "api_key": "k",
           "data": {"source_mpid": 1, "destination_mpid": 2, "start_unixtime_ms": 1, "end_unixtime_ms": 2,
                    "device_application_stamp": "das-1"}})
}

/// The Web SDK's alias call: plain JSON, no signature.
async fn web_alias(app: &TestApp, input: &Value) -> reqwest::Response {
    let key = input["api_key"].as_str().unwrap();
    app.client
        .post(format!("{}/v1/identity/{key}/Alias", app.base))
        .json(&alias_body())
        .send()
        .await
        .unwrap()
}

/// How a mobile SDK signs an alias request.
#[derive(Debug, Clone, Copy)]
enum Signing {
    None,
    /// Signed with the input's secret over the default path.
    Valid,
    /// Signed with another secret.
    WrongSecret,
    /// Signed correctly, with a `Date` an hour old (a captured request replayed).
    Stale,
}

/// The mobile SDKs' alias call to `path` (default `/v1/identity/{key}/alias`): gzip, signed
/// over the default path whatever path is called.
async fn mobile_alias(
    app: &TestApp,
    input: &Value,
    path: Option<&str>,
    signing: Signing,
) -> reqwest::Response {
    let key = input["api_key"].as_str().unwrap();
    let body = alias_body().to_string();
    let default_path = format!("/v1/identity/{key}/alias");
    let secret = match signing {
        Signing::WrongSecret => "not-the-secret",
        _ => input["api_secret"].as_str().unwrap(),
    };
    // Signed now: the server refuses a Date far from its clock, as for uploads.
    let now = std::time::SystemTime::now();
    let date = match signing {
        Signing::Stale => now - std::time::Duration::from_secs(3600),
        _ => now,
    };
    let date = httpdate::fmt_http_date(date);
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("POST\n{date}\n{default_path}").as_bytes());
    mac.update(body.as_bytes());
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(body.as_bytes()).unwrap();
    let path = path.map_or(default_path, str::to_owned);
    let mut request = app
        .client
        .post(format!("{}{path}", app.base))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzip.finish().unwrap());
    if !matches!(signing, Signing::None) {
        request = request
            .header("date", date)
            .header("x-mp-signature", hex::encode(mac.finalize().into_bytes()));
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn the_web_alias_route_takes_only_web_inputs() {
    let app = spawn_app().await;
    for platform in ["ios", "android", "custom_feed"] {
        let input = app.create_input(platform).await;
        let response = web_alias(&app, &input).await;
        assert_eq!(response.status(), 403, "{platform}");
        let body: Value = response.json().await.unwrap();
        let message = body["errors"][0]["message"].as_str().unwrap_or_default();
        assert!(message.contains("takes web data"), "{platform}: {message}");
    }
    assert_eq!(app.count("aliases").await, 0);
    let web = app.create_input("web").await;
    assert_eq!(web_alias(&app, &web).await.status(), 202);
    assert_eq!(app.count("aliases").await, 1);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_mobile_alias_route_needs_a_mobile_input_and_its_signature() {
    let app = spawn_app().await;
    let web = app.create_input("web").await;
    let feed = app.create_input("custom_feed").await;
    let android = app.create_input("android").await;
    let ios = app.create_input("ios").await;
    for other in [&web, &feed] {
        let response = mobile_alias(&app, other, None, Signing::Valid).await;
        assert_eq!(response.status(), 403, "{}", other["platform"]);
    }
    let unsigned = mobile_alias(&app, &android, None, Signing::None).await;
    assert_eq!(unsigned.status(), 401);
    let forged = mobile_alias(&app, &android, None, Signing::WrongSecret).await;
    assert_eq!(forged.status(), 403);
    let replayed = mobile_alias(&app, &android, None, Signing::Stale).await;
    assert_eq!(replayed.status(), 403);
    assert_eq!(app.count("aliases").await, 0, "nothing refused is stored");

    let signed = mobile_alias(&app, &android, None, Signing::Valid).await;
    assert_eq!(signed.status(), 202);
    let cname = format!(
        "/nativeevents/v1/identity/{}/alias",
        ios["api_key"].as_str().unwrap()
    );
    let signed = mobile_alias(&app, &ios, Some(&cname), Signing::Valid).await;
    assert_eq!(signed.status(), 202);
    assert_eq!(app.count("aliases").await, 2);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn aliases_older_than_the_retention_are_pruned() {
    let app = spawn_app_with(|config| config.retention.interval_secs = 1).await;
    let web = app.create_input("web").await;
    for _ in 0..3 {
        assert_eq!(web_alias(&app, &web).await.status(), 202);
    }
    let old = boson_now_ms() - 31 * DAY_MS;
    app.execute(&format!(
        "UPDATE aliases SET created_at = {old} WHERE id = (SELECT MIN(id) FROM aliases)"
    ))
    .await;
    wait_for_rows(&app, "aliases", 2).await;
    app.stop().await.unwrap();
}
