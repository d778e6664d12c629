//! Consent kept on the user profile (issue 13 item 4): a user's GDPR and CCPA choices from one
//! batch govern their later batches, which need not repeat them; the profile shows them merged.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Receiver, TestApp, spawn_app};

/// A batch of `mpid` with one custom event named `name`, and `consent` if given.
fn batch(mpid: i64, name: &str, consent: Option<Value>) -> Value {
    let mut batch = json!({
        "mpid": mpid,
        "events": [{"event_type": "custom_event",
                    "data": {"event_name": name, "custom_event_type": "other"}}],
    });
    if let Some(consent) = consent {
        batch["consent_state"] = consent;
    }
    batch
}

fn purpose(consented: bool) -> Value {
    json!({"consented": consented, "timestamp_unixtime_ms": 1})
}

/// Posts `batch`, waits until every delivery job has finished (forwarded or filtered), and
/// returns the event names the receiver got meanwhile.
async fn deliver(
    app: &TestApp,
    input: &Value,
    receiver: &mut Receiver,
    batch: Value,
) -> Vec<String> {
    assert_eq!(app.post_events(input, batch).await.status(), 202);
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.count("jobs").await > 0 {
        assert!(Instant::now() < deadline, "delivery jobs never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut names = Vec::new();
    while let Some(request) = receiver.next_within(Duration::from_millis(300)).await {
        for event in request.events() {
            names.push(
                event["data"]["event_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    names
}

#[tokio::test]
async fn a_ccpa_opt_out_on_one_batch_stops_later_batches_of_that_user() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"forwarding_rules": {"ccpa_respect_data_sale_opt_out": true}});
    let (input, _) = app.pipeline(&receiver.url("/ccpa"), settings).await;
    let opted_out = json!({"ccpa": {"data_sale_opt_out": purpose(true)}});

    let sent = deliver(
        &app,
        &input,
        &mut receiver,
        batch(7, "opt-out", Some(opted_out)),
    )
    .await;
    assert!(sent.is_empty(), "{sent:?}");
    // The same user's next batch says nothing about consent: the opt-out still holds.
    let sent = deliver(&app, &input, &mut receiver, batch(7, "later", None)).await;
    assert!(sent.is_empty(), "{sent:?}");
    // Another user, who never opted out, is forwarded: deliveries did run.
    let sent = deliver(&app, &input, &mut receiver, batch(8, "other user", None)).await;
    assert_eq!(sent, ["other user"]);
    app.stop().await.unwrap();
}

#[tokio::test]
async fn gdpr_consent_given_once_holds_until_withdrawn() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}});
    let (input, _) = app.pipeline(&receiver.url("/gdpr"), settings).await;
    let marketing = |consented| json!({"gdpr": {"marketing": purpose(consented)}});

    let given = batch(9, "consented", Some(marketing(true)));
    assert_eq!(
        deliver(&app, &input, &mut receiver, given).await,
        ["consented"]
    );
    let later = batch(9, "later", None);
    assert_eq!(deliver(&app, &input, &mut receiver, later).await, ["later"]);
    let withdrawn = batch(9, "withdrawn", Some(marketing(false)));
    let sent = deliver(&app, &input, &mut receiver, withdrawn).await;
    assert!(sent.is_empty(), "{sent:?}");
    let sent = deliver(&app, &input, &mut receiver, batch(9, "after", None)).await;
    assert!(sent.is_empty(), "{sent:?}");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_profile_shows_the_merged_consent() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let first = json!({
        "gdpr": {"marketing": purpose(true),
                 "analytics": {"consented": true, "timestamp_unixtime_ms": 1, "document": "v1"}},
        "ccpa": {"data_sale_opt_out": purpose(false)},
    });
    // A purpose stated again replaces the stored one whole (its `document` goes too); the
    // purposes it does not state are kept.
    let second = json!({"gdpr": {"analytics": {"consented": false, "timestamp_unixtime_ms": 5}}});
    for consent in [first, second] {
        let response = app.post_events(&input, batch(11, "e", Some(consent))).await;
        assert_eq!(response.status(), 202);
    }
    let profile = app.read("/api/v1/users/11").await;
    assert_eq!(
        profile["consent_state"],
        json!({
            "gdpr": {
                "marketing": purpose(true),
                "analytics": {"consented": false, "timestamp_unixtime_ms": 5},
            },
            "ccpa": {"data_sale_opt_out": purpose(false)},
        })
    );
    // A user without any stated consent shows empty regulations.
    app.post_events(&input, batch(12, "e", None)).await;
    let profile = app.read("/api/v1/users/12").await;
    assert_eq!(profile["consent_state"], json!({"gdpr": {}, "ccpa": {}}));
    app.stop().await.unwrap();
}

