//! The Data Filter and forwarding rules (issue 13), proven at a real receiver: one input, one
//! connection per case, each posting to its own path.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Received, Receiver, TestApp, spawn_app};
use crate::live::LiveStream;

/// Connects one webhook per case (name → settings; every case sends as batch) to a new input.
async fn connect_cases(app: &TestApp, receiver: &Receiver, cases: &[(&str, Value)]) -> Value {
    let input = app.create_input("custom_feed").await;
    for (name, settings) in cases {
        let mut settings = settings.clone();
        settings["send_as_batch"] = json!(true);
        let output = app.create_webhook(&receiver.url(&format!("/{name}"))).await;
        app.connect(&input, &output, settings).await;
    }
    input
}

/// Every request the receiver gets until it has been quiet for a moment, by case name.
async fn received_by_case(receiver: &mut Receiver) -> BTreeMap<String, Vec<Received>> {
    let mut got: BTreeMap<String, Vec<Received>> = BTreeMap::new();
    while let Some(request) = receiver.next_within(Duration::from_millis(1500)).await {
        got.entry(request.path.trim_start_matches('/').to_owned())
            .or_default()
            .push(request);
    }
    got
}

fn custom(name: &str, attributes: &Value) -> Value {
    json!({"event_type": "custom_event",
           "data": {"event_name": name, "custom_event_type": "other", "custom_attributes": attributes}})
}

fn purchase(attributes: &Value) -> Value {
    json!({"event_type": "commerce_event",
           "data": {"product_action": {"action": "purchase", "total_amount": 5.0}, "custom_attributes": attributes}})
}

