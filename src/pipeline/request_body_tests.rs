//! Bodies cut from a stored batch's bytes are the bodies written from its parsed document,
//! byte for byte; and the borrowed base is the base the filter built by cloning before.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;
use crate::model::batch::{Channel, normalize};
use crate::model::event_type::EventType;
use crate::model::settings::ConnectionStatus;
use crate::pipeline::events_body::to_json;
use crate::pipeline::filter::{plan, plan_stored};
use crate::pipeline::stored_batch::StoredBatch;

fn webhook() -> WebhookSettings {
    WebhookSettings::with_url("http://x")
}

/// A batch as the store keeps it: normalised, then written by serde_json.
fn stored(batch: Value) -> (Value, Vec<u8>) {
    let normalized =
        normalize(batch, Channel::ServerToServer, 1_700_000_000_000, "").expect("a valid batch");
    let body = serde_json::to_vec(&normalized.whole_document()).expect("serialisable");
    let document = serde_json::from_slice(&body).expect("readable");
    (document, body)
}

fn read(body: &[u8]) -> StoredBatch<'_> {
    StoredBatch::read(body).expect("readable")
}

fn spec_sample(file: &str) -> Value {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("sample")).expect("json")
}

/// A batch like the load generator's SDK-like one (`boson-load --payload sdk`), with a
/// location on its events and on the batch, and a consent statement.
fn sdk_batch() -> Value {
    let events: Vec<Value> = (0..10)
        .map(|n| {
            let kind = ["other", "navigation"][n % 2];
            json!({"event_type": "custom_event", "data": {
                "event_name": "load_test", "custom_event_type": kind,
                "timestamp_unixtime_ms": 1_700_000_000_000_i64 + n as i64,
                "session_uuid": "5e550001-0000-4000-8000-000000000001",
                "location": {"latitude": 52.5, "longitude": 13.4},
                "custom_attributes": {"sent_at_us": "17", "i": n.to_string(), "page": "/catalog/é\"\\",
                    "step": n.to_string(), "item_id": "sku-000001", "price": 0.1 + n as f64}}})
        })
        .collect();
    json!({
        "environment": "production", "mpid": 2, "ip": "10.1.2.3", "mp_deviceid": "d-1",
        "user_identities": {"customer_id": "user-1", "email": "u@example.com"},
        "user_attributes": {"plan": "pro", "$Age": 30},
        "consent_state": {"gdpr": {"marketing": {"consented": true, "timestamp_unixtime_ms": 1}}},
        "context": {"location": {"latitude": 1.5, "longitude": 2.5}},
        "device_info": {"platform": "Android", "device": "Pixel 7 Pro", "screen_dpi": 512,
            "http_header_user_agent": "Mozilla/5.0 (Linux; Android 14)"},
        "application_info": {"application_name": "Boson Shop", "sideloaded_kits_count": 0},
        "events": events,
        "screen_view_like": null,
    })
}

/// Settings that leave events as stored, and settings that change events, the base or both.
fn settings_cases() -> Vec<ConnectionSettings> {
    let from = |patch: Value| ConnectionSettings::from_json(patch).expect("valid settings");
    vec![
        ConnectionSettings::default(),
        from(json!({"send_as_batch": true})),
        from(json!({"include_location_information": false})),
        from(json!({"include_location_information": false, "send_as_batch": true})),
        from(json!({"include_metadata": false, "include_event_batch_location": true})),
        from(
            json!({"metadata_field_exclusions": ["ip", "device_info.device"],
                    "unique_id": "u-1"}),
        ),
        from(json!({"data_filter": {"rules": [
            {"event_type": "custom_event", "event_name": "load_test", "attribute": "page",
             "send": false},
            {"user_attribute": "plan", "send": false},
            {"identity_type": "email", "send": false}]}})),
        from(json!({"data_filter": {"send_new_data_points": false}, "send_as_batch": true})),
        from(json!({"forwarding_rules": {"gdpr_purposes": ["marketing"]}})),
    ]
}

fn samples() -> Vec<(String, Value, Vec<u8>)> {
    let mut out = Vec::new();
    for file in [
        "mparticle.inbound.eventsapi.sample.json",
        "api-evangelist.mparticle-eventsapi-sample.json",
    ] {
        let (document, body) = stored(spec_sample(file));
        out.push((file.to_owned(), document, body));
    }
    let (document, body) = stored(sdk_batch());
    out.push(("sdk batch".to_owned(), document, body));
    out
}

