//! The Live Stream in headless Chromium (tests/browser/dashboard.mjs, phase `live-history`): an
//! event sent before the page was opened shows by its name (the node's history), a new one shows
//! within seconds, outbound rows open their event beside the list, the keyboard moves through
//! it, and signed out the navigation is hidden. Screenshots at 1440 and 420 px.

use serde_json::json;

use crate::dashboard::walk;
use crate::helpers::{Receiver, spawn_app};

#[tokio::test]
async fn the_live_stream_shows_recent_and_new_events_by_name() {
    if !crate::web_sdk::browser_suite_runs("dashboard_live_stream") {
        return;
    }
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let before = "Sent Before Opening";
    let batch = json!({"environment": "development", "mpid": 7, "events": [
        {"event_type": "custom_event", "data": {"event_name": before, "custom_event_type": "other"}}]});
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    receiver.next().await;

    let credentials = format!(
        "{}:{}:{before}",
        input["api_key"].as_str().unwrap(),
        input["api_secret"].as_str().unwrap()
    );
    let walked = walk("live-history", &app.base, &credentials).await;
    assert_eq!(walked["ok"], true, "{walked}");
    receiver.next().await;
    app.stop().await.unwrap();
}
