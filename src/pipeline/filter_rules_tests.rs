//! Tests of the Data Filter and forwarding rules as the filter applies them (issue 13).

use serde_json::{Value, json};

use super::*;
use crate::pipeline::rules::sampled_in;

fn webhook() -> WebhookSettings {
    WebhookSettings::with_url("http://x")
}

fn settings(rules: Value) -> ConnectionSettings {
    let mut patch = rules;
    patch["send_as_batch"] = json!(true);
    ConnectionSettings::from_json(patch).expect("valid settings")
}

fn custom(name: &str, attributes: &Value) -> Value {
    json!({"event_type": "custom_event", "data": {"event_name": name, "custom_event_type": "other", "custom_attributes": attributes}})
}

fn purchase(attributes: &Value) -> Value {
    json!({"event_type": "commerce_event", "data": {"product_action": {"action": "purchase"}, "custom_attributes": attributes}})
}

fn screen(name: &str) -> Value {
    json!({"event_type": "screen_view", "data": {"screen_name": name}})
}

fn batch(events: &[Value]) -> Value {
    json!({
        "events": events,
        "mpid": 42,
        "user_attributes": {"$Age": 30, "plan": "pro", "tier": "gold"},
        "user_identities": [
            {"identity_type": "email", "identity": "a@b.c", "timestamp_unixtime_ms": 1},
            {"identity_type": "customer_id", "identity": "c1", "timestamp_unixtime_ms": 1}
        ],
        "consent_state": {
            "gdpr": {"marketing": {"consented": true, "timestamp_unixtime_ms": 1},
                     "analytics": {"consented": false, "timestamp_unixtime_ms": 1}},
            "ccpa": {"data_sale_opt_out": {"consented": false, "timestamp_unixtime_ms": 1}}
        }
    })
}

fn sent(settings: &ConnectionSettings, document: &Value) -> (Plan, Value) {
    sent_with(settings, document, None)
}

/// What leaves when the user's profile holds `consent`.
fn sent_with(
    settings: &ConnectionSettings,
    document: &Value,
    consent: Option<&Value>,
) -> (Plan, Value) {
    let plan = plan(settings, &webhook(), BatchId::new(1), document, consent);
    let body = plan
        .payloads
        .first()
        .map(|p| serde_json::from_slice(&p.body).expect("json"))
        .unwrap_or(Value::Null);
    (plan, body)
}

fn reasons(plan: &Plan) -> Vec<String> {
    plan.verdicts
        .iter()
        .map(|v| match v {
            Verdict::Forwarded => "forwarded".to_owned(),
            Verdict::Filtered(setting) => setting.as_str().to_owned(),
            Verdict::Ruled(rule) => rule.to_string(),
        })
        .collect()
}

#[test]
fn event_type_name_and_attribute_rules() {
    let s = settings(json!({"data_filter": {"rules": [
        {"event_type": "custom_event", "event_name": "Coupon Viewed", "send": false},
        {"event_type": "commerce_event", "event_name": "purchase", "attribute": "coupon_code", "send": false},
        {"event_type": "screen_view", "send": false}
    ]}}));
    let doc = batch(&[
        custom("Coupon Viewed", &json!({"a": 1})),
        custom("Other", &json!({"coupon_code": "X"})),
        purchase(&json!({"coupon_code": "X", "total": 3})),
        screen("Home"),
    ]);
    let (plan, body) = sent(&s, &doc);
    assert_eq!(
        reasons(&plan),
        [
            "data_filter: custom_event \"Coupon Viewed\"",
            "forwarded",
            "forwarded",
            "data_filter: screen_view"
        ]
    );
    let events = body["events"].as_array().expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0]["data"]["custom_attributes"],
        json!({"coupon_code": "X"})
    );
    assert_eq!(events[1]["data"]["custom_attributes"], json!({"total": 3}));
    assert_eq!(plan.removed_attributes[2], ["coupon_code"]);
    assert!(plan.removed_attributes[1].is_empty());
}

