//! Standard Webhooks signing per output, every request checked by the reference
//! `standardwebhooks` package from PyPI (tests/sdk/verify_standard_webhooks.py), not by a
//! re-implementation: real-time and batched bodies, retries, rotation with its overlap, and an
//! output without a secret.

use std::path::Path;
use std::process::Stdio;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{
    ENABLE_PYTHON, Received, Receiver, TestApp, batch_of, python, skip_or_fail, spawn_app,
    suite_ran,
};

/// Exit code of the script when `import standardwebhooks` fails.
const LIBRARY_MISSING: i32 = 3;
const SUITE: &str = "standard_webhooks";

/// Issues (or rotates) an output's signing secret and returns it, checking the answer's shape.
pub async fn issue_secret(app: &TestApp, output_id: &str) -> String {
    let response = app
        .admin(
            Method::POST,
            &format!("/api/v1/outputs/{output_id}/signing-secret"),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 201);
    let answer: Value = response.json().await.expect("json");
    let object = answer.as_object().expect("an object");
    assert_eq!(object.len(), 1, "only the secret: {answer}");
    let secret = answer["secret"].as_str().expect("secret").to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    secret
}

/// An input connected to a new webhook output at `url` with `settings`; returns the input and
/// the output.
async fn pipeline(app: &TestApp, url: &str, settings: Value) -> (Value, Value) {
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook(url).await;
    app.connect(&input, &output, settings).await;
    (input, output)
}

fn id_of(value: &Value) -> &str {
    value["id"].as_str().expect("id")
}

fn header<'a>(request: &'a Received, name: &str) -> Option<&'a str> {
    request
        .headers
        .get(name)
        .map(|v| v.to_str().expect("ASCII"))
}

/// The library's verdict on `request` signed with `secret`, for each pair; `None` when the
/// suite cannot run here (said loudly, a failure when every suite is required).
pub async fn verify_all(checks: &[(&Received, &str)]) -> Option<Vec<Result<(), String>>> {
    let checks: Vec<Value> = checks
        .iter()
        .map(|(request, secret)| {
            let headers: serde_json::Map<String, Value> =
                ["webhook-id", "webhook-timestamp", "webhook-signature"]
                    .iter()
                    .filter_map(|name| Some((name.to_string(), json!(header(request, name)?))))
                    .collect();
            json!({
                "secret": secret,
                "body_base64": base64::engine::general_purpose::STANDARD.encode(&request.raw),
                "headers": headers,
            })
        })
        .collect();
    let stdin = json!({ "checks": checks }).to_string();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/verify_standard_webhooks.py");
    // Blocking: the in-process server keeps serving on the runtime while the script runs.
    let output = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = python()
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())?;
        child.wait_with_output()
    })
    .await
    .expect("script task");
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            skip_or_fail(
                SUITE,
                &format!("cannot run python3: {error}"),
                ENABLE_PYTHON,
            );
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(LIBRARY_MISSING) {
        skip_or_fail(
            SUITE,
            &format!(
                "the Standard Webhooks library is not installed ({})",
                stderr.trim()
            ),
            ENABLE_PYTHON,
        );
        return None;
    }
    suite_ran(SUITE);
    assert!(
        output.status.success(),
        "the verifying script failed with {}:\n{stderr}",
        output.status
    );
    let answer: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), checks.len());
    Some(
        results
            .iter()
            .map(|r| match r["ok"].as_bool() {
                Some(true) => Ok(()),
                _ => Err(r["error"].as_str().unwrap_or_default().to_owned()),
            })
            .collect(),
    )
}

