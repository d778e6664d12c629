//! The real mParticle Web SDK (npm `@mparticle/web-sdk` 2.68.0) in headless Chromium runs a
//! shopping session against Boson; two connections with different settings must each receive
//! exactly what their settings allow.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::helpers::{
    Received, Receiver, TestApp, skip_or_fail, spawn_app, spawn_app_with, suite_ran,
};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Whether the browser suite `suite` can run here; when it cannot, it is skipped loudly (see
/// `skip_or_fail`), else it is recorded as run.
pub fn browser_suite_runs(suite: &str) -> bool {
    match missing_prerequisite() {
        Some((why, enable)) => {
            skip_or_fail(suite, &why, enable);
            false
        }
        None => {
            suite_ran(suite);
            true
        }
    }
}

/// Why the browser suites cannot run here, if they cannot, and the command that enables them.
fn missing_prerequisite() -> Option<(String, &'static str)> {
    let sdk = browser_dir().join(SDKS[1].1);
    let playwright = browser_dir().join("node_modules/playwright-core");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        let enable =
            "apt-get install nodejs npm, then ./scripts/test (it runs npm ci in tests/browser)";
        return Some(("node is not installed".into(), enable));
    }
    if !Path::new(&chromium).exists() {
        let why = format!("{chromium} is missing");
        return Some((
            why,
            "apt-get install chromium (or CHROMIUM=/path/to/chromium)",
        ));
    }
    if !sdk.exists() || !playwright.exists() {
        let why = "tests/browser/node_modules is missing".into();
        return Some((
            why,
            "./scripts/test (it runs npm ci in tests/browser), or cd tests/browser && npm ci",
        ));
    }
    None
}

/// The SDK bundles the page can load: `/sdk/2.68/…` and `/sdk/2.18/…`.
const SDKS: &[(&str, &str)] = &[
    ("2.68", "node_modules/@mparticle/web-sdk/dist/mparticle.js"),
    (
        "2.18",
        "node_modules/mparticle-web-sdk-2-18/dist/mparticle.js",
    ),
];

/// Serves the test page and the SDK bundles on loopback.
async fn serve_page() -> std::net::SocketAddr {
    let page = std::fs::read_to_string(browser_dir().join("shop.html")).expect("shop.html");
    let mut app = axum::Router::new().route(
        "/shop.html",
        axum::routing::get(move || async move { ([(CONTENT_TYPE, "text/html")], page) }),
    );
    for (version, path) in SDKS {
        let sdk = std::fs::read_to_string(browser_dir().join(path)).expect("SDK bundle");
        app = app.route(
            &format!("/sdk/{version}/mparticle.js"),
            axum::routing::get(
                move || async move { ([(CONTENT_TYPE, "application/javascript")], sdk) },
            ),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    address
}

/// Runs the shopping session with SDK `version` against `app`; returns what the page recorded
/// and every webhook request that arrived.
async fn shopping_session(
    app: &TestApp,
    input: &Value,
    receiver: &mut Receiver,
    version: &str,
) -> (Value, Vec<Received>) {
    let page = serve_page().await;
    let (scheme, boson) = app.base.split_once("://").unwrap();
    let https = u8::from(scheme == "https");
    let key = input["api_key"].as_str().unwrap();
    let recorded = run_page(format!(
        "http://{page}/shop.html?boson={boson}&key={key}&sdk={version}&https={https}"
    ))
    .await;
    let mut requests = Vec::new();
    while let Some(request) = receiver.next_within(Duration::from_secs(2)).await {
        requests.push(request);
    }
    (recorded, requests)
}

/// Runs the page in Chromium; returns what it recorded (MPIDs of identify, login, logout).
async fn run_page(url: String) -> Value {
    let script = browser_dir().join("run_page.mjs");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(script)
            .arg(url)
            .arg("30000")
            .output()
    })
    .await
    .unwrap()
    .expect("run node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the page failed: {}\n{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("page output: {e}\n{stderr}"))
}

/// Every event a receiver path got, flattened, with its batch.
fn events_at<'a>(requests: &'a [Received], path: &str) -> Vec<(&'a Value, &'a Value)> {
    requests
        .iter()
        .filter(|r| r.path == path)
        .flat_map(|r| r.events().iter().map(move |e| (&r.body, e)))
        .collect()
}

fn named<'a>(events: &[(&'a Value, &'a Value)], name: &str) -> Option<(&'a Value, &'a Value)> {
    events
        .iter()
        .copied()
        .find(|(_, e)| e["data"]["event_name"] == name || e["data"]["screen_name"] == name)
}

fn of_type<'a>(events: &[(&'a Value, &'a Value)], event_type: &str) -> Vec<(&'a Value, &'a Value)> {
    events
        .iter()
        .copied()
        .filter(|(_, e)| e["event_type"] == event_type)
        .collect()
}

