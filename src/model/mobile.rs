//! The Android and iOS SDKs' upload format (a `dt: "h"` envelope whose `msgs` carry short-keyed
//! messages typed by `dt`) translated into the Events API batch model, so connections treat
//! every input alike (spec `sdk-wire.md` §2.6, §2.7, §4). Pure.

use serde_json::{Map, Value, json};

use super::batch::BatchError;
use super::identity::types::IdentityType;

/// The platform an upload says it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MobileOs {
    Android,
    Ios,
}

/// Translates an upload envelope into an Events API batch document (to be normalised next).
pub(crate) fn translate(envelope: &Value, os: MobileOs) -> Result<Value, BatchError> {
    let Value::Object(h) = envelope else {
        return Err(error("batch", "must be a JSON object"));
    };
    if h.get("dt").and_then(Value::as_str) != Some("h") {
        return Err(error("dt", "must be \"h\" (an upload batch)"));
    }
    let mut batch = batch_header(h);
    copy(h, "uad", &mut batch, "deleted_user_attributes");
    if let Some(id) = h.get("id").and_then(Value::as_str) {
        batch.insert("source_request_id".into(), json!(id));
    }
    batch.insert("application_info".into(), application_info(h.get("ai"), os));
    batch.insert("device_info".into(), device_info(h.get("di"), os));
    if let Some(identities) = user_identities(h.get("ui"))? {
        batch.insert("user_identities".into(), identities);
    }
    if let Some(consent) = h.get("con").filter(|c| c.is_object()) {
        batch.insert("consent_state".into(), consent_state(consent));
    }
    if let Some(plan) = h.get("ctx").and_then(|c| c.get("dpln")) {
        batch.insert(
            "context".into(),
            json!({"data_plan": {"plan_id": plan.get("id"), "plan_version": plan.get("v")}}),
        );
    }
    let messages = match h.get("msgs") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(messages)) => messages,
        Some(_) => return Err(error("msgs", "must be an array of messages")),
    };
    let mpid = h.get("mpid").cloned().unwrap_or(Value::Null);
    let mut events = Vec::with_capacity(messages.len());
    for (i, message) in messages.iter().enumerate() {
        events.push(translate_message(message, &mpid, &format!("msgs[{i}]"))?);
    }
    batch.insert("events".into(), Value::Array(events));
    Ok(Value::Object(batch))
}

fn error(field: &str, problem: &str) -> BatchError {
    BatchError {
        field: field.to_owned(),
        message: format!("Field \"{field}\" {problem}."),
    }
}

/// The batch-level fields both SDK wire formats carry under the same short keys: user, device,
/// SDK version, user and integration attributes, and the environment (`dbg`).
pub(super) fn batch_header(from: &Map<String, Value>) -> Map<String, Value> {
    let mut batch = Map::new();
    copy(from, "mpid", &mut batch, "mpid");
    copy(from, "das", &mut batch, "mp_deviceid");
    copy(from, "sdk", &mut batch, "sdk_version");
    copy(from, "ua", &mut batch, "user_attributes");
    copy(from, "ia", &mut batch, "integration_attributes");
    let development = from.get("dbg").and_then(Value::as_bool).unwrap_or(false);
    let environment = if development {
        "development"
    } else {
        "production"
    };
    batch.insert("environment".into(), json!(environment));
    batch
}

/// Copies `key` as `as_key` when present and not null.
pub(super) fn copy(
    from: &Map<String, Value>,
    key: &str,
    to: &mut Map<String, Value>,
    as_key: &str,
) {
    if let Some(value) = from.get(key).filter(|v| !v.is_null()) {
        to.insert(as_key.to_owned(), value.clone());
    }
}

/// Copies the short keys of `pairs` (short → long) that are present.
fn rename(from: &Map<String, Value>, pairs: &[(&str, &str)]) -> Map<String, Value> {
    let mut to = Map::new();
    for (short, long) in pairs {
        copy(from, short, &mut to, long);
    }
    to
}