#[test]
fn without_new_data_points_only_send_true_rules_leave() {
    let s = settings(
        json!({"data_filter": {"send_new_data_points": false, "rules": [
            {"event_type": "custom_event", "event_name": "Known", "send": true},
            {"event_type": "custom_event", "event_name": "Known", "attribute": "kept", "send": true},
            {"user_attribute": "plan", "send": true},
            {"identity_type": "customer_id", "send": true}
        ]}}),
    );
    let doc = batch(&[
        custom("Known", &json!({"kept": 1, "dropped": 2})),
        custom("Never Seen", &json!({})),
        screen("Home"),
    ]);
    let (plan, body) = sent(&s, &doc);
    assert_eq!(
        reasons(&plan),
        [
            "forwarded",
            "data_filter: custom_event \"Never Seen\"",
            "data_filter: screen_view \"Home\""
        ]
    );
    assert_eq!(
        body["events"][0]["data"]["custom_attributes"],
        json!({"kept": 1})
    );
    assert_eq!(body["user_attributes"], json!({"plan": "pro"}));
    assert_eq!(body["user_identities"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        body["user_identities"][0]["identity_type"],
        json!("customer_id")
    );
}

#[test]
fn user_attribute_and_identity_rules_strip_the_batch() {
    let s = settings(json!({"data_filter": {"rules": [
        {"user_attribute": "$Age", "send": false},
        {"identity_type": "email", "send": false}
    ]}}));
    let (_, body) = sent(&s, &batch(&[custom("A", &json!({}))]));
    assert_eq!(
        body["user_attributes"],
        json!({"plan": "pro", "tier": "gold"})
    );
    assert_eq!(body["user_identities"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        body["user_identities"][0]["identity_type"],
        json!("customer_id")
    );
}

#[test]
fn attribute_forwarding_rule_on_events_and_users() {
    let only = settings(json!({"forwarding_rules": {"attribute":
        {"scope": "event", "name": "plan", "value": "pro", "mode": "only_forward"}}}));
    let doc = batch(&[
        custom("A", &json!({"plan": "pro"})),
        custom("B", &json!({"plan": "Pro"})),
        custom("C", &json!({})),
    ]);
    let (plan, _) = sent(&only, &doc);
    assert_eq!(
        reasons(&plan),
        [
            "forwarded",
            "forwarding_rule: plan",
            "forwarding_rule: plan"
        ]
    );
    let dont = settings(json!({"forwarding_rules": {"attribute":
        {"scope": "event", "name": "plan", "value": "pro", "mode": "dont_forward"}}}));
    let (plan, _) = sent(&dont, &doc);
    assert_eq!(
        reasons(&plan),
        ["forwarding_rule: plan", "forwarded", "forwarded"]
    );
    let user = settings(json!({"forwarding_rules": {"attribute":
        {"scope": "user", "name": "tier", "value": "silver", "mode": "only_forward"}}}));
    let (plan, _) = sent(&user, &doc);
    assert!(plan.payloads.is_empty());
    assert!(reasons(&plan).iter().all(|r| r == "forwarding_rule: tier"));
}

#[test]
fn login_identity_and_consent_rules_drop_the_whole_user() {
    let mut anonymous = batch(&[custom("A", &json!({}))]);
    anonymous["user_identities"] = json!([]);
    let login = settings(json!({"forwarding_rules": {"require_login_identity": true}}));
    assert_eq!(
        reasons(&sent(&login, &anonymous).0),
        ["forwarding_rule: login identity"]
    );
    assert_eq!(
        reasons(&sent(&login, &batch(&[custom("A", &json!({}))])).0),
        ["forwarded"]
    );

    let gdpr = settings(json!({"forwarding_rules": {"gdpr_purposes": ["marketing", "analytics"]}}));
    assert_eq!(
        reasons(&sent(&gdpr, &batch(&[custom("A", &json!({}))])).0),
        ["consent: gdpr analytics"]
    );
    let gdpr = settings(json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}}));
    assert_eq!(
        reasons(&sent(&gdpr, &batch(&[custom("A", &json!({}))])).0),
        ["forwarded"]
    );

    let ccpa = settings(json!({"forwarding_rules": {"ccpa_respect_data_sale_opt_out": true}}));
    let mut opted_out = batch(&[]);
    opted_out["consent_state"]["ccpa"]["data_sale_opt_out"]["consented"] = json!(true);
    let (plan, _) = sent(&ccpa, &opted_out);
    assert!(
        plan.payloads.is_empty(),
        "a batch without events is user data too"
    );
    opted_out["events"] = json!([custom("A", &json!({}))]);
    assert_eq!(reasons(&sent(&ccpa, &opted_out).0), ["consent: ccpa"]);
    assert_eq!(
        reasons(&sent(&ccpa, &batch(&[custom("A", &json!({}))])).0),
        ["forwarded"]
    );
}

