//! The real mParticle Web SDK (npm `@mparticle/web-sdk` 2.68.0) in headless Chromium runs a
//! shopping session against Boson; two connections with different settings must each receive
//! exactly what their settings allow.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::helpers::{Received, Receiver, skip_or_fail, spawn_app};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Why the browser suite cannot run here, if it cannot.
fn missing_prerequisite() -> Option<String> {
    let sdk = browser_dir().join("node_modules/@mparticle/web-sdk/dist/mparticle.js");
    let playwright = browser_dir().join("node_modules/playwright-core");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        return Some("node is not installed".into());
    }
    if !Path::new(&chromium).exists() {
        return Some(format!("{chromium} is missing (apt-get install chromium)"));
    }
    if !sdk.exists() || !playwright.exists() {
        return Some("tests/browser/node_modules is missing (cd tests/browser && npm ci)".into());
    }
    None
}

/// Serves the test page and the SDK bundle on loopback.
async fn serve_page() -> std::net::SocketAddr {
    let page = std::fs::read_to_string(browser_dir().join("shop.html")).expect("shop.html");
    let sdk = std::fs::read_to_string(
        browser_dir().join("node_modules/@mparticle/web-sdk/dist/mparticle.js"),
    )
    .expect("mparticle.js");
    let app = axum::Router::new()
        .route(
            "/shop.html",
            axum::routing::get(move || async move { ([(CONTENT_TYPE, "text/html")], page) }),
        )
        .route(
            "/mparticle.js",
            axum::routing::get(
                move || async move { ([(CONTENT_TYPE, "application/javascript")], sdk) },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    address
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
    if let Some(why) = missing_prerequisite() {
        skip_or_fail("web_sdk", &why);
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

    let page = serve_page().await;
    let boson = app.base.trim_start_matches("http://");
    let key = input["api_key"].as_str().unwrap();
    let recorded = run_page(format!("http://{page}/shop.html?boson={boson}&key={key}")).await;
    let mut requests = Vec::new();
    while let Some(request) = receiver.next_within(Duration::from_secs(2)).await {
        requests.push(request);
    }

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

    let commerce = of_type(&all, "commerce_event");
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
    assert_eq!(user["user_identities"]["email"], "ada@example.com");
    app.stop().await.unwrap();
}
