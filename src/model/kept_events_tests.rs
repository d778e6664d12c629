//! An event is kept as sent exactly when normalising would only add its ids, and stored either
//! way it reads back as the event normalised as a `Value`.

use serde_json::json;

use super::*;
use crate::model::batch::{Channel, normalize, normalize_split};
use crate::model::json_walk::Cursor;
use crate::model::kept_members::split_batch;

const NOW_MS: i64 = 1_700_000_000_000;

/// The event `text` (alone) read as the walk of a batch reads it, and kept if it is to be.
fn kept(text: &str) -> Option<StoredEvent> {
    let mut cursor = Cursor::new(text);
    let (read, sent) = cursor.value::<ScannedAt<'_, 3>>()?;
    assert!(cursor.at_end(), "one event: {text}");
    let scanned = read.scanned(sent)?;
    Some(keep(sent, scanned, NOW_MS, || {
        "00000000-0000-4000-8000-000000000001".to_owned()
    }))
}

#[test]
fn an_event_needing_only_its_ids_is_kept_as_sent_with_them_first_in_its_data() {
    let text = r#"{"data": {"event_name":"tap", "custom_event_type":"navigation",
        "custom_attributes":{"b":1,"a":"x"}}, "event_type":"custom_event"}"#;
    let event = kept(text).expect("kept");
    let expected = r#"{"data": {"message_id":"00000000-0000-4000-8000-000000000001","timestamp_unixtime_ms":1700000000000,"event_name":"tap", "custom_event_type":"navigation",
        "custom_attributes":{"b":1,"a":"x"}}, "event_type":"custom_event"}"#;
    assert_eq!(event.text, expected);
    assert_eq!(
        event.summary,
        EventSummary {
            event_type: Some(EventType::CustomEvent),
            name: Some("tap".into()),
            attributes: vec![
                ("a".into(), ValueType::String),
                ("b".into(), ValueType::Number)
            ],
        }
    );
    // With both ids given, the text is the event as sent.
    let given =
        r#"{"event_type":"session_start","data":{"timestamp_unixtime_ms":5,"message_id":"m"}}"#;
    assert_eq!(kept(given).expect("kept").text, given);
    let spaced = "{ \"event_type\" : \"screen_view\" , \"data\" : {\n \"a\" : [ 1 ] } }";
    let read: Value = serde_json::from_str(&kept(spaced).expect("kept").text).expect("JSON");
    assert_eq!(read["data"]["a"], json!([1]));
    assert_eq!(read["data"]["timestamp_unixtime_ms"], json!(NOW_MS));
}