/// The event names (custom event names, commerce actions) a case received, in order.
fn names(requests: Option<&Vec<Received>>) -> Vec<String> {
    requests
        .into_iter()
        .flatten()
        .flat_map(Received::events)
        .map(|e| {
            let data = &e["data"];
            data["event_name"]
                .as_str()
                .or(data["product_action"]["action"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn the_data_filter_removes_events_attributes_user_attributes_and_identities() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let cases = [
        (
            "rules",
            json!({"data_filter": {"rules": [
                {"event_type": "custom_event", "event_name": "Coupon Viewed", "send": false},
                {"event_type": "commerce_event", "event_name": "purchase", "attribute": "coupon_code", "send": false},
                {"user_attribute": "$Age", "send": false},
                {"identity_type": "email", "send": false}
            ]}}),
        ),
        (
            "known_only",
            json!({"data_filter": {"send_new_data_points": false, "rules": [
                {"event_type": "custom_event", "event_name": "Clicked", "send": true},
                {"event_type": "custom_event", "event_name": "Clicked", "attribute": "button", "send": true},
                {"identity_type": "customer_id", "send": true}
            ]}}),
        ),
        ("everything", json!({})),
    ];
    let input = connect_cases(&app, &receiver, &cases).await;
    let batch = json!({
        "mpid": 7,
        "user_identities": {"customer_id": "c-7", "email": "u7@example.com"},
        "user_attributes": {"$Age": 41, "tier": "gold"},
        "events": [
            custom("Coupon Viewed", &json!({})),
            custom("Clicked", &json!({"button": "buy", "page": "home"})),
            custom("Never Seen Before", &json!({})),
            purchase(&json!({"coupon_code": "SAVE", "channel": "web"})),
        ],
    });
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    let got = received_by_case(&mut receiver).await;

    assert_eq!(
        names(got.get("rules")),
        ["Clicked", "Never Seen Before", "purchase"]
    );
    let body = &got["rules"][0].body;
    assert_eq!(
        body["events"][2]["data"]["custom_attributes"],
        json!({"channel": "web"})
    );
    assert_eq!(body["user_attributes"], json!({"tier": "gold"}));
    let identity_types: Vec<&Value> = body["user_identities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["identity_type"])
        .collect();
    assert_eq!(identity_types, [&json!("customer_id")]);

    // A data point no rule names is not forwarded when new data points are off.
    assert_eq!(names(got.get("known_only")), ["Clicked"]);
    let body = &got["known_only"][0].body;
    assert_eq!(
        body["events"][0]["data"]["custom_attributes"],
        json!({"button": "buy"})
    );
    assert_eq!(body["user_attributes"], json!({}));
    assert_eq!(body["user_identities"].as_array().map(Vec::len), Some(1));

    assert_eq!(names(got.get("everything")).len(), 4, "no rules, no change");
    app.stop().await.unwrap();
}

#[tokio::test]
async fn forwarding_rules_follow_attribute_values_login_and_consent() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let cases = [
        (
            "only_pro",
            json!({"forwarding_rules": {"attribute":
                {"scope": "event", "name": "plan", "value": "pro", "mode": "only_forward"}}}),
        ),
        (
            "not_pro",
            json!({"forwarding_rules": {"attribute":
                {"scope": "event", "name": "plan", "value": "pro", "mode": "dont_forward"}}}),
        ),
        (
            "gold_users",
            json!({"forwarding_rules": {"attribute":
                {"scope": "user", "name": "tier", "value": "gold", "mode": "only_forward"}}}),
        ),
        (
            "login",
            json!({"forwarding_rules": {"require_login_identity": true}}),
        ),
        (
            "gdpr",
            json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}}),
        ),
        (
            "ccpa",
            json!({"forwarding_rules": {"ccpa_respect_data_sale_opt_out": true}}),
        ),
    ];
    let input = connect_cases(&app, &receiver, &cases).await;
    let consent = |marketing: bool, opted_out: bool| {
        json!({"gdpr": {"marketing": {"consented": marketing, "timestamp_unixtime_ms": 1}},
               "ccpa": {"data_sale_opt_out": {"consented": opted_out, "timestamp_unixtime_ms": 1}}})
    };
    // A logged-in gold user who consented, and an anonymous one who did not and opted out.
    let known = json!({
        "mpid": 1,
        "user_identities": {"customer_id": "c-1"},
        "user_attributes": {"tier": "gold"},
        "consent_state": consent(true, false),
        "events": [custom("Pro", &json!({"plan": "pro"})), custom("Missing", &json!({}))],
    });
    let anonymous = json!({
        "mpid": 2,
        "user_attributes": {"tier": "silver"},
        "consent_state": consent(false, true),
        "events": [custom("Free", &json!({"plan": "free"})), custom("Pro Too", &json!({"plan": "pro"}))],
    });
    for batch in [known, anonymous] {
        assert_eq!(app.post_events(&input, batch).await.status(), 202);
    }
    let got = received_by_case(&mut receiver).await;
    let sorted = |case: &str| {
        let mut names = names(got.get(case));
        names.sort();
        names
    };
    // A missing attribute does not match: it fails only_forward and passes dont_forward.
    assert_eq!(sorted("only_pro"), ["Pro", "Pro Too"]);
    assert_eq!(sorted("not_pro"), ["Free", "Missing"]);
    for case in ["gold_users", "login", "gdpr", "ccpa"] {
        assert_eq!(sorted(case), ["Missing", "Pro"], "{case}");
    }
    app.stop().await.unwrap();
}

#[tokio::test]
async fn invalid_rules_are_refused_naming_the_field_and_nothing_is_stored() {
    let app = spawn_app().await;
    let input = app.create_input("custom_feed").await;
    let output = app.create_webhook("http://127.0.0.1:9/hook").await;
    let refused = [
        (
            json!({"data_filter": {"rules": [{"event_type": "custom_events", "send": false}]}}),
            "data_filter.rules[0].event_type",
        ),
        (
            json!({"forwarding_rules": {"user_sample_percent": 0}}),
            "forwarding_rules.user_sample_percent",
        ),
    ];
    for (settings, field) in refused {
        let response = app
            .admin(reqwest::Method::POST, "/api/v1/connections")
            .json(
                &json!({"input_id": input["id"], "output_id": output["id"], "settings": settings}),
            )
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 400);
        let body = response.text().await.expect("body");
        assert!(body.contains(field), "{field}: {body}");
    }
    assert_eq!(app.count("connections").await, 0);
    app.stop().await.unwrap();
}

/// Posts one two-event batch per MPID in bulk requests of 100 batches.
async fn post_users(app: &TestApp, input: &Value, mpids: std::ops::Range<i64>) {
    let mpids: Vec<i64> = mpids.collect();
    for chunk in mpids.chunks(100) {
        let bulk: Vec<Value> = chunk
            .iter()
            .map(|mpid| json!({"mpid": mpid, "events": [custom("A", &json!({})), custom("B", &json!({}))]}))
            .collect();
        let response = app
            .post_raw(input, "/v2/bulkevents", Value::Array(bulk).to_string())
            .await;
        assert_eq!(response.status(), 202);
    }
}

