//! Consent on the user profile: each batch's stated purposes merged into the stored ones, per
//! purpose, by the group commit that stores the batch (on SQLite and on PostgreSQL).

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::harness::{TestStore, batch};
use crate::model::ids::Mpid;
use crate::store::queue::ProfileUpdate;
use crate::store::steps::{ProfileRow, upsert_profiles};

const USER: Mpid = Mpid::new(42);

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("test consent is an object"),
    }
}

fn purpose(consented: bool, at: i64) -> Value {
    json!({"consented": consented, "timestamp_unixtime_ms": at})
}

/// Upserts one profile row per consent, each in its own transaction (as separate commits do).
async fn upsert_each(db: &TestStore, consents: Vec<Value>) {
    for (at, consent) in (1_000..).step_by(1_000).zip(consents) {
        let row = ProfileRow {
            mpid: USER,
            patch: Map::new(),
            consent: object(consent),
        };
        let mut tx = db.store.begin().await.expect("begin");
        upsert_profiles(&mut tx, &[row], at).await.expect("upsert");
        tx.commit().await.expect("commit");
    }
}

#[tokio::test]
async fn a_stated_purpose_replaces_the_stored_one_and_the_others_stay() {
    let db = TestStore::open().await;
    let mut first_analytics = purpose(true, 1);
    first_analytics["document"] = json!("v1");
    upsert_each(
        &db,
        vec![
            json!({"gdpr": {"marketing": purpose(true, 1), "analytics": first_analytics},
                   "ccpa": {"data_sale_opt_out": purpose(false, 1)}}),
            json!({"gdpr": {"analytics": purpose(false, 2)}}),
            json!({"ccpa": {"data_sale_opt_out": purpose(true, 3)}}),
            json!({}),
        ],
    )
    .await;
    let consent = db.store.user_consent(USER).await.expect("read");
    assert_eq!(
        consent,
        Some(json!({
            "gdpr": {"marketing": purpose(true, 1), "analytics": purpose(false, 2)},
            "ccpa": {"data_sale_opt_out": purpose(true, 3)},
        }))
    );
    let profile = db.store.get_user(USER).await.expect("profile");
    assert_eq!(
        crate::model::consent::state(&profile.consent),
        consent.expect("stored")
    );
}

#[tokio::test]
async fn restating_the_stored_consent_or_none_keeps_it_and_a_change_after_still_merges() {
    // As an SDK sends it: the whole consent state with every upload, mostly unchanged.
    let db = TestStore::open().await;
    let whole = json!({"gdpr": {"marketing": purpose(true, 1), "analytics": purpose(true, 1)},
                       "ccpa": {"data_sale_opt_out": purpose(false, 1)}});
    // First none (a stored `{}`), which the first statement must still merge into.
    upsert_each(
        &db,
        vec![json!({}), whole.clone(), whole.clone(), json!({})],
    )
    .await;
    assert_eq!(
        db.store.user_consent(USER).await.expect("read"),
        Some(whole.clone())
    );
    upsert_each(
        &db,
        vec![json!({"gdpr": {"marketing": purpose(false, 4)}}), json!({})],
    )
    .await;
    assert_eq!(
        db.store.user_consent(USER).await.expect("read"),
        Some(
            json!({"gdpr": {"marketing": purpose(false, 4), "analytics": purpose(true, 1)},
                    "ccpa": {"data_sale_opt_out": purpose(false, 1)}})
        )
    );
}

#[tokio::test]
async fn a_user_without_stated_consent_has_empty_regulations_and_a_stranger_none() {
    let db = TestStore::open().await;
    upsert_each(&db, vec![json!({})]).await;
    assert_eq!(
        db.store.user_consent(USER).await.expect("read"),
        Some(json!({"gdpr": {}, "ccpa": {}}))
    );
    assert_eq!(
        db.store.user_consent(Mpid::new(7)).await.expect("read"),
        None
    );
}

#[tokio::test]
async fn one_group_merges_its_batches_consent_in_order() {
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(3600));
    let with_consent = |at: i64, consent: Value| {
        let mut batch = batch("in_a", None, at, &[]);
        batch.profile = Some(ProfileUpdate {
            mpid: USER,
            patch: Map::new(),
            consent: object(consent),
        });
        batch
    };
    node.ingest(vec![
        with_consent(
            1_000,
            json!({"gdpr": {"marketing": purpose(true, 1), "analytics": purpose(true, 1)}}),
        ),
        with_consent(2_000, json!({"gdpr": {"marketing": purpose(false, 2)}})),
    ])
    .await;
    assert_eq!(
        db.store.user_consent(USER).await.expect("read"),
        Some(json!({
            "gdpr": {"marketing": purpose(false, 2), "analytics": purpose(true, 1)},
            "ccpa": {},
        }))
    );
}

#[tokio::test]
async fn a_handed_over_job_that_reads_consent_carries_its_users_merged_consent() {
    let db = TestStore::open().await;
    let mut node = db.node(Duration::from_secs(3600));
    // An earlier commit stated analytics; this batch states marketing.
    upsert_each(&db, vec![json!({"gdpr": {"analytics": purpose(true, 1)}})]).await;
    let mut stated = batch("in_a", None, 2_000, &["conn_rules", "conn_plain"]);
    stated.jobs[0].reads_consent = true;
    stated.profile = Some(ProfileUpdate {
        mpid: USER,
        patch: Map::new(),
        consent: object(json!({"gdpr": {"marketing": purpose(true, 2)}})),
    });
    // A batch without a user has no profile to carry.
    let mut anonymous = batch("in_a", None, 2_000, &["conn_rules"]);
    anonymous.jobs[0].reads_consent = true;
    node.ingest(vec![stated, anonymous]).await;

    let jobs = node.handed_over();
    let carried: Vec<(&str, Option<Value>)> = jobs
        .iter()
        .map(|job| {
            let consent = job.profile_consent.as_deref().cloned();
            (job.connection_id.as_str(), consent)
        })
        .collect();
    let merged = json!({
        "gdpr": {"analytics": purpose(true, 1), "marketing": purpose(true, 2)},
        "ccpa": {},
    });
    assert_eq!(
        carried,
        [
            ("conn_rules", Some(merged)),
            ("conn_plain", None),
            ("conn_rules", None)
        ]
    );
}

/// Jobs the poller claims read their users' consent together, in one query per claim: each
/// user with a profile answers their stored consent, a stranger nothing.
#[tokio::test]
async fn the_consent_of_many_users_is_read_at_once() {
    let db = TestStore::open().await;
    let other = Mpid::new(43);
    upsert_each(&db, vec![json!({"gdpr": {"marketing": purpose(true, 1)}})]).await;
    let row = ProfileRow {
        mpid: other,
        patch: Map::new(),
        consent: object(json!({"ccpa": {"data_sale_opt_out": purpose(true, 2)}})),
    };
    let mut tx = db.store.begin().await.expect("begin");
    upsert_profiles(&mut tx, &[row], 5_000)
        .await
        .expect("upsert");
    tx.commit().await.expect("commit");

    let stranger = Mpid::new(7);
    let read = db
        .store
        .users_consent(&[USER, stranger, other, USER])
        .await
        .expect("read");
    assert_eq!(read.len(), 2, "one entry per user with a profile: {read:?}");
    for mpid in [USER, other] {
        let one = db.store.user_consent(mpid).await.expect("read one");
        assert_eq!(read.get(&mpid), one.as_ref(), "user {mpid:?}");
    }
    assert!(!read.contains_key(&stranger));
    assert!(db.store.users_consent(&[]).await.expect("none").is_empty());
}
