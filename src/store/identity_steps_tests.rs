//! The identity step against a real database (SQLite, or PostgreSQL with `TEST_DATABASE_URL`):
//! a group resolved in one transaction gives the same users as IDSync's one transaction per
//! call would, in the same order, and each batch becomes what its user makes it.

use std::collections::HashMap;

use serde_json::json;

use super::*;
use crate::model::ids::{ConnectionId, InputId};
use crate::store::Store;
use crate::store::backend::Plans;
use crate::store::identity_sql::identity_lock_key;
use crate::store::queue::NewJob;
use crate::store::tests::harness::{TestStore, on_postgres};

/// (identities, device, may create a user).
type Given<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, bool);

/// The calls both ways run: new users, returning ones, a device's anonymous user converted by
/// a login in the same group, a device whose user has logged in, and a batch that may not make
/// a user.
const CALLS: &[Given<'static>] = &[
    (&[("email", "a@x")], None, true),
    (&[("email", "a@x"), ("customer_id", "c1")], None, true),
    (&[("customer_id", "c1")], None, true),
    (&[], Some("dev-1"), true),
    (&[], Some("dev-1"), true),
    (&[("email", "b@x")], Some("dev-1"), true),
    (&[("customer_id", "c2")], Some("dev-1"), true),
    (&[("email", "z@x")], Some("dev-1"), true),
    (&[("other", "o1")], None, false),
    (&[("email", "b@x")], None, false),
    (
        &[("customer_id", "c1"), ("email", "q@x")],
        Some("dev-2"),
        true,
    ),
    (&[], Some("dev-2"), true),
];

