//! Validation and normalisation of the inbound batch, by example.

use super::*;

fn ok(v: Value) -> NormalizedBatch {
    normalize(v, Channel::ServerToServer, 1_700_000_000_000, "").unwrap()
}

fn err(v: Value) -> BatchError {
    normalize(v, Channel::ServerToServer, 1, "").unwrap_err()
}

#[test]
fn identities_become_an_array_and_extra_keys_survive() {
    let b = ok(json!({
        "user_identities": {"customer_id": "c1", "email": null},
        "schema_version": 2,
        "something_new": {"kept": true},
        "events": [{"event_type": "custom_event", "data": {"event_name": "x", "custom_event_type": "other", "extra": 1}}]
    }));
    let doc = &b.whole_document();
    assert_eq!(
        doc["user_identities"],
        json!([{"identity_type": "customer_id", "identity": "c1", "timestamp_unixtime_ms": 1_700_000_000_000i64}])
    );
    assert_eq!(doc["something_new"], json!({"kept": true}));
    assert_eq!(doc["events"][0]["data"]["extra"], json!(1));
    assert_eq!(doc["schema_version"], json!(2));
    assert_eq!(doc["source_info"]["channel"], json!("server_to_server"));
    assert_eq!(b.event_count, 1);
}

/// The `user_identities` keys a batch accepts: the Events API's types, and `customerid` as
/// the Python SDK spells `customer_id`; IDSync's other SDK spellings are not batch keys.
#[test]
fn identity_keys_are_the_events_api_types() {
    let types = [
        "customer_id",
        "email",
        "other",
        "other_id_2",
        "other_id_3",
        "other_id_4",
        "other_id_5",
        "other_id_6",
        "other_id_7",
        "other_id_8",
        "other_id_9",
        "other_id_10",
        "facebook",
        "twitter",
        "google",
        "microsoft",
        "yahoo",
        "alias",
        "facebook_custom_audience_id",
        "mobile_number",
        "phone_number_2",
        "phone_number_3",
    ];
    for kind in types.into_iter().chain(["customerid"]) {
        let b = ok(json!({"user_identities": {kind: "v"}}));
        let expected = if kind == "customerid" {
            "customer_id"
        } else {
            kind
        };
        assert_eq!(
            b.document["user_identities"][0]["identity_type"],
            json!(expected),
            "{kind}"
        );
    }
    for kind in [
        "other2",
        "email_sha256",
        "facebookcustomaudienceid",
        "ios_idfv",
        "Email",
    ] {
        let e = err(json!({"user_identities": {kind: "v"}}));
        assert_eq!(e.field, format!("user_identities.{kind}"));
        assert!(e.message.contains("not a known identity type"), "{kind}");
    }
    // A wrong value names the key as the Events API spells it.
    let e = err(json!({"user_identities": {"customerid": 1}}));
    assert_eq!(e.field, "user_identities.customer_id");
    assert!(e.message.contains("must be a string"));
}

#[test]
fn missing_event_type_names_the_event() {
    let e = err(json!({"events": [{"event_type": "screen_view", "data": {}}, {"data": {}}]}));
    assert_eq!(e.field, "events[1].event_type");
    assert!(e.message.contains("missing or empty"));
}

#[test]
fn wrong_types_are_named() {
    assert_eq!(err(json!({"events": {}})).field, "events");
    assert_eq!(err(json!({"mpid": "abc"})).field, "mpid");
    assert_eq!(
        err(json!({"user_identities": {"nope": "x"}})).field,
        "user_identities.nope"
    );
    assert_eq!(
        err(json!({"events": [{"event_type": "custom_event", "data": {"event_name": "a"}}]})).field,
        "events[0].data.custom_event_type"
    );
    assert_eq!(err(json!([1])).field, "batch");
}

#[test]
fn source_request_id_is_lifted_out_and_mpid_strings_become_numbers() {
    let b = ok(json!({"source_request_id": "r1", "mpid": "42"}));
    assert_eq!(b.source_request_id.as_deref(), Some("r1"));
    assert!(b.document.get("source_request_id").is_none());
    assert_eq!(b.document["mpid"], json!(42));
}

#[test]
fn null_timestamps_get_server_time_and_odd_keys_are_handled() {
    let b = ok(json!({
        "schema_version": "2",
        "unique_id": "from-client",
        "events": [{"event_type": "screen_view", "data": {"timestamp_unixtime_ms": null}}]
    }));
    assert_eq!(
        b.whole_document()["events"][0]["data"]["timestamp_unixtime_ms"],
        json!(1_700_000_000_000i64)
    );
    assert_eq!(b.document["schema_version"], json!(2));
    assert!(b.document.get("unique_id").is_none());
    assert_eq!(
        err(json!({"source_request_id": "a\u{0}b"})).field,
        "source_request_id"
    );
}

