//! The data catalog's pure parts: what a batch's data points are called (exactly what Data
//! Filter rules match), and the tally's merging and caps.

use serde_json::json;

use super::*;
use crate::model::batch::{Channel, normalize};
use crate::model::data_filter::{DataFilter, DataPointRef};
use crate::model::event_type::EventType;

fn points(batch: Value) -> BatchPoints {
    let document = normalize(batch, Channel::ServerToServer, 1_000, "")
        .expect("valid batch")
        .document;
    points_of(&document)
}

fn key(kind: Kind, event_type: &str, event_name: &str, name: &str) -> PointKey {
    PointKey::new(kind, event_type, event_name, name)
}

#[test]
fn a_batchs_data_points_are_named_as_filter_rules_name_them() {
    let found = points(json!({
        "user_identities": {"email": "a@example.com"},
        "user_attributes": {"$Age": 3, "plan": null},
        "events": [
            {"event_type": "custom_event", "data": {"event_name": "Coupon Viewed",
             "custom_event_type": "other", "custom_attributes": {"code": "X", "n": 1}}},
            {"event_type": "custom_event", "data": {"event_name": "Coupon Viewed",
             "custom_event_type": "other", "custom_attributes": {"code": 5}}},
            {"event_type": "screen_view", "data": {"screen_name": "Home"}},
            {"event_type": "commerce_event", "data": {"promotion_action": {"action": "view",
             "promotions": [{"id": "p"}]}}},
            {"event_type": "session_start", "data": {}},
        ],
    }));
    use Kind::{Event, EventAttribute, IdentityType, UserAttribute};
    use ValueType::{Mixed, Null, Number};
    let expected: BatchPoints = vec![
        (key(Event, "commerce_event", "view", ""), None, 1),
        (key(Event, "custom_event", "Coupon Viewed", ""), None, 2),
        (key(Event, "screen_view", "Home", ""), None, 1),
        (key(Event, "session_start", "", ""), None, 1),
        (
            key(EventAttribute, "custom_event", "Coupon Viewed", "code"),
            Some(Mixed),
            2,
        ),
        (
            key(EventAttribute, "custom_event", "Coupon Viewed", "n"),
            Some(Number),
            1,
        ),
        (key(UserAttribute, "", "", "$Age"), Some(Number), 1),
        (key(UserAttribute, "", "", "plan"), Some(Null), 1),
        (key(IdentityType, "", "", "email"), None, 1),
    ];
    assert_eq!(found, expected);

    // A filter rule written from a catalog entry matches the event it came from.
    let filter = DataFilter::parse(json!({"rules": [
        {"event_type": "commerce_event", "event_name": "view", "send": false},
        {"event_type": "custom_event", "event_name": "Coupon Viewed", "attribute": "code",
         "send": false},
    ]}))
    .expect("filter");
    assert_eq!(
        filter.rule_for(&DataPointRef::Event(EventType::CommerceEvent, "view")),
        Some(false)
    );
    assert_eq!(
        filter.rule_for(&DataPointRef::EventAttribute(
            EventType::CustomEvent,
            Some("Coupon Viewed"),
            "code"
        )),
        Some(false)
    );
}

fn sorted(mut pending: Vec<Pending>) -> Vec<(PointKey, Seen)> {
    pending.sort_by(|a, b| a.1.cmp(&b.1));
    pending.into_iter().map(|(_, k, s)| (k, s)).collect()
}

#[test]
fn requests_merge_in_the_tally_until_taken_and_a_failed_flush_is_restored() {
    let catalog = DataCatalog::default();
    let input = InputId::new();
    let event = key(Kind::Event, "custom_event", "A", "");
    let attribute = key(Kind::EventAttribute, "custom_event", "A", "x");
    let batch = |t| vec![(event.clone(), None, 2), (attribute.clone(), Some(t), 2)];
    catalog.record(&input, vec![batch(ValueType::String)], 10);
    catalog.record(&input, vec![batch(ValueType::Number)], 30);
    let taken = catalog.take();
    assert_eq!(
        sorted(taken.clone()),
        vec![
            (
                event.clone(),
                Seen {
                    count: 4,
                    first_seen_ms: 10,
                    last_seen_ms: 30,
                    value_type: None
                }
            ),
            (
                attribute.clone(),
                Seen {
                    count: 4,
                    first_seen_ms: 10,
                    last_seen_ms: 30,
                    value_type: Some(ValueType::Mixed)
                }
            ),
        ]
    );
    assert!(catalog.take().is_empty(), "taking empties the tally");
    catalog.record(&input, vec![vec![(event.clone(), None, 1)]], 40);
    catalog.restore(taken);
    let merged = sorted(catalog.take());
    assert_eq!(
        merged[0],
        (
            event,
            Seen {
                count: 5,
                first_seen_ms: 10,
                last_seen_ms: 40,
                value_type: None
            }
        )
    );
}