#[test]
fn an_event_normalising_changes_or_refuses_is_not_kept() {
    for text in [
        // corrected: a timestamp as a string, a name past the limit, `null` ids, no data
        r#"{"event_type":"custom_event","data":{"event_name":"a","custom_event_type":"other","timestamp_unixtime_ms":"5"}}"#,
        &format!(
            r#"{{"event_type":"custom_event","data":{{"event_name":"{}","custom_event_type":"other"}}}}"#,
            "n".repeat(MAX_EVENT_NAME_CHARS + 1)
        ),
        r#"{"event_type":"screen_view","data":{"message_id":null}}"#,
        r#"{"event_type":"screen_view","data":{"timestamp_unixtime_ms":null}}"#,
        r#"{"event_type":"screen_view"}"#,
        // read and possibly rewritten: a numbered promotion action, a location
        r#"{"event_type":"commerce_event","data":{"promotion_action":{"action":1}}}"#,
        r#"{"event_type":"commerce_event","data":{"product_action":{"action":2}}}"#,
        // commerce members of a type normalising refuses, an action given twice
        r#"{"event_type":"commerce_event","data":{"product_action":[]}}"#,
        r#"{"event_type":"commerce_event","data":{"promotion_action":"view"}}"#,
        r#"{"event_type":"commerce_event","data":{"shopping_cart":[]}}"#,
        r#"{"event_type":"commerce_event","data":{"product_impressions":{}}}"#,
        r#"{"event_type":"commerce_event","data":{"product_action":{"action":"a","action":"b"}}}"#,
        r#"{"event_type":"screen_view","data":{"location":{"latitude":1,"longitude":2}}}"#,
        // refused: an unknown type, a custom event without its name, attributes not an object
        r#"{"event_type":"nope","data":{}}"#,
        r#"{"event_type":"custom_event","data":{"custom_event_type":"other"}}"#,
        r#"{"event_type":"screen_view","data":{"custom_attributes":[1]}}"#,
        r#"{"event_type":"screen_view","data":{"source_message_id":7}}"#,
        r#"{"event_type":"session_end","data":{"session_duration_ms":"7"}}"#,
        // repeated members normalising reads: which one counts is the `Value` path's to say
        r#"{"event_type":"screen_view","event_type":"screen_view","data":{}}"#,
        r#"{"event_type":"screen_view","data":{"screen_name":"a","screen_name":"b"}}"#,
        r#"{"event_type":"screen_view","data":{"custom_attributes":{"a":1,"a":2}}}"#,
        // repeated members it does not read: receivers differ on which one counts
        r#"{"event_type":"screen_view","data":{"plan":"free","plan":"pro"}}"#,
        r#"{"event_type":"screen_view","extra":1,"extra":2,"data":{"a":1}}"#,
        // nowhere to splice the ids: an empty `data`, an escaped first key
        r#"{"event_type":"session_start","data":{ }}"#,
        r#"{"event_type":"session_start","data":{"\u0061":1}}"#,
        // numbers serde_json writes back longer than they came, serde_json's reserved key,
        // an unreadable string
        r#"{"event_type":"screen_view","data":{"a":{"b":[1E2]}}}"#,
        r#"{"event_type":"screen_view","data":{"price":1.5,"a":-0}}"#,
        r#"{"event_type":"screen_view","data":{"a":18446744073709551616}}"#,
        r#"{"event_type":"screen_view","data":{"a":{"$serde_json::private::RawValue":1}}}"#,
        r#"{"event_type":"screen_view","data":{"a":"\ud800"}}"#,
        // not an object
        r#"[1]"#,
    ] {
        assert_eq!(kept(text), None, "{text}");
    }
}

/// The stored body of `body` split (events kept where they may be) and of `body` parsed whole
/// (every event a `Value`), parsed back with the `message_id`s drawn at random blanked.
fn stored_both_ways(body: &str) -> (Value, Value) {
    let channel = Channel::ServerToServer;
    let (members, kept) = split_batch(body.as_bytes()).expect("splits");
    let split = normalize_split(Value::Object(members), kept, channel, NOW_MS, "").expect("valid");
    let whole = normalize(
        serde_json::from_str(body).expect("JSON"),
        channel,
        NOW_MS,
        "",
    )
    .expect("valid");
    let blanked = |stored: Vec<u8>| {
        let mut stored: Value = serde_json::from_slice(&stored).expect("reads back");
        stored["message_id"] = Value::Null;
        for event in stored["events"].as_array_mut().into_iter().flatten() {
            if event["data"]["message_id"].is_string() {
                event["data"]["message_id"] = Value::Null;
            }
        }
        stored
    };
    (
        blanked(split.stored_body().expect("writes")),
        blanked(whole.stored_body().expect("writes")),
    )
}