/// A job handed to delivery at its commit carries its user's consent from that commit: this
/// batch's statement merged over the earlier ones, without reading the profile again.
#[tokio::test]
async fn a_handed_over_job_decides_on_its_batch_merged_with_earlier_statements() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"forwarding_rules": {"gdpr_purposes": ["marketing", "analytics"]}});
    let (input, _) = app.pipeline(&receiver.url("/merged"), settings).await;

    let marketing = json!({"gdpr": {"marketing": purpose(true)}});
    let sent = deliver(
        &app,
        &input,
        &mut receiver,
        batch(21, "first", Some(marketing)),
    )
    .await;
    assert!(sent.is_empty(), "analytics not stated yet: {sent:?}");
    // Only analytics now: marketing comes from the earlier batch.
    let analytics = json!({"gdpr": {"analytics": purpose(true)}});
    let sent = deliver(
        &app,
        &input,
        &mut receiver,
        batch(21, "second", Some(analytics)),
    )
    .await;
    assert_eq!(sent, ["second"]);
    app.stop().await.unwrap();
}

/// A job the poller claims (here a retry) reads the profile when it is worked, so a withdrawal
/// stored after the batch stops its retry.
#[tokio::test]
async fn a_retried_job_reads_the_consent_stored_since() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, Some("3"))]);
    let settings = json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}});
    let (input, _) = app.pipeline(&receiver.url("/retry"), settings).await;
    let marketing = |consented| json!({"gdpr": {"marketing": purpose(consented)}});

    let given = batch(31, "given", Some(marketing(true)));
    assert_eq!(app.post_events(&input, given).await.status(), 202);
    let refused = receiver.next().await;
    assert_eq!(refused.events()[0]["data"]["event_name"], "given");
    // Withdrawn while the first batch waits for its retry (Retry-After: 3 s).
    let sent = deliver(
        &app,
        &input,
        &mut receiver,
        batch(31, "withdrawn", Some(marketing(false))),
    )
    .await;
    assert!(
        sent.is_empty(),
        "the retry and the withdrawal are filtered: {sent:?}"
    );
    let profile = app.read("/api/v1/users/31").await;
    assert_eq!(
        profile["consent_state"]["gdpr"]["marketing"],
        purpose(false)
    );
    app.stop().await.unwrap();
}

/// `boson_consent_reads_total{by="…"}` from the Prometheus text (0 when not yet counted).
fn consent_reads(metrics: &str, by: &str) -> u64 {
    let prefix = format!("boson_consent_reads_total{{by=\"{by}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().expect("a count"))
}

/// A job the poller claims (here a retry) gets its user's consent from the claim's one query,
/// not from a profile read of its own, and the GDPR rule decides on it.
#[tokio::test]
async fn a_claimed_job_decides_on_the_consent_its_claim_read() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    receiver.script(&[(503, Some("1"))]);
    let settings = json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}});
    let (input, _) = app.pipeline(&receiver.url("/claimed"), settings).await;
    let given = batch(
        41,
        "given",
        Some(json!({"gdpr": {"marketing": purpose(true)}})),
    );
    assert_eq!(app.post_events(&input, given).await.status(), 202);
    let refused = receiver.next().await;
    assert_eq!(refused.events()[0]["data"]["event_name"], "given");
    let retried = receiver.next().await;
    assert_eq!(retried.events()[0]["data"]["event_name"], "given");

    let metrics = app.metrics().await;
    assert!(consent_reads(&metrics, "claim") >= 1, "{metrics}");
    assert_eq!(
        consent_reads(&metrics, "job"),
        0,
        "no job read its own consent: {metrics}"
    );
    app.stop().await.unwrap();
}
