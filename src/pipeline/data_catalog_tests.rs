//! The data catalog's pure parts: what a batch's data points are called (exactly what Data
//! Filter rules match), and the tally's merging and caps.

use hashbrown::DefaultHashBuilder;
use serde_json::json;

use super::*;
use crate::model::batch::{Channel, normalize};
use crate::model::data_filter::{DataFilter, DataPointRef};
use crate::model::event_type::EventType;

fn points(batch: Value) -> BatchPoints {
    let batch = normalize(batch, Channel::ServerToServer, 1_000, "").expect("valid batch");
    points_of(&batch.document, &batch.events)
}

fn key(kind: Kind, event_type: &str, event_name: &str, name: &str) -> PointKey {
    PointKey::new(kind, event_type, event_name, name)
}

/// A batch's points as sightings of `keys`, in order.
fn sightings(keys: &[(PointKey, Option<ValueType>, i64)]) -> BatchPoints {
    let mut points = BatchPoints::default();
    for (key, value_type, count) in keys {
        points.add(PointRef::from(key), *value_type, *count);
    }
    points
}

/// What `points` holds, owned, in order.
fn owned(points: &BatchPoints) -> Vec<(PointKey, Option<ValueType>, i64)> {
    points.iter().map(|(k, t, n)| (k.to_key(), t, n)).collect()
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
    use ValueType::{Mixed, Null, Number, String};
    // As the batch carries them: each event before its attributes.
    let coupon = |name: &str| key(EventAttribute, "custom_event", "Coupon Viewed", name);
    let expected = vec![
        (key(Event, "custom_event", "Coupon Viewed", ""), None, 1),
        (coupon("code"), Some(String), 1),
        (coupon("n"), Some(Number), 1),
        (key(Event, "custom_event", "Coupon Viewed", ""), None, 1),
        (coupon("code"), Some(Number), 1),
        (key(Event, "screen_view", "Home", ""), None, 1),
        (key(Event, "commerce_event", "view", ""), None, 1),
        (key(Event, "session_start", "", ""), None, 1),
        (key(UserAttribute, "", "", "$Age"), Some(Number), 1),
        (key(UserAttribute, "", "", "plan"), Some(Null), 1),
        (key(IdentityType, "", "", "email"), None, 1),
    ];
    assert_eq!(owned(&found), expected);
    // Tallied, each data point once, with its count and merged type.
    let catalog = DataCatalog::default();
    catalog.record(&InputId::new(), &[found], 7);
    let tallied: Vec<(PointKey, Option<ValueType>, i64)> = sorted(catalog.take())
        .into_iter()
        .map(|(k, seen)| (k, seen.value_type, seen.count))
        .collect();
    let expected = vec![
        (key(Event, "commerce_event", "view", ""), None, 1),
        (key(Event, "custom_event", "Coupon Viewed", ""), None, 2),
        (key(Event, "screen_view", "Home", ""), None, 1),
        (key(Event, "session_start", "", ""), None, 1),
        (coupon("code"), Some(Mixed), 2),
        (coupon("n"), Some(Number), 1),
        (key(UserAttribute, "", "", "$Age"), Some(Number), 1),
        (key(UserAttribute, "", "", "plan"), Some(Null), 1),
        (key(IdentityType, "", "", "email"), None, 1),
    ];
    assert_eq!(tallied, expected);

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
    let batch = |t| sightings(&[(event.clone(), None, 2), (attribute.clone(), Some(t), 2)]);
    catalog.record(&input, &[batch(ValueType::String)], 10);
    catalog.record(&input, &[batch(ValueType::Number)], 30);
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
    catalog.record(&input, &[sightings(&[(event.clone(), None, 1)])], 40);
    catalog.restore(taken);
    // The event merges into what was recorded since; the attribute, not seen since, is
    // pending again.
    assert_eq!(
        sorted(catalog.take()),
        vec![
            (
                event,
                Seen {
                    count: 5,
                    first_seen_ms: 10,
                    last_seen_ms: 40,
                    value_type: None
                }
            ),
            (
                attribute,
                Seen {
                    count: 4,
                    first_seen_ms: 10,
                    last_seen_ms: 30,
                    value_type: Some(ValueType::Mixed)
                }
            ),
        ]
    );
    assert!(
        catalog.take().is_empty(),
        "each restored point is taken once"
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
    catalog.record_with(&input, &[sightings(&batch)], 1, &limits);
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
    catalog.record_with(&input, &[sightings(&[(event("a"), None, 3)])], 2, &limits);
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
    catalog.record_with(&input, &[sightings(&batch)], 1, &LIMITS);
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
    catalog.record_with(&input, &[sightings(&batch)], 1, &limits);
    let kept: Vec<PointKey> = sorted(catalog.take()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kept, vec![event("a"), attribute("x"), user("u1")]);
    assert_eq!(
        catalog.dropped(&input),
        3,
        "c, a.y and u2 are over the caps"
    );
    // Another input's caps are its own.
    let other = InputId::new();
    catalog.record_with(&other, &[sightings(&[(event("c"), None, 1)])], 1, &limits);
    assert_eq!(catalog.dropped(&other), 0);
}

/// A sighting is looked up by reference: it must hash as the key it equals, or a known data
/// point would be missed and stored twice.
#[test]
fn a_borrowed_key_hashes_as_the_owned_key_it_equals() {
    let hasher = DefaultHashBuilder::default();
    let keys = [
        key(Kind::Event, "custom_event", "Coupon Viewed", ""),
        key(
            Kind::EventAttribute,
            "custom_event",
            "Coupon Viewed",
            "code",
        ),
        key(Kind::UserAttribute, "", "", "plan"),
        key(Kind::IdentityType, "", "", "email"),
        // The same letters split otherwise are another key (for `equivalent` below: names are
        // compared one by one, not joined).
        key(
            Kind::EventAttribute,
            "custom_event",
            "Coupon",
            " Viewedcode",
        ),
    ];
    for owned in &keys {
        let borrowed = PointRef::from(owned);
        assert_eq!(
            hasher.hash_one(borrowed),
            hasher.hash_one(owned),
            "{owned:?}"
        );
        assert!(borrowed.equivalent(owned));
        assert_eq!(borrowed.to_key(), *owned);
    }
    assert!(!PointRef::from(&keys[1]).equivalent(&keys[4]));
}

/// The caps see a batch's points in the batch's order: an event is admitted or refused before
/// its attributes, wherever the batch carries it.
#[test]
fn an_events_attributes_follow_it_through_the_caps_in_the_batchs_order() {
    let limits = Limits {
        events: 1,
        ..LIMITS
    };
    let catalog = DataCatalog::default();
    let input = InputId::new();
    let found = points(json!({"events": [
        {"event_type": "custom_event", "data": {"event_name": "B",
         "custom_event_type": "other", "custom_attributes": {"x": 1}}},
        {"event_type": "custom_event", "data": {"event_name": "A",
         "custom_event_type": "other", "custom_attributes": {"y": 1}}},
    ]}));
    catalog.record_with(&input, &[found], 1, &limits);
    let kept: Vec<PointKey> = sorted(catalog.take()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kept,
        vec![
            key(Kind::Event, "custom_event", "B", ""),
            key(Kind::EventAttribute, "custom_event", "B", "x"),
        ]
    );
    assert_eq!(catalog.dropped(&input), 2, "A and its attribute");
}

#[tokio::test]
async fn the_tally_is_written_after_a_round_panicked() {
    use crate::store::tests::harness::TestStore;
    use crate::supervise::{panic_next_round, panic_pending, within_patience};

    let db = TestStore::open().await;
    let catalog = Arc::new(DataCatalog::default());
    let input = InputId::new();
    let event = key(Kind::Event, "custom_event", "A", "");
    catalog.record(&input, &[sightings(&[(event.clone(), None, 3)])], 10);
    panic_next_round(TASK);
    let cancel = CancellationToken::new();
    let task = tokio::spawn(flush_periodically(
        Arc::clone(&catalog),
        db.store.clone(),
        cancel.clone(),
    ));
    let written =
        within_patience(async || !db.store.data_points(&input).await.expect("read").is_empty())
            .await;
    assert!(!panic_pending(), "no round panicked");
    assert!(
        written,
        "the tally was never written after a round panicked"
    );
    cancel.cancel();
    task.await.expect("the flusher ended");
}
