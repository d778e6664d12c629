//! The batch insert on its own, against a real database: SQLite by default, PostgreSQL when
//! `TEST_DATABASE_URL` is set.

use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::model::ids::InputId;
use crate::store::backend::{args, round_trips};
use crate::store::tests::harness::{TestStore, on_postgres};

fn batch(input: &str, request: Option<&str>) -> NewBatch {
    NewBatch {
        input_id: InputId::trusted(input),
        source_request_id: request.map(str::to_owned),
        received_at: 1_000,
        event_count: 2,
        body: Arc::from(format!("{{\"request\":{request:?}}}").into_bytes()),
        jobs: Vec::new(),
        profile: None,
        unresolved: None,
    }
}

#[test]
fn a_chunk_goes_in_one_statement_of_a_few_distinct_sizes() {
    assert_eq!(statement_rows(1), 1);
    assert_eq!(statement_rows(45), 64);
    assert_eq!(statement_rows(5), 8);
    for rows in 1..=MAX_INSERT_ROWS {
        let slots = statement_rows(rows);
        assert!(slots.is_power_of_two() && slots >= rows && slots <= MAX_INSERT_ROWS);
        assert!(slots < 2 * rows, "{rows} rows in a statement of {slots}");
    }
}

#[test]
fn batches_take_their_keys_in_key_order() {
    let batches = [
        batch("in_b", Some("r1")),
        batch("in_a", Some("r2")),
        batch("in_a", None),
        batch("in_a", Some("r1")),
    ];
    let refs: Vec<&NewBatch> = batches.iter().collect();
    assert_eq!(lock_order(&refs), [2, 3, 1, 0]);
}

#[tokio::test]
async fn batch_ids_are_fresh_and_duplicates_are_not_stored() {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let first = batch("in_1", Some("r1"));
    let again = batch("in_1", Some("r1"));
    let other_input = batch("in_2", Some("r1"));
    let anonymous = batch("in_1", None);
    let (ids, stored) = insert_batches(&mut tx, &[&first, &again, &other_input, &anonymous])
        .await
        .expect("insert");
    assert_eq!(ids.len(), 4);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {ids:?}");
    let later = batch("in_1", Some("r9"));
    let (later, _) = insert_batches(&mut tx, &[&later])
        .await
        .expect("insert again");
    tx.commit().await.expect("commit");

    let expected: HashSet<BatchId> = [ids[0], ids[2], ids[3]].into();
    assert_eq!(stored, expected, "the repeated request id is not stored");
    assert!(
        later[0] > ids[3],
        "ids are never reused: {later:?} after {ids:?}"
    );
    let count: (i64,) = store
        .fetch_one(Sql::shared("SELECT COUNT(*) FROM batches"), &[])
        .await
        .expect("count");
    assert_eq!(count.0, 4);
}

/// Each batch's id must be the one its row got: on SQLite across chunks and around duplicates
/// (which store nothing and keep no id), on PostgreSQL although the rows are inserted in key
/// order, not in the order the requests came.
#[tokio::test]
async fn each_batch_is_answered_with_its_own_rows_id_across_chunks_and_duplicates() {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let earlier: Vec<NewBatch> = (0..3)
        .map(|i| batch("in_1", Some(&format!("r{i}"))))
        .collect();
    let earlier: Vec<&NewBatch> = earlier.iter().collect();
    let (first_ids, _) = insert_batches(&mut tx, &earlier).await.expect("insert");
    // 70 rows (SQLite: a chunk of 64, then one of 6 in a statement of 8 rows): requests r0..r2
    // again at 1, 63 and 69, the last of each chunk among them, so the next chunk starts below
    // that chunk's last id; the others in an order their keys do not sort in.
    let requests: Vec<String> = (0..70)
        .map(|i| match i {
            1 => "r0".to_owned(),
            63 => "r1".to_owned(),
            69 => "r2".to_owned(),
            i => format!("new{}", 97 * i % 70),
        })
        .collect();
    let batches: Vec<NewBatch> = requests
        .iter()
        .map(|request| batch("in_1", Some(request)))
        .collect();
    let rows: Vec<&NewBatch> = batches.iter().collect();
    let (ids, stored) = insert_batches(&mut tx, &rows).await.expect("insert");
    tx.commit().await.expect("commit");

    assert_eq!(ids.len(), 70);
    assert!(
        ids[0] > first_ids[2],
        "ids are never reused: {ids:?} after {first_ids:?}"
    );
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "increasing: {ids:?}");
    let duplicates: Vec<usize> = (0..70).filter(|i| !stored.contains(&ids[*i])).collect();
    assert_eq!(
        duplicates,
        [1, 63, 69],
        "the repeated requests are not stored"
    );
    let rows: Vec<(BatchId, String, Vec<u8>)> = store
        .fetch_all(
            Sql::shared("SELECT id, source_request_id, body FROM batches WHERE id > $1"),
            args![first_ids[2]],
        )
        .await
        .expect("read");
    let by_id: HashMap<BatchId, (String, Vec<u8>)> = rows
        .into_iter()
        .map(|(id, request, body)| (id, (request, body)))
        .collect();
    assert_eq!(by_id.len(), 67);
    for (i, id) in ids.iter().enumerate() {
        if stored.contains(id) {
            assert_eq!(
                by_id.get(id),
                Some(&(requests[i].clone(), batches[i].body.to_vec())),
                "row {i} has its batch's id"
            );
        }
    }
}

