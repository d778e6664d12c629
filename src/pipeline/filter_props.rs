//! Property tests of the Data Filter and forwarding rules: for random batches and rule sets, what
//! leaves is what came in minus exactly what the rules remove. The expected result is worked out
//! here from the rules as the issue states them, independently of `rules.rs`.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;
use crate::pipeline::rules::sampled_in;

const EVENTS: &[(&str, Option<&str>)] = &[
    ("custom_event", Some("A")),
    ("custom_event", Some("B")),
    ("screen_view", Some("Home")),
    ("commerce_event", Some("purchase")),
    ("commerce_event", Some("add_to_cart")),
    ("session_start", None),
];
const ATTRIBUTES: &[&str] = &["a", "b", "plan"];
const USER_ATTRIBUTES: &[&str] = &["$Age", "plan", "tier"];
const IDENTITIES: &[&str] = &["email", "customer_id"];
const VALUES: &[&str] = &["pro", "free"];

fn event_doc(kind: usize, attributes: &[(usize, usize)]) -> Value {
    let (event_type, name) = EVENTS[kind];
    let custom: Map<String, Value> = attributes
        .iter()
        .map(|&(a, v)| (ATTRIBUTES[a].to_owned(), json!(VALUES[v])))
        .collect();
    let mut data = json!({"custom_attributes": custom});
    match (event_type, name) {
        ("custom_event", Some(n)) => data["event_name"] = json!(n),
        ("screen_view", Some(n)) => data["screen_name"] = json!(n),
        ("commerce_event", Some(n)) => data["product_action"] = json!({"action": n}),
        _ => {}
    }
    json!({"event_type": event_type, "data": data})
}

fn arb_batch() -> impl Strategy<Value = Value> {
    let event = (
        0..EVENTS.len(),
        proptest::collection::vec((0..ATTRIBUTES.len(), 0..VALUES.len()), 0..3),
    );
    (
        proptest::collection::vec(event, 0..8),
        proptest::collection::btree_map(0..USER_ATTRIBUTES.len(), 0..VALUES.len(), 0..3),
        proptest::collection::btree_set(0..IDENTITIES.len(), 0..3),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        0..1000_i64,
    )
        .prop_map(|(events, users, ids, marketing, opt_out, mpid)| {
            let mut doc = json!({
                "events": events.iter().map(|(k, a)| event_doc(*k, a)).collect::<Vec<_>>(),
                "mpid": mpid,
                "user_attributes": users.iter().map(|(k, v)| (USER_ATTRIBUTES[*k].to_owned(), json!(VALUES[*v]))).collect::<Map<_, _>>(),
                "user_identities": ids.iter().map(|i| json!({"identity_type": IDENTITIES[*i], "identity": "x", "timestamp_unixtime_ms": 1})).collect::<Vec<_>>(),
                "consent_state": {"gdpr": {}, "ccpa": {}},
            });
            if let Some(c) = marketing {
                doc["consent_state"]["gdpr"]["marketing"] = json!({"consented": c, "timestamp_unixtime_ms": 1});
            }
            if let Some(c) = opt_out {
                doc["consent_state"]["ccpa"]["data_sale_opt_out"] = json!({"consented": c, "timestamp_unixtime_ms": 1});
            }
            doc
        })
}

/// A rule's data point as a key: at most one rule per point, so the expected outcome needs no
/// tie-breaking.
type Point = (String, Option<String>, Option<String>);