#[test]
fn bodies_from_stored_bytes_equal_bodies_written_from_the_document() {
    for (name, document, body) in samples() {
        for (k, settings) in settings_cases().iter().enumerate() {
            let written = plan(settings, &webhook(), BatchId::new(9), &document, None);
            let cut = plan_stored(settings, &webhook(), BatchId::new(9), &read(&body), None);
            assert_eq!(written, cut, "{name}, settings case {k}");
            let sent: usize = cut.payloads.iter().map(|p| p.event_count).sum();
            // Each sample has events every case but the consent rule and the Data Filter's
            // "nothing new" lets through, so the comparison is not between empty plans.
            if k < 7 {
                assert!(sent > 0, "{name}, settings case {k} sent no event");
            }
        }
    }
}

/// Under settings that change no event, a batch read as outlines gives the plan the whole
/// batch gives: the same bodies, verdicts and removals.
#[test]
fn outlines_give_the_plan_the_whole_batch_gives() {
    let from = |patch: Value| ConnectionSettings::from_json(patch).expect("valid settings");
    let mut cases = settings_cases();
    cases.extend([
        from(json!({"send_custom_events": false, "send_screen_views": false})),
        from(json!({"forwarding_rules": {"attribute":
            {"scope": "user", "name": "plan", "value": "pro", "mode": "only_forward"}}})),
        from(json!({"forwarding_rules": {"attribute":
            {"scope": "event", "name": "i", "value": "3", "mode": "dont_forward"}}})),
        from(json!({"status": "inactive"})),
    ]);
    let mut outlined = 0;
    for (name, _, body) in samples() {
        for (k, settings) in cases.iter().enumerate() {
            if !crate::pipeline::filter::outlines_suffice(settings) {
                continue;
            }
            outlined += 1;
            let whole = plan_stored(settings, &webhook(), BatchId::new(9), &read(&body), None);
            let outlines = StoredBatch::read_outlines(&body).expect("readable");
            let cut = plan_stored(settings, &webhook(), BatchId::new(9), &outlines, None);
            assert_eq!(whole, cut, "{name}, settings case {k}");
        }
    }
    assert!(outlined >= 15, "only {outlined} cases read as outlines");
}

/// The Live Stream names an event and its type from its outline as from the whole event.
#[test]
fn outlines_name_events_as_whole_events_do() {
    use crate::live::{event_type_of, name_of};
    let mut events = vec![
        json!({"event_type": "screen_view", "data": {"screen_name": "home"}}),
        json!({"event_type": "commerce_event", "data": {"product_impressions": [{"p": 1}]}}),
        json!({"event_type": "commerce_event", "data": {"promotion_action": {"action": "view"}}}),
        json!({"event_type": "user_attribute_change", "data": {"user_attribute_name": "a"}}),
        json!({"event_type": "user_identity_change", "data": {"old": {"identity_type": "email"}}}),
    ];
    for (_, document, _) in samples() {
        events.extend(document["events"].as_array().into_iter().flatten().cloned());
    }
    let body = serde_json::to_vec(&json!({"events": events})).expect("serialisable");
    let outlines = StoredBatch::read_outlines(&body).expect("readable");
    let outlined = outlines.document["events"].as_array().expect("events");
    assert_eq!(outlined.len(), events.len());
    for (outline, event) in outlined.iter().zip(&events) {
        assert_eq!(event_type_of(outline), event_type_of(event));
        assert_eq!(name_of(outline), name_of(event), "{event}");
        assert!(outline.to_string().len() <= event.to_string().len());
    }
}

#[test]
fn events_left_unchanged_go_out_as_stored() {
    let (_, body) = stored(sdk_batch());
    let settings = ConnectionSettings::default();
    let cut = plan_stored(&settings, &webhook(), BatchId::new(9), &read(&body), None);
    let text = std::str::from_utf8(&body).expect("utf-8");
    assert_eq!(cut.payloads.len(), 10);
    for payload in &cut.payloads {
        let sent = std::str::from_utf8(&payload.body).expect("utf-8");
        // The base's first field follows the one event.
        let end = sent.find("],\"application_info\"").expect("one event");
        let event = &sent["{\"events\":[".len()..end];
        assert!(
            text.contains(event),
            "not cut from the stored bytes: {event}"
        );
    }
}

