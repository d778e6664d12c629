//! The pure parsers behind one entry point each: the Events API batch (also the Web SDK's v3
//! upload), the mobile upload envelope, the legacy web event and gzip bodies.

use std::io::Write;

use axum::http::header::CONTENT_ENCODING;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Map, Value};

use crate::ingest::body::{decode_body, parse_json};
use crate::model::batch::{BatchError, Channel, NormalizedBatch, normalize, normalize_split};
use crate::model::kept_members::{KeptMembers, StoredForm, split_batch, split_bulk};
use crate::model::legacy_web;
use crate::model::mobile::{MobileOs, translate};

/// The receive time every entry point normalises with (the clock is a parameter of the model).
const NOW_MS: i64 = 1_700_000_000_000;
/// The body limit `gzip` decodes under; small, so the fuzzer reaches it.
const GZIP_LIMIT: usize = 1024;

/// `/v2/events` and the Web SDK's v3 upload: the body as one batch, on both channels; and
/// split as `/v2/events` splits it, the same answer and the same stored batch.
pub fn batch(data: &[u8]) {
    check_split(data);
    let Ok(value) = parse_json(data) else {
        return;
    };
    for channel in [Channel::ServerToServer, Channel::Javascript] {
        check_batch(&value, channel, "");
    }
}

/// The mobile SDKs' upload envelope (`dt: "h"`), from either OS, translated and normalised.
pub fn mobile(data: &[u8]) {
    let Ok(envelope) = parse_json(data) else {
        return;
    };
    for os in [MobileOs::Android, MobileOs::Ios] {
        match translate(&envelope, os) {
            Ok(document) => {
                // One event per message, never more.
                let messages = envelope.get("msgs").and_then(Value::as_array).map(Vec::len);
                assert_eq!(events_of(&document), messages.unwrap_or(0), "{document}");
                check_batch(&document, Channel::Native, "");
            }
            Err(error) => check_error(&error, ""),
        }
    }
}

/// The Web SDK's legacy per-event upload, translated and normalised.
pub fn legacy_web(data: &[u8]) {
    let Ok(dto) = parse_json(data) else {
        return;
    };
    match legacy_web::translate(&dto) {
        Ok(document) => {
            assert_eq!(events_of(&document), 1, "{document}");
            check_batch(&document, Channel::Javascript, "");
        }
        Err(error) => check_error(&error, ""),
    }
}

