//! The legacy per-event upload of Web SDKs up to 2.21.x (`POST /v2/JS/{key}/Events`): one event
//! per request in a short-keyed "v2 DTO" (`n`, `dt`, `et`, `attrs`, `ui`, `pd`, …) translated
//! into the same batch the v3 uploads produce, so connections and outputs cannot tell them
//! apart. The key set was read from the SDK's `convertEventToDTO` (2.18.1). Pure.

use serde_json::{Map, Value, json};

use super::batch::BatchError;
use super::identity::types::IdentityType;
use super::mobile::{batch_header, copy, impressions_and_cart, products};

/// Web `MessageType` numbers and the `event_type`s the v3 converter gives them.
fn event_type(dt: i64) -> Option<&'static str> {
    Some(match dt {
        1 => "session_start",
        2 => "session_end",
        3 => "screen_view",
        4 | 20 => "custom_event",
        5 => "crash_report",
        6 => "opt_out",
        10 => "application_state_transition",
        14 => "profile",
        16 => "commerce_event",
        17 => "user_attribute_change",
        18 => "user_identity_change",
        _ => return None,
    })
}

/// Web `EventType` numbers as `custom_event_type`s.
fn custom_event_type(et: i64) -> &'static str {
    match et {
        1 => "navigation",
        2 => "location",
        3 => "search",
        4 => "transaction",
        5 => "user_content",
        6 => "user_preference",
        7 => "social",
        8 => "other",
        9 => "media",
        _ => "unknown",
    }
}

/// Web `ProductActionType` numbers as Events API actions.
fn product_action(an: i64) -> &'static str {
    match an {
        1 => "add_to_cart",
        2 => "remove_from_cart",
        3 => "checkout",
        4 => "checkout_option",
        5 => "click",
        6 => "view_detail",
        7 => "purchase",
        8 => "refund",
        9 => "add_to_wishlist",
        10 => "remove_from_wish_list",
        _ => "unknown",
    }
}

/// Translates one legacy event DTO into an Events API batch document (to be normalised next).
pub(crate) fn translate(dto: &Value) -> Result<Value, BatchError> {
    let Value::Object(d) = dto else {
        return Err(error("event", "must be a JSON object"));
    };
    let dt = d
        .get("dt")
        .and_then(Value::as_i64)
        .ok_or_else(|| error("dt", "must be a message type number"))?;
    let event_type = event_type(dt).ok_or_else(|| BatchError {
        field: "dt".into(),
        message: format!("Field \"dt\" has unknown message type {dt}."),
    })?;

    let mut batch = batch_header(d);
    let mut application = Map::new();
    copy(d, "av", &mut application, "application_version");
    batch.insert("application_info".into(), Value::Object(application));
    batch.insert("device_info".into(), json!({"platform": "web"}));
    if let Some(identities) = user_identities(d.get("ui")) {
        batch.insert("user_identities".into(), identities);
    }
    if let Some(consent) = d.get("con").filter(|c| c.is_object()) {
        batch.insert("consent_state".into(), consent.clone());
    }
    if let Some(plan) = d.get("dp_id").filter(|p| p.is_string()) {
        batch.insert(
            "context".into(),
            json!({"data_plan": {"plan_id": plan, "plan_version": d.get("dp_v")}}),
        );
    }
    let data = event_data(dt, d);
    batch.insert(
        "events".into(),
        json!([{"event_type": event_type, "data": data}]),
    );
    Ok(Value::Object(batch))
}

fn error(field: &str, problem: &str) -> BatchError {
    BatchError {
        field: field.to_owned(),
        message: format!("Field \"{field}\" {problem}."),
    }
}

/// `[{Identity, Type}]` with web `IdentityType` numbers (the same numbering as mobile).
fn user_identities(ui: Option<&Value>) -> Option<Value> {
    let records = ui?.as_array()?;
    let mut identities = Map::new();
    for record in records {
        let kind = record
            .get("Type")
            .and_then(Value::as_i64)
            .and_then(IdentityType::from_sdk_number);
        if let (Some(kind), Some(value)) = (kind, record.get("Identity").filter(|v| v.is_string()))
        {
            identities.insert(kind.as_str().into(), value.clone());
        }
    }
    Some(Value::Object(identities))
}

