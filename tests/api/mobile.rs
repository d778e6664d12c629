//! Android and iOS uploads: fixtures in the SDKs' message format covering every `dt`, gzip
//! compressed and signed as the SDKs sign, translated into the Events API model and checked at a
//! real webhook; and every kind of bad upload gets the status the SDKs handle correctly.

use std::io::Write;
use std::time::{Duration, SystemTime};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::helpers::{Receiver, TestApp, spawn_app};

/// A `Date` header as the SDKs send it, `offset` seconds from now.
pub fn date_in(offset: i64) -> String {
    let now = SystemTime::now();
    let by = Duration::from_secs(offset.unsigned_abs());
    let at = if offset >= 0 { now + by } else { now - by };
    httpdate::fmt_http_date(at)
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/mobile/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// The SDKs' signature: hex HMAC-SHA256 of `POST\n{Date}\n{default path}{uncompressed body}`.
pub fn sign(secret: &str, date: &str, path: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("POST\n{date}\n{path}").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Uploads `batch` the way the SDKs do, to `path` (default: `/v2/{key}/events`).
async fn upload(app: &TestApp, input: &Value, batch: &Value, path: Option<&str>) -> (u16, Value) {
    let key = input["api_key"].as_str().unwrap();
    let path = path.map_or_else(|| format!("/v2/{key}/events"), str::to_owned);
    let body = batch.to_string();
    let signature = sign_upload(input, &date_in(0), &body);
    send(app, &path, &date_in(0), &signature, gzip(body.as_bytes())).await
}

/// The signature an SDK puts on an upload of `body` for `input` at `date`.
fn sign_upload(input: &Value, date: &str, body: &str) -> String {
    let key = input["api_key"].as_str().unwrap();
    let secret = input["api_secret"].as_str().unwrap();
    sign(secret, date, &format!("/v2/{key}/events"), body.as_bytes())
}

/// Posts a gzip upload to `path` with the given `Date` and signature, as they are.
async fn send(
    app: &TestApp,
    path: &str,
    date: &str,
    signature: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{}{path}", app.base))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .header("date", date)
        .header("x-mp-signature", signature)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Settings that let every event type through, in one POST per batch.
fn everything() -> Value {
    json!({"send_as_batch": true, "include_user_identity_change_events": true,
           "include_user_attribute_change_events": true, "include_event_batch_location": true})
}

fn event_types(body: &Value) -> Vec<&str> {
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn an_android_batch_with_every_message_type_is_translated() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("android").await;
    let settings = json!({"url": receiver.url("/hook"), "include_mp_deviceid": true});
    let output = app
        .create(
            "/api/v1/outputs",
            json!({"name": "all", "kind": "webhook", "settings": settings}),
        )
        .await;
    app.connect(&input, &output, everything()).await;

    let (status, body) = upload(&app, &input, &fixture("android_batch.json"), None).await;
    assert_eq!(status, 202);
    assert_eq!(
        body,
        json!({}),
        "Android deletes a batch only after reading a JSON object"
    );
    let got = receiver.take(1).await.remove(0).body;

    assert_eq!(
        event_types(&got),
        vec![
            "session_start",
            "first_run",
            "application_state_transition",
            "screen_view",
            "custom_event",
            "commerce_event",
            "commerce_event",
            "commerce_event",
            "user_attribute_change",
            "user_identity_change",
            "push_registration",
            "push_message",
            "push_reaction",
            "network_performance",
            "breadcrumb",
            "crash_report",
            "opt_out",
            "profile",
            "session_end",
        ]
    );
    assert_eq!(got["mpid"], 8_446_744_073_709_551_615i64);
    assert_eq!(got["environment"], "development");
    assert_eq!(got["mp_deviceid"], "a1b2c3d4-0000-4000-8000-00000000d001");
    assert_eq!(got["sdk_version"], "5.55.0");
    assert_eq!(got["source_info"]["channel"], "native");
    assert_eq!(got["application_info"]["application_name"], "Higgs Shop");
    assert_eq!(
        got["application_info"]["package"],
        "com.mparticle.example.higgsshop"
    );
    assert_eq!(got["device_info"]["platform"], "Android");
    assert_eq!(got["device_info"]["device"], "Pixel 7");
    assert_eq!(
        got["device_info"]["android_advertising_id"],
        "38400000-8cf0-11bd-b23e-10b96e40000d"
    );
    assert_eq!(
        got["user_attributes"],
        json!({"tier": "gold", "interests": ["shoes", "hats"]})
    );
    assert_eq!(got["deleted_user_attributes"], json!(["old_attribute"]));
    assert_eq!(
        got["context"]["data_plan"],
        json!({"plan_id": "shop_plan", "plan_version": 2})
    );
    assert_eq!(got["consent_state"]["gdpr"]["marketing"]["consented"], true);
    let identities = got["user_identities"].as_array().unwrap();
    assert!(
        identities
            .iter()
            .any(|i| i["identity_type"] == "customer_id" && i["identity"] == "cust-7")
    );

    let events = got["events"].as_array().unwrap();
    let data = |i: usize| &events[i]["data"];
    assert_eq!(data(0)["session_uuid"], "SESSION-1");
    assert_eq!(
        data(0)["location"],
        json!({"latitude": 52.52, "longitude": 13.405, "accuracy": 10.0})
    );
    assert_eq!(
        data(2)["application_transition_type"],
        "application_initialized"
    );
    assert_eq!(data(2)["is_first_run"], true);
    assert_eq!(data(3)["screen_name"], "Shop");
    assert_eq!(data(3)["custom_attributes"], json!({"section": "shoes"}));
    assert_eq!(data(4)["event_name"], "Navbar Clicked");
    assert_eq!(data(4)["custom_event_type"], "navigation");
    assert_eq!(data(4)["custom_flags"], json!({"Google.Category": ["nav"]}));
    assert_eq!(data(4)["session_uuid"], "SESSION-1");
    assert_eq!(data(4)["timestamp_unixtime_ms"], 1_700_000_000_005i64);
    let purchase = &data(5)["product_action"];
    assert_eq!(purchase["action"], "purchase");
    assert_eq!(purchase["transaction_id"], "T-77");
    assert_eq!(purchase["total_amount"], 59.98);
    assert_eq!(
        purchase["products"][0],
        json!({"id": "sku-9", "name": "Tee", "price": 29.99, "quantity": 2,
        "brand": "Higgs", "variant": "blue", "category": "shirts", "total_product_amount": 59.98,
        "custom_attributes": {"size": "M"}})
    );
    assert_eq!(data(5)["currency_code"], "EUR");
    assert_eq!(data(6)["promotion_action"]["action"], "click");
    assert_eq!(
        data(6)["promotion_action"]["promotions"][0]["creative"],
        "banner"
    );
    assert_eq!(
        data(7)["product_impressions"][0]["product_impression_list"],
        "Products List"
    );
    assert_eq!(data(8)["user_attribute_name"], "tier");
    assert_eq!(data(8)["old"], "silver");
    assert_eq!(data(9)["new"]["identity_type"], "email");
    assert_eq!(data(10)["registration_token"], "fcm-token-1");
    assert_eq!(data(11)["push_message_type"], "received");
    assert_eq!(data(13)["url"], "https://api.example.com/items");
    assert_eq!(data(13)["response_code"], 200);
    assert_eq!(data(14)["label"], "opened cart");
    assert_eq!(data(15)["message"], "NullPointerException");
    assert_eq!(data(15)["exception_handled"], false);
    assert_eq!(data(16)["is_opted_out"], false);
    assert_eq!(data(17)["profile_event_type"], "logout");
    assert_eq!(data(18)["session_duration_ms"], 18000);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_ios_batch_reaches_connections_like_any_other() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("ios").await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    // Real time and no commerce: the same settings act on mobile data as on any other.
    app.connect(&input, &output, json!({"send_commerce_events": false}))
        .await;
    let key = input["api_key"].as_str().unwrap().to_owned();

    // The CNAME path; the signature still covers the default path.
    let (status, _) = upload(
        &app,
        &input,
        &fixture("ios_batch.json"),
        Some(&format!("/nativeevents/v2/{key}/events")),
    )
    .await;
    assert_eq!(status, 202);
    let got = receiver.take(5).await;
    let types: Vec<&str> = got.iter().flat_map(|r| event_types(&r.body)).collect();
    assert_eq!(
        types,
        vec![
            "session_start",
            "custom_event",
            "screen_view",
            "application_state_transition",
            "session_end"
        ]
    );
    let custom = &got[1].body;
    assert_eq!(custom["mpid"], 1_234_567_890_123_456_789i64);
    assert_eq!(custom["environment"], "production");
    assert_eq!(custom["device_info"]["platform"], "iOS");
    assert_eq!(
        custom["device_info"]["ios_idfv"],
        "7C2C9B6A-0000-4000-8000-0000000000AA"
    );
    assert_eq!(
        custom["device_info"]["att_authorization_status"],
        "authorized"
    );
    assert_eq!(custom["application_info"]["os"], "IOS");
    assert_eq!(custom["events"][0]["data"]["custom_event_type"], "social");
    assert_eq!(
        got[3].body["events"][0]["data"]["application_transition_type"],
        "application_background"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn bad_uploads_get_the_status_the_sdks_handle_and_store_nothing() {
    let app = spawn_app().await;
    let android = app.create_input("android").await;
    let ios = app.create_input("ios").await;
    let web = app.create_input("web").await;
    let key = android["api_key"].as_str().unwrap();
    let url = format!("{}/v2/{key}/events", app.base);
    let batch = fixture("android_batch.json").to_string();
    let date = date_in(0);
    let post = |body: Vec<u8>, signature: Option<String>| {
        let mut request = app
            .client
            .post(&url)
            .header("content-encoding", "gzip")
            .header("date", &date)
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-mp-signature", signature);
        }
        request.send()
    };

    let wrong = sign(
        "not-the-secret",
        &date,
        &format!("/v2/{key}/events"),
        batch.as_bytes(),
    );
    assert_eq!(
        post(gzip(batch.as_bytes()), Some(wrong))
            .await
            .unwrap()
            .status(),
        403,
        "wrong signature"
    );
    assert_eq!(
        post(gzip(batch.as_bytes()), None).await.unwrap().status(),
        401,
        "no signature"
    );
    let signed = sign_upload(&android, &date, &batch);
    assert_eq!(
        post(b"not gzip at all".to_vec(), Some(signed))
            .await
            .unwrap()
            .status(),
        400,
        "bad gzip"
    );

    let mut unknown_dt = fixture("android_batch.json");
    unknown_dt["msgs"][0]["dt"] = json!("zz");
    let (status, body) = upload(&app, &android, &unknown_dt, None).await;
    assert_eq!(status, 400);
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("msgs[0].dt"),
        "{body}"
    );

    let (status, body) = upload(&app, &ios, &fixture("android_batch.json"), None).await;
    assert_eq!(status, 403, "an Android upload to an iOS key");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("android"),
        "{body}"
    );
    assert_eq!(
        upload(&app, &web, &fixture("ios_batch.json"), None).await.0,
        403,
        "a mobile upload to a web key"
    );
    let nobody = json!({"api_key": "nobody", "api_secret": "x"});
    assert_eq!(
        upload(&app, &nobody, &fixture("ios_batch.json"), None)
            .await
            .0,
        403
    );

    let mut huge = fixture("ios_batch.json");
    huge["ua"] = json!({"padding": "y".repeat(300 * 1024)});
    let big_body = huge.to_string();
    let response = app
        .client
        .post(&url)
        .header("date", &date)
        .header("x-mp-signature", sign_upload(&android, &date, &big_body))
        .body(big_body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413, "oversize");
    assert_eq!(app.count("batches").await, 0);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn mobile_config_answers_with_an_etag_and_304() {
    let app = spawn_app().await;
    let ios = app.create_input("ios").await;
    let url = format!(
        "{}/v4/{}/config?av=1.0&sv=8.29.0",
        app.base,
        ios["api_key"].as_str().unwrap()
    );
    let first = app.client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let etag = first.headers()["etag"].clone();
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["dt"], "ac");
    let again = app
        .client
        .get(&url)
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    let web = app.create_input("web").await;
    let refused = app
        .client
        .get(format!(
            "{}/v4/{}/config",
            app.base,
            web["api_key"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn android_identity_calls_may_be_gzipped() {
    let app = spawn_app().await;
    let android = app.create_input("android").await;
    let body = json!({"client_sdk": {"platform": "android"}, "known_identities":
        {"android_uuid": "9774d56d682e549c", "customerid": "cust-7"}, "previous_mpid": 0});
    let response = app
        .client
        .post(format!("{}/v1/identify", app.base))
        .header("x-mp-key", android["api_key"].as_str().unwrap())
        .header("content-encoding", "gzip")
        .header("content-type", "application/json")
        .body(gzip(body.to_string().as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["is_logged_in"], true);
    app.stop().await.unwrap();
}

/// The iOS fixture without its `id`: nothing in the body tells one upload from another.
fn upload_without_id() -> String {
    let mut batch = fixture("ios_batch.json");
    batch.as_object_mut().unwrap().remove("id");
    batch.to_string()
}

#[tokio::test]
async fn an_upload_dated_too_far_from_the_servers_clock_is_refused() {
    let app = spawn_app().await;
    let ios = app.create_input("ios").await;
    let path = format!("/v2/{}/events", ios["api_key"].as_str().unwrap());
    let body = fixture("ios_batch.json").to_string();
    let attempt = |date: String| {
        let signature = sign_upload(&ios, &date, &body);
        let gzipped = gzip(body.as_bytes());
        let path = path.clone();
        let app = &app;
        async move { send(app, &path, &date, &signature, gzipped).await }
    };

    for (offset, why) in [(-3600, "an hour old"), (3600, "an hour ahead")] {
        let (status, answer) = attempt(date_in(offset)).await;
        // 4xx: the SDKs delete the batch rather than retry it forever; the answer and the
        // rejection metric say why.
        assert_eq!(status, 403, "{why}: {answer}");
        assert_eq!(answer["errors"][0]["code"], "FORBIDDEN", "{why}");
        let message = answer["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("Date"), "{why}: {message}");
    }
    let (status, _) = attempt("yesterday at noon".to_owned()).await;
    assert_eq!(status, 401, "a Date that is not a date");
    assert_eq!(app.count("batches").await, 0, "nothing stored");

    assert_eq!(attempt(date_in(-300)).await.0, 202, "five minutes old");
    assert_eq!(attempt(date_in(300)).await.0, 202, "five minutes ahead");
    assert!(
        app.metrics()
            .await
            .lines()
            .any(|l| l.contains("clock_skew") && !l.starts_with('#')),
        "counted as a rejection"
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_android_date_in_local_time_is_read_with_its_offset() {
    let app = spawn_app().await;
    let android = app.create_input("android").await;
    let path = format!("/v2/{}/events", android["api_key"].as_str().unwrap());
    let body = fixture("android_batch.json").to_string();
    // Android formats the device's local time with its zone: 05:30 ahead of GMT in India.
    let wall_clock = date_in(5 * 3600 + 1800);
    let local = wall_clock.replace(" GMT", " GMT+05:30");
    let signature = sign_upload(&android, &local, &body);
    let (status, answer) = send(&app, &path, &local, &signature, gzip(body.as_bytes())).await;
    assert_eq!(status, 202, "{answer}");
    // The same wall clock read as GMT is five and a half hours ahead.
    let signature = sign_upload(&android, &wall_clock, &body);
    let (status, _) = send(&app, &path, &wall_clock, &signature, gzip(body.as_bytes())).await;
    assert_eq!(status, 403);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_replayed_upload_is_answered_alike_and_stored_once_on_every_node() {
    let app = spawn_app().await;
    let ios = app.create_input("ios").await;
    // Started after the input exists: on SQLite a node reads the catalog at start.
    let other_node = app.second_node(|_| {}).await;
    let path = format!("/v2/{}/events", ios["api_key"].as_str().unwrap());
    let body = upload_without_id();
    let date = date_in(0);
    let signature = sign_upload(&ios, &date, &body);

    let first = send(&app, &path, &date, &signature, gzip(body.as_bytes())).await;
    assert_eq!(first, (202, json!({})));
    let replay = send(&app, &path, &date, &signature, gzip(body.as_bytes())).await;
    assert_eq!(replay, first, "a replay gets the first upload's answer");
    // The same signature in capitals, and the body compressed differently: still a replay.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(body.as_bytes()).unwrap();
    let recompressed = encoder.finish().unwrap();
    let shouting = signature.to_uppercase();
    let replay = send(&app, &path, &date, &shouting, recompressed).await;
    assert_eq!(replay, first);
    let replay = send(&other_node, &path, &date, &signature, gzip(body.as_bytes())).await;
    assert_eq!(replay, first, "another node knows the upload too");
    assert_eq!(app.count("batches").await, 1, "stored once");

    // An upload with an `id` is known by it, as before.
    let mut with_id = fixture("ios_batch.json");
    with_id["id"] = json!("upload-7");
    let with_id = with_id.to_string();
    let signature = sign_upload(&ios, &date, &with_id);
    for node in [&app, &other_node] {
        let answer = send(node, &path, &date, &signature, gzip(with_id.as_bytes())).await;
        assert_eq!(answer, first);
    }
    assert_eq!(app.count("batches").await, 2);
    other_node.stop().await.unwrap();
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_upload_is_inflated_only_up_to_the_body_limit() {
    let app = spawn_app().await;
    let ios = app.create_input("ios").await;
    let path = format!("/v2/{}/events", ios["api_key"].as_str().unwrap());
    let padded = |bytes: usize| {
        let mut batch = fixture("ios_batch.json");
        batch["ua"] = json!({"padding": "y".repeat(bytes)});
        batch.to_string()
    };
    let date = date_in(0);

    // 1 MB of JSON, a few kilobytes gzipped: over the 256 KB limit once inflated.
    let big = padded(1024 * 1024);
    let signature = sign_upload(&ios, &date, &big);
    let (status, answer) = send(&app, &path, &date, &signature, gzip(big.as_bytes())).await;
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["errors"][0]["code"], "REQUEST_TOO_LARGE");
    assert_eq!(app.count("batches").await, 0);

    let fits = padded(200 * 1024);
    let signature = sign_upload(&ios, &date, &fits);
    let (status, _) = send(&app, &path, &date, &signature, gzip(fits.as_bytes())).await;
    assert_eq!(status, 202, "200 KB inflated is within the limit");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_oversized_gzip_identity_call_is_413_too_large() {
    let app = spawn_app().await;
    let android = app.create_input("android").await;
    // Just over the 256 KB limit, and far over it (which used to be called "not valid gzip").
    for padding in [300 * 1024, 3 * 1024 * 1024] {
        let body = json!({"client_sdk": {"platform": "android"}, "known_identities":
            {"android_uuid": "9774d56d682e549c"}, "padding": " ".repeat(padding)});
        let response = app
            .client
            .post(format!("{}/v1/identify", app.base))
            .header("x-mp-key", android["api_key"].as_str().unwrap())
            .header("content-encoding", "gzip")
            .header("content-type", "application/json")
            .body(gzip(body.to_string().as_bytes()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 413, "{padding} bytes");
        let answer: Value = response.json().await.unwrap();
        let message = answer["Errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("too large"), "{message}");
    }
    app.stop().await.unwrap();
}

/// `levels` arrays, one inside the other, around a number.
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// An upload's `attrs` sit a level deeper in the batch it becomes: an upload serde_json reads
/// whose batch it could not read back is refused, as delivery and replay would fail on it.
#[tokio::test]
async fn an_upload_nested_deeper_than_its_batch_can_be_read_is_refused() {
    let app = spawn_app().await;
    let android = app.create_input("android").await;
    // The upload, `msgs`, the message and `attrs` are levels 1 to 4: 123 arrays reach 127.
    let mut deep = fixture("android_batch.json");
    deep["msgs"][4]["attrs"] = json!({"k": nested(123)});
    serde_json::from_str::<Value>(&deep.to_string()).expect("serde_json reads the upload");
    let (status, body) = upload(&app, &android, &deep, None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["errors"][0]["message"],
        "Field \"events[4].data.custom_attributes\" is nested too deeply; \
         a batch may nest at most 127 levels.",
        "{body}"
    );
    assert_eq!(app.count("batches").await, 0);

    let mut deepest = fixture("android_batch.json");
    deepest["msgs"][4]["attrs"] = json!({"k": nested(122)});
    assert_eq!(upload(&app, &android, &deepest, None).await.0, 202);
    assert_eq!(app.count("batches").await, 1);
    app.stop().await.unwrap();
}
