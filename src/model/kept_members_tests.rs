//! Splitting a batch keeps exactly what a `Value` parse keeps, refuses exactly what it refuses,
//! and stores what the batch parsed whole stored.

use serde_json::json;

use super::*;
use crate::model::batch::{Channel, NormalizedBatch, normalize, normalize_split};

/// The split batch written out again, parsed as a `Value`.
fn reassembled((members, kept): &(Map<String, Value>, KeptMembers)) -> Value {
    let document = Value::Object(members.clone());
    let text = StoredForm {
        document: &document,
        kept,
        events: None,
    }
    .to_vec()
    .expect("serialise");
    serde_json::from_slice(&text).expect("the stored form parses")
}

/// Whether `body` splits exactly when a `Value` parse gives an object, into the same object.
fn assert_splits_like_a_value(body: &[u8]) {
    let whole = serde_json::from_slice::<Value>(body);
    let shown = String::from_utf8_lossy(body);
    match split_batch(body) {
        Some(split) => assert_eq!(reassembled(&split), whole.expect("parses"), "{shown}"),
        None => assert!(!matches!(whole, Ok(Value::Object(_))), "{shown}: {whole:?}"),
    }
    let whole = serde_json::from_slice::<Value>(body);
    let objects = |items: &Vec<Value>| items.iter().all(Value::is_object);
    match split_bulk(body) {
        Some(batches) => {
            let batches: Vec<Value> = batches.iter().map(reassembled).collect();
            assert_eq!(Value::Array(batches), whole.expect("parses"), "{shown}");
        }
        None => assert!(
            !matches!(&whole, Ok(Value::Array(items)) if objects(items)),
            "{shown}: {whole:?}"
        ),
    }
}

#[test]
fn kept_members_are_the_members_parsed_whole() {
    let bodies: &[&str] = &[
        r#"{"device_info":{"a":1},"events":[]}"#,
        // Whitespace and escapes stay in the text; they parse the same.
        " { \"device_info\" : { \"a\" : \"\\u00e9\\n\\\"\" ,\"b\":[1, 2.5e3, -0, null, true, {}]} ,\n\"mpid\":7 } ",
        // A later member of the same name wins, kept or not.
        r#"{"device_info":{"a":1},"device_info":{"b":2},"mpid":1,"mpid":2}"#,
        r#"{"context":null,"application_info":"not an object","integration_attributes":[1]}"#,
        r#"{"zzz":1,"aaa":2,"device_info":{},"context":{"x":{"y":[[]]}},"ip":"1.2.3.4"}"#,
        r#"{"device_info":{"big":18446744073709551616,"small":-9223372036854775809,"f":1e-320}}"#,
        r#"{"device_info":{"pair":"\ud83d\ude00","nul":"\u0000"}}"#,
        "{}",
    ];
    for body in bodies {
        assert_splits_like_a_value(body.as_bytes());
        assert!(split_batch(body.as_bytes()).is_some(), "{body}");
        let bulk = format!("[{body},{body}]");
        assert_splits_like_a_value(bulk.as_bytes());
        assert!(split_bulk(bulk.as_bytes()).is_some(), "{bulk}");
    }
}