fn pairs(identities: &[(&str, &str)]) -> Vec<(String, String)> {
    identities
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn device(device: Option<&str>) -> Option<String> {
    device.map(|d| format!("device_application_stamp:{d}"))
}

fn job(mpid: Option<Mpid>) -> NewJob {
    NewJob {
        connection_id: ConnectionId::trusted("conn_a"),
        revision_id: 1,
        leased: true,
        reads_consent: false,
        mpid,
        window_ms: 0,
    }
}

fn unnamed(call: &Given<'_>) -> NewBatch {
    let body: Arc<[u8]> = Arc::from(br#"{"events":[]}"#.as_slice());
    let unresolved = Unresolved {
        identities: pairs(call.0),
        device: device(call.1),
        may_create: call.2,
        said_zero: false,
        body: Arc::clone(&body),
        user_jobs: vec![job(Some(Mpid::new(0))), job(None)],
        anonymous_jobs: vec![job(None), job(None)],
        profile: ProfileUpdate {
            mpid: Mpid::new(0),
            patch: serde_json::Map::from_iter([("tier".to_owned(), json!("gold"))]),
            consent: serde_json::Map::new(),
        },
        resolved: Arc::default(),
    };
    NewBatch {
        input_id: InputId::trusted("in_a"),
        source_request_id: None,
        received_at: 1_000,
        event_count: 0,
        body,
        jobs: unresolved.anonymous_jobs.clone(),
        profile: None,
        unresolved: Some(Box::new(unresolved)),
    }
}

/// Every call resolved in one group (its users bare: no profile rows); the batches as the step
/// left them.
async fn in_one_group(store: &Store) -> Vec<NewBatch> {
    resolved_together(store, CALLS).await
}

/// `calls` resolved in one group and committed; the batches as the step left them.
async fn resolved_together(store: &Store, calls: &[Given<'_>]) -> Vec<NewBatch> {
    let mut batches: Vec<NewBatch> = calls.iter().map(unnamed).collect();
    let mut tx = store.begin().await.expect("begin");
    let mut refs: Vec<&mut NewBatch> = batches.iter_mut().collect();
    let decided = resolve_batches(&mut tx, &mut refs, Resends::FoundByInsert)
        .await
        .expect("resolve");
    write(&mut tx, &decided, &[], 1_000, false)
        .await
        .expect("write");
    tx.commit().await.expect("commit");
    batches
}

/// Every call resolved as IDSync's identify does, one transaction each.
async fn one_by_one(store: &Store) -> Vec<Option<Mpid>> {
    let mut users = Vec::new();
    for (identities, stamp, may_create) in CALLS {
        let identities = pairs(identities);
        let stamp = device(*stamp);
        let answer = store
            .resolve_identity(&identities, stamp.as_deref(), None, 1_000, |lookup| {
                let decision = decide(Call::Identify, &identities, lookup);
                (decision.target != Target::New || *may_create).then_some(decision)
            })
            .await;
        users.push(match answer {
            Ok(resolution) => Some(resolution.mpid),
            Err(crate::store::StoreError::Refused) => None,
            Err(error) => panic!("resolve: {error}"),
        });
    }
    users
}

/// Users named by the first call that got them (MPIDs differ from store to store, so two compare
/// only this way).
fn classes(users: &[Option<Mpid>]) -> (Vec<Option<usize>>, HashMap<Mpid, usize>) {
    let mut first: HashMap<Mpid, usize> = HashMap::new();
    let named = users
        .iter()
        .enumerate()
        .map(|(i, user)| user.map(|m| *first.entry(m).or_insert(i)))
        .collect();
    (named, first)
}

const OWNERS: Sql = Sql::shared(
    "SELECT identity_type || ':' || identity, mpid FROM user_identities \
     UNION ALL SELECT device, mpid FROM device_users",
);

/// Who owns each identity and device, by class.
async fn owners(store: &Store, class: &HashMap<Mpid, usize>) -> HashMap<String, Option<usize>> {
    let rows: Vec<(String, Mpid)> = store.fetch_all(OWNERS, &[]).await.expect("owners");
    rows.into_iter()
        .map(|(key, mpid)| (key, class.get(&mpid).copied()))
        .collect()
}

async fn users(store: &Store) -> i64 {
    let count = Sql::shared("SELECT COUNT(*) FROM users");
    let (n,): (i64,) = store.fetch_one(count, &[]).await.expect("count");
    n
}

#[tokio::test]
async fn a_group_resolves_as_idsync_would_one_call_at_a_time() {
    let grouped = TestStore::open().await;
    let batches = in_one_group(&grouped.store).await;
    let group_users = users_of(&batches);
    let single = TestStore::open().await;
    let single_users = one_by_one(&single.store).await;
    assert_same_users(&grouped, &group_users, &single, &single_users).await;
}

#[tokio::test]
async fn a_resolved_batch_carries_its_user_in_body_jobs_and_profile() {
    let db = TestStore::open().await;
    let batches = in_one_group(&db.store).await;
    for batch in &batches {
        let unresolved = batch.unresolved.as_deref().expect("kept");
        let resolved = unresolved.resolved.load(Ordering::Relaxed);
        let body: serde_json::Value = serde_json::from_slice(&batch.body).expect("JSON");
        match &batch.profile {
            Some(profile) => {
                assert_eq!(profile.mpid.get(), resolved);
                assert_eq!(profile.patch["tier"], "gold");
                assert_eq!(body, json!({"mpid": resolved, "events": []}));
                assert_eq!(batch.jobs, [job(Some(profile.mpid)), job(None)]);
            }
            None => {
                assert_eq!(resolved, 0);
                assert_eq!(body, json!({"events": []}));
                assert_eq!(batch.jobs, [job(None), job(None)]);
            }
        }
    }
    assert!(batches[8].profile.is_none(), "may not make a user");
}

/// The calls in two groups, the second after the first committed, so that the second reads
/// every owner, device and login from the store; against IDSync running them all twice.
#[tokio::test]
async fn a_second_group_reads_what_the_first_stored_as_idsync_would() {
    let grouped = TestStore::open().await;
    let mut batches = in_one_group(&grouped.store).await;
    batches.extend(in_one_group(&grouped.store).await);
    let group_users = users_of(&batches);
    let single = TestStore::open().await;
    let mut single_users = one_by_one(&single.store).await;
    single_users.extend(one_by_one(&single.store).await);
    assert_same_users(&grouped, &group_users, &single, &single_users).await;
}

const LOCK: Sql = Sql::postgres_only("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))");
const MADE_USER: Sql =
    Sql::shared("INSERT INTO users (mpid, created_at, last_seen_at) VALUES (77, 1, 1)");
const GAVE_IDENTITY: Sql = Sql::shared(
    "INSERT INTO user_identities (identity_type, identity, mpid, created_at) \
     VALUES ('email', 'late@x', 77, 1)",
);
/// Advisory locks waited for in this test's database.
const WAITING: Sql = Sql::postgres_only(
    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
);

/// PostgreSQL: a group that waits for an identity's lock reads after the wait, so it finds the
/// user the lock's holder made of that identity meanwhile, and makes no second one. (A read in
/// the statement that takes the locks would not: its snapshot is older than the holder's
/// commit.)
#[tokio::test]
async fn a_group_waiting_for_an_identitys_lock_finds_the_user_its_holder_made() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let group = read_after_the_lock(db.store.clone());
    waits_for_the_holder_and_finds_its_user(&db.store, group).await;
}

/// The same for a group on a lane that guesses the identity unknown (it never saw it): its
/// batch insert takes the lock, reads after it, finds the holder's user where it guessed none,
/// stores nothing, and the group is decided again against that read.
#[tokio::test]
async fn a_lane_guessing_an_identity_unknown_finds_the_user_its_lock_holder_made() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let group = group_on_a_lane(db.store.clone());
    waits_for_the_holder_and_finds_its_user(&db.store, group).await;
}

/// The same on a server whose transactions default to REPEATABLE READ: there the first
/// statement's snapshot would serve the group's whole transaction, unless its BEGIN says READ
/// COMMITTED (without it, the group decided a new user and its write failed: "could not
/// serialize access due to concurrent update").
#[tokio::test]
async fn a_group_on_a_repeatable_read_server_finds_the_user_its_lock_holder_made() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let strict = repeatable_read(&db.store).await;
    let group = read_after_the_lock(strict.clone());
    waits_for_the_holder_and_finds_its_user(&db.store, group).await;
    strict.close().await;
}