#[test]
fn kept_and_parsed_events_store_the_same_batch() {
    for body in [
        r#"{"events":[
            {"event_type":"custom_event","data":{"event_name":"tap","custom_event_type":"navigation","custom_attributes":{"k":[1,{"x":null}]},"session_uuid":"s"},"extra":true},
            {"event_type":"commerce_event","data":{"product_action":{"action":"purchase","products":[{"price":89.5}]}}},
            {"event_type":"screen_view","data":{"screen_name":"Home","price":1.5}},
            {"event_type":"session_start","data":{"timestamp_unixtime_ms":"12","message_id":"given"}},
            {"event_type":"screen_view","data":{"unread":1,"unread":2}}
        ],"mpid":"7","user_attributes":{"a":1}}"#,
        r#"{"events":[]}"#,
        r#"{"events":null}"#,
        r#"{"mpid":1}"#,
    ] {
        let (split, whole) = stored_both_ways(body);
        assert_eq!(split, whole, "{body}");
    }
}

#[test]
fn a_kept_event_is_stored_as_sent_and_its_batch_counts_its_points() {
    let event = r#"{"event_type":"screen_view","data":{"timestamp_unixtime_ms":5,"message_id":"m","screen_name":"Home","custom_attributes":{"z":1,"a":true}}}"#;
    let body = format!(r#"{{"events":[{event}],"mpid":1}}"#);
    let (members, kept) = split_batch(body.as_bytes()).expect("splits");
    let batch =
        normalize_split(Value::Object(members), kept, Channel::Native, NOW_MS, "").expect("valid");
    let stored = String::from_utf8(batch.stored_body().expect("writes")).expect("UTF-8");
    assert!(stored.contains(event), "{stored}");
    assert_eq!(batch.event_count, 1);
    let summary = &batch.events[0].summary;
    let parsed: Value = serde_json::from_str(event).expect("JSON");
    assert_eq!(summary, &EventSummary::of(&parsed));
}

#[test]
fn floats_are_kept_when_serde_json_writes_each_back_spelt_as_sent() {
    for (number, kept_as_sent) in [
        ("89.5", true),
        ("-0.25", true),
        ("-0.0", true),
        ("1e-7", true),
        ("1e+300", true),
        ("12345678901234567890", true),
        ("1.50", false),
        ("1.0E+300", false),
        ("1e300", false),
        ("1E2", false),
        ("1e5", false),
        ("0.1e1", false),
        ("-0", false),
        ("18446744073709551616", false),
        ("123456789012345678901234567890", false),
        ("0.10000000000000000555", false),
    ] {
        let text = format!(
            r#"{{"event_type":"screen_view","data":{{"s":"1E2 \" 1e5","n":[{number}],"k":7}}}}"#
        );
        assert_eq!(kept(&text).is_some(), kept_as_sent, "{text}");
        // Kept or not, the event reads back as the `Value` normalising gives.
        let body = format!(r#"{{"events":[{text}]}}"#);
        let (split, whole) = stored_both_ways(&body);
        assert_eq!(split, whole, "{body}");
    }
}

#[test]
fn a_commerce_event_is_kept_and_named_by_its_product_action_else_its_promotion_action() {
    for (data, name) in [
        (
            r#"{"product_action":{"action":"purchase","products":[{"price":89.5}]}}"#,
            Some("purchase"),
        ),
        (
            r#"{"product_action":{"products":[]},"promotion_action":{"action":"view"}}"#,
            Some("view"),
        ),
        (
            r#"{"product_action":null,"promotion_action":{"action":"click"}}"#,
            Some("click"),
        ),
        (
            r#"{"product_action":{"action":null},"promotion_action":{"action":"view"}}"#,
            None,
        ),
        (
            r#"{"shopping_cart":{},"product_impressions":[],"currency_code":"USD"}"#,
            None,
        ),
        (
            r#"{"product_action":{"action":"add_to_cart"},"shopping_cart":null,"product_impressions":null}"#,
            Some("add_to_cart"),
        ),
    ] {
        let text = format!(r#"{{"event_type":"commerce_event","data":{data}}}"#);
        let event = kept(&text).unwrap_or_else(|| panic!("not kept: {text}"));
        assert_eq!(event.summary.name.as_deref(), name, "{text}");
        let parsed: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(event.summary, EventSummary::of(&parsed), "{text}");
    }
}
