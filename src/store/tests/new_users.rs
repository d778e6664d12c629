//! Batches without an MPID that make new users, through the group commit: each new user's row
//! is written once, with the profile its batches give it, as a returning user's row would be
//! merged (issue 16, item 4: a new user cost about five more B-tree writes than a batch with
//! an MPID, one of them the same users row inserted and then updated).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::harness::{TestStore, batch, on_postgres};
use crate::model::ids::Mpid;
use crate::store::backend::{Sql, args};
use crate::store::queue::{IngestOutcome, NewBatch, ProfileUpdate, Unresolved};

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("test profiles are objects"),
    }
}

/// A profile update that sets and deletes an attribute and states consent.
fn profile(mpid: Mpid) -> ProfileUpdate {
    ProfileUpdate {
        mpid,
        patch: object(json!({"tier": "gold", "gone": null})),
        consent: object(json!({"gdpr": {"marketing": {"consented": true}}})),
    }
}

/// A batch of the customer id `who` without an MPID, whose one job reads consent.
fn unnamed(who: &str, request: &str) -> NewBatch {
    let mut named = batch("in_1", Some(request), 1_000, &["conn_1"]);
    named.jobs[0].reads_consent = true;
    let mut user_jobs = named.jobs.clone();
    user_jobs[0].mpid = Some(Mpid::new(0));
    named.unresolved = Some(Box::new(Unresolved {
        identities: vec![("customer_id".to_owned(), who.to_owned())],
        device: None,
        may_create: true,
        said_zero: false,
        body: Arc::clone(&named.body),
        user_jobs,
        anonymous_jobs: named.jobs.clone(),
        profile: profile(Mpid::new(0)),
        resolved: Arc::default(),
    }));
    named
}

const UPDATES: Sql = Sql::shared("CREATE TABLE user_updates (mpid BIGINT NOT NULL)");
const COUNT_UPDATES: Sql = Sql::postgres_only(
    "CREATE FUNCTION count_user_update() RETURNS trigger LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO user_updates VALUES (NEW.mpid); RETURN NEW; END $$",
);
const ON_UPDATE: Sql = Sql::each(
    "CREATE TRIGGER user_updated AFTER UPDATE ON users \
     BEGIN INSERT INTO user_updates VALUES (new.mpid); END",
    "CREATE TRIGGER user_updated AFTER UPDATE ON users \
     FOR EACH ROW EXECUTE FUNCTION count_user_update()",
);
const UPDATED: Sql = Sql::shared("SELECT COUNT(*) FROM user_updates");
const PROFILE: Sql = Sql::shared(
    "SELECT mpid, created_at, last_seen_at, user_attributes, consent FROM users WHERE mpid = $1",
);
const NEW_USER: Sql =
    Sql::shared("INSERT INTO users (mpid, created_at, last_seen_at) VALUES ($1, $2, $2)");

/// Counts every UPDATE of a users row from now on.
async fn count_user_updates(db: &TestStore) {
    for statement in [UPDATES, COUNT_UPDATES, ON_UPDATE] {
        db.store.execute(statement, &[]).await.expect("trigger");
    }
}

async fn user_updates(db: &TestStore) -> i64 {
    let (n,): (i64,) = db.store.fetch_one(UPDATED, &[]).await.expect("count");
    n
}

#[tokio::test]
async fn a_new_users_row_is_written_once_and_a_returning_users_updated() {
    let db = TestStore::open().await;
    count_user_updates(&db).await;
    let mut node = db.node(Duration::from_secs(60));
    let group = vec![
        unnamed("once-1", "r1"),
        unnamed("once-2", "r2"),
        unnamed("once-1", "r3"),
    ];
    let outcomes = node.ingest(group).await;
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, IngestOutcome::Stored { .. })),
        "{outcomes:?}"
    );
    assert_eq!(user_updates(&db).await, 0, "a new user's row was updated");
    let handed = node.handed_over();
    assert_eq!(handed.len(), 3);
    for job in &handed {
        let consent = job.profile_consent.as_deref().expect("consent handed over");
        assert_eq!(consent["gdpr"]["marketing"]["consented"], true, "{consent}");
    }
    node.ingest(vec![unnamed("once-2", "r4")]).await;
    assert_eq!(
        user_updates(&db).await,
        1,
        "a returning user is merged into"
    );
}

#[tokio::test]
async fn a_new_users_profile_is_what_merging_into_an_empty_one_makes() {
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(60));
    let made = Mpid::new(7);
    db.store
        .execute(NEW_USER, args![made, 1_000])
        .await
        .expect("user");
    let mut merged = batch("in_1", Some("a"), 1_000, &[]);
    merged.profile = Some(profile(made));
    node.ingest(vec![merged, unnamed("fresh", "b")]).await;
    let owner = db.store.find_user(
        crate::model::identity::types::IdentityType::CustomerId,
        "fresh",
    );
    let fresh = owner.await.expect("the new user").mpid;
    type Row = (Mpid, i64, i64, String, String);
    let (_, _, seen, attributes, consent): Row =
        db.store.fetch_one(PROFILE, args![made]).await.expect("row");
    let (_, created, new_seen, new_attributes, new_consent): Row = db
        .store
        .fetch_one(PROFILE, args![fresh])
        .await
        .expect("row");
    assert_eq!(new_attributes, attributes);
    assert_eq!(new_consent, consent);
    assert_eq!((created, new_seen), (seen, seen));
    let stored: Value = serde_json::from_str(&new_attributes).expect("JSON");
    assert_eq!(
        stored,
        json!({"tier": "gold"}),
        "on PostgreSQL: {}",
        on_postgres()
    );
}