#[tokio::test]
async fn a_request_id_repeated_in_one_group_is_stored_once() {
    let db = TestStore::open().await;
    let mut tx = db.store.begin().await.expect("begin");
    let (a, b, c) = (
        batch("in_1", Some("r1")),
        batch("in_1", Some("r0")),
        batch("in_1", Some("r1")),
    );
    let (ids, stored) = insert_batches(&mut tx, &[&a, &b, &c])
        .await
        .expect("insert");
    tx.commit().await.expect("commit");
    assert_eq!(stored, [ids[0], ids[1]].into(), "the first r1 is stored");
}

/// SQLite inserts a group in as few statements as it can, whatever its size: a chunk's
/// statement has room for more rows than the chunk has (the rest left empty and skipped), and
/// the empty rows neither store anything nor take an id.
#[tokio::test]
async fn a_group_is_one_insert_and_empty_rows_store_nothing() {
    let db = TestStore::open().await;
    let mut tx = db.store.begin().await.expect("begin");
    let batches: Vec<NewBatch> = (0..45)
        .map(|i| batch("in_1", Some(&format!("r{i}"))))
        .collect();
    let mut rows: Vec<&NewBatch> = batches.iter().collect();
    // The last real row a duplicate, right before the empty ones.
    rows.push(&batches[0]);
    round_trips::take();
    let (ids, stored) = insert_batches(&mut tx, &rows).await.expect("insert");
    let trips = round_trips::take();
    let after = batch("in_1", Some("after"));
    let (later, _) = insert_batches(&mut tx, &[&after]).await.expect("insert");
    tx.commit().await.expect("commit");

    if !on_postgres() {
        assert_eq!(trips, 1, "46 batches in one statement");
    }
    assert_eq!(ids.len(), 46);
    assert_eq!(stored.len(), 45, "every batch but the repeated one");
    assert!(!stored.contains(&ids[45]));
    assert!(later[0] > ids[45], "ids are never reused: {later:?}");
    let count: (i64,) = db
        .store
        .fetch_one(Sql::shared("SELECT COUNT(*) FROM batches"), &[])
        .await
        .expect("count");
    assert_eq!(
        count.0, 46,
        "the 45 batches and the later one, no empty row"
    );
}

/// A profile row for `mpid` setting `plan`, with consent to `marketing`.
fn profile(mpid: i64, plan: &str) -> ProfileRow {
    let consent = serde_json::json!({"gdpr": {"marketing": {"consented": true}}});
    let serde_json::Value::Object(consent) = consent else {
        unreachable!("an object");
    };
    ProfileRow {
        mpid: Mpid::new(mpid),
        patch: serde_json::Map::from_iter([("plan".to_owned(), serde_json::json!(plan))]),
        consent,
    }
}

const PLAN: Sql = Sql::shared("SELECT user_attributes FROM users WHERE mpid = $1");

#[tokio::test]
async fn profiles_go_with_the_insert_on_postgresql_only_if_every_batch_is_stored() {
    let db = TestStore::open().await;
    let mut tx = db.store.begin().await.expect("begin");
    let first = batch("in_1", Some("r1"));
    let rows = [profile(7, "gold")];
    let along = |consent| ProfilesAlong {
        rows: &rows,
        new_users: None,
        guessed: None,
        now: 1_000,
        consent,
    };
    let inserted = insert_batches_with_profiles(&mut tx, &[&first], along(true))
        .await
        .expect("insert");
    assert_eq!(inserted.stored.len(), 1);
    // A resend of r1 beside a new batch: the insert stores only r2 and upserts nothing.
    let resend = batch("in_1", Some("r1"));
    let second = batch("in_1", Some("r2"));
    let rows = [profile(7, "free")];
    let again = ProfilesAlong {
        rows: &rows,
        new_users: None,
        guessed: None,
        now: 2_000,
        consent: true,
    };
    let after_resend = insert_batches_with_profiles(&mut tx, &[&resend, &second], again)
        .await
        .expect("insert again");
    let plan: Option<(String,)> = tx.fetch_optional(PLAN, args![7_i64]).await.expect("read");
    let plan = plan.map(|(plan,)| plan);
    tx.commit().await.expect("commit");

    assert_eq!(after_resend.stored.len(), 1, "r2 only");
    assert!(after_resend.written.is_none(), "left to the caller");
    if on_postgres() {
        let consents = inserted.written.expect("upserted with the batch");
        assert_eq!(
            consents
                .get(&Mpid::new(7))
                .map(|c| c["gdpr"]["marketing"]["consented"].clone()),
            Some(serde_json::json!(true)),
            "the user's consent, answered"
        );
        assert_eq!(
            plan.as_deref(),
            Some(r#"{"plan": "gold"}"#),
            "not the resend's group's"
        );
    } else {
        // SQLite leaves every upsert to the caller.
        assert!(inserted.written.is_none());
        assert_eq!(plan, None);
    }
}