/// Found by fuzzing: serde_json's default float parsing can be one unit in the last place
/// off, so a client's number reached outputs changed, and changed again at each parse of the
/// stored document. Rust's own parser is exact, so it says what was sent.
#[test]
fn client_floats_are_stored_exactly_as_sent() {
    for sent in [
        "4.5798353663572674e-176",
        "0.1",
        "1.7976931348623157e308",
        "5e-324",
    ] {
        let body = format!(r#"{{"user_attributes": {{"price": {sent}}}}}"#);
        let stored = serde_json::to_vec(&ok(serde_json::from_str(&body).unwrap()).document);
        let read: Value = serde_json::from_slice(&stored.unwrap()).unwrap();
        let price = read["user_attributes"]["price"].as_f64();
        assert_eq!(price, sent.parse::<f64>().ok(), "{sent}");
    }
}

#[test]
fn a_nul_character_in_an_identity_or_device_id_is_refused_by_field() {
    let error = err(json!({"user_identities": {"email": "a\u{0}b"}}));
    assert_eq!(error.field, "user_identities.email");
    assert_eq!(err(json!({"mp_deviceid": "\u{0}"})).field, "mp_deviceid");
    // Elsewhere a NUL is kept: the stored document escapes it.
    ok(
        json!({"events": [{"event_type": "custom_event", "data": {"event_name": "e",
        "custom_event_type": "other", "custom_attributes": {"a\u{0}": "\u{0}"}}}]}),
    );
}

#[test]
fn a_nul_character_bound_for_the_profile_is_refused_by_field() {
    // The profile keeps user attributes and consent as JSON, which PostgreSQL cannot hold
    // with a NUL: the commit would fail (503) for a request that can never succeed.
    let field = |batch: Value| err(batch).field;
    assert_eq!(
        field(json!({"user_attributes": {"a": "x\u{0}"}})),
        "user_attributes.a"
    );
    assert_eq!(
        field(json!({"user_attributes": {"list": ["ok", "\u{0}"]}})),
        "user_attributes.list"
    );
    assert_eq!(
        field(json!({"user_attributes": {"a\u{0}b": 1}})),
        "user_attributes"
    );
    assert_eq!(
        field(json!({"deleted_user_attributes": ["a\u{0}"]})),
        "deleted_user_attributes"
    );
    assert_eq!(
        field(json!({"consent_state": {"gdpr": {"mark\u{0}eting": {"consented": true}}}})),
        "consent_state.gdpr"
    );
    assert_eq!(
        field(json!({"consent_state": {"ccpa": {"data_sale_opt_out":
            {"consented": true, "document": "\u{0}"}}}})),
        "consent_state.ccpa.data_sale_opt_out"
    );
    let prefixed = normalize(
        json!({"user_attributes": {"a": "\u{0}"}}),
        Channel::ServerToServer,
        1,
        "[2]",
    );
    assert_eq!(prefixed.unwrap_err().field, "[2].user_attributes.a");
}

#[test]
fn long_event_names_are_truncated_like_mparticle() {
    let name = "é".repeat(300);
    let b = ok(
        json!({"events": [{"event_type": "custom_event", "data": {"event_name": name, "custom_event_type": "other"}}]}),
    );
    let whole = b.whole_document();
    let got = whole["events"][0]["data"]["event_name"].as_str().unwrap();
    assert_eq!(got.chars().count(), 256);
}

#[test]
fn the_sample_batches_from_the_spec_are_accepted() {
    for file in [
        "mparticle.inbound.eventsapi.sample.json",
        "api-evangelist.mparticle-eventsapi-sample.json",
    ] {
        let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let result = normalize(value, Channel::ServerToServer, 1, "");
        assert!(result.is_ok(), "{file}: {result:?}");
    }
}

/// The event type's messages, whatever the field holds (the type is parsed once, not cloned).
#[test]
fn a_missing_or_unknown_event_type_is_named_with_its_message() {
    let missing = "Required event field \"events[0].event_type\" is missing or empty.";
    for event_type in [json!(null), json!(""), json!(7)] {
        let e = err(json!({"events": [{"event_type": event_type, "data": {}}]}));
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            ("events[0].event_type", missing)
        );
    }
    assert_eq!(err(json!({"events": [{"data": {}}]})).message, missing);
    let e = err(json!({"events": [{"event_type": "Custom_Event", "data": {}}]}));
    assert_eq!(
        e.message,
        "Field \"events[0].event_type\" has unknown event type \"Custom_Event\"."
    );
    // An int64 timestamp is kept; a string of digits becomes one.
    let b = ok(json!({"events": [
        {"event_type": "screen_view", "data": {"timestamp_unixtime_ms": 5, "event_num": "6"}}]}));
    assert_eq!(
        b.whole_document()["events"][0]["data"]["timestamp_unixtime_ms"],
        json!(5)
    );
    assert_eq!(
        b.whole_document()["events"][0]["data"]["event_num"],
        json!(6)
    );
}