fn application_info(ai: Option<&Value>, os: MobileOs) -> Value {
    let ai = ai.and_then(Value::as_object).cloned().unwrap_or_default();
    let mut info = rename(
        &ai,
        &[
            ("an", "application_name"),
            ("av", "application_version"),
            ("apn", "package"),
            ("abn", "application_build_number"),
            ("ir", "install_referrer"),
        ],
    );
    info.insert(
        "os".into(),
        json!(match os {
            MobileOs::Android => "Android",
            MobileOs::Ios => "IOS",
        }),
    );
    Value::Object(info)
}

fn device_info(di: Option<&Value>, os: MobileOs) -> Value {
    let di = di.and_then(Value::as_object).cloned().unwrap_or_default();
    let mut info = rename(
        &di,
        &[
            ("b", "brand"),
            ("p", "product"),
            ("dn", "device"),
            ("dma", "device_manufacturer"),
            ("dosv", "os_version"),
            ("dmdl", "device_model"),
            ("dsh", "screen_height"),
            ("dsw", "screen_width"),
            ("dpi", "screen_dpi"),
            ("dc", "device_country"),
            ("dlc", "locale_country"),
            ("dll", "locale_language"),
            ("tz", "timezone_offset"),
            ("nc", "network_country"),
            ("nca", "network_carrier"),
            ("mnc", "network_code"),
            ("mcc", "network_mobile_country_code"),
            ("bid", "build_identifier"),
            ("anid", "android_uuid"),
            ("gaid", "android_advertising_id"),
            ("lat", "limit_ad_tracking"),
            ("aid", "ios_advertising_id"),
            ("vid", "ios_idfv"),
            ("atts", "att_authorization_status"),
            ("attt", "att_timestamp_unixtime_ms"),
            ("arc", "cpu_architecture"),
            ("it", "is_tablet"),
            ("to", "push_token"),
            ("dst", "is_dst"),
            ("dsnfc", "has_nfc"),
            ("dbe", "bluetooth_enabled"),
            ("dbv", "bluetooth_version"),
            ("vr", "build_version_release"),
        ],
    );
    // The platform follows the input the upload was accepted for (iOS and tvOS both say iOS here).
    info.insert(
        "platform".into(),
        json!(match os {
            MobileOs::Android => "Android",
            MobileOs::Ios => "iOS",
        }),
    );
    Value::Object(info)
}

fn user_identities(ui: Option<&Value>) -> Result<Option<Value>, BatchError> {
    let Some(Value::Array(records)) = ui else {
        return Ok(None);
    };
    let mut identities = Map::new();
    for (i, record) in records.iter().enumerate() {
        let n = record.get("n").and_then(Value::as_i64);
        let kind = n
            .and_then(IdentityType::from_sdk_number)
            .ok_or_else(|| error(&format!("ui[{i}].n"), "is not a known identity type number"))?;
        if let Some(value) = record.get("i").filter(|v| v.is_string()) {
            identities.insert(kind.as_str().into(), value.clone());
        }
    }
    Ok(Some(Value::Object(identities)))
}

fn identity_record(record: Option<&Value>) -> Value {
    let Some(Value::Object(r)) = record else {
        return Value::Null;
    };
    json!({
        "identity_type": r
            .get("n")
            .and_then(Value::as_i64)
            .and_then(IdentityType::from_sdk_number)
            .map(IdentityType::as_str),
        "identity": r.get("i"),
        "timestamp_unixtime_ms": r.get("dfs"),
        "created_this_batch": r.get("f"),
    })
}

fn consent_state(con: &Value) -> Value {
    let purpose = |p: &Value| {
        json!({
            "consented": p.get("c"),
            "document": p.get("d"),
            "timestamp_unixtime_ms": p.get("ts"),
            "location": p.get("l"),
            "hardware_id": p.get("h"),
        })
    };
    let mut state = Map::new();
    if let Some(Value::Object(gdpr)) = con.get("gdpr") {
        let purposes: Map<String, Value> =
            gdpr.iter().map(|(k, v)| (k.clone(), purpose(v))).collect();
        state.insert("gdpr".into(), Value::Object(purposes));
    }
    if let Some(opt_out) = con.get("ccpa").and_then(|c| c.get("data_sale_opt_out")) {
        state.insert(
            "ccpa".into(),
            json!({"data_sale_opt_out": purpose(opt_out)}),
        );
    }
    Value::Object(state)
}

