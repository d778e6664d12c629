//! The dashboard looks and works like a product (tests/browser/look.mjs): every page at 1440 and
//! 420 px without horizontal scroll and with the nav on one row, help text on every connection
//! setting, confirmations next to what they concern and never a native dialog, focus rings and
//! Esc, and a Live Stream row of a retrying delivery saying its status, error and next attempt.
//! Screenshots `target/screenshots/look-*.png`.

use std::path::Path;

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, Receiver, spawn_app};

#[tokio::test]
async fn every_page_reads_at_both_widths_and_confirms_next_to_the_change() {
    if !crate::web_sdk::browser_suite_runs("dashboard_look") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    // The connection's endpoint fails, so the Live Stream has a retrying row to show.
    receiver.script(&[(500, None); 200]);
    let (input, connection) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    app.create(
        "/api/v1/outputs",
        json!({"name": "Spare webhook", "kind": "webhook", "settings": {"url": receiver.url("/spare")}}),
    )
    .await;
    let batch = json!({"environment": "development", "mpid": 7, "events": [
        {"event_type": "custom_event", "data": {"event_name": "Checkout Started", "custom_event_type": "other",
            "custom_attributes": {"plan": "pro"}}}]});
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    assert_eq!(receiver.next().await.answered, 500);

    let target = format!(
        "{}:{}:{}",
        input["api_key"].as_str().unwrap(),
        input["api_secret"].as_str().unwrap(),
        connection["id"].as_str().unwrap()
    );
    let walked = look(&app.base, &target).await;
    assert_eq!(walked["ok"], true, "{walked}");
    app.stop().await.unwrap();
}

async fn look(base: &str, target: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shots = root.join("target/screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let script = root.join("tests/browser/look.mjs");
    let args = [
        base.to_owned(),
        ADMIN_TOKEN.to_owned(),
        target.to_owned(),
        shots.display().to_string(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node")
            .arg(script)
            .args(args)
            .output()
    })
    .await
    .unwrap()
    .expect("run node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the dashboard's look failed (screenshots in target/screenshots/zz-look-failure-*.png): {stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("look.mjs output: {e}\n{stderr}"))
}
