//! The fuzz targets' bounded twins, run in the normal suite: the same entry points (which panic
//! on a broken promise), fed arbitrary bytes and arbitrary JSON built from the keys and values
//! the parsers look for, so the cases reach past "not an object". Case counts are small; the fuzz
//! targets in `fuzz/` run the same checks for as long as one likes.

use axum::http::StatusCode;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value};

use super::{App, batch, gzip, legacy_web, mobile};
use crate::model::value_check::number_tokens;

/// Keys the parsers read, Events API and SDK short keys alike.
const KEYS: &[&str] = &[
    "events",
    "event_type",
    "data",
    "user_identities",
    "user_attributes",
    "mpid",
    "environment",
    "source_request_id",
    "unique_id",
    "device_info",
    "application_info",
    "context",
    "consent_state",
    "ip",
    "mp_deviceid",
    "event_name",
    "custom_event_type",
    "custom_attributes",
    "custom_flags",
    "location",
    "latitude",
    "longitude",
    "timestamp_unixtime_ms",
    "event_num",
    "message_id",
    "session_uuid",
    "screen_name",
    "product_action",
    "promotion_action",
    "action",
    "product_impressions",
    "shopping_cart",
    "session_duration_ms",
    "dt",
    "msgs",
    "ui",
    "n",
    "i",
    "id",
    "ct",
    "sid",
    "attrs",
    "flags",
    "lc",
    "lat",
    "lng",
    "et",
    "di",
    "dp",
    "ai",
    "con",
    "gdpr",
    "ccpa",
    "ctx",
    "dpln",
    "das",
    "ua",
    "uad",
    "dbg",
    "pd",
    "an",
    "pr",
    "pi",
    "cu",
    "pm",
    "Type",
    "Identity",
    "pet",
    "sl",
    "known_identities",
    "previous_mpid",
    "identity_changes",
    "identity_type",
    "old_value",
    "new_value",
    "request_id",
    "source_mpid",
    "destination_mpid",
    "start_unixtime_ms",
    "end_unixtime_ms",
    "mid",
    "customerid",
    "email",
    "customer_id",
    "android_uuid",
    "device_application_stamp",
    "ios_idfv",
];

/// Values the parsers branch on.
const WORDS: &[&str] = &[
    "custom_event",
    "screen_view",
    "commerce_event",
    "session_start",
    "session_end",
    "profile",
    "navigation",
    "other",
    "production",
    "development",
    "unknown",
    "h",
    "e",
    "v",
    "ss",
    "se",
    "cm",
    "ast",
    "uac",
    "uic",
    "pro",
    "x",
    "Android",
    "iOS",
    "android",
    "ios",
    "tvos",
    "firetv",
    "email",
    "customer_id",
    "customerid",
    "other_id_2",
    "android_uuid",
    "push_token",
    "1",
    "-1",
    "9223372036854775807",
    "9223372036854775808",
    "",
    "\u{0}",
    "\u{1F600}",
];

const EVENT_TYPES: &[&str] = &[
    "custom_event",
    "screen_view",
    "commerce_event",
    "session_start",
    "session_end",
    "profile",
    "crash_report",
    "opt_out",
    "first_run",
    "push_registration",
    "breadcrumb",
    "unknown",
];

const MOBILE_TYPES: &[&str] = &[
    "ss", "se", "v", "e", "x", "o", "fr", "pr", "ast", "pm", "npe", "bc", "pro", "pre", "cm",
    "uac", "uic",
];

const IDENTITY_NAMES: &[&str] = &[
    "customerid",
    "customer_id",
    "email",
    "other",
    "other2",
    "other_id_2",
    "mobile_number",
    "android_uuid",
    "ios_idfv",
    "device_application_stamp",
    "push_token",
    "facebook",
    "bogus",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![0i64, 1, 2, 3, 4, 14, 16, 20, -1, i64::MAX, i64::MIN])
            .prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(WORDS).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        "[0-9]{1,20}".prop_map(Value::from),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => "\\PC{0,6}",
    ]
}

/// Any JSON, its object keys mostly the parsers' own.
fn json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            object_of(key(), inner),
        ]
    })
}

fn object_of(
    keys: impl Strategy<Value = String>,
    values: impl Strategy<Value = Value>,
) -> impl Strategy<Value = Value> {
    prop::collection::vec((keys, values), 0..6)
        .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>()))
}