#[test]
fn caps_drop_new_data_points_but_keep_counting_known_ones() {
    let limits = Limits {
        events: 2,
        attributes_per_event: 1,
        event_attributes: 10,
        user_attributes: 1,
        name_bytes: 8,
    };
    let catalog = DataCatalog::default();
    let input = InputId::new();
    let event = |name: &str| key(Kind::Event, "custom_event", name, "");
    let attribute = |name: &str, attr: &str| key(Kind::EventAttribute, "custom_event", name, attr);
    let batch = vec![
        (event("a"), None, 1),
        (event("b"), None, 1),
        (event("c"), None, 5),
        (attribute("a", "x"), Some(ValueType::String), 1),
        (attribute("a", "y"), Some(ValueType::String), 1),
        (attribute("c", "x"), Some(ValueType::String), 1),
        (
            key(Kind::UserAttribute, "", "", "u1"),
            Some(ValueType::Number),
            1,
        ),
        (
            key(Kind::UserAttribute, "", "", "u2"),
            Some(ValueType::Number),
            1,
        ),
        (
            key(Kind::UserAttribute, "", "", "much-too-long"),
            Some(ValueType::Number),
            1,
        ),
        (key(Kind::IdentityType, "", "", "email"), None, 1),
    ];
    catalog.record_with(&input, vec![batch], 1, &limits);
    let kept: Vec<PointKey> = sorted(catalog.take()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kept,
        vec![
            event("a"),
            event("b"),
            attribute("a", "x"),
            key(Kind::UserAttribute, "", "", "u1"),
            key(Kind::IdentityType, "", "", "email"),
        ]
    );
    // c (5), a.y, c.x, u2, the long name.
    assert_eq!(catalog.dropped(&input), 9);
    // Known data points keep counting after the caps are reached.
    catalog.record_with(&input, vec![vec![(event("a"), None, 3)]], 2, &limits);
    assert_eq!(sorted(catalog.take())[0].1.count, 3);
    assert_eq!(catalog.dropped(&input), 9);
}

#[test]
fn a_name_with_a_nul_is_dropped_because_postgresql_text_cannot_hold_it() {
    let catalog = DataCatalog::default();
    let input = InputId::new();
    let batch = vec![
        (key(Kind::Event, "custom_event", "a\0b", ""), None, 1),
        (
            key(Kind::UserAttribute, "", "", "\0"),
            Some(ValueType::String),
            1,
        ),
        (key(Kind::Event, "custom_event", "fine", ""), None, 1),
    ];
    catalog.record_with(&input, vec![batch], 1, &LIMITS);
    let kept: Vec<PointKey> = sorted(catalog.take()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kept, vec![key(Kind::Event, "custom_event", "fine", "")]);
    assert_eq!(catalog.dropped(&input), 2);
}

#[test]
fn data_points_already_in_the_table_count_toward_the_caps_after_a_restart() {
    let limits = Limits {
        events: 2,
        attributes_per_event: 1,
        event_attributes: 10,
        user_attributes: 1,
        name_bytes: 64,
    };
    let input = InputId::new();
    let event = |name: &str| key(Kind::Event, "custom_event", name, "");
    let attribute = |attr: &str| key(Kind::EventAttribute, "custom_event", "a", attr);
    let user = |name: &str| key(Kind::UserAttribute, "", "", name);
    // What earlier runs (or other nodes) flushed: the caps are full.
    let catalog = DataCatalog::default();
    catalog.seed(vec![
        (input.clone(), event("a")),
        (input.clone(), event("b")),
        (input.clone(), attribute("x")),
        (input.clone(), user("u1")),
    ]);
    let batch = vec![
        (event("a"), None, 1),
        (event("c"), None, 1),
        (attribute("x"), Some(ValueType::String), 1),
        (attribute("y"), Some(ValueType::String), 1),
        (user("u1"), Some(ValueType::Number), 1),
        (user("u2"), Some(ValueType::Number), 1),
    ];
    catalog.record_with(&input, vec![batch], 1, &limits);
    let kept: Vec<PointKey> = sorted(catalog.take()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kept, vec![event("a"), attribute("x"), user("u1")]);
    assert_eq!(
        catalog.dropped(&input),
        3,
        "c, a.y and u2 are over the caps"
    );
    // Another input's caps are its own.
    let other = InputId::new();
    catalog.record_with(&other, vec![vec![(event("c"), None, 1)]], 1, &limits);
    assert_eq!(catalog.dropped(&other), 0);
}
