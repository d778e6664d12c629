//! The data catalog's merging upsert on a real database (SQLite, or PostgreSQL when
//! `TEST_DATABASE_URL` is set): flushes from several nodes add up and never overwrite.

use super::harness::TestStore;
use crate::model::data_points::{Kind, PointKey, Seen, ValueType};
use crate::model::ids::InputId;
use crate::store::backend::Sql;

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

/// Makes the database refuse a data point named `poison` (a real failure, mid-flush).
const POISON: [Sql; 2] = [
    Sql::each(
        "CREATE TRIGGER poison BEFORE INSERT ON data_points WHEN NEW.name = 'poison' \
         BEGIN SELECT RAISE(ABORT, 'poisoned'); END",
        "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF NEW.name = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$",
    ),
    Sql::postgres_only(
        "CREATE TRIGGER poison BEFORE INSERT ON data_points FOR EACH ROW EXECUTE FUNCTION poison()",
    ),
];
const CURE: Sql = Sql::each("DROP TRIGGER poison", "DROP TRIGGER poison ON data_points");

/// A flush that fails part way writes nothing, so the retry of the same tally counts each data
/// point once (it used to commit chunk by chunk, and the retry counted the first chunks twice).
#[tokio::test]
async fn a_flush_that_fails_part_way_writes_nothing_and_its_retry_counts_once() {
    let db = TestStore::open().await;
    let store = &db.store;
    let input = InputId::new();
    // More than one statement's worth of rows; `poison` sorts after every `e…` name.
    let mut rows: Vec<_> = (0..1_200)
        .map(|i| {
            let key = PointKey::new(Kind::UserAttribute, "", "", &format!("e{i:04}"));
            (input.clone(), key, seen(1, 10, 10, Some(ValueType::Number)))
        })
        .collect();
    let poison = PointKey::new(Kind::UserAttribute, "", "", "poison");
    rows.push((input.clone(), poison, seen(1, 10, 10, None)));
    for sql in POISON {
        store.execute(sql, &[]).await.expect("poison");
    }
    assert!(store.merge_data_points(&rows).await.is_err());
    let kept = store.data_points(&input).await.expect("read").len();
    assert_eq!(kept, 0, "nothing of a failed flush is kept");

    store.execute(CURE, &[]).await.expect("cure");
    store.merge_data_points(&rows).await.expect("retry");
    let points = store.data_points(&input).await.expect("read");
    assert_eq!(points.len(), 1_201);
    assert!(points.iter().all(|(_, seen)| seen.count == 1));
}

#[tokio::test]
async fn every_stored_data_point_key_is_read_back_for_seeding_the_caps() {
    let db = TestStore::open().await;
    let (input, other) = (InputId::new(), InputId::new());
    let event = PointKey::event("custom_event", "a");
    let attribute = PointKey::new(Kind::EventAttribute, "custom_event", "a", "x");
    let rows = vec![
        (input.clone(), event.clone(), seen(1, 1, 1, None)),
        (input.clone(), attribute.clone(), seen(1, 1, 1, None)),
        (other.clone(), event.clone(), seen(1, 1, 1, None)),
    ];
    db.store.merge_data_points(&rows).await.expect("flush");
    let mut keys = db.store.data_point_keys().await.expect("read");
    keys.sort();
    let mut expected = vec![
        (input.clone(), event.clone()),
        (input, attribute),
        (other, event),
    ];
    expected.sort();
    assert_eq!(keys, expected);
}

/// A flush whose COMMIT answer is lost did commit: the store finds its flush id and answers it
/// as written, so the caller does not put it back and count it twice. A flush rolled back is an
/// error, and written whole when retried.
#[tokio::test]
async fn a_flush_whose_commit_answer_was_lost_counts_once() {
    use crate::store::faults::{CommitFault, inject_commit_fault};
    let db = TestStore::open().await;
    let store = &db.store;
    let input = InputId::new();
    let event = PointKey::event("custom_event", "Clicked");
    let points = vec![(input.clone(), event.clone(), seen(3, 100, 200, None))];

    inject_commit_fault(CommitFault::AnswerLost);
    store
        .merge_data_points(&points)
        .await
        .expect("a lost answer to a COMMIT that happened is settled as written");
    inject_commit_fault(CommitFault::RolledBack);
    store
        .merge_data_points(&points)
        .await
        .expect_err("a rolled-back flush is an error, to be retried");
    store.merge_data_points(&points).await.expect("the retry");

    let stored = store.data_points(&input).await.expect("read");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].1.count, 6, "written once, then once by the retry");
}