/// An unchanged event is the very slice of the stored body it was stored as; removing its
/// location or an attribute writes it anew, without them.
#[test]
fn an_unchanged_event_is_its_stored_slice() {
    let (_, body) = stored(sdk_batch());
    let read = read(&body);
    let stored_events = read.stored_events().expect("events");
    let (event, stored) = (&read.document["events"][0], stored_events[0]);
    let keep = ConnectionSettings::default();
    match outbound_event(&keep, event, Some(stored), &[]) {
        OutboundEvent::Stored(bytes) => {
            assert!(std::ptr::eq(bytes, stored), "not the stored slice");
            assert!(body.as_ptr_range().contains(&bytes.as_ptr()));
        }
        other => panic!("not sent as stored: {other:?}"),
    }
    let no_location = ConnectionSettings::from_json(json!({"include_location_information": false}))
        .expect("valid settings");
    let mut expected = event.clone();
    expected["data"]
        .as_object_mut()
        .expect("data")
        .remove("location");
    match outbound_event(&no_location, event, Some(stored), &[]) {
        OutboundEvent::Changed(changed) => assert_eq!(changed, expected),
        other => panic!("location not removed: {other:?}"),
    }
    let mut expected = event.clone();
    expected["data"]["custom_attributes"]
        .as_object_mut()
        .expect("attributes")
        .remove("page");
    match outbound_event(&keep, event, Some(stored), &["page".to_owned()]) {
        OutboundEvent::Changed(changed) => assert_eq!(changed, expected),
        other => panic!("attribute not removed: {other:?}"),
    }
}

/// The filter sends an unchanged event as its stored text: stored another way than serde_json
/// writes (spaced out, a number as `1e5`, which serde_json writes `100000.0`), the request
/// carries that text as it is.
#[test]
fn the_request_carries_an_unchanged_events_stored_text() {
    let event = r#"{ "event_type" : "custom_event", "data" : { "event_name" : "x",
        "custom_event_type" : "other", "custom_attributes" : { "n" : 1e5 } } }"#;
    let body = format!(r#"{{ "mpid" : 5, "events" : [ {event} ] }}"#);
    for settings in [
        ConnectionSettings::default(),
        ConnectionSettings::from_json(json!({"send_as_batch": true})).expect("valid settings"),
    ] {
        let cut = plan_stored(
            &settings,
            &webhook(),
            BatchId::new(1),
            &read(body.as_bytes()),
            None,
        );
        assert_eq!(cut.payloads.len(), 1);
        let sent = std::str::from_utf8(&cut.payloads[0].body).expect("utf-8");
        assert!(
            sent.starts_with(&format!("{{\"events\":[{event}]")),
            "{sent}"
        );
    }
}

/// A body that is not the document's own serialisation still gives the same JSON: its events'
/// bytes go out as they are (here with their spacing), which reads as the same events.
#[test]
fn a_body_written_another_way_gives_json_equal_requests() {
    let (document, _) = stored(sdk_batch());
    let pretty = serde_json::to_vec_pretty(&document).expect("serialisable");
    for settings in settings_cases() {
        let written = plan(&settings, &webhook(), BatchId::new(3), &document, None);
        let cut = plan_stored(&settings, &webhook(), BatchId::new(3), &read(&pretty), None);
        assert_eq!(written.payloads.len(), cut.payloads.len());
        for (a, b) in written.payloads.iter().zip(&cut.payloads) {
            let a: Value = serde_json::from_slice(&a.body).expect("json");
            let b: Value = serde_json::from_slice(&b.body).expect("json");
            assert_eq!(a, b);
        }
    }
}