/// The MPIDs the receiver got events of, checking each batch arrived whole.
async fn forwarded_users(receiver: &mut Receiver) -> BTreeSet<i64> {
    let mut users = BTreeSet::new();
    while let Some(request) = receiver.next_within(Duration::from_millis(2000)).await {
        assert_eq!(request.events().len(), 2, "all or none of a user's events");
        let mpid = request.body["mpid"].as_i64().expect("mpid");
        assert!(users.insert(mpid), "user {mpid} twice");
    }
    users
}

#[tokio::test]
async fn half_sampling_forwards_half_the_users_the_same_ones_on_every_node() {
    const USERS: i64 = 10_000;
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let settings = json!({"forwarding_rules": {"user_sample_percent": 50}});
    let input = connect_cases(&app, &receiver, &[("half", settings)]).await;
    post_users(&app, &input, 0..USERS).await;
    let first = forwarded_users(&mut receiver).await;
    let share = first.len() as f64 / USERS as f64;
    assert!((0.45..=0.55).contains(&share), "{share}");

    // Another node, started after the first has decided (as after a restart), decides alike:
    // the same users' next batches, sent through it, go out for exactly the same users.
    let second = app.second_node(|_| {}).await;
    post_users(&second, &input, 0..USERS).await;
    let again = forwarded_users(&mut receiver).await;
    assert_eq!(first, again);
    second.stop().await.unwrap();
    app.stop().await.unwrap();
}

#[tokio::test]
async fn the_live_stream_names_the_rule_behind_each_decision() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let cases = [
        (
            "filter",
            json!({"data_filter": {"rules": [
                {"event_type": "custom_event", "event_name": "Coupon Viewed", "send": false},
                {"event_type": "commerce_event", "event_name": "purchase", "attribute": "coupon_code", "send": false}
            ]}}),
        ),
        (
            "plan",
            json!({"forwarding_rules": {"attribute":
                {"scope": "event", "name": "plan", "value": "pro", "mode": "only_forward"}}}),
        ),
        (
            "gdpr",
            json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}}),
        ),
        (
            "ccpa",
            json!({"forwarding_rules": {"ccpa_respect_data_sale_opt_out": true}}),
        ),
        (
            "half",
            json!({"forwarding_rules": {"user_sample_percent": 50}}),
        ),
    ];
    let input = connect_cases(&app, &receiver, &cases).await;
    let mut live = LiveStream::open(
        &app,
        &format!(
            "input_id={}&direction=outbound",
            input["id"].as_str().unwrap()
        ),
    )
    .await;
    for mpid in 0..20 {
        let batch = json!({
            "mpid": mpid,
            "consent_state": {"ccpa": {"data_sale_opt_out": {"consented": true, "timestamp_unixtime_ms": 1}}},
            "events": [custom("Coupon Viewed", &json!({})), purchase(&json!({"coupon_code": "SAVE"}))],
        });
        assert_eq!(app.post_events(&input, batch).await.status(), 202);
    }
    let mut expected: BTreeSet<String> = [
        "filtered (data_filter: custom_event \"Coupon Viewed\")",
        "forwarded · attribute removed (data_filter: coupon_code)",
        "filtered (forwarding_rule: plan)",
        "filtered (consent: gdpr marketing)",
        "filtered (consent: ccpa)",
        "filtered (sampling 50%)",
    ]
    .map(str::to_owned)
    .into();
    while !expected.is_empty() {
        let Some(item) = live.next_within(Duration::from_secs(10)).await else {
            panic!("never shown: {expected:?}");
        };
        let shown = match (&item["reason"], &item["note"]) {
            (Value::String(reason), _) => {
                format!("{} ({reason})", item["outcome"].as_str().unwrap())
            }
            (_, Value::String(note)) => format!("{} · {note}", item["outcome"].as_str().unwrap()),
            _ => continue,
        };
        expected.remove(&shown);
    }
    app.stop().await.unwrap();
}