/// `levels` arrays, one inside the other, around a number (`0` is the number alone).
fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// The SDKs' uploads put a custom attribute deeper in the batch than they sent it, so an
/// upload serde_json read can make a batch it cannot read back. A batch whose stored body
/// serde_json would refuse is refused, naming the field; one it reads is stored as before.
#[test]
fn a_batch_is_stored_only_if_serde_json_reads_it_back() {
    // The batch, `events`, the event, `data` and `custom_attributes` are levels 1 to 5, the
    // attribute's value level 6: it may nest 122 levels (to level 127).
    for levels in 118..=126 {
        let batch = json!({"events": [{"event_type": "custom_event", "data": {
            "event_name": "x", "custom_event_type": "other",
            "custom_attributes": {"k": nested(levels)}}}]});
        let normalized = normalize(batch, Channel::Native, 1, "");
        match normalized {
            Ok(batch) => {
                let body = batch.stored_body().expect("serialisable");
                let read = serde_json::from_slice::<Value>(&body);
                assert!(read.is_ok(), "{levels} levels: stored, then {read:?}");
            }
            Err(e) => {
                assert!(levels > 122, "{levels} levels refused: {e}");
                assert_eq!(
                    e.message,
                    "Field \"events[0].data.custom_attributes\" is nested too deeply; \
                     a batch may nest at most 127 levels."
                );
            }
        }
    }
    let deep = json!({"user_attributes": {"a": 1}, "something_new": nested(127)});
    // Named down to the level of an event's data members.
    assert_eq!(err(deep).field, "something_new[0][0][0]");
}

/// serde_json reads an object whose first key is its reserved `$serde_json::private::RawValue`
/// as the JSON text that key holds. A stored batch is written with its keys sorted, and `$`
/// sorts first, so a batch holding that key anywhere would be stored as a body that reads back
/// as something else or not at all (delivery then dead-letters it as unreadable). It is refused
/// instead, naming the field, wherever it is.
#[test]
fn a_batch_holding_serde_jsons_reserved_key_is_refused_by_field() {
    let key = "$serde_json::private::RawValue";
    let event = |attributes: Value| {
        json!({"events": [{"event_type": "custom_event", "data": {
            "event_name": "x", "custom_event_type": "other", "custom_attributes": attributes}}]})
    };
    let refused = err(event(json!({"a": 1, key: "x"})));
    assert_eq!(refused.field, "events[0].data.custom_attributes");
    assert_eq!(
        refused.message,
        "Field \"events[0].data.custom_attributes\" holds the key \
         \"$serde_json::private::RawValue\", which Boson cannot store."
    );
    let deeper = err(event(json!({"list": [{"b": {key: "[1]", "c": 2}}]})));
    assert_eq!(deeper.field, "events[0].data.custom_attributes");
    let top = err(json!({"user_attributes": {"a": 1}, "extra": {"z": {key: "1"}}}));
    assert_eq!(top.field, "extra.z");
    // The key as a value, or as part of a longer key, is only text.
    let fine = ok(event(
        json!({"a": key, "x$serde_json::private::RawValue": 1}),
    ));
    let body = fine.stored_body().expect("serialisable");
    assert!(serde_json::from_slice::<Value>(&body).is_ok());
}

/// The reserved key as a key of the batch itself, not first in the text a client sent (so
/// serde_json's own parse takes it as an ordinary key), would be stored first in the sorted
/// body, which then reads back as the text under it, not as the batch: it is refused, named.
#[test]
fn a_batch_holding_serde_jsons_reserved_key_at_its_top_level_is_refused() {
    let key = "$serde_json::private::RawValue";
    let sent = format!(r#"{{"events": [], "{key}": "1"}}"#);
    let parsed: Value = serde_json::from_str(&sent).expect("not first: an ordinary key");
    let accepted = normalize(parsed, Channel::Native, 1, "");
    if let Ok(batch) = &accepted {
        let body = batch.stored_body().expect("serialisable");
        let read = serde_json::from_slice::<Value>(&body);
        panic!(
            "accepted; stored as {} which reads back as {read:?}",
            String::from_utf8_lossy(&body)
        );
    }
    assert_eq!(accepted.expect_err("refused").field, key);
}