/// A member kept as text must parse wherever the stored batch is read, so whatever a `Value`
/// parse refuses is not split (the caller then parses the body whole, for its error).
#[test]
fn what_a_value_parse_refuses_is_not_split() {
    let bodies: &[&[u8]] = &[
        br#"{"device_info":{"a":"\ud800"}}"#,
        br#"{"device_info":{"a":"\udc00x"}}"#,
        br#"{"device_info":{"\ud800":1}}"#,
        br#"{"device_info":{"a":1e400}}"#,
        br#"{"device_info":{"a":-1e309}}"#,
        b"{\"device_info\":{\"a\":\"\xff\"}}",
        br#"{"device_info":{"a":1}} x"#,
        br#"{"device_info":{"a":01}}"#,
        br#"{"device_info":{"a":1,}}"#,
        br#"{"device_info":{"a":"tab	"}}"#,
        br#"[{"device_info":{"a":1}}]"#,
        br#"{"device_info":{"a":1},"events":[1e999]}"#,
    ];
    for body in bodies {
        assert_splits_like_a_value(body);
        assert!(
            split_batch(body).is_none(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    assert!(split_bulk(br#"[{"device_info":{"a":"\ud800"}}]"#).is_none());
    assert!(split_bulk(br#"[{"device_info":{}}, 1]"#).is_none());
    assert!(split_bulk(br#"{"device_info":{}}"#).is_none());
}

/// serde_json refuses the 128th level of nesting, counted from the body's root: a kept member
/// is split up to that level and no further, in a single batch and in a bulk request alike.
#[test]
fn a_kept_member_nests_as_deep_as_a_value_parse_allows() {
    let member = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let mut split = [0; 2];
    for levels in 120..130 {
        let single = format!(r#"{{"device_info":{}}}"#, member(levels));
        assert_splits_like_a_value(single.as_bytes());
        split[0] += usize::from(split_batch(single.as_bytes()).is_some());
        let bulk = format!(r#"[{{"context":{}}}]"#, member(levels));
        assert_splits_like_a_value(bulk.as_bytes());
        split[1] += usize::from(split_bulk(bulk.as_bytes()).is_some());
    }
    // 126 levels in a single batch's member (127 with the batch's object), 125 in a bulk's.
    assert_eq!(split, [7, 6]);
}

/// A member read on its own from the walk is as deep as its text, also where a `Value` read
/// from it is shallower (a key given twice keeps only its last value there).
#[test]
fn a_repeated_key_does_not_hide_a_branch_nested_too_deep() {
    let deep = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    for levels in [125, 126] {
        let single = format!(r#"{{"user_attributes":{{"a":{},"a":1}}}}"#, deep(levels));
        assert_splits_like_a_value(single.as_bytes());
        let bulk = format!(r#"[{{"user_attributes":{{"a":{},"a":1}}}}]"#, deep(levels));
        assert_splits_like_a_value(bulk.as_bytes());
        let events = format!(r#"{{"events":{{"a":{},"a":1}}}}"#, deep(levels));
        assert_splits_like_a_value(events.as_bytes());
    }
}

#[test]
fn an_event_nests_as_deep_as_a_value_parse_allows() {
    // Deep in an attribute's value: the event is read from the walk on its own, where its depth
    // counts from the level it stands at (the third, the fourth in a bulk body).
    let event = |levels: usize| {
        format!(
            r#"{{"event_type":"screen_view","data":{{"screen_name":"s","custom_attributes":{{"a":{}{}}}}}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    };
    let mut split = [0; 2];
    for levels in 118..128 {
        let single = format!(r#"{{"events":[{}]}}"#, event(levels));
        assert_splits_like_a_value(single.as_bytes());
        split[0] += usize::from(split_batch(single.as_bytes()).is_some());
        let bulk = format!(r#"[{{"events":[{}]}}]"#, event(levels));
        assert_splits_like_a_value(bulk.as_bytes());
        split[1] += usize::from(split_bulk(bulk.as_bytes()).is_some());
    }
    // The attribute's array is the sixth level of a single batch (the seventh of a bulk body).
    assert_eq!(split, [5, 4]);
}

/// What the two paths make of `body`: parsed whole and normalised, or split and normalised.
fn both_ways(
    body: &[u8],
) -> (
    Result<NormalizedBatch, String>,
    Result<NormalizedBatch, String>,
) {
    let channel = Channel::ServerToServer;
    let whole: Value = serde_json::from_slice(body).expect("valid JSON");
    let old = normalize(whole, channel, 1_700_000_000_000, "").map_err(|e| e.message);
    let (members, kept) = split_batch(body).expect("an object splits");
    let new = normalize_split(Value::Object(members), kept, channel, 1_700_000_000_000, "")
        .map_err(|e| e.message);
    (old, new)
}

/// A stored body parsed back, its `message_id`s (drawn at random by normalisation) blanked.
fn stored(batch: &NormalizedBatch) -> Value {
    let mut stored: Value = serde_json::from_slice(&batch.stored_body().unwrap()).unwrap();
    stored["message_id"] = Value::Null;
    for event in stored["events"].as_array_mut().into_iter().flatten() {
        event["data"]["message_id"] = Value::Null;
    }
    stored
}

/// The spec's sample batches and the load generator's SDK batch: the stored body, parsed, is
/// what parsing the batch whole stored, and the kept members are exactly the ones sent.
#[test]
fn the_sample_batches_store_what_parsing_them_whole_stored() {
    for file in [
        "mparticle.inbound.eventsapi.sample.json",
        "api-evangelist.mparticle-eventsapi-sample.json",
        "boson-load.sdk-batch.json",
    ] {
        let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
        let body = std::fs::read(&path).unwrap();
        let (old, new) = both_ways(&body);
        let (old, new) = (old.unwrap(), new.unwrap());
        assert_eq!(stored(&new), stored(&old), "{file}");
        assert_eq!(new.event_count, old.event_count);
        assert_eq!(new.source_request_id, old.source_request_id);
        let sent: Value = serde_json::from_slice(&body).unwrap();
        for key in KEPT_AS_SENT {
            assert_eq!(new.document.get(key), None, "{file}: {key}");
            let kept = new
                .kept
                .get(key)
                .map(|text| serde_json::from_str(text).unwrap());
            assert_eq!(kept.as_ref(), sent.get(key), "{file}: {key}");
        }
    }
}

/// A kept member that is not an object is refused as before, and first where it was first.
#[test]
fn a_kept_member_is_checked_where_it_was() {
    let cases = [
        json!({"device_info": "phone"}),
        json!({"application_info": [1], "context": 2}),
        json!({"consent_state": 1, "integration_attributes": 1}),
        json!({"integration_attributes": 1, "ip": 5}),
        json!({"mpid": "x", "device_info": 1}),
        json!({"device_info": null, "context": {}, "events": []}),
    ];
    for case in cases {
        let (old, new) = both_ways(case.to_string().as_bytes());
        match (old, new) {
            (Err(old), Err(new)) => assert_eq!(new, old, "{case}"),
            (Ok(old), Ok(new)) => assert_eq!(stored(&new), stored(&old), "{case}"),
            (old, new) => panic!("{case}: {old:?} against {new:?}"),
        }
    }
}

/// The split batch written out, as stored.
fn stored_text((members, kept): &(Map<String, Value>, KeptMembers)) -> Vec<u8> {
    let document = Value::Object(members.clone());
    StoredForm {
        document: &document,
        kept,
        events: None,
    }
    .to_vec()
    .expect("serialise")
}

/// Delivery cuts send-as-batch requests by stored sizes, on the rule that a request is never
/// longer than what was stored: so no member may be stored shorter than serde_json writes it
/// back. Floats are (`1e15` comes back as `1000000000000000.0`), so a member holding one is
/// parsed, not kept.
#[test]
fn nothing_is_stored_shorter_than_it_is_written_back() {
    let bodies: &[&str] = &[
        r#"{"device_info":{"a":1e15,"b":[1E2,-0,1e-05]},"events":[]}"#,
        r#"{"context":{"big":18446744073709551616,"n":[1,2,{"f":0.5}]}}"#,
        r#"{"application_info":{"i":-9223372036854775808,"u":18446744073709551615}}"#,
        " { \"device_info\" : { \"a\" : \"\\u00e9\\/\" , \"a\" : 2 } } ",
    ];
    for body in bodies {
        let split = split_batch(body.as_bytes()).expect("splits");
        let written_back: Value = serde_json::from_slice(&stored_text(&split)).expect("parses");
        let written_back = serde_json::to_vec(&written_back).expect("serialise");
        assert!(
            stored_text(&split).len() >= written_back.len(),
            "{body}: stored {} bytes, written back {}",
            stored_text(&split).len(),
            written_back.len()
        );
    }
}

#[test]
fn a_member_holding_a_number_written_back_longer_is_parsed_and_others_kept() {
    let body = br#"{"device_info":{"a":1E2},"context":{"a":[1,-2.5]},"device_info":{"a":1e5}}"#;
    let (members, kept) = split_batch(body).expect("splits");
    assert_eq!(members.get("device_info"), Some(&json!({"a": 100000.0})));
    assert_eq!(kept.get("device_info"), None);
    assert_eq!(kept.get("context"), Some(r#"{"a":[1,-2.5]}"#));
    // A later member of the same name replaces an earlier one, parsed or kept.
    let body = br#"{"device_info":{"a":1E2},"device_info":{"a":1.5}}"#;
    let (members, kept) = split_batch(body).expect("splits");
    assert_eq!(members.get("device_info"), None);
    assert_eq!(kept.get("device_info"), Some(r#"{"a":1.5}"#));
    let body = br#"{"device_info":{"a":2},"device_info":{"a":-0}}"#;
    let (members, kept) = split_batch(body).expect("splits");
    assert_eq!(members.get("device_info"), Some(&json!({"a": -0.0})));
    assert_eq!(kept.get("device_info"), None);
}

/// A kept member is stored as its text, but the stored batch is read back into `Value`s and
/// written out again with sorted keys, where serde_json's reserved key would come first and
/// change what the object reads as. So a member holding that key is not kept as text, and the
/// batch, parsed whole, is refused for it (`batch::normalize` names the field).
#[test]
fn a_kept_member_holding_serde_jsons_reserved_key_is_not_kept_and_is_refused() {
    let body = br#"{"device_info":{"a":1,"$serde_json::private::RawValue":"x"}}"#;
    assert!(split_batch(body).is_none());
    let whole: Value = serde_json::from_slice(body).expect("a Value parse takes it");
    let refused = normalize(whole, Channel::Native, 1, "").expect_err("refused");
    assert_eq!(refused.field, "device_info");
    assert!(split_bulk(&[b"[", &body[..], b"]"].concat()).is_none());
}