/// Each `dt` and the `event_type` it becomes (sdk-wire §4.1).
fn event_type(dt: &str) -> Option<&'static str> {
    Some(match dt {
        "ss" => "session_start",
        "se" => "session_end",
        "v" => "screen_view",
        "e" => "custom_event",
        "x" => "crash_report",
        "o" => "opt_out",
        "fr" => "first_run",
        "pr" => "push_registration",
        "ast" => "application_state_transition",
        "pm" => "push_message",
        "npe" => "network_performance",
        "bc" => "breadcrumb",
        "pro" => "profile",
        "pre" => "push_reaction",
        "cm" => "commerce_event",
        "uac" => "user_attribute_change",
        "uic" => "user_identity_change",
        _ => return None,
    })
}

fn translate_message(message: &Value, mpid: &Value, field: &str) -> Result<Value, BatchError> {
    let Value::Object(m) = message else {
        return Err(error(field, "must be an object"));
    };
    let dt = m.get("dt").and_then(Value::as_str).unwrap_or_default();
    let event_type = event_type(dt).ok_or_else(|| BatchError {
        field: format!("{field}.dt"),
        message: format!("Field \"{field}.dt\" has unknown message type \"{dt}\"."),
    })?;
    let mut data = rename(
        m,
        &[
            ("ct", "timestamp_unixtime_ms"),
            ("sct", "session_start_unixtime_ms"),
            ("id", "source_message_id"),
            ("attrs", "custom_attributes"),
            ("est", "event_start_unixtime_ms"),
            ("en", "event_num"),
        ],
    );
    // A session start's own id is the session id; every other message names its session.
    let session = if dt == "ss" {
        m.get("id")
    } else {
        m.get("sid")
    };
    if let Some(session) = session.filter(|s| s.is_string()) {
        data.insert("session_uuid".into(), session.clone());
    }
    if let Some(Value::Object(flags)) = m.get("flags") {
        data.insert("custom_flags".into(), Value::Object(flags.clone()));
    }
    if let Some(Value::Object(lc)) = m.get("lc") {
        data.insert(
            "location".into(),
            Value::Object(rename(
                lc,
                &[
                    ("lat", "latitude"),
                    ("lng", "longitude"),
                    ("acc", "accuracy"),
                ],
            )),
        );
    }
    data.extend(type_specific(dt, m, mpid));
    Ok(json!({"event_type": event_type, "data": data}))
}

fn type_specific(dt: &str, m: &Map<String, Value>, mpid: &Value) -> Map<String, Value> {
    match dt {
        "e" => {
            let mut data = rename(m, &[("n", "event_name")]);
            let kind = m.get("et").and_then(Value::as_str).unwrap_or("Other");
            data.insert("custom_event_type".into(), json!(snake_case(kind)));
            data
        }
        "v" => rename(m, &[("n", "screen_name"), ("t", "activity_type")]),
        "se" => rename(m, &[("sl", "session_duration_ms")]),
        "ast" => {
            let mut data = rename(
                m,
                &[
                    ("ifr", "is_first_run"),
                    ("iu", "is_upgrade"),
                    ("lr", "launch_referral"),
                ],
            );
            let transition = match m.get("t").and_then(Value::as_str) {
                Some("app_init") => "application_initialized",
                Some("app_fore") => "application_foreground",
                Some("app_back") => "application_background",
                Some("app_exit") => "application_exit",
                _ => "application_initialized",
            };
            data.insert("application_transition_type".into(), json!(transition));
            data
        }
        "uac" => rename(
            m,
            &[
                ("n", "user_attribute_name"),
                ("nv", "new"),
                ("ov", "old"),
                ("d", "deleted"),
                ("na", "is_new_attribute"),
            ],
        ),
        "uic" => {
            let mut data = Map::new();
            data.insert("new".into(), identity_record(m.get("ni")));
            data.insert("old".into(), identity_record(m.get("oi")));
            data
        }
        "o" => rename(m, &[("s", "is_opted_out")]),
        "x" => {
            let mut data = rename(
                m,
                &[
                    ("m", "message"),
                    ("c", "class_name"),
                    ("s", "severity"),
                    ("st", "stack_trace"),
                    ("sn", "session_number"),
                ],
            );
            if let Some(handled) = m.get("eh") {
                let handled = handled
                    .as_bool()
                    .unwrap_or_else(|| handled.as_str() == Some("true"));
                data.insert("exception_handled".into(), json!(handled));
            }
            data
        }
        "bc" => rename(m, &[("l", "label"), ("sn", "session_number")]),
        "npe" => rename(
            m,
            &[
                ("v", "http_verb"),
                ("url", "url"),
                ("te", "time_elapsed"),
                ("bo", "bytes_out"),
                ("bi", "bytes_in"),
                ("rc", "response_code"),
            ],
        ),
        "pr" => rename(m, &[("to", "registration_token"), ("r", "register")]),
        "pm" | "pre" => rename(
            m,
            &[
                ("pay", "push_notification_payload"),
                ("t", "push_message_type"),
                ("as", "application_state"),
                ("to", "push_message_token"),
                ("aid", "action_identifier"),
            ],
        ),
        "pro" => {
            let mut data = Map::new();
            data.insert(
                "profile_event_type".into(),
                m.get("t").cloned().unwrap_or(json!("update")),
            );
            data.insert("previous_mpid".into(), mpid.clone());
            data.insert("current_mpid".into(), mpid.clone());
            data
        }
        "cm" => commerce(m),
        _ => Map::new(),
    }
}