#[test]
fn the_profile_consent_decides_over_the_batch_own() {
    let gdpr = settings(json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}}));
    let ccpa = settings(json!({"forwarding_rules": {"ccpa_respect_data_sale_opt_out": true}}));
    let mut silent = batch(&[custom("A", &json!({}))]);
    silent.as_object_mut().unwrap().remove("consent_state");
    let profile = |marketing: bool, opted_out: bool| {
        json!({"gdpr": {"marketing": {"consented": marketing, "timestamp_unixtime_ms": 1}},
               "ccpa": {"data_sale_opt_out": {"consented": opted_out, "timestamp_unixtime_ms": 1}}})
    };
    // A batch that states nothing: the profile's consent is the user's.
    let consented = profile(true, false);
    assert_eq!(
        reasons(&sent_with(&gdpr, &silent, Some(&consented)).0),
        ["forwarded"]
    );
    assert_eq!(
        reasons(&sent_with(&ccpa, &silent, Some(&consented)).0),
        ["forwarded"]
    );
    assert_eq!(
        reasons(&sent(&gdpr, &silent).0),
        ["consent: gdpr marketing"]
    );
    // The profile already holds this batch's statement and any later one: it wins.
    let withdrawn = profile(false, true);
    let stating = batch(&[custom("A", &json!({}))]);
    assert_eq!(
        reasons(&sent_with(&gdpr, &stating, Some(&withdrawn)).0),
        ["consent: gdpr marketing"]
    );
    assert_eq!(
        reasons(&sent_with(&ccpa, &stating, Some(&withdrawn)).0),
        ["consent: ccpa"]
    );
    // The consent read from the profile never changes what the body carries.
    let (_, body) = sent_with(&gdpr, &stating, Some(&consented));
    assert_eq!(body["consent_state"], stating["consent_state"]);
}

#[test]
fn sampling_is_per_mpid_and_stable() {
    let half = settings(json!({"forwarding_rules": {"user_sample_percent": 50}}));
    let mut forwarded = 0;
    for mpid in 0..2000_i64 {
        let mut doc = batch(&[custom("A", &json!({})), screen("B")]);
        doc["mpid"] = json!(mpid);
        let plan = sent(&half, &doc).0;
        let verdicts = reasons(&plan);
        assert!(verdicts[0] == verdicts[1], "all or nothing for {mpid}");
        if verdicts[0] == "forwarded" {
            forwarded += 1;
        } else {
            assert_eq!(verdicts[0], "sampling 50%");
        }
        assert_eq!(sampled_in(Some(mpid), 50), verdicts[0] == "forwarded");
    }
    assert!((900..=1100).contains(&forwarded), "{forwarded} of 2000");
    assert!((0..1000).all(|m| sampled_in(Some(m), 100)));
    // Pinned buckets (SHA-256 of the MPID's digits): a change here would move users in or out
    // of every sampled connection on upgrade.
    let in_half: Vec<i64> = (0..10).filter(|m| sampled_in(Some(*m), 50)).collect();
    assert_eq!(in_half, [0, 1, 2, 3, 7, 9]);
}
