//! Every connection setting: what it lets through and what it removes, proven at a real
//! receiver. One server, one input, one connection per case; each case's output posts to its
//! own path so the receiver can tell them apart.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::helpers::{ALL_EVENT_TYPES, Received, Receiver, batch_of, spawn_app};

/// Event types a gate setting controls, as documented in spec §2.
const GATES: &[(&str, &[&str])] = &[
    ("send_custom_events", &["custom_event"]),
    (
        "send_lifecycle_events",
        &[
            "session_start",
            "session_end",
            "application_state_transition",
            "first_run",
            "uninstall",
            "opt_out",
        ],
    ),
    ("send_profile_change_events", &["profile"]),
    ("send_screen_views", &["screen_view"]),
    ("send_commerce_events", &["commerce_event"]),
    ("send_crash_events", &["crash_report", "breadcrumb"]),
    ("send_network_performance_events", &["network_performance"]),
    (
        "send_push_registrations_and_receipts",
        &["push_registration", "push_message", "push_reaction"],
    ),
];

/// Sends one batch of every event type through `cases` (name → settings) and returns what each
/// connection's webhook received, keyed by case name.
async fn run_cases(cases: &[(String, Value)], batch: Value) -> BTreeMap<String, Vec<Received>> {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("custom_feed").await;
    for (name, settings) in cases {
        let output = app.create_webhook(&receiver.url(&format!("/{name}"))).await;
        app.connect(&input, &output, settings.clone()).await;
    }
    assert_eq!(app.post_events(&input, batch).await.status(), 202);
    let mut got: BTreeMap<String, Vec<Received>> =
        cases.iter().map(|(n, _)| (n.clone(), Vec::new())).collect();
    while let Some(request) = receiver
        .next_within(std::time::Duration::from_millis(1500))
        .await
    {
        got.entry(request.path.trim_start_matches('/').to_owned())
            .or_default()
            .push(request);
    }
    app.stop().await.unwrap();
    got
}

fn types_of(requests: &[Received]) -> Vec<String> {
    let mut types: Vec<String> = requests.iter().flat_map(Received::event_types).collect();
    types.sort();
    types
}

fn sorted(types: &[&str]) -> Vec<String> {
    let mut types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
    types.sort();
    types
}

/// What a connection with default settings forwards: everything but the two change types.
fn default_forwarded() -> Vec<&'static str> {
    ALL_EVENT_TYPES
        .iter()
        .copied()
        .filter(|t| !matches!(*t, "user_identity_change" | "user_attribute_change"))
        .collect()
}

#[tokio::test]
async fn each_event_type_gate_removes_exactly_its_types() {
    let mut cases: Vec<(String, Value)> = GATES
        .iter()
        .map(|(s, _)| ((*s).to_owned(), json!({ *s: false })))
        .collect();
    cases.push(("defaults".into(), json!({})));
    cases.push((
        "identity_changes".into(),
        json!({"include_user_identity_change_events": true}),
    ));
    cases.push((
        "attribute_changes".into(),
        json!({"include_user_attribute_change_events": true}),
    ));
    let got = run_cases(&cases, batch_of(ALL_EVENT_TYPES)).await;

    for (setting, gated) in GATES {
        let expected: Vec<&str> = default_forwarded()
            .into_iter()
            .filter(|t| !gated.contains(t))
            .collect();
        assert_eq!(
            types_of(&got[*setting]),
            sorted(&expected),
            "{setting}=false"
        );
    }
    assert_eq!(types_of(&got["defaults"]), sorted(&default_forwarded()));
    let mut with_identity = default_forwarded();
    with_identity.push("user_identity_change");
    assert_eq!(types_of(&got["identity_changes"]), sorted(&with_identity));
    let mut with_attribute = default_forwarded();
    with_attribute.push("user_attribute_change");
    assert_eq!(types_of(&got["attribute_changes"]), sorted(&with_attribute));
}

