//! The data catalog (`GET /api/v1/catalog?input_id=`): the data points an input's accepted
//! batches carried, named as Data Filter rules name them, with detected types and counts that
//! merge across nodes and restarts.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::forwarding::post;
use crate::helpers::{TestApp, spawn_app};

/// A data point appears within this long of being sent (the brief's promise).
const WITHIN: Duration = Duration::from_secs(5);

async fn catalog(app: &TestApp, input: &Value) -> Value {
    let id = input["id"].as_str().unwrap();
    app.read(&format!("/api/v1/catalog?input_id={id}")).await
}

/// The catalog entry of one event, if listed.
fn find<'a>(catalog: &'a Value, event_type: &str, event_name: Option<&str>) -> Option<&'a Value> {
    catalog["events"].as_array()?.iter().find(|e| {
        e["event_type"] == event_type && e.get("event_name").and_then(Value::as_str) == event_name
    })
}

/// Polls the catalog until `done` holds of it, for at most [`WITHIN`].
async fn catalog_when(app: &TestApp, input: &Value, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let catalog = catalog(app, input).await;
        if done(&catalog) {
            return catalog;
        }
        assert!(
            started.elapsed() < WITHIN,
            "not in the catalog within {WITHIN:?}: {catalog:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn count_of(catalog: &Value, event_type: &str, event_name: Option<&str>) -> i64 {
    find(catalog, event_type, event_name).map_or(0, |e| e["count"].as_i64().unwrap())
}

fn coupon_viewed(code: &Value, price: &Value) -> Value {
    json!({"event_type": "custom_event", "data": {"event_name": "Coupon Viewed",
           "custom_event_type": "other",
           "custom_attributes": {"coupon_code": code, "price": price}}})
}

#[tokio::test]
async fn an_events_api_batch_is_listed_by_filter_names_with_types_and_counts() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let batch = json!({
        "environment": "production",
        "user_identities": {"email": "a@example.com", "customer_id": "c-1"},
        "user_attributes": {"$Age": 42, "plan": "pro", "vip": true, "tags": ["a"],
                            "nickname": null},
        "events": [
            coupon_viewed(&json!("SPRING"), &json!(9.5)),
            coupon_viewed(&json!("SUMMER"), &json!(3)),
            {"event_type": "screen_view", "data": {"screen_name": "Home",
             "custom_attributes": {"tab": "deals"}}},
            {"event_type": "commerce_event", "data": {"product_action": {"action": "purchase",
             "transaction_id": "t-1", "total_amount": 9.5,
             "products": [{"id": "sku", "name": "Thing", "price": 9.5, "quantity": 1}]},
             "custom_attributes": {"gift": false}}},
            {"event_type": "session_start", "data": {}},
        ],
    });
    assert_eq!(app.post_events(&input, batch).await.status(), 202);

    let catalog = catalog_when(&app, &input, |c| find(c, "session_start", None).is_some()).await;
    assert_eq!(catalog["input_id"], input["id"]);
    let coupon = find(&catalog, "custom_event", Some("Coupon Viewed")).unwrap();
    assert_eq!(coupon["count"], 2);
    assert_eq!(
        coupon["attributes"],
        json!({"coupon_code": "string", "price": "number"})
    );
    let first = coupon["first_seen_ms"].as_i64().unwrap();
    assert!(first > 0 && first <= coupon["last_seen_ms"].as_i64().unwrap());
    let home = find(&catalog, "screen_view", Some("Home")).unwrap();
    assert_eq!(
        (home["count"].clone(), home["attributes"].clone()),
        (json!(1), json!({"tab": "string"}))
    );
    let purchase = find(&catalog, "commerce_event", Some("purchase")).unwrap();
    assert_eq!(purchase["attributes"], json!({"gift": "boolean"}));
    // An event type without names is listed without one, as a type-wide filter rule names it.
    let session = find(&catalog, "session_start", None).unwrap();
    assert!(session.get("event_name").is_none(), "{session}");
    assert_eq!(session["attributes"], json!({}));
    assert_eq!(
        catalog["user_attributes"],
        json!({"$Age": "number", "plan": "string", "vip": "boolean", "tags": "array",
               "nickname": "null"})
    );
    assert_eq!(catalog["identity_types"], json!(["customer_id", "email"]));
    assert_eq!(catalog["events"].as_array().unwrap().len(), 4);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_attribute_seen_with_two_types_is_mixed_and_null_does_not_count() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let batch = json!({"events": [
        coupon_viewed(&json!("A"), &json!(1)),
        coupon_viewed(&json!(null), &json!("free")),
    ]});
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    let catalog = catalog_when(&app, &input, |c| {
        find(c, "custom_event", Some("Coupon Viewed")).is_some()
    })
    .await;
    let coupon = find(&catalog, "custom_event", Some("Coupon Viewed")).unwrap();
    assert_eq!(
        coupon["attributes"],
        json!({"coupon_code": "string", "price": "mixed"})
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn web_sdk_batches_and_legacy_web_events_reach_the_catalog() {
    let app = spawn_app().await;
    let input = app.create_input("web").await;
    let key = input["api_key"].as_str().unwrap();
    // The Web SDK's v3 upload, as the SDK sends it (JSON as text/plain, the key in the path).
    let v3 = json!({
        "source_request_id": "c0ffee00-0000-4000-8000-000000000001",
        "environment": "development", "mpid": "7",
        "user_attributes": {"favourite_colour": "green"},
        "user_identities": {"customer_id": "web-1"},
        "events": [{"event_type": "custom_event", "data": {
            "event_name": "Added To Wishlist", "custom_event_type": "transaction",
            "custom_attributes": {"sku": "s-1", "quantity": 2}}}],
    });
    assert_eq!(post(&app, &format!("/v3/JS/{key}/events"), &v3).await, 202);
    // An older Web SDK's per-event upload (dt 4: a custom event).
    let legacy = json!({"n": "Viewed Banner", "dt": 4, "et": 1, "mpid": "7",
                        "attrs": {"banner": "summer"}});
    assert_eq!(
        post(&app, &format!("/v2/JS/{key}/Events"), &legacy).await,
        202
    );

    let catalog = catalog_when(&app, &input, |c| {
        find(c, "custom_event", Some("Added To Wishlist")).is_some()
            && find(c, "custom_event", Some("Viewed Banner")).is_some()
    })
    .await;
    let wish = find(&catalog, "custom_event", Some("Added To Wishlist")).unwrap();
    assert_eq!(
        wish["attributes"],
        json!({"sku": "string", "quantity": "number"})
    );
    let banner = find(&catalog, "custom_event", Some("Viewed Banner")).unwrap();
    assert_eq!(banner["attributes"], json!({"banner": "string"}));
    assert_eq!(catalog["user_attributes"]["favourite_colour"], "string");
    assert_eq!(catalog["identity_types"], json!(["customer_id"]));
    app.stop().await.unwrap();
}

fn signed_up(n: usize) -> Value {
    let events: Vec<Value> = (0..n)
        .map(|_| {
            json!({"event_type": "custom_event", "data": {"event_name": "Signed Up",
                         "custom_event_type": "other", "custom_attributes": {"plan": "pro"}}})
        })
        .collect();
    json!({"events": events})
}

/// Two nodes on one database flush into the same rows: counts add up, nothing is
/// overwritten, and a node stopping flushes what it still holds.
#[tokio::test]
async fn counts_from_two_nodes_and_a_stopped_node_add_up() {
    let node_1 = spawn_app().await;
    let input = node_1.create_input("custom_feed").await;
    assert_eq!(node_1.post_events(&input, signed_up(2)).await.status(), 202);
    catalog_when(&node_1, &input, |c| {
        count_of(c, "custom_event", Some("Signed Up")) == 2
    })
    .await;

    let node_2 = node_1.second_node(|_| {}).await;
    assert_eq!(node_2.post_events(&input, signed_up(3)).await.status(), 202);
    catalog_when(&node_1, &input, |c| {
        count_of(c, "custom_event", Some("Signed Up")) == 5
    })
    .await;
    // Sent just before a graceful stop: the shutdown flush stores it.
    assert_eq!(node_2.post_events(&input, signed_up(4)).await.status(), 202);
    node_2.stop().await.unwrap();
    let catalog = catalog(&node_1, &input).await;
    let event = find(&catalog, "custom_event", Some("Signed Up")).unwrap();
    assert_eq!(event["count"], 9, "{catalog:#}");
    assert_eq!(event["attributes"], json!({"plan": "string"}));
    node_1.stop().await.unwrap();
}

#[tokio::test]
async fn the_catalog_needs_a_known_input_and_the_admin_token() {
    let app = spawn_app().await;
    let missing = app
        .admin(Method::GET, "/api/v1/catalog")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);
    let body: Value = missing.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("input_id"),
        "{body}"
    );
    for unknown in ["not-an-id", "inp_0192d3b4c5e67f8091a2b3c4d5e6f708"] {
        let response = app
            .admin(Method::GET, &format!("/api/v1/catalog?input_id={unknown}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{unknown}");
    }
    let input = app.create_input("custom_feed").await;
    let anonymous = app
        .client
        .get(format!(
            "{}/api/v1/catalog?input_id={}",
            app.base,
            input["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // A known input nothing was sent to has an empty catalog.
    assert_eq!(
        catalog(&app, &input).await,
        json!({"input_id": input["id"], "events": [], "user_attributes": {}, "identity_types": []})
    );
    app.stop().await.unwrap();
}