fn arb_rules() -> impl Strategy<Value = (bool, BTreeMap<Point, bool>, Value)> {
    let point = prop_oneof![
        (0..EVENTS.len()).prop_map(|k| (EVENTS[k].0.to_owned(), None, None)),
        (0..EVENTS.len()).prop_map(|k| (
            EVENTS[k].0.to_owned(),
            EVENTS[k].1.map(str::to_owned),
            None
        )),
        (0..EVENTS.len(), any::<bool>(), 0..ATTRIBUTES.len()).prop_map(|(k, named, a)| (
            EVENTS[k].0.to_owned(),
            EVENTS[k].1.filter(|_| named).map(str::to_owned),
            Some(ATTRIBUTES[a].to_owned())
        )),
        (0..USER_ATTRIBUTES.len()).prop_map(|a| (
            "user".to_owned(),
            Some(USER_ATTRIBUTES[a].to_owned()),
            None
        )),
        (0..IDENTITIES.len()).prop_map(|i| (
            "identity".to_owned(),
            Some(IDENTITIES[i].to_owned()),
            None
        )),
    ];
    let attribute = proptest::option::of((
        any::<bool>(),
        0..ATTRIBUTES.len(),
        0..VALUES.len(),
        any::<bool>(),
    ));
    (
        any::<bool>(),
        proptest::collection::btree_map(point, any::<bool>(), 0..8),
        attribute,
        any::<[bool; 3]>(),
        proptest::sample::select(vec![1_u8, 50, 100, 100]),
    )
        .prop_map(|(new_points, rules, attribute, flags, percent)| {
            let wire: Vec<Value> = rules
                .iter()
                .map(|((kind, name, attr), send)| match kind.as_str() {
                    "user" => json!({"user_attribute": name, "send": send}),
                    "identity" => json!({"identity_type": name, "send": send}),
                    _ => {
                        let mut rule = json!({"event_type": kind, "send": send});
                        if let Some(n) = name {
                            rule["event_name"] = json!(n);
                        }
                        if let Some(a) = attr {
                            rule["attribute"] = json!(a);
                        }
                        rule
                    }
                })
                .collect();
            let attribute = attribute.map(|(user, a, v, only)| {
                json!({
                    "scope": if user { "user" } else { "event" },
                    "name": if user { USER_ATTRIBUTES[a] } else { ATTRIBUTES[a] },
                    "value": VALUES[v],
                    "mode": if only { "only_forward" } else { "dont_forward" },
                })
            });
            let settings = json!({
                "send_as_batch": true,
                "data_filter": {"send_new_data_points": new_points, "rules": wire},
                "forwarding_rules": {
                    "attribute": attribute,
                    "require_login_identity": flags[0],
                    "gdpr_purposes": if flags[1] { vec!["marketing"] } else { vec![] },
                    "ccpa_respect_data_sale_opt_out": flags[2],
                    "user_sample_percent": percent,
                },
            });
            (new_points, rules, settings)
        })
}

