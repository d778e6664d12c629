//! The Inputs page in headless Chromium (tests/browser/inputs.mjs): secrets masked with Reveal
//! and Copy, rename, allowed origins and Web settings with the API's errors next to their field,
//! the per-platform snippets (the copied Events API curl is run and must reach the webhook),
//! rotation and delete. Screenshots at 1440 and 420 px.

use std::path::Path;

use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, Receiver, spawn_app};

/// Runs tests/browser/inputs.mjs against `base` and returns the JSON line it prints.
async fn walk_inputs(base: &str, inputs: &Value) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shots = root.join("target/screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let args = [
        root.join("tests/browser/inputs.mjs").display().to_string(),
        base.to_owned(),
        ADMIN_TOKEN.to_owned(),
        inputs.to_string(),
        shots.display().to_string(),
    ];
    let output =
        tokio::task::spawn_blocking(move || std::process::Command::new("node").args(args).output())
            .await
            .unwrap()
            .expect("run node");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "inputs.mjs failed (see target/screenshots/zz-inputs-failure.png): {stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("inputs.mjs output: {e}\n{stderr}"))
}

#[tokio::test]
async fn the_inputs_page_masks_secrets_edits_inputs_and_gives_working_snippets() {
    if !crate::web_sdk::browser_suite_runs("dashboard_inputs") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let feed = app
        .create(
            "/api/v1/inputs",
            json!({"name": "Backend", "platform": "custom_feed"}),
        )
        .await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    app.connect(&feed, &output, json!({})).await;
    let web = app
        .create("/api/v1/inputs", json!({"name": "Shop", "platform": "web"}))
        .await;

    let walked = walk_inputs(&app.base, &json!({"feed": feed, "web": web})).await;
    assert_eq!(walked["ok"], true, "{walked}");

    // The curl copied from the page reached Boson and went out through the connection.
    let got = receiver.next().await;
    assert_eq!(
        got.events()[0]["data"]["event_name"],
        "Hello from Boson",
        "{walked}"
    );
    let inputs = app.read("/api/v1/inputs").await;
    let names: Vec<&str> = inputs
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["Backend (renamed)"],
        "renamed, and the web input deleted"
    );
    app.stop().await.unwrap();
}