/// `UserContent` → `user_content`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

fn product(p: &Value) -> Value {
    let Value::Object(p) = p else {
        return p.clone();
    };
    Value::Object(rename(
        p,
        &[
            ("id", "id"),
            ("nm", "name"),
            ("pr", "price"),
            ("qt", "quantity"),
            ("br", "brand"),
            ("va", "variant"),
            ("ca", "category"),
            ("ps", "position"),
            ("cc", "coupon_code"),
            ("tpa", "total_product_amount"),
            ("act", "added_to_cart_time_ms"),
            ("attrs", "custom_attributes"),
        ],
    ))
}

/// Product impressions (`pi`) and the shopping cart (`sc`), keyed the same by the mobile SDKs
/// and the legacy Web upload.
pub(super) fn impressions_and_cart(from: &Map<String, Value>, data: &mut Map<String, Value>) {
    if let Some(Value::Array(impressions)) = from.get("pi") {
        let impressions: Vec<Value> = impressions
            .iter()
            .map(|i| json!({"product_impression_list": i.get("pil"), "products": products(i.get("pl"))}))
            .collect();
        data.insert("product_impressions".into(), Value::Array(impressions));
    }
    if let Some(cart) = from.get("sc").filter(|c| c.is_object()) {
        data.insert(
            "shopping_cart".into(),
            json!({"products": products(cart.get("pl"))}),
        );
    }
}

/// A short-keyed product list (`id`, `nm`, `pr`, …) as Events API products; the mobile SDKs and
/// the legacy Web upload share this vocabulary.
pub(super) fn products(list: Option<&Value>) -> Value {
    Value::Array(
        list.and_then(Value::as_array)
            .map(|l| l.iter().map(product).collect())
            .unwrap_or_default(),
    )
}