/// The batch naming `email:late@x`, resolved by the identity step's read on a lane's
/// connection and written; its user.
async fn read_after_the_lock(store: Store) -> Option<Mpid> {
    let mut batches = [unnamed(&(&[("email", "late@x")], None, true))];
    let mut writer = store.writer_connection();
    let mut tx = writer.begin(&store, Plans::Generic).await.expect("begin");
    let mut refs: Vec<&mut NewBatch> = batches.iter_mut().collect();
    let decided = resolve_batches(&mut tx, &mut refs, Resends::FoundByInsert)
        .await
        .expect("resolve");
    write(&mut tx, &decided, &[], 1_000, false)
        .await
        .expect("write");
    tx.commit().await.expect("commit");
    writer.close().await;
    batches[0].profile.as_ref().map(|p| p.mpid)
}

/// The batch naming `email:late@x`, committed as a lane commits a group (guessing its read);
/// its user.
async fn group_on_a_lane(store: Store) -> Option<Mpid> {
    use crate::store::group::{Command, commit};
    let (reply, _answer) = tokio::sync::oneshot::channel();
    let batches = vec![unnamed(&(&[("email", "late@x")], None, true))];
    let mut group = [Command::Ingest { batches, reply }];
    let mut writer = store.writer_connection();
    commit(&store, &mut writer, &mut group, 60_000, "node", &|| false)
        .await
        .expect("the group commits");
    writer.close().await;
    let [Command::Ingest { batches, .. }] = &group else {
        unreachable!("an ingest");
    };
    batches[0].profile.as_ref().map(|p| p.mpid)
}