/// Asserts the library accepts every request with `secret` and, as a control that the check
/// can fail, refuses it with `wrong`; also that the headers are what the specification asks.
async fn assert_signed(requests: &[Received], secret: &str, wrong: &str) {
    for request in requests {
        let id = header(request, "webhook-id").expect("webhook-id");
        assert_eq!(Some(id), header(request, "x-boson-delivery-id"));
        let timestamp: i64 = header(request, "webhook-timestamp")
            .expect("webhook-timestamp")
            .parse()
            .expect("Unix seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(timestamp.abs_diff(i64::try_from(now).unwrap()) <= 60);
    }
    let checks: Vec<(&Received, &str)> = requests
        .iter()
        .flat_map(|r| [(r, secret), (r, wrong)])
        .collect();
    let Some(results) = verify_all(&checks).await else {
        return;
    };
    for (pair, result) in results.chunks(2).zip(requests) {
        assert_eq!(pair[0], Ok(()), "refused with its secret: {}", result.body);
        assert!(pair[1].is_err(), "accepted with another secret");
    }
}

#[tokio::test]
async fn every_real_time_and_batched_body_verifies_with_the_reference_library() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (live_input, live_output) = pipeline(&app, &receiver.url("/live"), json!({})).await;
    let (batch_input, batch_output) = pipeline(
        &app,
        &receiver.url("/batch"),
        json!({"send_as_batch": true}),
    )
    .await;
    let live_secret = issue_secret(&app, id_of(&live_output)).await;
    let batch_secret = issue_secret(&app, id_of(&batch_output)).await;
    assert_ne!(live_secret, batch_secret);

    let batch = batch_of(&["custom_event", "screen_view", "commerce_event"]);
    assert_eq!(
        app.post_events(&live_input, batch.clone()).await.status(),
        202
    );
    assert_eq!(app.post_events(&batch_input, batch).await.status(), 202);
    let got = receiver.take(4).await;
    let (live, batched): (Vec<Received>, Vec<Received>) =
        got.into_iter().partition(|r| r.path == "/live");
    assert_eq!(live.len(), 3, "one request per event");
    assert_eq!(batched.len(), 1, "one request for the batch");
    assert_eq!(batched[0].events().len(), 3);
    assert_signed(&live, &live_secret, &batch_secret).await;
    assert_signed(&batched, &batch_secret, &live_secret).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_retried_request_keeps_its_webhook_id_and_is_signed_again() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, None)]);
    let (input, output) = pipeline(&app, &receiver.url("/hook"), json!({})).await;
    let secret = issue_secret(&app, id_of(&output)).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let tries = receiver.take(2).await;
    assert_eq!(tries[0].answered, 503);
    assert_eq!(
        header(&tries[0], "webhook-id"),
        header(&tries[1], "webhook-id"),
        "a retry is the same message"
    );
    assert_signed(
        &tries,
        &secret,
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    )
    .await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn during_a_rotation_both_secrets_verify_and_after_the_overlap_only_the_new_one() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, output) = pipeline(&app, &receiver.url("/hook"), json!({})).await;
    let old = issue_secret(&app, id_of(&output)).await;
    let new = issue_secret(&app, id_of(&output)).await;
    assert_ne!(old, new);

    app.post_events(&input, batch_of(&["custom_event"])).await;
    let during = receiver.take(1).await;
    let signatures: Vec<&str> = header(&during[0], "webhook-signature")
        .expect("signed")
        .split(' ')
        .collect();
    assert_eq!(signatures.len(), 2, "{signatures:?}");
    // The first signature alone is the new secret's.
    let mut newest_only = during[0].clone();
    newest_only
        .headers
        .insert("webhook-signature", signatures[0].parse().unwrap());
    let checks = [
        (&during[0], new.as_str()),
        (&during[0], old.as_str()),
        (&newest_only, new.as_str()),
        (&newest_only, old.as_str()),
    ];
    if let Some(results) = verify_all(&checks).await {
        assert_eq!(results[0], Ok(()), "the new secret");
        assert_eq!(results[1], Ok(()), "the old secret, during the overlap");
        assert_eq!(results[2], Ok(()), "the new secret signs first");
        assert!(results[3].is_err(), "the old secret signs second");
    }

    // An overlap of 0 has ended at once.
    let saved = app
        .admin(
            Method::PATCH,
            &format!("/api/v1/outputs/{}", id_of(&output)),
        )
        .json(&json!({"settings": {"signing_rotation_overlap_secs": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(saved.status(), 200);
    app.post_events(&input, batch_of(&["screen_view"])).await;
    let after = receiver.take(1).await;
    let signature = header(&after[0], "webhook-signature").expect("signed");
    assert_eq!(signature.split(' ').count(), 1, "{signature}");
    assert_signed(&after, &new, &old).await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn an_output_without_a_secret_sends_no_webhook_headers() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, _) = pipeline(&app, &receiver.url("/hook"), json!({})).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let got = receiver.take(1).await;
    let webhook_headers: Vec<&str> = got[0]
        .headers
        .keys()
        .map(|name| name.as_str())
        .filter(|name| name.starts_with("webhook-"))
        .collect();
    assert!(webhook_headers.is_empty(), "{webhook_headers:?}");
    assert!(header(&got[0], "x-boson-delivery-id").is_some());
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_secret_is_answered_once_and_never_shown_again() {
    let app = spawn_app().await;
    let output = app.create_webhook("http://127.0.0.1:9/hook").await;
    assert_eq!(output["signing"]["enabled"], false, "{output}");
    let path = format!("/api/v1/outputs/{}", id_of(&output));

    let first = issue_secret(&app, id_of(&output)).await;
    let key = base64::engine::general_purpose::STANDARD
        .decode(first.trim_start_matches("whsec_"))
        .expect("base64");
    assert_eq!(key.len(), 32);
    let second = issue_secret(&app, id_of(&output)).await;

    let shown = app
        .admin(Method::GET, &path)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let listed = app
        .admin(Method::GET, "/api/v1/outputs")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for text in [&shown, &listed] {
        for secret in [&first, &second] {
            assert!(
                !text.contains(secret.trim_start_matches("whsec_")),
                "{text}"
            );
        }
    }
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["signing"]["enabled"], true, "{shown}");
    let rotated_at = shown["signing"]["rotated_at"].as_i64().expect("rotated_at");
    assert_eq!(
        shown["signing"]["previous_secret_until"].as_i64(),
        Some(rotated_at + 86_400_000),
        "{shown}"
    );
    assert_eq!(shown["settings"]["signing_rotation_overlap_secs"], 86_400);

    let missing = app
        .admin(Method::POST, "/api/v1/outputs/out_nope/signing-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn a_replayed_dead_letter_is_signed_too() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(400, None)]);
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook(&receiver.url("/hook")).await;
    let connection = app.connect(&input, &output, json!({})).await;
    let secret = issue_secret(&app, id_of(&output)).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    receiver.take(1).await;
    let letters_path = format!("/api/v1/connections/{}/dead-letters", id_of(&connection));
    let mut letters = Value::Null;
    for _ in 0..100 {
        letters = app
            .admin(Method::GET, &letters_path)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if letters["items"].as_array().is_some_and(|i| !i.is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let letter = letters["items"][0]["id"].as_i64().expect("a dead letter");
    let replayed = app
        .admin(Method::POST, &format!("{letters_path}/{letter}/replay"))
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), 200);
    let again = receiver.take(1).await;
    assert_signed(
        &again,
        &secret,
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    )
    .await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn disabling_signing_removes_the_secrets_and_later_requests_go_unsigned() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let (input, output) = pipeline(&app, &receiver.url("/hook"), json!({})).await;
    let path = format!("/api/v1/outputs/{}/signing-secret", id_of(&output));
    // Rotated once, so both the current and the previous secret must go.
    issue_secret(&app, id_of(&output)).await;
    issue_secret(&app, id_of(&output)).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let before = receiver.take(1).await;
    assert!(header(&before[0], "webhook-signature").is_some());

    let removed = app.admin(Method::DELETE, &path).send().await.unwrap();
    assert_eq!(removed.status(), 204);
    let shown: Value = app
        .admin(Method::GET, &format!("/api/v1/outputs/{}", id_of(&output)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["signing"]["enabled"], false, "{shown}");
    assert!(
        shown["signing"]["previous_secret_until"].is_null(),
        "{shown}"
    );

    app.post_events(&input, batch_of(&["screen_view"])).await;
    let after = receiver.take(1).await;
    let webhook_headers: Vec<&str> = after[0]
        .headers
        .keys()
        .map(|name| name.as_str())
        .filter(|name| name.starts_with("webhook-"))
        .collect();
    assert!(webhook_headers.is_empty(), "{webhook_headers:?}");

    // Disabling again is not an error; an unknown output is.
    let again = app.admin(Method::DELETE, &path).send().await.unwrap();
    assert_eq!(again.status(), 204);
    let missing = app
        .admin(Method::DELETE, "/api/v1/outputs/out_nope/signing-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    app.stop().await.unwrap();
}
