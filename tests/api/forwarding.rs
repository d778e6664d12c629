//! Kit forwarding statistics (`/v1|v2/JS/{key}/Forwarding`) are bounded: a cap on distinct
//! kits per input (the rest counted in one `overflow` bucket), reports of sideloaded kits (no
//! `mid`) counted under `sideloaded`, a paginated admin listing, and stale rows pruned.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, spawn_app_with};

/// The default `ingest.max_forwarding_kits_per_input`.
const KIT_CAP: i64 = 100;
const DAY_MS: i64 = 86_400_000;

pub async fn post(app: &TestApp, path: &str, body: &Value) -> u16 {
    app.client
        .post(format!("{}{path}", app.base))
        .header("content-type", "text/plain;charset=UTF-8")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// One page of the admin listing.
async fn page(app: &TestApp, input: &Value, query: &str) -> Value {
    let id = input["id"].as_str().unwrap();
    let response = app
        .admin(
            Method::GET,
            &format!("/api/v1/inputs/{id}/forwarding-stats{query}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Every row of the listing, following `next` page by page; `(kit, events)` in order.
async fn all_rows(app: &TestApp, input: &Value, limit: usize) -> (Vec<(String, i64)>, usize) {
    let mut rows = Vec::new();
    let mut pages = 0;
    let mut query = format!("?limit={limit}");
    loop {
        let body = page(app, input, &query).await;
        pages += 1;
        let items = body["items"].as_array().unwrap();
        assert!(items.len() <= limit, "a page holds at most `limit` items");
        for item in items {
            rows.push((
                item["kit"].as_str().unwrap().to_owned(),
                item["events"].as_i64().unwrap(),
            ));
        }
        match body["next"].as_str() {
            Some(next) => query = format!("?limit={limit}&after={next}"),
            None => break,
        }
    }
    (rows, pages)
}

#[tokio::test]
async fn reports_of_sideloaded_kits_without_a_mid_are_counted_under_sideloaded() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    // What Web SDK 2.20 posts for a sideloaded kit: `mid: forwarder.id` is undefined, so gone.
    let sideloaded = json!({"esid": 1, "n": "Viewed", "attrs": {}, "sdk": "2.20.0", "dt": 4, "et": 1, "dbg": true, "ct": 1, "eec": 0});
    let path = format!("/v1/JS/{key}/Forwarding");
    assert_eq!(post(&app, &path, &sideloaded).await, 202);
    let batch =
        json!({"uuid": "u-1", "data": [sideloaded, {"mid": 160, "n": "Viewed"}, sideloaded]});
    let path = format!("/v2/JS/{key}/Forwarding");
    assert_eq!(post(&app, &path, &batch).await, 202);

    let body = page(&app, &input, "").await;
    assert_eq!(
        body["items"],
        json!([
            {"kit": "sideloaded", "module_id": null, "events": 3,
             "last_reported_at": body["items"][0]["last_reported_at"]},
            {"kit": "160", "module_id": 160, "events": 1,
             "last_reported_at": body["items"][1]["last_reported_at"]},
        ])
    );
    assert!(body["items"][0]["last_reported_at"].as_i64().unwrap() > 0);
    assert_eq!(body["next"], Value::Null);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn distinct_kits_beyond_the_cap_share_one_overflow_bucket_and_the_listing_pages() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    let path = format!("/v2/JS/{key}/Forwarding");
    // The security review's request: 14,000 distinct kit ids in one report batch.
    let reports: Vec<Value> = (1..=14_000).map(|mid| json!({"mid": mid})).collect();
    assert_eq!(post(&app, &path, &json!({"data": reports})).await, 202);
    assert_eq!(
        app.count("forwarding_stats").await,
        KIT_CAP + 1,
        "the cap's kits and one overflow bucket"
    );

    // A kit already counted keeps counting; a new one goes to the overflow bucket; a bad
    // report refuses its whole request.
    let more = json!({"data": [{"mid": 7}, {"mid": 7}, {"mid": 20_000}]});
    assert_eq!(post(&app, &path, &more).await, 202);
    let bad = json!({"data": [{"mid": 8}, {"mid": "eight"}]});
    assert_eq!(post(&app, &path, &bad).await, 400);
    assert_eq!(app.count("forwarding_stats").await, KIT_CAP + 1);

    let (rows, pages) = all_rows(&app, &input, 40).await;
    assert_eq!(pages, 3, "101 rows in pages of 40");
    let mut expected = vec![("overflow".to_owned(), 14_000 - KIT_CAP + 1)];
    expected.extend((1..=KIT_CAP).map(|kit| (kit.to_string(), if kit == 7 { 3 } else { 1 })));
    assert_eq!(rows, expected, "every row once, in order");
    assert_eq!(
        page(&app, &input, "?limit=1").await["items"][0]["module_id"],
        Value::Null
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_listing_refuses_a_bad_cursor() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let id = input["id"].as_str().unwrap();
    let response = app
        .admin(
            Method::GET,
            &format!("/api/v1/inputs/{id}/forwarding-stats?after=nonsense"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_cursor", "{body}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn statistics_not_updated_within_the_retention_are_pruned() {
    let app = spawn_app_with(|config| config.retention.interval_secs = 1).await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    let path = format!("/v2/JS/{key}/Forwarding");
    let reports = json!({"data": [{"mid": 1}, {"mid": 2}, {"n": "sideloaded"}]});
    assert_eq!(post(&app, &path, &reports).await, 202);
    // Kit 1 last reported 31 days ago, kit 2 29 days ago (the default keeps 30 days).
    let now = boson_now_ms();
    app.execute(&format!(
        "UPDATE forwarding_stats SET last_at = {} WHERE module_id = 1",
        now - 31 * DAY_MS
    ))
    .await;
    app.execute(&format!(
        "UPDATE forwarding_stats SET last_at = {} WHERE module_id = 2",
        now - 29 * DAY_MS
    ))
    .await;
    wait_for_rows(&app, "forwarding_stats", 2).await;
    let (rows, _) = all_rows(&app, &input, 10).await;
    let kits: Vec<&str> = rows.iter().map(|(kit, _)| kit.as_str()).collect();
    assert_eq!(kits, ["sideloaded", "2"]);
    app.stop().await.unwrap();
}

pub fn boson_now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// Waits (up to 10 s) until `table` holds `rows` rows.
pub async fn wait_for_rows(app: &TestApp, table: &str, rows: i64) {
    for _ in 0..100 {
        if app.count(table).await == rows {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{table} holds {} rows, not {rows}, after 10 s",
        app.count(table).await
    );
}
