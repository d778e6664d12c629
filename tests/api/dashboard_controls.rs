//! The connection controls in headless Chromium (issue 13 item 5, issue 14 item 9): the input's
//! data catalog shows an event sent before; switching that event off in the Data Filter grid is
//! previewed (the dry run names the rule) and saved, and the next such event is filtered at the
//! receiver and in the Live Stream; a signing secret is generated and shown once, and requests are
//! signed from then on and carry the custom header added in the output's form; a replay is
//! previewed; a failing connection shows its next attempt and give-up time. Screenshots (desktop and 420 px) go to
//! `target/screenshots/`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::dashboard::walk;
use crate::helpers::{Receiver, batch_of, spawn_app, wait_for};

#[tokio::test]
async fn the_connection_controls_work_in_the_dashboard() {
    if !crate::web_sdk::browser_suite_runs("dashboard_controls") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let created = walk("setup", &app.base, &receiver.url("/hook")).await;
    let connection_id = created["connection_id"].as_str().unwrap().to_owned();
    let input = json!({"api_key": created["api_key"], "api_secret": created["api_secret"]});
    let credentials = format!(
        "{}:{}",
        input["api_key"].as_str().unwrap(),
        input["api_secret"].as_str().unwrap()
    );
    walk("live", &app.base, &format!("{credentials}:forwarded")).await;
    assert_eq!(
        receiver.next().await.events()[0]["data"]["event_name"],
        "Live Test"
    );
    // The catalog is flushed every 2 s: wait until it lists the event.
    let input_id = app
        .read(&format!("/api/v1/connections/{connection_id}"))
        .await["input_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for(|| async {
        let catalog = app
            .read(&format!("/api/v1/catalog?input_id={input_id}"))
            .await;
        catalog.to_string().contains("Live Test")
    })
    .await;

    let filtered = walk("filter", &app.base, &connection_id).await;
    let summary = filtered["summary"].as_str().unwrap();
    assert!(
        summary.contains("would have filtered 1 of the last event (now 0)"),
        "{summary}"
    );
    let saved = app
        .read(&format!("/api/v1/connections/{connection_id}"))
        .await;
    assert_eq!(
        saved["settings"]["data_filter"]["rules"],
        json!([{"event_type": "custom_event", "event_name": "Live Test", "send": false}]),
        "{saved}"
    );
    let live = walk("live", &app.base, &format!("{credentials}:filtered")).await;
    assert!(
        live["detail"]
            .as_str()
            .unwrap()
            .contains("data_filter: custom_event \"Live Test\""),
        "{live}"
    );
    assert!(
        receiver
            .next_within(Duration::from_millis(800))
            .await
            .is_none(),
        "the event switched off is not forwarded"
    );

    let signing = walk("signing", &app.base, "-").await;
    let secret = signing["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{signing}");
    let later = signing["later"].as_str().unwrap();
    assert!(!later.contains(secret), "the secret is shown once: {later}");
    assert_eq!(
        app.post_events(&input, batch_of(&["screen_view"]))
            .await
            .status(),
        202
    );
    let signed = receiver.next().await;
    assert!(
        signed.headers["webhook-signature"]
            .to_str()
            .unwrap()
            .starts_with("v1,"),
        "{:?}",
        signed.headers
    );
    assert_eq!(
        signed.headers["x-team"], "growth",
        "the custom header added in the form"
    );

    // Under today's settings the two "Live Test" batches send nothing; the screen view goes.
    let replay: Value = walk("replay", &app.base, &connection_id).await;
    assert!(
        replay["summary"]
            .as_str()
            .unwrap()
            .starts_with("Would send 1 request carrying 1 event from 3 batches"),
        "{replay}"
    );

    // Disabled from the same dialog: the badge turns unsigned and so do the requests.
    let unsigning = walk("unsigning", &app.base, "-").await;
    assert_eq!(unsigning["badge"], "unsigned", "{unsigning}");
    assert_eq!(
        app.post_events(&input, batch_of(&["screen_view"]))
            .await
            .status(),
        202
    );
    let unsigned = receiver.next().await;
    assert!(
        unsigned.headers.get("webhook-signature").is_none(),
        "{:?}",
        unsigned.headers
    );

    // A failing endpoint: the page says when the next attempt goes and when it gives up.
    receiver.script(&[(503, None); 50]);
    assert_eq!(
        app.post_events(&input, batch_of(&["screen_view"]))
            .await
            .status(),
        202
    );
    assert_eq!(receiver.next().await.answered, 503);
    let failing = walk("retrying", &app.base, &connection_id).await;
    let line = failing["retrying"].as_str().unwrap();
    assert!(
        line.contains("1 delivery is failing. Next attempt: ") && line.contains("dead letters at"),
        "{line}"
    );
    app.stop().await.unwrap();
}