/// Custom flags come as arrays of strings; a one-value flag is sent by v3 as the value itself.
fn custom_flags(flags: &Map<String, Value>) -> Value {
    let flags: Map<String, Value> = flags
        .iter()
        .map(|(k, v)| match v.as_array().map(Vec::as_slice) {
            Some([single]) => (k.clone(), single.clone()),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    Value::Object(flags)
}

fn event_data(dt: i64, d: &Map<String, Value>) -> Map<String, Value> {
    let mut data = Map::new();
    copy(d, "ct", &mut data, "timestamp_unixtime_ms");
    copy(d, "sid", &mut data, "session_uuid");
    copy(d, "ssd", &mut data, "session_start_unixtime_ms");
    if let Some(Value::Object(attrs)) = d.get("attrs") {
        data.insert("custom_attributes".into(), Value::Object(attrs.clone()));
    }
    if let Some(Value::Object(flags)) = d.get("flags") {
        data.insert("custom_flags".into(), custom_flags(flags));
    }
    if let Some(Value::Object(lc)) = d.get("lc") {
        data.insert(
            "location".into(),
            json!({"latitude": lc.get("lat"), "longitude": lc.get("lng")}),
        );
    }
    match dt {
        2 => copy(d, "sl", &mut data, "session_duration_ms"),
        3 => copy(d, "n", &mut data, "screen_name"),
        4 | 20 => {
            copy(d, "n", &mut data, "event_name");
            let et = if dt == 20 {
                9
            } else {
                d.get("et").and_then(Value::as_i64).unwrap_or(0)
            };
            data.insert("custom_event_type".into(), json!(custom_event_type(et)));
        }
        5 => copy(d, "n", &mut data, "message"),
        6 => copy(d, "o", &mut data, "is_opted_out"),
        10 => {
            data.insert(
                "application_transition_type".into(),
                json!("application_initialized"),
            );
            copy(d, "fr", &mut data, "is_first_run");
            copy(d, "iu", &mut data, "is_upgrade");
            copy(d, "lr", &mut data, "launch_referral");
        }
        14 => {
            let kind = if d.get("pet").and_then(Value::as_i64) == Some(3) {
                "logout"
            } else {
                "update"
            };
            data.insert("profile_event_type".into(), json!(kind));
            data.insert(
                "previous_mpid".into(),
                d.get("mpid").cloned().unwrap_or(Value::Null),
            );
            data.insert(
                "current_mpid".into(),
                d.get("mpid").cloned().unwrap_or(Value::Null),
            );
        }
        16 => data.extend(commerce(d)),
        _ => {}
    }
    data
}

fn commerce(d: &Map<String, Value>) -> Map<String, Value> {
    let mut data = Map::new();
    copy(d, "cu", &mut data, "currency_code");
    if let Some(Value::Object(pd)) = d.get("pd") {
        let mut action = Map::new();
        let an = pd.get("an").and_then(Value::as_i64).unwrap_or(0);
        action.insert("action".into(), json!(product_action(an)));
        for (short, long) in [
            ("cs", "checkout_step"),
            ("co", "checkout_options"),
            ("ti", "transaction_id"),
            ("ta", "affiliation"),
            ("tcc", "coupon_code"),
            ("tr", "total_amount"),
            ("ts", "shipping_amount"),
            ("tt", "tax_amount"),
        ] {
            copy(pd, short, &mut action, long);
        }
        // The legacy DTO sends every amount, 0 when none was given; v3 sends only those given.
        // Without a transaction id no transaction attributes were given, so zeros mean "absent".
        if !action.contains_key("transaction_id") {
            for key in ["total_amount", "shipping_amount", "tax_amount"] {
                if action.get(key).and_then(Value::as_f64) == Some(0.0) {
                    action.remove(key);
                }
            }
        }
        action.insert("products".into(), products(pd.get("pl")));
        data.insert("product_action".into(), Value::Object(action));
    }
    if let Some(Value::Object(pm)) = d.get("pm") {
        let action = match pm.get("an").and_then(Value::as_i64) {
            Some(2) => "click",
            _ => "view",
        };
        let promotions: Vec<Value> = pm
            .get("pl")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| json!({"id": p.get("id"), "name": p.get("nm"), "creative": p.get("cr"), "position": p.get("ps")}))
            .collect();
        data.insert(
            "promotion_action".into(),
            json!({"action": action, "promotions": promotions}),
        );
    }
    impressions_and_cart(d, &mut data);
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purchase_dto_becomes_a_commerce_event() {
        let dto = json!({
            "n": "eCommerce - Purchase", "et": 16, "dt": 16, "ct": 1700, "sid": "S-1", "ssd": 1600, "dbg": true,
            "mpid": "42", "das": "dev", "sdk": "2.18.1", "av": "1.0", "ua": {"tier": "gold"},
            "ui": [{"Identity": "c-1", "Type": 1}, {"Identity": "a@x", "Type": 7}],
            "attrs": {"source": "checkout"}, "flags": {"Google.Category": ["shoes"]}, "cu": "USD",
            "pd": {"an": 7, "ti": "T-1", "tr": 64.49, "tt": 4.5, "ts": 0,
                   "pl": [{"id": "sku-1", "nm": "Sneaker", "pr": 59.99, "qt": 1, "tpa": 59.99, "attrs": null}]}
        });
        let batch = translate(&dto).unwrap();
        assert_eq!(batch["mpid"], "42");
        assert_eq!(batch["environment"], "development");
        assert_eq!(
            batch["user_identities"],
            json!({"customer_id": "c-1", "email": "a@x"})
        );
        let event = &batch["events"][0];
        assert_eq!(event["event_type"], "commerce_event");
        assert_eq!(event["data"]["product_action"]["action"], "purchase");
        assert_eq!(event["data"]["product_action"]["transaction_id"], "T-1");
        assert_eq!(
            event["data"]["product_action"]["products"][0]["name"],
            "Sneaker"
        );
        assert_eq!(
            event["data"]["custom_flags"],
            json!({"Google.Category": "shoes"})
        );
        assert_eq!(event["data"]["session_uuid"], "S-1");
    }

    #[test]
    fn page_events_keep_their_type_and_unknown_types_are_named() {
        let batch = translate(
            &json!({"dt": 4, "et": 1, "n": "Viewed Banner", "attrs": {"banner": "summer"}}),
        )
        .unwrap();
        assert_eq!(
            batch["events"][0]["data"]["custom_event_type"],
            "navigation"
        );
        assert_eq!(batch["events"][0]["data"]["event_name"], "Viewed Banner");
        assert_eq!(translate(&json!({"dt": 99})).unwrap_err().field, "dt");
        assert_eq!(translate(&json!({"n": "x"})).unwrap_err().field, "dt");
    }
}