/// A holder on `holder_store` locks `email:late@x` and makes user 77 of it; `group` waits for
/// the lock; once the holder commits, the group must resolve to 77, the only user.
async fn waits_for_the_holder_and_finds_its_user(
    holder_store: &Store,
    group: impl Future<Output = Option<Mpid>> + Send + 'static,
) {
    let mut holder = holder_store.begin().await.expect("begin");
    holder
        .execute(LOCK, args![identity_lock_key("email", "late@x").as_str()])
        .await
        .expect("lock");
    holder.execute(MADE_USER, &[]).await.expect("user");
    holder.execute(GAVE_IDENTITY, &[]).await.expect("identity");
    let group = tokio::spawn(group);
    let mut polls = 0;
    loop {
        let (waiting,): (i64,) = holder_store.fetch_one(WAITING, &[]).await.expect("locks");
        if waiting > 0 {
            break;
        }
        polls += 1;
        assert!(
            polls < 1_000,
            "the group never waited for the identity's lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    holder.commit().await.expect("commit");
    let user = group.await.expect("the group");
    assert_eq!(user, Some(Mpid::new(77)));
    assert_eq!(
        users(holder_store).await,
        1,
        "a second user of one identity"
    );
    assert_eq!(orphans(holder_store).await, 0, "identities without a user");
}

#[test]
fn the_mpid_goes_in_front_of_any_object() {
    let m = Mpid::new(9_007_199_254_740_993);
    assert_eq!(
        &*with_mpid(br#"{"a":1}"#, m),
        br#"{"mpid":9007199254740993,"a":1}"#.as_slice()
    );
    assert_eq!(
        &*with_mpid(b"{}", m),
        br#"{"mpid":9007199254740993}"#.as_slice()
    );
    assert_eq!(
        &*with_mpid(b"{ }", m),
        br#"{"mpid":9007199254740993 }"#.as_slice()
    );
}

/// A batch of `identities` under `request`, resolved with the stored keys read first and
/// stored in one transaction, as the group commit runs the two steps when it runs a group
/// again for a resend (`round_trips` has the group's own test); the ids the insert stored.
async fn resolve_and_store(store: &Store, batches: &mut [NewBatch]) -> usize {
    let mut tx = store.begin().await.expect("begin");
    let mut refs: Vec<&mut NewBatch> = batches.iter_mut().collect();
    let decided = resolve_batches(&mut tx, &mut refs, Resends::Read)
        .await
        .expect("resolve");
    let rows: Vec<&NewBatch> = batches.iter().collect();
    let (_, stored) = crate::store::batch_steps::insert_batches(&mut tx, &rows)
        .await
        .expect("insert");
    write(&mut tx, &decided, &[], 1_000, false)
        .await
        .expect("write");
    tx.commit().await.expect("commit");
    stored.len()
}

fn keyed(identity: &str, request: &str) -> NewBatch {
    let mut batch = unnamed(&(&[("email", identity)], None, true));
    batch.source_request_id = Some(request.to_owned());
    batch
}

#[tokio::test]
async fn a_duplicate_resolves_nothing_stored_before_or_earlier_in_its_group() {
    let db = TestStore::open().await;
    assert_eq!(
        resolve_and_store(&db.store, &mut [keyed("a@x", "r1")]).await,
        1
    );
    assert_eq!(users(&db.store).await, 1);
    // A resend of r1 naming someone else, and r2 twice in one group: only r2's first is
    // stored, and only it makes a user.
    let mut group = [keyed("b@x", "r1"), keyed("c@x", "r2"), keyed("d@x", "r2")];
    assert_eq!(resolve_and_store(&db.store, &mut group).await, 1);
    assert_eq!(users(&db.store).await, 2, "a duplicate made a user");
    let owners = owners(&db.store, &HashMap::new()).await;
    let mut named: Vec<&str> = owners.keys().map(String::as_str).collect();
    named.sort_unstable();
    assert_eq!(named, ["email:a@x", "email:c@x"]);
    assert!(group[0].profile.is_none() && group[2].profile.is_none());
    assert!(group[1].profile.is_some());
}

/// `batches` resolved (resends found by the insert) and inserted with their new users' writes
/// along, as the group commit does; whether the writes went with the insert, and the batches
/// stored.
async fn inserted_with_new_users(store: &Store, batches: &mut [NewBatch]) -> (bool, usize) {
    use crate::store::batch_steps::{ProfilesAlong, insert_batches_with_profiles};
    let mut tx = store.begin().await.expect("begin");
    let mut refs: Vec<&mut NewBatch> = batches.iter_mut().collect();
    let decided = resolve_batches(&mut tx, &mut refs, Resends::FoundByInsert)
        .await
        .expect("resolve");
    let rows: Vec<ProfileRow> = (batches.iter().filter_map(|b| b.profile.as_ref()))
        .map(|p| ProfileRow {
            mpid: p.mpid,
            patch: p.patch.clone(),
            consent: p.consent.clone(),
        })
        .collect();
    let along = ProfilesAlong {
        rows: &[],
        new_users: Writing::of(&decided, &rows),
        guessed: None,
        now: 1_000,
        consent: false,
    };
    let batches: Vec<&NewBatch> = batches.iter().collect();
    let inserted = insert_batches_with_profiles(&mut tx, &batches, along)
        .await
        .expect("insert");
    tx.commit().await.expect("commit");
    (inserted.written.is_some(), inserted.stored.len())
}

/// PostgreSQL writes a group's new users, their identities and history in its batch insert's
/// statement, and only when every batch was stored: a resend's decision must not be written,
/// and the caller then writes what the stored batches decided on its own. SQLite always
/// leaves the writes to the caller.
#[tokio::test]
async fn new_users_go_with_the_insert_only_if_every_batch_is_stored() {
    let db = TestStore::open().await;
    let (along, stored) = inserted_with_new_users(&db.store, &mut [keyed("a@x", "r1")]).await;
    assert_eq!((along, stored), (on_postgres(), 1));
    let owned = owners(&db.store, &HashMap::new()).await;
    let expected = i64::from(on_postgres());
    assert_eq!(owned.len() as i64, expected, "identities given: {owned:?}");
    assert_eq!(users(&db.store).await, expected);
    if on_postgres() {
        const TIER: Sql = Sql::shared("SELECT user_attributes FROM users");
        let (tier,): (String,) = db.store.fetch_one(TIER, &[]).await.expect("user");
        assert_eq!(tier, r#"{"tier": "gold"}"#, "the new user's profile");
        assert_eq!(count(&db.store, HISTORY, "a@x").await, 1);
    }
    // A resend of r1 naming someone else beside a new batch: nothing of either is written.
    let mut group = [keyed("b@x", "r1"), keyed("c@x", "r2")];
    let (along, stored) = inserted_with_new_users(&db.store, &mut group).await;
    assert_eq!((along, stored), (false, 1));
    let owned = owners(&db.store, &HashMap::new()).await;
    assert_eq!(owned.len() as i64, expected, "identities given: {owned:?}");
    assert_eq!(users(&db.store).await, expected, "a user made");
    assert_eq!(count(&db.store, HISTORY, "c@x").await, 0);
}

/// `query`'s count for the email `value`.
async fn count(store: &Store, query: Sql, value: &str) -> i64 {
    let (n,): (i64,) = store
        .fetch_one(query, args!["email", value])
        .await
        .expect("count");
    n
}

/// New users' MPIDs grow in the order they are made, so their rows and the `mpid` indexes of
/// identities and history append at the right edge of their B-trees instead of landing on a
/// random page each (issue 16, item 4); in one group, across groups, and from IDSync.
#[tokio::test]
async fn new_users_get_mpids_that_grow_in_the_order_they_are_made() {
    let db = TestStore::open().await;
    let mut made = Vec::new();
    for group in 0..3 {
        let names: Vec<String> = (0..40).map(|i| format!("grow-{group}-{i}@x")).collect();
        let mut batches: Vec<NewBatch> = names
            .iter()
            .map(|name| unnamed(&(&[("email", name.as_str())], None, true)))
            .collect();
        let mut tx = db.store.begin().await.expect("begin");
        let mut refs: Vec<&mut NewBatch> = batches.iter_mut().collect();
        let decided = resolve_batches(&mut tx, &mut refs, Resends::FoundByInsert)
            .await
            .expect("resolve");
        write(&mut tx, &decided, &[], 1_000, false)
            .await
            .expect("write");
        tx.commit().await.expect("commit");
        made.extend(
            batches
                .iter()
                .map(|b| b.profile.as_ref().expect("a user").mpid),
        );
        let identities = pairs(&[("customer_id", &format!("grow-idsync-{group}"))]);
        let answer = db
            .store
            .resolve_identity(&identities, None, None, 1_000, |lookup| {
                Some(decide(Call::Identify, &identities, lookup))
            })
            .await
            .expect("identify");
        made.push(answer.mpid);
    }
    assert!(made.iter().all(|m| m.get() > 0), "positive: {made:?}");
    let out_of_order: Vec<_> = made.windows(2).filter(|w| w[0] >= w[1]).collect();
    assert!(out_of_order.is_empty(), "not growing: {out_of_order:?}");
}

/// `calls` resolved in one group and committed; each batch's user.
async fn group_of(store: &Store, calls: &[Given<'_>]) -> Vec<Option<Mpid>> {
    users_of(&resolved_together(store, calls).await)
}

/// Each batch's user, as the step left it.
fn users_of(batches: &[NewBatch]) -> Vec<Option<Mpid>> {
    batches
        .iter()
        .map(|b| b.profile.as_ref().map(|p| p.mpid))
        .collect()
}

/// The same calls gave the same users in `grouped` (resolved in groups) as in `single` (one
/// call at a time): the same batches share a user, the users own the same identities, and the
/// stores hold the same users.
async fn assert_same_users(
    grouped: &TestStore,
    group_users: &[Option<Mpid>],
    single: &TestStore,
    single_users: &[Option<Mpid>],
) {
    let (group_classes, group_map) = classes(group_users);
    let (single_classes, single_map) = classes(single_users);
    assert_eq!(group_classes, single_classes);
    assert_eq!(
        owners(&grouped.store, &group_map).await,
        owners(&single.store, &single_map).await
    );
    assert_eq!(users(&grouped.store).await, users(&single.store).await);
    assert_eq!(
        orphans(&grouped.store).await,
        0,
        "identities without a user"
    );
}

/// A device whose user has since logged in gets a new anonymous user, as IDSync gives it:
/// the second group must read from the store that the device's user has a login (in one
/// group that is known without a read).
#[tokio::test]
async fn a_device_whose_user_logged_in_in_an_earlier_group_gets_a_new_user() {
    let db = TestStore::open().await;
    let first = group_of(
        &db.store,
        &[
            (&[], Some("dev-9"), true),
            (&[("customer_id", "c9")], Some("dev-9"), true),
        ],
    )
    .await;
    assert!(first[0].is_some());
    assert_eq!(first[0], first[1], "the device's user logs in");
    let second = group_of(&db.store, &[(&[], Some("dev-9"), true)]).await;
    assert!(second[0].is_some());
    assert_ne!(
        second[0], first[0],
        "the logged-in user was given to an anonymous batch"
    );
    assert_eq!(users(&db.store).await, 2);
}

const ISOLATION: Sql = Sql::postgres_only("SHOW transaction_isolation");

/// A store on `store`'s PostgreSQL database whose connections' transactions default to
/// REPEATABLE READ (set with the connection's options: the test database is left as it is).
async fn repeatable_read(store: &Store) -> Store {
    let Store::Postgres(pool) = store else {
        unreachable!("on PostgreSQL")
    };
    let options = (*pool.connect_options())
        .clone()
        .options([("default_transaction_isolation", "repeatable read")]);
    let strict = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .expect("connect");
    Store::Postgres(strict)
}

/// The isolation a transaction runs at.
async fn isolation_of(tx: &mut crate::store::backend::Tx<'_>) -> String {
    let (level,): (String,) = tx.fetch_one(ISOLATION, &[]).await.expect("isolation");
    level
}

/// PostgreSQL: the group's transaction and IDSync's run at READ COMMITTED whatever the server's
/// default: the identity read's statements each need a snapshot taken after the locks they
/// wait for (at REPEATABLE READ the first statement's snapshot would serve them all: see
/// `a_group_on_a_repeatable_read_server_finds_the_user_its_lock_holder_made`).
#[tokio::test]
async fn identity_transactions_read_committed_on_a_repeatable_read_server() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let store = repeatable_read(&db.store).await;
    let (default,): (String,) = store
        .fetch_one(
            Sql::postgres_only("SHOW default_transaction_isolation"),
            &[],
        )
        .await
        .expect("default");
    assert_eq!(
        default, "repeatable read",
        "the server's default was not set"
    );
    let mut writer = store.writer_connection();
    let mut group = writer
        .begin(&store, Plans::Generic)
        .await
        .expect("group begin");
    let group_level = isolation_of(&mut group).await;
    group.commit().await.expect("commit");
    let mut idsync = store.begin().await.expect("begin");
    let idsync_level = isolation_of(&mut idsync).await;
    idsync.commit().await.expect("commit");
    writer.close().await;
    store.close().await;
    assert_eq!(
        (group_level.as_str(), idsync_level.as_str()),
        ("read committed", "read committed")
    );
}

/// Identities and devices whose user has no row: none may exist (PostgreSQL has no foreign key
/// from them to users since migration 0030; every writer inserts the user first).
const ORPHANS: Sql = Sql::shared(
    "SELECT COUNT(*) FROM (SELECT mpid FROM user_identities UNION ALL \
     SELECT mpid FROM device_users) AS r WHERE NOT EXISTS \
     (SELECT 1 FROM users u WHERE u.mpid = r.mpid)",
);

async fn orphans(store: &Store) -> i64 {
    let (n,): (i64,) = store.fetch_one(ORPHANS, &[]).await.expect("orphans");
    n
}

const HISTORY: Sql = Sql::shared(
    "SELECT COUNT(*) FROM identity_changes WHERE identity_type = $1 AND new_value = $2",
);

/// A batch that names one identity twice makes one user, who is given it once and whose
/// history records it once (PostgreSQL's insert of identities has no `ON CONFLICT` to skip a
/// second row of one identity; the history recorded it twice).
#[tokio::test]
async fn a_batch_naming_an_identity_twice_is_given_it_once() {
    let db = TestStore::open().await;
    let twice: Given<'_> = (&[("email", "twice@x"), ("email", "twice@x")], None, true);
    let users_made = group_of(&db.store, &[twice]).await;
    assert!(users_made[0].is_some());
    assert_eq!(users(&db.store).await, 1);
    let owners = owners(&db.store, &HashMap::new()).await;
    assert_eq!(owners.keys().collect::<Vec<_>>(), ["email:twice@x"]);
    let (recorded,): (i64,) = db
        .store
        .fetch_one(HISTORY, args!["email", "twice@x"])
        .await
        .expect("history");
    assert_eq!(recorded, 1, "history rows of the identity");
}

/// The WAL records each part of `plan` (EXPLAIN ANALYZE's text) wrote, summed over the parts
/// that insert (each counts its own children's), and the calls of the triggers it lists.
fn writes_and_trigger_calls(plan: &[String]) -> (u64, u64) {
    let number = |line: &str, key: &str| -> u64 {
        line.split(key)
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse().ok())
            .unwrap_or(0)
    };
    let (mut records, mut calls, mut in_insert) = (0, 0, false);
    for line in plan {
        if line.contains("->") {
            in_insert = line.contains("Insert on");
        } else if in_insert && line.trim_start().starts_with("WAL:") {
            records += number(line, "records=");
            in_insert = false;
        } else if line.starts_with("Trigger") {
            calls += number(line, "calls=");
        }
    }
    (records, calls)
}

/// PostgreSQL: what a group's new users cost in heap rows and index entries, as WAL records
/// counted by EXPLAIN for each part of the write statement: per user with two identities, its
/// row and key (2), each identity's row, key and `mpid` entry (3 each), each history row and
/// its key (2 each), 12 in all, and a few more for the group (the history's sequence logs one
/// per 32 ids, an empty index one for its first page: 7 here). The statement runs no trigger. Before (migration 0030 and the plain insert of identities) it was 16 per user
/// and a foreign-key check per identity (`ON CONFLICT`'s speculative insertion and its
/// confirmation, the history's second index).
#[tokio::test]
async fn a_new_user_costs_twelve_wal_records_and_no_foreign_key_check() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let names: Vec<String> = (0..45).map(|i| format!("wal-{i}")).collect();
    let identities: Vec<[(&str, &str); 2]> = names
        .iter()
        .map(|n| [("customer_id", n.as_str()), ("email", n.as_str())])
        .collect();
    let mut batches: Vec<NewBatch> = identities
        .iter()
        .map(|named| unnamed(&(named.as_slice(), None, true)))
        .collect();
    let mut tx = db.store.begin().await.expect("begin");
    let mut refs: Vec<&mut NewBatch> = batches.iter_mut().collect();
    let decided = resolve_batches(&mut tx, &mut refs, Resends::FoundByInsert)
        .await
        .expect("resolve");
    let explain = format!("EXPLAIN (ANALYZE, WAL, COSTS OFF) {WRITE_POSTGRES}");
    let query = sqlx::query_as::<Postgres, (String,)>(sqlx::AssertSqlSafe(explain));
    // No profile rows: every new user is inserted bare.
    let writing = Writing::of(&decided, &[]).expect("writes");
    let query = writing.bind(query).bind(1_000_i64).bind(false);
    let plan: Vec<String> = tx
        .fetch_all_postgres(query)
        .await
        .expect("explain")
        .into_iter()
        .map(|(line,)| line)
        .collect();
    tx.commit().await.expect("commit");
    let (records, trigger_calls) = writes_and_trigger_calls(&plan);
    let users = names.len() as u64;
    let plan = plan.join("\n");
    assert!(
        records >= 12 * users,
        "the plan's WAL was not read:\n{plan}"
    );
    assert!(
        records <= 12 * users + users / 4,
        "{records} WAL records for {users} new users:\n{plan}"
    );
    assert_eq!(trigger_calls, 0, "triggers ran:\n{plan}");
    assert_eq!(orphans(&db.store).await, 0);
}

/// IDSync's identify, asked with one identity twice (`{"customerid": "c", "customer_id": "c"}`
/// both name the customer id), records it in the history as often as a batch naming it twice
/// does: once (review of ddf17c2, which gave the batch once and left IDSync at twice).
#[tokio::test]
async fn idsync_naming_an_identity_twice_records_it_as_a_batch_does() {
    let db = TestStore::open().await;
    let twice = pairs(&[
        ("customer_id", "idsync-twice"),
        ("customer_id", "idsync-twice"),
    ]);
    db.store
        .resolve_identity(&twice, None, None, 1_000, |lookup| {
            Some(decide(Call::Identify, &twice, lookup))
        })
        .await
        .expect("identify");
    let (by_idsync,): (i64,) = db
        .store
        .fetch_one(HISTORY, args!["customer_id", "idsync-twice"])
        .await
        .expect("history");
    let batch: Given<'_> = (
        &[
            ("customer_id", "batch-twice"),
            ("customer_id", "batch-twice"),
        ],
        None,
        true,
    );
    group_of(&db.store, &[batch]).await;
    let (by_batch,): (i64,) = db
        .store
        .fetch_one(HISTORY, args!["customer_id", "batch-twice"])
        .await
        .expect("history");
    assert_eq!(by_idsync, by_batch, "history rows: IDSync's, a batch's");
}
