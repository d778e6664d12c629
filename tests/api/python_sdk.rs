//! The Events API against mParticle's own Python SDK: what the official client sends (one batch
//! to `/v2/events`, two to `/v2/bulkevents`) must reach the webhook intact.

use std::path::Path;

use serde_json::{Value, json};

use crate::helpers::{
    ENABLE_PYTHON, Received, Receiver, python, skip_or_fail, spawn_app, suite_ran,
};

/// Exit code of the script when `import mparticle` fails.
const SDK_MISSING: i32 = 3;

#[tokio::test]
async fn python_sdk_batches_reach_the_webhook() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = app.pipeline(&receiver.url("/hook"), json!({})).await;
    let Some(sent) = run_sdk_script(&app.base, &input).await else {
        return;
    };

    assert_eq!(
        sent["single"]["status"], 202,
        "upload_events status: {sent}"
    );
    assert_eq!(
        sent["bulk"]["status"], 202,
        "bulk_upload_events status: {sent}"
    );
    let batches: Vec<&Value> = std::iter::once(&sent["single"])
        .chain(sent["bulk"]["batches"].as_array().expect("bulk batches"))
        .collect();
    let expected: usize = batches
        .iter()
        .map(|b| b["events"].as_array().expect("events").len())
        .sum();
    // Real-time delivery (the default): one webhook request per event.
    let requests = receiver.take(expected).await;
    for batch in batches {
        assert_batch_delivered(batch, &requests);
    }
}

/// Runs the SDK script; `None` when the suite cannot run here (python3 or the SDK missing).
async fn run_sdk_script(base: &str, input: &Value) -> Option<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/send_with_python_sdk.py");
    let args = [
        script.display().to_string(),
        base.to_owned(),
        input["api_key"].as_str().expect("api_key").to_owned(),
        input["api_secret"].as_str().expect("api_secret").to_owned(),
    ];
    // Blocking: the in-process server must keep serving on the runtime while the script runs.
    let output = tokio::task::spawn_blocking(move || python().args(args).output())
        .await
        .expect("script task");
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            skip_or_fail(
                "python_sdk",
                &format!("cannot run python3: {error}"),
                ENABLE_PYTHON,
            );
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(SDK_MISSING) {
        skip_or_fail(
            "python_sdk",
            &format!(
                "the mParticle Python SDK is not installed ({})",
                stderr.trim()
            ),
            ENABLE_PYTHON,
        );
        return None;
    }
    suite_ran("python_sdk");
    assert!(
        output.status.success(),
        "the SDK script failed with {}:\n{stderr}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    Some(
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("the script printed no JSON line ({e}): {stdout}")),
    )
}

/// Asserts the requests of one sent batch (found by its mpid) carry its identity and events.
fn assert_batch_delivered(sent: &Value, requests: &[Received]) {
    // Above 2^53: equality fails if the number went through a float anywhere.
    let mpid = sent["mpid"].as_u64().expect("mpid");
    let mine: Vec<&Received> = requests
        .iter()
        .filter(|r| r.body["mpid"].as_u64() == Some(mpid))
        .collect();
    let mut got: Vec<String> = Vec::new();
    for request in &mine {
        assert_eq!(request.path, "/hook");
        assert_eq!(
            request.events().len(),
            1,
            "one event per request: {}",
            request.body
        );
        assert_batch_fields(sent, &request.body);
        got.push(signature(&request.events()[0], sent));
    }
    let mut want: Vec<String> = sent["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(expected_signature)
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "events of the batch with mpid {mpid}");
}

/// The batch-level part of an outbound body.
fn assert_batch_fields(sent: &Value, body: &Value) {
    assert_eq!(body["schema_version"], 2, "{body}");
    assert!(body["batch_id"].is_i64(), "no batch_id: {body}");
    let identities = body["user_identities"]
        .as_array()
        .unwrap_or_else(|| panic!("user_identities: {body}"));
    for (identity_type, identity) in [
        ("customer_id", &sent["customer_id"]),
        ("email", &sent["email"]),
    ] {
        assert!(
            identities
                .iter()
                .any(|i| i["identity_type"] == identity_type && i["identity"] == *identity),
            "user_identities lacks {identity_type} = {identity}: {identities:?}"
        );
    }
}

/// An outbound event as `type:name`, where the name is what the script reports for that type;
/// also checks it belongs to the batch's session.
fn signature(event: &Value, sent: &Value) -> String {
    let data = &event["data"];
    assert_eq!(data["session_id"], sent["session_id"], "session of {event}");
    let event_type = event["event_type"]
        .as_str()
        .unwrap_or_else(|| panic!("no event_type: {event}"));
    let name = match event_type {
        "custom_event" => {
            assert_eq!(data["custom_event_type"], "navigation", "{event}");
            &data["event_name"]
        }
        "screen_view" => &data["screen_name"],
        "commerce_event" => &data["product_action"]["transaction_id"],
        _ => &Value::Null,
    };
    format!("{event_type}:{}", name.as_str().unwrap_or_default())
}

/// The script's description of an event in the same `type:name` form.
fn expected_signature(event: &Value) -> String {
    let name = ["event_name", "screen_name", "transaction_id"]
        .iter()
        .find_map(|key| event[key].as_str());
    format!(
        "{}:{}",
        event["event_type"].as_str().expect("event_type"),
        name.unwrap_or_default()
    )
}
