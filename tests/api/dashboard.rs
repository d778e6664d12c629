//! The dashboard: sign-in sessions and CSRF over HTTP, and the quickstart walked in headless
//! Chromium (sign in, create an input and a webhook output, Connect, Add Connection, see events
//! at a real receiver, switch the connection to inactive and see the next event filtered).
//! Screenshots of each page go to `target/screenshots/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{
    ADMIN_TOKEN, Receiver, TestApp, batch_of, http_client, skip_or_fail, spawn_app,
};

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

async fn walk(phase: &str, base: &str, target: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.mjs");
    let args = [
        phase.to_owned(),
        base.to_owned(),
        ADMIN_TOKEN.to_owned(),
        target.to_owned(),
        screenshots().display().to_string(),
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
        "dashboard {phase} failed (see target/screenshots/zz-failure.png): {stderr}"
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("dashboard output: {e}\n{stderr}"))
}

#[tokio::test]
async fn the_quickstart_works_in_the_dashboard() {
    if let Some(why) = crate::web_sdk::missing_prerequisite() {
        skip_or_fail("dashboard", &why);
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let created = walk("setup", &app.base, &receiver.url("/hook")).await;
    let input = json!({"api_key": created["api_key"], "api_secret": created["api_secret"]});
    let credentials = format!(
        "{}:{}",
        input["api_key"].as_str().unwrap(),
        input["api_secret"].as_str().unwrap()
    );

    // The page sends an event while watching the Live Stream, which shows it forwarded.
    let live = walk("live", &app.base, &format!("{credentials}:forwarded")).await;
    assert!(
        live["detail"].as_str().unwrap().contains("Live Test"),
        "{live}"
    );
    let got = receiver.next().await;
    assert_eq!(got.headers["authorization"], "Bearer dashboard-test");
    assert_eq!(got.events()[0]["data"]["event_name"], "Live Test");

    assert_eq!(
        app.post_events(&input, batch_of(&["custom_event"]))
            .await
            .status(),
        202
    );
    let got = receiver.next().await;
    assert!(
        got.body.get("ip").is_none(),
        "the IP Address exclusion chosen in the form applies"
    );

    walk(
        "deactivate",
        &app.base,
        created["connection_id"].as_str().unwrap(),
    )
    .await;
    let live = walk("live", &app.base, &format!("{credentials}:filtered")).await;
    assert!(
        live["detail"].as_str().unwrap().contains("status"),
        "filtered by the status setting: {live}"
    );
    assert!(
        receiver
            .next_within(Duration::from_millis(800))
            .await
            .is_none(),
        "an inactive connection forwards nothing"
    );
    app.stop().await.unwrap();
}

async fn login(app: &TestApp, client: &reqwest::Client, token: &str) -> reqwest::Response {
    client
        .post(format!("{}/dashboard/login", app.base))
        .json(&json!({"token": token}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn sessions_need_the_token_and_their_csrf_header() {
    let app = spawn_app().await;
    let _ = http_client();
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    assert_eq!(login(&app, &browser, "wrong").await.status(), 401);
    let signed_in = login(&app, &browser, ADMIN_TOKEN).await;
    assert_eq!(signed_in.status(), 200);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let csrf = signed_in.json::<Value>().await.unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();

    let list = browser
        .get(format!("{}/api/v1/inputs", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200, "reads need only the session");
    let body = json!({"name": "x", "platform": "web"});
    let forged = browser
        .post(format!("{}/api/v1/inputs", app.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.status(),
        401,
        "a write without the CSRF header is refused"
    );
    let wrong = browser
        .post(format!("{}/api/v1/inputs", app.base))
        .header("x-boson-csrf", "guess")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let real = browser
        .post(format!("{}/api/v1/inputs", app.base))
        .header("x-boson-csrf", &csrf)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(real.status(), 201);

    let out = browser
        .post(format!("{}/dashboard/logout", app.base))
        .header("x-boson-csrf", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    assert_eq!(
        browser
            .get(format!("{}/api/v1/inputs", app.base))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let page = app
        .client
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn dashboard_modules_are_served_from_folders_as_javascript() {
    let app = spawn_app().await;
    let get = |path: &str| app.client.get(format!("{}/assets/{path}", app.base)).send();
    let index = app
        .client
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        index.contains(r#"<script type="module" src="/assets/app.js">"#),
        "{index}"
    );
    for path in ["app.js", "lib/api.js", "pages/connect.js"] {
        let response = get(path).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "text/javascript",
            "{path}: browsers run modules only with a JavaScript type"
        );
    }
    // Encoded slashes reach the handler as `../`, which could step out of the folder on disk.
    for path in ["..%2FCargo.toml", "lib%2F..%2F..%2FCargo.toml", "nope.js"] {
        assert_eq!(get(path).await.unwrap().status(), 404, "{path}");
    }
    app.stop().await.unwrap();
}