fn commerce(m: &Map<String, Value>) -> Map<String, Value> {
    let mut data = rename(
        m,
        &[
            ("cu", "currency_code"),
            ("sn", "screen_name"),
            ("ni", "is_non_interactive"),
        ],
    );
    if let Some(Value::Object(pd)) = m.get("pd") {
        let mut action = rename(
            pd,
            &[
                ("cs", "checkout_step"),
                ("co", "checkout_options"),
                ("pal", "product_action_list"),
                ("pls", "product_list_source"),
                ("ti", "transaction_id"),
                ("ta", "affiliation"),
                ("tr", "total_amount"),
                ("tt", "tax_amount"),
                ("ts", "shipping_amount"),
                ("tcc", "coupon_code"),
            ],
        );
        let name = pd.get("an").and_then(Value::as_str).unwrap_or("unknown");
        // The Events API spells this one with an extra underscore.
        let name = if name == "remove_from_wishlist" {
            "remove_from_wish_list"
        } else {
            name
        };
        action.insert("action".into(), json!(name));
        action.insert("products".into(), products(pd.get("pl")));
        data.insert("product_action".into(), Value::Object(action));
    }
    if let Some(Value::Object(pm)) = m.get("pm") {
        let promotions: Vec<Value> = pm
            .get("pl")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .map(|p| {
                Value::Object(rename(
                    p,
                    &[
                        ("id", "id"),
                        ("nm", "name"),
                        ("cr", "creative"),
                        ("ps", "position"),
                    ],
                ))
            })
            .collect();
        data.insert(
            "promotion_action".into(),
            json!({"action": pm.get("an"), "promotions": promotions}),
        );
    }
    impressions_and_cart(m, &mut data);
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mobile SDKs' identity type numbers, pinned as the SDKs define them.
    #[test]
    fn identity_type_numbers_are_the_sdks() {
        let expected = [
            "other",
            "customer_id",
            "facebook",
            "twitter",
            "google",
            "microsoft",
            "yahoo",
            "email",
            "alias",
            "facebook_custom_audience_id",
            "other_id_2",
            "other_id_3",
            "other_id_4",
            "other_id_5",
            "other_id_6",
            "other_id_7",
            "other_id_8",
            "other_id_9",
            "other_id_10",
            "mobile_number",
            "phone_number_2",
            "phone_number_3",
        ];
        for (n, name) in (0i64..).zip(expected) {
            let kind = IdentityType::from_sdk_number(n);
            assert_eq!(kind.map(IdentityType::as_str), Some(name), "{n}");
        }
        for n in [-1, 22, 100, i64::MIN, i64::MAX] {
            assert_eq!(IdentityType::from_sdk_number(n), None, "{n}");
        }
    }

    #[test]
    fn an_envelope_becomes_a_batch() {
        let envelope = json!({
            "dt": "h", "id": "b-1", "mpid": "123", "dbg": true, "das": "stamp", "sdk": "5.50.0",
            "ai": {"an": "Shop", "av": "1.2", "apn": "com.example"},
            "di": {"b": "Pixel", "dosv": "14", "dn": "Ada's Pixel"},
            "ui": [{"n": 1, "i": "c-1"}, {"n": 7, "i": "a@example.com"}],
            "ua": {"tier": "gold"},
            "msgs": [
                {"dt": "ss", "id": "S1", "ct": 10},
                {"dt": "e", "id": "E1", "sid": "S1", "ct": 11, "n": "Tapped", "et": "UserContent", "attrs": {"k": "v"},
                 "flags": {"f": ["x"]}, "lc": {"lat": 1.0, "lng": 2.0}},
                {"dt": "cm", "sid": "S1", "ct": 12, "cu": "EUR",
                 "pd": {"an": "remove_from_wishlist", "ti": "T1", "tr": 5.0, "pl": [{"id": "sku", "nm": "Tee", "pr": 5.0, "qt": 1}]}}
            ]
        });
        let batch = translate(&envelope, MobileOs::Android).unwrap();
        assert_eq!(batch["mpid"], "123");
        assert_eq!(batch["environment"], "development");
        assert_eq!(batch["mp_deviceid"], "stamp");
        assert_eq!(batch["application_info"]["application_name"], "Shop");
        assert_eq!(batch["device_info"]["device"], "Ada's Pixel");
        assert_eq!(batch["device_info"]["platform"], "Android");
        assert_eq!(
            batch["user_identities"],
            json!({"customer_id": "c-1", "email": "a@example.com"})
        );
        let events = batch["events"].as_array().unwrap();
        assert_eq!(events[0]["data"]["session_uuid"], "S1");
        assert_eq!(events[1]["data"]["custom_event_type"], "user_content");
        assert_eq!(
            events[1]["data"]["location"],
            json!({"latitude": 1.0, "longitude": 2.0})
        );
        assert_eq!(
            events[2]["data"]["product_action"]["action"],
            "remove_from_wish_list"
        );
        assert_eq!(
            events[2]["data"]["product_action"]["products"][0]["name"],
            "Tee"
        );
    }

    #[test]
    fn unknown_message_types_are_named() {
        let envelope = json!({"dt": "h", "msgs": [{"dt": "ss"}, {"dt": "zz"}]});
        let e = translate(&envelope, MobileOs::Ios).unwrap_err();
        assert_eq!(e.field, "msgs[1].dt");
        assert!(translate(&json!({"dt": "ac"}), MobileOs::Ios).is_err());
    }
}