#[tokio::test]
async fn send_as_batch_decides_between_one_post_per_event_and_one_per_batch() {
    let cases = vec![
        ("realtime".to_owned(), json!({})),
        ("batched".to_owned(), json!({"send_as_batch": true})),
    ];
    let got = run_cases(
        &cases,
        batch_of(&["custom_event", "screen_view", "session_start"]),
    )
    .await;
    assert_eq!(got["realtime"].len(), 3);
    assert!(got["realtime"].iter().all(|r| r.events().len() == 1));
    // Every real-time POST carries the batch-level fields.
    assert!(
        got["realtime"]
            .iter()
            .all(|r| r.body["user_attributes"]["$firstname"] == "Ada")
    );
    assert_eq!(got["batched"].len(), 1);
    assert_eq!(got["batched"][0].events().len(), 3);
    // Delivery ids are distinct per request.
    let mut ids: Vec<String> = got["realtime"]
        .iter()
        .map(|r| {
            r.headers["x-boson-delivery-id"]
                .to_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
}

#[tokio::test]
async fn metadata_settings_strip_what_they_name() {
    let cases = vec![
        (
            "full".to_owned(),
            json!({"send_as_batch": true, "include_event_batch_location": true}),
        ),
        (
            "no_metadata".to_owned(),
            json!({"send_as_batch": true, "include_metadata": false}),
        ),
        (
            "exclusions".to_owned(),
            json!({"send_as_batch": true, "metadata_field_exclusions": ["ip", "device_info.device", "application_info.application_name"]}),
        ),
        (
            "no_location".to_owned(),
            json!({"send_as_batch": true, "include_location_information": false}),
        ),
        (
            "unique".to_owned(),
            json!({"send_as_batch": true, "unique_id": "shop-eu"}),
        ),
    ];
    let got = run_cases(&cases, batch_of(&["custom_event", "screen_view"])).await;
    let body = |name: &str| got[name][0].body.clone();

    let full = body("full");
    assert_eq!(full["ip"], "203.0.113.9");
    assert_eq!(full["device_info"]["device"], "Ada's phone");
    assert_eq!(full["application_info"]["application_name"], "Shop");
    assert!(full["source_info"].is_object());
    assert_eq!(full["context"]["location"]["latitude"], 52.5);
    assert_eq!(full["events"][0]["data"]["location"]["latitude"], 1.5);
    assert!(full.get("unique_id").is_none());

    let bare = body("no_metadata");
    for key in ["application_info", "device_info", "source_info"] {
        assert!(bare.get(key).is_none(), "include_metadata=false kept {key}");
    }
    assert_eq!(
        bare["user_attributes"], full["user_attributes"],
        "non-metadata keys stay"
    );

    let excluded = body("exclusions");
    assert!(excluded.get("ip").is_none());
    assert!(excluded["device_info"].get("device").is_none());
    assert_eq!(
        excluded["device_info"]["os_version"], "17.1",
        "only the named field goes"
    );
    assert!(
        excluded["application_info"]
            .get("application_name")
            .is_none()
    );
    assert_eq!(excluded["application_info"]["package"], "com.example.shop");

    let no_location = body("no_location");
    assert!(no_location["context"].get("location").is_none());
    for event in no_location["events"].as_array().unwrap() {
        assert!(event["data"].get("location").is_none());
        assert_eq!(
            event["data"]["custom_attributes"]["marker"], event["event_type"],
            "the rest of the event stays"
        );
    }

    let defaults = body("unique");
    assert_eq!(defaults["unique_id"], "shop-eu");
    assert!(
        defaults["context"].get("location").is_none(),
        "batch location is off by default"
    );
    assert_eq!(defaults["events"][0]["data"]["location"]["latitude"], 1.5);
}

#[tokio::test]
async fn batches_without_events_follow_their_setting() {
    let cases = vec![
        ("on".to_owned(), json!({})),
        (
            "off".to_owned(),
            json!({"send_batches_without_events": false}),
        ),
    ];
    let got = run_cases(&cases, batch_of(&[])).await;
    assert_eq!(got["on"].len(), 1);
    assert!(got["on"][0].events().is_empty());
    assert_eq!(got["on"][0].body["user_attributes"]["$firstname"], "Ada");
    assert!(got["off"].is_empty());
}

#[tokio::test]
async fn an_inactive_connection_forwards_nothing() {
    let cases = vec![
        ("active".to_owned(), json!({"status": "active"})),
        ("inactive".to_owned(), json!({"status": "inactive"})),
    ];
    let got = run_cases(&cases, batch_of(&["custom_event"])).await;
    assert_eq!(got["active"].len(), 1);
    assert!(got["inactive"].is_empty());
}

#[tokio::test]
async fn include_mp_deviceid_is_an_output_setting() {
    let app = spawn_app().await;
    let mut receiver = Receiver::start().await;
    let input = app.create_input("custom_feed").await;
    let settings = json!({"url": receiver.url("/with"), "include_mp_deviceid": true});
    let with = app
        .create(
            "/api/v1/outputs",
            json!({"name": "w", "kind": "webhook", "settings": settings}),
        )
        .await;
    let without = app.create_webhook(&receiver.url("/without")).await;
    app.connect(&input, &with, json!({})).await;
    app.connect(&input, &without, json!({})).await;
    app.post_events(&input, batch_of(&["custom_event"])).await;
    let mut got: Vec<Received> = receiver.take(2).await;
    got.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(got[0].path, "/with");
    assert_eq!(
        got[0].body["mp_deviceid"],
        "5a6e7f2c-1111-4d2b-9c1e-0d3a4f5b6c7d"
    );
    assert!(got[1].body.get("mp_deviceid").is_none());
    app.stop().await.unwrap();
}