/// `base` with some keys set to arbitrary JSON: a shape the parser accepts, values it may not.
fn shaped(base: impl Strategy<Value = Value>) -> impl Strategy<Value = Value> {
    (base, prop::collection::vec((key(), json()), 0..4)).prop_map(|(mut base, extra)| {
        if let Value::Object(map) = &mut base {
            map.extend(extra);
        }
        base
    })
}

fn events_batch() -> impl Strategy<Value = Value> {
    let event = (prop::sample::select(EVENT_TYPES), object_of(key(), json()))
        .prop_map(|(t, data)| serde_json::json!({"event_type": t, "data": data}));
    shaped(prop::collection::vec(event, 0..4).prop_map(|e| serde_json::json!({"events": e})))
}

fn mobile_envelope() -> impl Strategy<Value = Value> {
    let message =
        (prop::sample::select(MOBILE_TYPES), object_of(key(), json())).prop_map(|(dt, mut m)| {
            m["dt"] = Value::from(dt);
            m
        });
    // The OS the device info names decides whether the upload fits its key.
    let os = prop::option::of(prop::sample::select(vec![
        "Android", "iOS", "tvOS", "FireTV",
    ]));
    shaped(
        (prop::collection::vec(message, 0..4), os).prop_map(|(msgs, os)| match os {
            Some(os) => serde_json::json!({"dt": "h", "msgs": msgs, "di": {"dp": os}}),
            None => serde_json::json!({"dt": "h", "msgs": msgs}),
        }),
    )
}

fn legacy_event() -> impl Strategy<Value = Value> {
    shaped((0i64..22).prop_map(|dt| serde_json::json!({"dt": dt})))
}

fn identity_request() -> impl Strategy<Value = Value> {
    // Mostly strings, which is what identities are: other values stop at the first check.
    let value = || {
        prop_oneof![
            3 => "\\PC{0,12}".prop_map(Value::from),
            1 => prop::sample::select(WORDS).prop_map(Value::from),
            1 => json(),
        ]
    };
    let known = object_of(
        prop::sample::select(IDENTITY_NAMES).prop_map(str::to_owned),
        value(),
    );
    let change = (prop::sample::select(IDENTITY_NAMES), value(), value()).prop_map(
        |(t, o, n)| serde_json::json!({"identity_type": t, "old_value": o, "new_value": n}),
    );
    let alias = (json(), json())
        .prop_map(|(s, d)| serde_json::json!({"data": {"source_mpid": s, "destination_mpid": d}}));
    prop_oneof![
        shaped(known.prop_map(|k| serde_json::json!({"known_identities": k}))),
        shaped(
            prop::collection::vec(change, 0..3)
                .prop_map(|c| serde_json::json!({"identity_changes": c}))
        ),
        shaped(alias),
    ]
}

fn forwarding_report() -> impl Strategy<Value = Value> {
    let report = || shaped(json().prop_map(|mid| serde_json::json!({"mid": mid})));
    prop_oneof![
        report(),
        prop::collection::vec(report(), 0..4).prop_map(|data| serde_json::json!({"data": data})),
    ]
}