#[tokio::test]
async fn web_sdk_shopping_session_reaches_two_connections() {
    if !browser_suite_runs("web_sdk") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("web").await;
    let everything = app.create_webhook(&receiver.url("/everything")).await;
    let narrow = app.create_webhook(&receiver.url("/narrow")).await;
    app.connect(
        &input,
        &everything,
        json!({"include_user_identity_change_events": true, "include_user_attribute_change_events": true}),
    )
    .await;
    app.connect(
        &input,
        &narrow,
        json!({"send_as_batch": true, "send_commerce_events": false, "send_screen_views": false,
               "send_profile_change_events": false}),
    )
    .await;

    let (recorded, requests) = shopping_session(&app, &input, &mut receiver, "2.68").await;

    let login_mpid: i64 = recorded["loginMpid"]
        .as_str()
        .expect("login MPID")
        .parse()
        .unwrap();
    let logout_mpid: i64 = recorded["logoutMpid"]
        .as_str()
        .expect("logout MPID")
        .parse()
        .unwrap();
    assert_ne!(
        login_mpid, logout_mpid,
        "logout gives the device an anonymous user"
    );

    let all = events_at(&requests, "/everything");
    let (_, home) = named(&all, "Home").expect("the page view");
    assert_eq!(home["event_type"], "screen_view");
    assert_eq!(home["data"]["custom_attributes"]["section"], "landing");
    let (batch, banner) = named(&all, "Viewed Banner").expect("the custom event");
    assert_eq!(banner["data"]["custom_event_type"], "navigation");
    assert_eq!(batch["source_info"]["channel"], "javascript");
    assert_eq!(batch["application_info"]["application_name"], "Higgs Shop");
    assert_eq!(batch["device_info"]["platform"], "web");

    let mut commerce = of_type(&all, "commerce_event");
    // In the order the page logged them: the SDK may upload them in two batches, and a
    // connection not ordered per user delivers two batches in whatever order they finish.
    commerce.sort_by_key(|(_, e)| e["data"]["timestamp_unixtime_ms"].as_i64());
    let actions: Vec<&Value> = commerce
        .iter()
        .map(|(_, e)| &e["data"]["product_action"]["action"])
        .collect();
    assert_eq!(actions, vec!["add_to_cart", "purchase"], "{commerce:?}");
    let purchase = &commerce[1].1["data"]["product_action"];
    assert_eq!(purchase["transaction_id"], "T-1001");
    assert_eq!(purchase["total_amount"], 64.49);
    assert_eq!(purchase["products"][0]["id"], "sku-1");
    assert_eq!(purchase["products"][0]["name"], "Sneaker");

    let (after_login_batch, _) = named(&all, "After Login").expect("the event after login");
    assert_eq!(after_login_batch["mpid"], login_mpid);
    let identities = after_login_batch["user_identities"].as_array().unwrap();
    assert!(
        identities
            .iter()
            .any(|i| i["identity_type"] == "customer_id" && i["identity"] == "cust-42"),
        "{identities:?}"
    );
    let (after_logout_batch, _) = named(&all, "After Logout").expect("the event after logout");
    assert_eq!(after_logout_batch["mpid"], logout_mpid);

    let attribute_changes = of_type(&all, "user_attribute_change");
    assert!(
        attribute_changes
            .iter()
            .any(|(_, e)| e["data"]["user_attribute_name"] == "tier" && e["data"]["new"] == "gold")
    );
    assert!(!of_type(&all, "user_identity_change").is_empty());
    let profiles: Vec<&Value> = of_type(&all, "profile")
        .iter()
        .map(|(_, e)| &e["data"]["profile_event_type"])
        .collect();
    assert!(
        profiles.contains(&&json!("login")) && profiles.contains(&&json!("logout")),
        "{profiles:?}"
    );
    assert!(!of_type(&all, "session_start").is_empty());

    // The narrow connection: batches, no commerce, no screen views, no profile or change events.
    let narrow_requests: Vec<&Received> = requests.iter().filter(|r| r.path == "/narrow").collect();
    assert!(!narrow_requests.is_empty());
    let narrow_events = events_at(&requests, "/narrow");
    for excluded in [
        "commerce_event",
        "screen_view",
        "profile",
        "user_attribute_change",
        "user_identity_change",
    ] {
        assert!(
            of_type(&narrow_events, excluded).is_empty(),
            "{excluded} reached the narrow connection"
        );
    }
    assert!(named(&narrow_events, "Viewed Banner").is_some());
    assert!(named(&narrow_events, "After Logout").is_some());

    // The identity store knows the logged-in user by customer id.
    let user: Value = app
        .admin(
            reqwest::Method::GET,
            "/api/v1/users?identity_type=customer_id&value=cust-42",
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(user["mpid"], login_mpid.to_string());
    // The SDK's modify carried the binding login answered, so it changed the email.
    assert_eq!(recorded["modifyCode"], 200, "{recorded}");
    assert_eq!(user["user_identities"]["email"], "ada.lovelace@example.com");
    app.stop().await.unwrap();
}

/// What a shopper did, as the webhook saw it: page views, custom events and commerce events with
/// their names, attributes, products and transaction fields, in order.
fn shopping_summary(requests: &[Received]) -> Vec<Value> {
    requests
        .iter()
        .flat_map(|r| r.events().iter())
        .filter(|e| matches!(e["event_type"].as_str(), Some("screen_view" | "custom_event" | "commerce_event")))
        .map(|e| {
            let d = &e["data"];
            let action = &d["product_action"];
            let products: Vec<Value> = action["products"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| json!({"id": p["id"], "name": p["name"], "price": p["price"], "quantity": p["quantity"]}))
                .collect();
            json!({
                "type": e["event_type"],
                "name": d.get("event_name").or(d.get("screen_name")),
                "custom_event_type": d["custom_event_type"],
                "attributes": d["custom_attributes"],
                "action": action["action"],
                "transaction_id": action["transaction_id"],
                "total_amount": action["total_amount"],
                "tax_amount": action["tax_amount"],
                "products": products,
            })
        })
        .collect()
}

/// Counts of SDK uploads by endpoint, from /metrics.
async fn uploads(app: &TestApp, input: &Value, endpoint: &str) -> u64 {
    let metrics = app.metrics().await;
    let id = input["id"].as_str().unwrap();
    let line = format!("boson_ingest_requests_total{{input=\"{id}\",endpoint=\"{endpoint}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0, |n| n.trim().parse().unwrap_or(0))
}

#[tokio::test]
async fn a_legacy_web_sdk_delivers_the_same_events_as_the_current_one() {
    if !browser_suite_runs("web_sdk_legacy") {
        return;
    }
    let mut summaries = Vec::new();
    for version in ["2.68", "2.18"] {
        let app = spawn_app().await;
        let mut receiver = Receiver::start().await;
        let (input, _) = app
            .pipeline_for("web", &receiver.url("/hook"), json!({}))
            .await;
        let (_, requests) = shopping_session(&app, &input, &mut receiver, version).await;
        let (v3, legacy) = (
            uploads(&app, &input, "web_v3").await,
            uploads(&app, &input, "web_legacy").await,
        );
        if version == "2.18" {
            assert!(
                legacy > 0 && v3 == 0,
                "2.18.1 uploads per event on the legacy path (v3 {v3}, legacy {legacy})"
            );
        } else {
            assert!(
                v3 > 0 && legacy == 0,
                "2.68 uploads v3 batches (v3 {v3}, legacy {legacy})"
            );
        }
        let channels: Vec<&Value> = requests
            .iter()
            .map(|r| &r.body["source_info"]["channel"])
            .collect();
        assert!(channels.iter().all(|c| *c == "javascript"), "{channels:?}");
        let mut summary = shopping_summary(&requests);
        // 2.18.1 uploads each event on its own, and separate batches are delivered
        // concurrently, so their arrival order is not the order they were logged in.
        summary.sort_by_key(Value::to_string);
        summaries.push(summary);
        app.stop().await.unwrap();
    }
    assert_eq!(
        summaries[0].len(),
        6,
        "page view, banner, add to cart, purchase, after login, after logout: {:#?}",
        summaries[0]
    );
    assert_eq!(
        summaries[0], summaries[1],
        "2.68 (left) and 2.18.1 (right) must look alike at the webhook"
    );
}

#[tokio::test]
async fn a_legacy_web_sdk_switches_to_batches_when_boson_s_config_answer_says_so() {
    if !browser_suite_runs("web_sdk_legacy_v3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = crate::tls::certificate(dir.path());
    let app = spawn_app_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    })
    .await;
    let mut receiver = Receiver::start().await;
    let input = app
        .create(
            "/api/v1/inputs",
            json!({"name": "old shop", "platform": "web",
                                         "settings": {"web_flags": {"eventsV3": "100"}}}),
        )
        .await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    app.connect(&input, &output, json!({})).await;
    let (recorded, requests) = shopping_session(&app, &input, &mut receiver, "2.18").await;
    assert!(recorded["loginMpid"].is_string(), "{recorded}");
    let (v3, legacy) = (
        uploads(&app, &input, "web_v3").await,
        uploads(&app, &input, "web_legacy").await,
    );
    assert!(
        v3 > 0 && legacy == 0,
        "the config answer's eventsV3 flag moves 2.18.1 to v3 batches (v3 {v3}, legacy {legacy})"
    );
    let summary = shopping_summary(&requests);
    assert!(
        summary.iter().any(|e| e["transaction_id"] == "T-1001"),
        "{summary:#?}"
    );
    app.stop().await.unwrap();
}