#[test]
fn a_body_without_an_events_array_is_written_from_the_document() {
    assert!(
        read(br#"{"request_type":"alias"}"#)
            .stored_events()
            .is_none()
    );
    assert!(read(br#"{"events":null}"#).stored_events().is_none());
    let (document, body) = stored(json!({"mpid": 5, "user_attributes": {"a": 1}}));
    let settings = ConnectionSettings::default();
    let written = plan(&settings, &webhook(), BatchId::new(1), &document, None);
    let cut = plan_stored(&settings, &webhook(), BatchId::new(1), &read(&body), None);
    assert_eq!(written, cut);
    assert_eq!(cut.payloads.len(), 1);
}

/// The base as the filter built it before it borrowed: the whole document but `events` cloned
/// into a map, then stripped (the reference the borrowed base is held to).
fn cloned_base(
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: BatchId,
    document: &Value,
) -> Vec<u8> {
    let mut base: Map<String, Value> = document
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.as_str() != "events")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    base.insert("batch_id".into(), json!(batch_id));
    if !settings.include_metadata {
        for key in ["application_info", "device_info", "source_info"] {
            base.remove(key);
        }
    }
    for path in &settings.metadata_field_exclusions {
        remove_inner_path(&mut base, path);
    }
    if !settings.include_event_batch_location
        && let Some(Value::Object(context)) = base.get_mut("context")
    {
        context.remove("location");
    }
    if !webhook.include_mp_deviceid {
        base.remove("mp_deviceid");
    }
    if let Some(unique_id) = settings.unique_id.as_deref().filter(|u| !u.is_empty()) {
        base.insert("unique_id".into(), json!(unique_id));
    }
    // The Data Filter's stripping, on the cloned map through the borrowed form.
    let mut borrowed: Base<'_> = base
        .iter()
        .map(|(k, v)| (k.as_str(), Cow::Borrowed(v)))
        .collect();
    strip_user_data(&settings.data_filter, &mut borrowed);
    serde_json::to_vec(&borrowed).expect("serialisable")
}

#[test]
fn the_borrowed_base_is_the_cloned_one() {
    for (name, document, _) in samples() {
        for (k, settings) in settings_cases().iter().enumerate() {
            let (base, _) = outbound_base(settings, &webhook(), BatchId::new(4), &document);
            let expected = cloned_base(settings, &webhook(), BatchId::new(4), &document);
            assert_eq!(to_json(&base), expected, "{name}, settings case {k}");
        }
    }
}

fn arb_settings() -> impl Strategy<Value = ConnectionSettings> {
    (any::<[bool; 9]>(), proptest::option::of("[a-z]{1,4}")).prop_map(|(b, unique_id)| {
        ConnectionSettings {
            status: if b[0] {
                ConnectionStatus::Active
            } else {
                ConnectionStatus::Inactive
            },
            send_as_batch: b[1],
            send_custom_events: b[2],
            send_screen_views: b[3],
            include_metadata: b[4],
            include_location_information: b[5],
            include_event_batch_location: b[6],
            send_batches_without_events: b[7],
            metadata_field_exclusions: if b[8] {
                vec!["device_info.device".into(), "ip".into()]
            } else {
                Vec::new()
            },
            unique_id,
            ..ConnectionSettings::default()
        }
    })
}

fn arb_event() -> impl Strategy<Value = Value> {
    (
        proptest::sample::select(EventType::ALL.map(EventType::as_str).to_vec()),
        any::<bool>(),
        "\\PC{0,6}",
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        any::<i64>(),
    )
        .prop_map(|(event_type, located, text, float, int)| {
            let mut data = json!({"custom_attributes": {"t": text, "f": float, "i": int}});
            if located {
                data["location"] = json!({"latitude": float, "longitude": 2});
            }
            json!({"event_type": event_type, "data": data, "n": text})
        })
}

proptest! {
    /// Whatever the settings and events, the bodies cut from the stored bytes are the bodies
    /// written from the document.
    #[test]
    fn stored_and_written_bodies_agree(
        settings in arb_settings(),
        events in proptest::collection::vec(arb_event(), 0..8),
    ) {
        let document = json!({
            "events": events, "ip": "10.0.0.1", "mp_deviceid": "d",
            "device_info": {"device": "Jo's phone", "platform": "iOS"},
            "context": {"location": {"latitude": 1.0, "longitude": 2.0}},
        });
        let body = serde_json::to_vec(&document).expect("serialisable");
        let document: Value = serde_json::from_slice(&body).expect("readable");
        let written = plan(&settings, &webhook(), BatchId::new(2), &document, None);
        let cut = plan_stored(&settings, &webhook(), BatchId::new(2), &read(&body), None);
        prop_assert_eq!(&written, &cut);
        if crate::pipeline::filter::outlines_suffice(&settings) {
            let outlines = StoredBatch::read_outlines(&body).expect("readable");
            let outlined = plan_stored(&settings, &webhook(), BatchId::new(2), &outlines, None);
            prop_assert_eq!(written, outlined);
        }
    }
}