/// A body: mostly the JSON of `documents`, sometimes any JSON, sometimes any bytes.
fn body(documents: impl Strategy<Value = Value>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => documents.prop_map(|v| v.to_string().into_bytes()),
        1 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// `text` with each float spelt in scientific notation with a capital `E`.
fn respelt_floats(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for at in number_tokens(text) {
        let token = &text[at.clone()];
        if let (true, Ok(float)) = (token.contains(['.', 'e', 'E']), token.parse::<f64>()) {
            out.push_str(&text[copied..at.start]);
            out.push_str(&format!("{float:E}"));
            copied = at.end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// Runs `check` on `cases` cases against one in-process app.
fn with_app<S: Strategy>(cases: u32, strategy: S, check: impl Fn(&App, S::Value) -> StatusCode) {
    let app = App::start().expect("an in-process Boson");
    let mut runner = TestRunner::new(ProptestConfig::with_cases(cases));
    let outcome = runner.run(&strategy, |value| {
        check(&app, value);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn events_api_batches_are_normalised_or_refused_by_field(data in body(events_batch())) {
        batch(&data);
    }

    /// A `/v2/bulkevents` body (an array of batches) splits into batches that store and
    /// normalise as each batch parsed whole does; their events stand a level deeper.
    #[test]
    fn bulk_bodies_split_into_batches_as_parsed_whole(
        batches in prop::collection::vec(events_batch(), 0..4),
    ) {
        batch(Value::Array(batches).to_string().as_bytes());
    }

    /// The same with every float spelt in scientific notation (`100.0` as `1E2`, `1.5` as
    /// `1.5E0`): shorter or longer than serde_json writes it back, which decides whether an
    /// event holding it is stored as sent (`model::kept_events`).
    #[test]
    fn events_api_batches_with_floats_respelt_are_normalised_or_refused_by_field(
        document in events_batch(),
    ) {
        batch(respelt_floats(&document.to_string()).as_bytes());
    }

    #[test]
    fn mobile_envelopes_translate_or_are_refused_by_field(data in body(mobile_envelope())) {
        mobile(&data);
    }

    #[test]
    fn legacy_web_events_translate_or_are_refused_by_field(data in body(legacy_event())) {
        legacy_web(&data);
    }

    #[test]
    fn gzip_bodies_decode_within_bounds_or_are_refused(
        data in prop::collection::vec(any::<u8>(), 0..1500),
        damage in prop::option::of((any::<prop::sample::Index>(), any::<u8>())),
    ) {
        gzip(&data);
        // A real gzip stream, damaged at one byte, is decoded or refused cleanly too.
        let mut stream = super::app::gzipped(&data);
        if let Some((at, byte)) = damage {
            let at = at.index(stream.len());
            stream[at] = byte;
        }
        gzip(&stream);
    }
}

#[test]
fn events_api_requests_store_all_or_nothing() {
    let bulk = prop::collection::vec(events_batch(), 0..4).prop_map(Value::Array);
    let bodies = prop_oneof![
        (Just(false), body(events_batch())),
        (Just(true), body(bulk)),
    ];
    with_app(256, bodies, |app, (bulk, data)| app.events_api(bulk, &data));
}

#[test]
fn sdk_uploads_store_all_or_nothing() {
    let uploads = prop_oneof![
        (Just(0u8), any::<u8>(), body(events_batch())),
        (Just(1u8), any::<u8>(), body(legacy_event())),
        (Just(2u8), any::<u8>(), body(mobile_envelope())),
    ];
    with_app(256, uploads, |app, (route, selector, data)| match route {
        0 => app.web_upload(false, &data),
        1 => app.web_upload(true, &data),
        _ => app.mobile_upload(selector, &data),
    });
}

#[test]
fn idsync_bodies_get_an_answer_or_idsyncs_error() {
    with_app(
        256,
        (any::<u8>(), body(identity_request())),
        |app, (selector, data)| app.idsync(selector, &data),
    );
}

#[test]
fn forwarding_reports_are_counted_once_or_refused() {
    with_app(
        256,
        (any::<bool>(), body(forwarding_report())),
        |app, (v2, data)| app.forwarding(v2, &data),
    );
}

/// Found by running `idsync_bodies_get_an_answer_or_idsyncs_error` on PostgreSQL, whose text
/// cannot hold U+0000: an identity or device id with a NUL character was answered 503 ("retry"),
/// so an SDK would send it again forever. It is a bad request on either backend.
#[test]
fn nul_characters_in_identities_are_refused() {
    let app = App::start().expect("an in-process Boson");
    let nul = r#""a\u0000b""#;
    for known in ["email", "customerid", "android_uuid"] {
        let body = format!(r#"{{"known_identities": {{"{known}": {nul}}}}}"#);
        assert_eq!(app.idsync(0, body.as_bytes()), 400, "{body}");
    }
    let change =
        format!(r#"{{"identity_changes": [{{"identity_type": "email", "new_value": {nul}}}]}}"#);
    assert_eq!(app.idsync(3, change.as_bytes()), 400, "{change}");
    for batch in [
        format!(r#"{{"user_identities": {{"email": {nul}}}}}"#),
        format!(r#"{{"mp_deviceid": {nul}}}"#),
    ] {
        assert_eq!(app.events_api(false, batch.as_bytes()), 400, "{batch}");
    }
}
