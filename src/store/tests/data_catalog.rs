//! The data catalog's merging upsert on a real database (SQLite, or PostgreSQL when
//! `TEST_DATABASE_URL` is set): flushes from several nodes add up and never overwrite.

use super::harness::TestStore;
use crate::model::data_points::{Kind, PointKey, Seen, ValueType};
use crate::model::ids::InputId;

fn seen(count: i64, first: i64, last: i64, value_type: Option<ValueType>) -> Seen {
    Seen {
        count,
        first_seen_ms: first,
        last_seen_ms: last,
        value_type,
    }
}

#[tokio::test]
async fn flushes_merge_counts_times_and_types() {
    let db = TestStore::open().await;
    let store = &db.store;
    let (input, other) = (InputId::new(), InputId::new());
    let event = PointKey::event("custom_event", "Coupon Viewed");
    let code = PointKey::new(
        Kind::EventAttribute,
        "custom_event",
        "Coupon Viewed",
        "code",
    );
    let price = PointKey::new(
        Kind::EventAttribute,
        "custom_event",
        "Coupon Viewed",
        "price",
    );
    let plan = PointKey::new(Kind::UserAttribute, "", "", "plan");
    use ValueType::{Mixed, Null, Number, String};
    // What one node flushed, then another.
    let first = vec![
        (input.clone(), event.clone(), seen(2, 100, 200, None)),
        (input.clone(), code.clone(), seen(2, 100, 200, Some(Null))),
        (
            input.clone(),
            price.clone(),
            seen(1, 100, 100, Some(Number)),
        ),
        (input.clone(), plan.clone(), seen(1, 100, 100, Some(String))),
        (other.clone(), event.clone(), seen(7, 1, 1, None)),
    ];
    let second = vec![
        (input.clone(), event.clone(), seen(3, 50, 150, None)),
        (input.clone(), code.clone(), seen(1, 300, 300, Some(String))),
        (
            input.clone(),
            price.clone(),
            seen(1, 300, 300, Some(String)),
        ),
        (input.clone(), plan.clone(), seen(1, 300, 300, Some(Null))),
    ];
    store.merge_data_points(&first).await.expect("first flush");
    store
        .merge_data_points(&second)
        .await
        .expect("second flush");
    let mut points = store.data_points(&input).await.expect("read");
    points.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        points,
        vec![
            (event.clone(), seen(5, 50, 200, None)),
            (code, seen(3, 100, 300, Some(String))),
            (price, seen(2, 100, 300, Some(Mixed))),
            (plan, seen(2, 100, 300, Some(String))),
        ]
    );
    assert_eq!(
        store.data_points(&other).await.expect("read"),
        vec![(event, seen(7, 1, 1, None))],
        "inputs are apart"
    );
    assert!(
        store
            .data_points(&InputId::new())
            .await
            .expect("read")
            .is_empty()
    );
}

/// Two nodes flushing the same data points at once, many times over: every count lands and
/// neither blocks the other for good (rows go in key order).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_flushes_from_nodes_all_count() {
    let db = TestStore::open().await;
    let input = InputId::new();
    let keys: Vec<PointKey> = (0..50)
        .map(|i| PointKey::event("custom_event", &format!("e{i}")))
        .collect();
    let flushes: Vec<_> = (0..8)
        .map(|node| {
            let store = db.store.clone();
            let mut rows: Vec<_> = keys
                .iter()
                .map(|k| (input.clone(), k.clone(), seen(1, node, node, None)))
                .collect();
            // Each node lists its rows in its own order; the store orders them.
            rows.rotate_left(usize::try_from(node).unwrap() * 7);
            tokio::spawn(async move {
                for _ in 0..5 {
                    store.merge_data_points(&rows).await.expect("flush");
                }
            })
        })
        .collect();
    for flush in flushes {
        flush.await.expect("task");
    }
    let points = db.store.data_points(&input).await.expect("read");
    assert_eq!(points.len(), 50);
    for (_, seen) in points {
        assert_eq!(
            (seen.count, seen.first_seen_ms, seen.last_seen_ms),
            (40, 0, 7)
        );
    }
}