/// Whether the user's data may leave at all, from the forwarding rules as the issue states them.
/// `profile`: the user's consent as their profile keeps it, which decides over the batch's own.
fn user_allowed(settings: &Value, doc: &Value, profile: Option<&Value>) -> bool {
    let rules = &settings["forwarding_rules"];
    let percent = u8::try_from(rules["user_sample_percent"].as_u64().unwrap_or(100)).unwrap_or(100);
    let consent = profile.unwrap_or(&doc["consent_state"]);
    let gdpr_ok = rules["gdpr_purposes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| consent["gdpr"][p.as_str().unwrap()]["consented"] == json!(true));
    let ccpa_ok = rules["ccpa_respect_data_sale_opt_out"] != json!(true)
        || consent["ccpa"]["data_sale_opt_out"]["consented"] != json!(true);
    let login_ok = rules["require_login_identity"] != json!(true)
        || !doc["user_identities"].as_array().unwrap().is_empty();
    let attribute = &rules["attribute"];
    let user_attribute_ok = attribute["scope"] != json!("user")
        || attribute_passes(
            attribute,
            &doc["user_attributes"][attribute["name"].as_str().unwrap()],
        );
    sampled_in(doc["mpid"].as_i64(), percent) && gdpr_ok && ccpa_ok && login_ok && user_attribute_ok
}

fn attribute_passes(rule: &Value, found: &Value) -> bool {
    let matches = *found == rule["value"];
    if rule["mode"] == json!("only_forward") {
        matches
    } else {
        !matches
    }
}

fn lookup(
    rules: &BTreeMap<Point, bool>,
    kind: &str,
    name: Option<&str>,
    attr: Option<&str>,
) -> Option<bool> {
    rules
        .get(&(
            kind.to_owned(),
            name.map(str::to_owned),
            attr.map(str::to_owned),
        ))
        .copied()
}

/// The event as it should leave, or `None` when it should not.
fn expected_event(
    settings: &Value,
    new_points: bool,
    rules: &BTreeMap<Point, bool>,
    event: &Value,
) -> Option<Value> {
    let kind = event["event_type"].as_str().unwrap();
    let (_, name) = EVENTS
        .iter()
        .find(|(t, n)| *t == kind && event_doc_name(event) == *n)?;
    let type_rule = lookup(rules, kind, None, None);
    let sends = type_rule != Some(false)
        && name
            .and_then(|n| lookup(rules, kind, Some(n), None))
            .or(type_rule)
            .unwrap_or(new_points);
    let attribute = &settings["forwarding_rules"]["attribute"];
    let custom = &event["data"]["custom_attributes"];
    if !sends
        || (attribute["scope"] == json!("event")
            && !attribute_passes(attribute, &custom[attribute["name"].as_str().unwrap()]))
    {
        return None;
    }
    let mut out = event.clone();
    out["data"]["custom_attributes"]
        .as_object_mut()
        .unwrap()
        .retain(|key, _| {
            name.and_then(|n| lookup(rules, kind, Some(n), Some(key)))
                .or(lookup(rules, kind, None, Some(key)))
                .unwrap_or(new_points)
        });
    Some(out)
}

fn event_doc_name(event: &Value) -> Option<&str> {
    let data = &event["data"];
    data["event_name"]
        .as_str()
        .or(data["screen_name"].as_str())
        .or(data["product_action"]["action"].as_str())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Events, attributes, user attributes and identities leave exactly when the rules let them.
    #[test]
    fn what_leaves_is_what_came_in_minus_what_the_rules_remove(
        doc in arb_batch(),
        profile in proptest::option::of(arb_batch()),
        (new_points, rules, settings_json) in arb_rules(),
    ) {
        let settings = ConnectionSettings::from_json(settings_json.clone()).unwrap();
        let webhook = WebhookSettings::with_url("http://x");
        // Another random batch's consent stands for the one the user's profile holds.
        let profile = profile.map(|p| p["consent_state"].clone());
        let plan = plan(&settings, &webhook, BatchId::new(1), &doc, profile.as_ref());
        let inbound = doc["events"].as_array().unwrap();
        let allowed = user_allowed(&settings_json, &doc, profile.as_ref());
        let expected: Vec<Value> = if allowed {
            inbound.iter().filter_map(|e| expected_event(&settings_json, new_points, &rules, e)).collect()
        } else {
            Vec::new()
        };
        let body: Option<Value> = plan.payloads.first().map(|p| serde_json::from_slice(&p.body).unwrap());
        prop_assert!(plan.payloads.len() <= 1);
        let sent = body.as_ref().map(|b| b["events"].as_array().unwrap().clone()).unwrap_or_default();
        prop_assert_eq!(&sent, &expected);
        prop_assert_eq!(plan.verdicts.iter().filter(|v| **v == Verdict::Forwarded).count(), expected.len());
        if !allowed {
            prop_assert!(plan.payloads.is_empty(), "all or nothing of a user");
            prop_assert!(plan.verdicts.iter().all(|v| matches!(v, Verdict::Ruled(r) if r.setting() == SettingName::ForwardingRules)));
        }
        if let Some(body) = body {
            let user_attributes: Map<String, Value> = doc["user_attributes"].as_object().unwrap().iter()
                .filter(|(k, _)| lookup(&rules, "user", Some(k), None).unwrap_or(new_points))
                .map(|(k, v)| (k.clone(), v.clone())).collect();
            prop_assert_eq!(&body["user_attributes"], &Value::Object(user_attributes));
            let identities: Vec<Value> = doc["user_identities"].as_array().unwrap().iter()
                .filter(|i| lookup(&rules, "identity", i["identity_type"].as_str(), None).unwrap_or(new_points))
                .cloned().collect();
            prop_assert_eq!(&body["user_identities"], &Value::Array(identities));
            prop_assert_eq!(&body["consent_state"], &doc["consent_state"]);
            prop_assert_eq!(&body["mpid"], &doc["mpid"]);
        }
    }
}