/// A gzip body as the SDK routes decode it: bounded output, a 400 or 413 otherwise; and what
/// is compressed comes back whole.
pub fn gzip(data: &[u8]) {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    match decode_body(&headers, data, GZIP_LIMIT) {
        Ok(out) => assert!(out.len() <= GZIP_LIMIT, "{} bytes out", out.len()),
        Err(error) => assert!(
            [StatusCode::BAD_REQUEST, StatusCode::PAYLOAD_TOO_LARGE].contains(&error.status),
            "{error:?}"
        ),
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let compressed = encoder
        .write_all(data)
        .and_then(|()| encoder.finish())
        .expect("gzip into memory");
    match decode_body(&headers, &compressed, GZIP_LIMIT) {
        Ok(out) => assert_eq!(out, data),
        Err(error) => assert!(
            data.len() > GZIP_LIMIT && error.status == StatusCode::PAYLOAD_TOO_LARGE,
            "{} bytes: {error:?}",
            data.len()
        ),
    }
    // Without the header the body passes as it came.
    let plain = decode_body(&HeaderMap::new(), data, GZIP_LIMIT).expect("plain body");
    assert_eq!(plain, data);
}

/// A body split with its members kept as sent (`model::kept_members`) splits exactly when it
/// parses as an object (but for one holding serde_json's reserved key in a member or event it
/// keeps as text, left to a whole parse), and normalises as the whole parse does
/// ([`check_normalised_alike`]). A bulk body splits exactly when it parses as an array of
/// objects, into batches that do the same ([`check_split_bulk`]).
fn check_split(data: &[u8]) {
    let whole = parse_json(data).ok();
    let Some((members, kept)) = split_batch(data) else {
        assert!(
            holds_reserved_key(data) || !matches!(whole, Some(Value::Object(_))),
            "not split: {whole:?}"
        );
        check_split_bulk(data, whole.as_ref());
        return;
    };
    let whole = whole.expect("split a body that does not parse");
    check_normalised_alike(&whole, members, kept);
}

/// A batch normalised from its whole parse (`whole`) and from its split (`members`, `kept`):
/// the same error, or stored batches that parse to the same document (but for the
/// `message_id`s normalisation draws at random), whose events the data catalog reads alike,
/// and which are never shorter than serde_json writes them back.
fn check_normalised_alike(whole: &Value, members: Map<String, Value>, kept: KeptMembers) {
    let channel = Channel::ServerToServer;
    let old = normalize(whole.clone(), channel, NOW_MS, "");
    let new = normalize_split(Value::Object(members), kept, channel, NOW_MS, "");
    match (old, new) {
        (Err(old), Err(new)) => assert_eq!(new, old),
        (Ok(old), Ok(new)) => {
            assert_eq!(without_drawn_ids(&new), without_drawn_ids(&old));
            // What the data catalog reads of each event, kept as sent or not.
            let summaries = |batch: &NormalizedBatch| -> Vec<_> {
                batch.events.iter().map(|e| e.summary.clone()).collect()
            };
            assert_eq!(summaries(&new), summaries(&old), "{whole}");
            // Delivery sizes requests by stored bytes: serde_json never writes more.
            let stored = new.stored_body().expect("serialise");
            let read: Value = serde_json::from_slice(&stored).expect("parse again");
            let written = serde_json::to_vec(&read).expect("serialise");
            assert!(
                written.len() <= stored.len(),
                "{}",
                String::from_utf8_lossy(&stored)
            );
        }
        (old, new) => panic!("{whole}: {old:?} but split {new:?}"),
    }
}

/// A bulk body splits exactly when it parses as an array of objects, into batches that store
/// as each object would, and normalise as each would ([`check_normalised_alike`]).
fn check_split_bulk(data: &[u8], whole: Option<&Value>) {
    let Some(batches) = split_bulk(data) else {
        assert!(
            holds_reserved_key(data)
                || !matches!(whole, Some(Value::Array(items)) if items.iter().all(Value::is_object)),
            "not split: {whole:?}"
        );
        return;
    };
    let Some(Value::Array(items)) = whole else {
        panic!("split a body that is not an array: {whole:?}");
    };
    assert_eq!(batches.len(), items.len());
    for ((members, kept), item) in batches.into_iter().zip(items) {
        let document = Value::Object(members.clone());
        let text = StoredForm {
            document: &document,
            kept: &kept,
            events: None,
        }
        .to_vec()
        .expect("serialise");
        let stored: Value = serde_json::from_slice(&text).expect("parse again");
        assert_eq!(&stored, item);
        check_normalised_alike(item, members, kept);
    }
}

/// Whether `data` may hold serde_json's reserved key, which normalising refuses by name: a
/// body holding it in a member or event kept as text is left to a whole parse.
fn holds_reserved_key(data: &[u8]) -> bool {
    String::from_utf8_lossy(data).contains("RawValue")
}

/// The stored body parsed back, its `message_id`s blanked.
fn without_drawn_ids(batch: &NormalizedBatch) -> Value {
    let mut stored: Value =
        serde_json::from_slice(&batch.stored_body().expect("serialise")).expect("parse again");
    stored["message_id"] = Value::Null;
    for event in stored["events"].as_array_mut().into_iter().flatten() {
        event["data"]["message_id"] = Value::Null;
    }
    stored
}

/// Normalises `value` and checks what came out, or that the error names its field.
pub(super) fn check_batch(value: &Value, channel: Channel, prefix: &str) {
    match normalize(value.clone(), channel, NOW_MS, prefix) {
        Ok(batch) => check_normalized(value, &batch, channel),
        Err(error) => check_error(&error, prefix),
    }
}

/// A refusal names the field it is about, inside the document's location.
fn check_error(error: &BatchError, prefix: &str) {
    assert!(!error.field.is_empty(), "{error:?}");
    assert!(
        error.field.starts_with(prefix),
        "{error:?} outside {prefix}"
    );
    assert!(error.message.contains(&error.field), "{error:?}");
}

/// What normalisation promises: the outbound form, every event kept, every key a client sent
/// kept, and a result that is itself a valid batch with the same events (normalising twice
/// changes nothing).
fn check_normalized(input: &Value, batch: &NormalizedBatch, channel: Channel) {
    let whole = batch.whole_document();
    let document = whole.as_object().expect("a normalised batch is an object");
    let sent = input.as_object().expect("only objects normalise");
    let events = document["events"].as_array().expect("events is an array");
    assert_eq!(events.len(), batch.event_count);
    let sent_events = sent.get("events").and_then(Value::as_array).map(Vec::len);
    assert_eq!(batch.event_count, sent_events.unwrap_or(0));
    for event in events {
        let data = event["data"].as_object().expect("event data is an object");
        assert!(data["timestamp_unixtime_ms"].is_i64(), "{event}");
        assert!(!data["message_id"].is_null(), "{event}");
    }
    assert_eq!(document["source_info"]["channel"], channel_name(channel));
    assert_eq!(document["schema_version"], 2);
    assert!(!document.contains_key("unique_id"));
    assert!(!document.contains_key("source_request_id"));
    assert!(
        document
            .get("mpid")
            .is_none_or(|m| m.is_null() || m.is_i64())
    );
    assert!(document.get("user_identities").is_none_or(Value::is_array));
    for (key, value) in sent {
        let dropped = ["source_request_id", "unique_id"].contains(&key.as_str());
        assert!(
            dropped || value.is_null() || document.contains_key(key),
            "{key} was lost"
        );
    }
    let bytes = serde_json::to_vec(&batch.document).expect("serialise");
    let reparsed: Value = serde_json::from_slice(&bytes).expect("parse again");
    assert_eq!(reparsed, batch.document);
    let again = normalize(inbound_form(document), channel, NOW_MS + 1, "")
        .unwrap_or_else(|e| panic!("a normalised batch no longer validates: {e}"));
    assert_eq!(again.event_count, batch.event_count);
    assert_eq!(again.whole_document()["events"], whole["events"]);
}

/// A normalised document as a client would send it: identities as an object again.
fn inbound_form(document: &Map<String, Value>) -> Value {
    let mut inbound = document.clone();
    if let Some(Value::Array(identities)) = inbound.remove("user_identities") {
        let folded: Map<String, Value> = identities
            .iter()
            .filter_map(|i| {
                Some((
                    i["identity_type"].as_str()?.to_owned(),
                    i["identity"].clone(),
                ))
            })
            .collect();
        inbound.insert("user_identities".into(), Value::Object(folded));
    }
    Value::Object(inbound)
}

fn events_of(document: &Value) -> usize {
    document["events"].as_array().map_or(0, Vec::len)
}

fn channel_name(channel: Channel) -> &'static str {
    match channel {
        Channel::ServerToServer => "server_to_server",
        Channel::Javascript => "javascript",
        Channel::Native => "native",
    }
}
