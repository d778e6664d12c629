//! What a group commit of many ingest requests costs in statements, each a round trip to the
//! database on PostgreSQL: a wake-up of a PostgreSQL backend and of the writer, which, where the
//! node, the server and the load share the cores, were a large part of the CPU per event
//! (issue 16, item 2). On SQLite the writer's thread runs its statements itself (no round trip:
//! `sqlite_lane`), but each is still SQLite's work of binding and stepping a statement. So the count is pinned here, and must not grow with the number of batches in
//! the group.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::harness::{TestStore, batch, on_postgres};
use crate::model::ids::ConnectionId;
use crate::model::ids::Mpid;
use crate::store::backend::{Plans, Sql, WriterConnection, round_trips};
use crate::store::group::{ClaimOf, Command, Done, plans_for};
use crate::store::queue::{IngestOutcome, ProfileUpdate, Unresolved};

/// The answers a test keeps so that the writer's replies have somewhere to go.
type Answers = Vec<oneshot::Receiver<crate::store::StoreResult<Vec<IngestOutcome>>>>;

/// `count` ingest requests of one batch each, every batch with its own `source_request_id`, a
/// user (one of 8) and one job.
fn requests(first: usize, count: usize) -> (Vec<Command>, Answers) {
    let mut commands = Vec::new();
    let mut answers = Vec::new();
    for n in first..first + count {
        let request = format!("req-{n}");
        let mut one = batch("in_a", Some(&request), 1_000, &["conn_a"]);
        let mpid = Mpid::new(i64::try_from(n % 8).expect("small") + 1);
        one.profile = Some(ProfileUpdate {
            mpid,
            patch: serde_json::Map::from_iter([("n".to_owned(), serde_json::json!(n))]),
            consent: serde_json::Map::new(),
        });
        one.body = Arc::from(format!("{{\"n\":{n}}}").into_bytes());
        let (reply, answer) = oneshot::channel();
        commands.push(Command::Ingest {
            batches: vec![one],
            reply,
        });
        answers.push(answer);
    }
    (commands, answers)
}

/// Commits `warm`, then `group`, on one lane's connection (so the second finds it as a running
/// lane does); answers the second's answers and round trips.
async fn commit_counting(
    db: &TestStore,
    warm: &mut [Command],
    group: &mut [Command],
) -> (Vec<Done>, u64) {
    let mut connection = db.store.writer_connection();
    db.commit_alone(&mut connection, warm)
        .await
        .unwrap_or_else(|_| panic!("first group"));
    counted(db, &mut connection, group).await
}

/// Commits `group` on `connection`; answers its answers and round trips.
async fn counted(
    db: &TestStore,
    connection: &mut WriterConnection,
    group: &mut [Command],
) -> (Vec<Done>, u64) {
    round_trips::take();
    let done = db
        .commit_alone(connection, group)
        .await
        .unwrap_or_else(|_| panic!("the group commits"));
    (done, round_trips::take())
}

#[tokio::test]
async fn a_group_of_ingests_costs_the_same_few_round_trips_whatever_its_size() {
    let db = TestStore::open().await;
    let (mut warm, _answers) = requests(0, 3);
    // 45 batches: the old power-of-two chunks sent 4 inserts (32 + 8 + 4 + 1).
    let (mut group, _answers) = requests(100, 45);
    let (done, trips) = commit_counting(&db, &mut warm, &mut group).await;
    assert_eq!(done.len(), 45);
    assert_eq!(db.batches().await.len(), 48, "every batch is stored");
    // BEGIN on the lane's own connection, one insert allocating the ids, the profiles, the
    // jobs, COMMIT (SQLite's insert takes up to 64 batches in one statement); PostgreSQL's
    // insert upserts the profiles too.
    let expected = if on_postgres() { 4 } else { 5 };
    assert_eq!(trips, expected, "round trips of a group of 45 ingests");
}

const ATTRIBUTES: Sql = Sql::shared("SELECT user_attributes FROM users WHERE mpid = $1");

#[tokio::test]
async fn a_resend_in_a_group_leaves_its_users_profile_as_the_stored_batches_give_it() {
    let db = TestStore::open().await;
    // req-0, then a group of req-8 (the same user, 8 % 8) and a resend of req-0 after it: were
    // the resend's attributes merged, the later one's `n` would be undone, and an attribute
    // only the resend names would appear.
    let (mut warm, _warm) = requests(0, 1);
    let (mut group, _answers) = requests(8, 1);
    let (mut resend, _resend) = requests(0, 1);
    if let Some(Command::Ingest { batches, .. }) = resend.first_mut()
        && let Some(profile) = batches[0].profile.as_mut()
    {
        profile
            .patch
            .insert("resent".to_owned(), serde_json::json!(true));
    }
    group.extend(resend);
    let (done, trips) = commit_counting(&db, &mut warm, &mut group).await;
    let Some(Done::Ingest(outcomes, _)) = done.last() else {
        panic!("an ingest's answer");
    };
    assert!(matches!(outcomes[..], [IngestOutcome::Duplicate]));
    let (attributes,): (String,) = db
        .store
        .fetch_one(ATTRIBUTES, &[Mpid::new(1).get().into()])
        .await
        .expect("the user");
    let attributes: serde_json::Value = serde_json::from_str(&attributes).expect("json");
    assert_eq!(
        attributes,
        serde_json::json!({"n": 8}),
        "the stored batches' attributes, none of the resend's"
    );
    // On PostgreSQL the insert found the resend and left the profiles out; they went on their
    // own after it, as on SQLite: BEGIN, insert, profiles, the stored batch's job, COMMIT.
    assert_eq!(trips, 5, "round trips of a group holding a resend");
}

/// `count` requests as [`requests`] makes them, but naming their users by identities only (a
/// customer id and an email, as `boson-load --identities` sends): request n names `who(n)`.
fn unnamed_requests(
    first: usize,
    count: usize,
    who: impl Fn(usize) -> String,
) -> (Vec<Command>, Answers) {
    let (mut commands, answers) = requests(first, count);
    for (n, command) in (first..).zip(&mut commands) {
        let Command::Ingest { batches, .. } = command else {
            unreachable!("requests makes ingests");
        };
        let one = &mut batches[0];
        let Some(profile) = one.profile.take() else {
            unreachable!("requests gives every batch a profile");
        };
        let mut user_jobs = one.jobs.clone();
        user_jobs[0].mpid = Some(Mpid::new(0));
        let who = who(n);
        one.unresolved = Some(Box::new(Unresolved {
            identities: vec![
                ("customer_id".to_owned(), who.clone()),
                ("email".to_owned(), format!("{who}@example.com")),
            ],
            device: None,
            may_create: true,
            said_zero: false,
            body: Arc::clone(&one.body),
            user_jobs,
            anonymous_jobs: one.jobs.clone(),
            profile,
            resolved: Arc::default(),
        }));
    }
    (commands, answers)
}

const USERS: Sql = Sql::shared("SELECT COUNT(*) FROM users");

/// The round trips of committing `group` after `warm` on one lane's connection, and the users
/// stored then; asserts every batch of both was stored.
async fn round_trips_of(warm: &mut [Command], group: &mut [Command]) -> (u64, i64) {
    let db = TestStore::open().await;
    let (done, trips) = commit_counting(&db, warm, group).await;
    assert_eq!(done.len(), group.len());
    assert_eq!(db.batches().await.len(), warm.len() + group.len());
    let (users,): (i64,) = db.store.fetch_one(USERS, &[]).await.expect("users");
    (trips, users)
}

// Batches without an MPID cost what batches with one cost on PostgreSQL when the lane guesses
// right what the identity store knows of their identities: the batch insert reads it (the
// advisory locks too) and checks the guess, instead of a read of its own before it (see
// `identity_known`). New users' rows, identities and history go with the batch insert, as the
// known users' profiles do. (Before: one round trip more; before that 8 for returning users,
// 10 for new ones.) SQLite, a regression guard, sends a statement per read and per kind of row
// written (and before its insert took a group in one statement, 3 more for these 45 batches).
// Neither reads which batch keys are stored first: the insert finds a resend
// (`a_group_holding_a_resend_that_would_write_runs_again_reading_the_stored_keys_first`), which
// was one statement more on SQLite and a fifth of the read on PostgreSQL.

#[tokio::test]
async fn a_group_of_returning_users_without_mpids_costs_what_one_with_mpids_costs() {
    let user = |n: usize| format!("user-{}", n % 8);
    let (mut warm, _warm) = unnamed_requests(0, 8, user);
    let (mut group, _answers) = unnamed_requests(100, 45, user);
    let (trips, users) = round_trips_of(&mut warm, &mut group).await;
    // The lane remembers the warm group's users: BEGIN, the insert with the read, the jobs,
    // COMMIT.
    let expected = if on_postgres() { 4 } else { 6 };
    assert_eq!(
        trips, expected,
        "round trips of 45 returning users' batches"
    );
    assert_eq!(users, 8, "the warm group's 8 users, and no other");
}

#[tokio::test]
async fn a_group_of_new_users_without_mpids_costs_what_one_with_mpids_costs() {
    let (mut warm, _warm) = unnamed_requests(0, 3, |n| format!("first-{n}"));
    let (mut group, _answers) = unnamed_requests(100, 45, |n| format!("new-{n}"));
    let (trips, users) = round_trips_of(&mut warm, &mut group).await;
    // Identities never seen are guessed unknown.
    let expected = if on_postgres() { 4 } else { 8 };
    assert_eq!(trips, expected, "round trips of 45 new users' batches");
    assert_eq!(
        users,
        3 + 45,
        "the warm group's 3 users and one per new batch"
    );
}

/// A lane that guesses wrong (its users were made on another lane, so it guesses them
/// unknown) stores nothing with the guess and decides the group again against what its insert
/// read: the batches go to the users made before, and the group costs what a read before the
/// insert cost.
#[tokio::test]
async fn a_lane_that_guesses_wrong_decides_again_against_what_its_insert_read() {
    let db = TestStore::open().await;
    let user = |n: usize| format!("user-{}", n % 8);
    let (mut warm, _warm) = unnamed_requests(0, 8, user);
    let mut other = db.store.writer_connection();
    db.commit_alone(&mut other, &mut warm)
        .await
        .unwrap_or_else(|_| panic!("the warm group"));
    let (mut group, _answers) = unnamed_requests(100, 45, user);
    let mut connection = db.store.writer_connection();
    let (done, trips) = counted(&db, &mut connection, &mut group).await;
    assert_eq!(done.len(), 45);
    assert_eq!(db.batches().await.len(), 8 + 45);
    let (users,): (i64,) = db.store.fetch_one(USERS, &[]).await.expect("users");
    assert_eq!(users, 8, "the warm group's 8 users, and no other");
    // BEGIN, the insert that found the guess wrong, the insert, the jobs, COMMIT.
    let expected = if on_postgres() { 5 } else { 6 };
    assert_eq!(trips, expected, "round trips of a wrong guess");
}

/// Gives each of `commands`' unresolved batches the device `dev-<its customer id>`, and, with
/// `anonymous`, no identities.
fn on_devices(commands: &mut [Command], anonymous: bool) {
    for command in commands {
        let Command::Ingest { batches, .. } = command else {
            unreachable!("requests makes ingests");
        };
        for unresolved in batches.iter_mut().filter_map(|b| b.unresolved.as_mut()) {
            unresolved.device = Some(format!("dev-{}", unresolved.identities[0].1));
            if anonymous {
                unresolved.identities.clear();
            }
        }
    }
}

/// A lane guesses devices and logins as `boson_group_identities` reads them: 8 anonymous users
/// on devices of their own, then given a customer id (a login) and an email by a second group,
/// are guessed right by a third (a wrong guess would cost the insert once more).
#[tokio::test]
async fn a_lane_guesses_devices_and_logins_as_the_read_finds_them() {
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    let user = |n: usize| format!("device-user-{}", n % 8);
    for (first, anonymous) in [(0, true), (8, false)] {
        let (mut earlier, _answers) = unnamed_requests(first, 8, user);
        on_devices(&mut earlier, anonymous);
        db.commit_alone(&mut connection, &mut earlier)
            .await
            .unwrap_or_else(|_| panic!("an earlier group"));
    }
    let (mut group, _answers) = unnamed_requests(100, 45, user);
    on_devices(&mut group, false);
    let (_, trips) = counted(&db, &mut connection, &mut group).await;
    let expected = if on_postgres() { 4 } else { 8 };
    assert_eq!(trips, expected, "round trips of users on their devices");
    let (users,): (i64,) = db.store.fetch_one(USERS, &[]).await.expect("users");
    assert_eq!(users, 8, "the 8 anonymous users, and no other");
}

/// Commits a first group of 3 new users (requests 0 to 2, `first-0` to `first-2`), then a group
/// of 45 new users and a resend of request 0 naming `who`; asserts the resend was answered as
/// a duplicate and stored nothing, and answers the second group's round trips and the users
/// stored.
async fn with_a_resend_naming(who: &str) -> (u64, i64, TestStore) {
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    let (mut warm, _warm) = unnamed_requests(0, 3, |n| format!("first-{n}"));
    db.commit_alone(&mut connection, &mut warm)
        .await
        .unwrap_or_else(|_| panic!("first group"));
    let (mut group, mut answers) = unnamed_requests(100, 45, |n| format!("new-{n}"));
    let (resend, resend_answer) = unnamed_requests(0, 1, |_| who.to_owned());
    group.extend(resend);
    answers.extend(resend_answer);
    let (done, trips) = counted(&db, &mut connection, &mut group).await;
    assert_eq!(done.len(), 46);
    let Some(Done::Ingest(outcomes, _)) = done.last() else {
        panic!("an ingest's answer");
    };
    assert!(matches!(outcomes[..], [IngestOutcome::Duplicate]));
    assert_eq!(db.batches().await.len(), 3 + 45, "the resend is not stored");
    let (users,): (i64,) = db.store.fetch_one(USERS, &[]).await.expect("users");
    (trips, users, db)
}

#[tokio::test]
async fn a_group_holding_a_resend_that_would_write_runs_again_reading_the_stored_keys_first() {
    // Naming someone else: decided without the stored keys, the resend would make a user and
    // give it identities, which only the batch first stored had the say on.
    let (trips, users, db) = with_a_resend_naming("someone-else").await;
    assert_eq!(users, 3 + 45, "the resend made a user");
    const SOMEONE_ELSE: Sql =
        Sql::shared("SELECT COUNT(*) FROM user_identities WHERE identity LIKE 'someone-else%'");
    let (given,): (i64,) = db.store.fetch_one(SOMEONE_ELSE, &[]).await.expect("owners");
    assert_eq!(given, 0, "the resend's identities were given to a user");
    // The first try, up to the insert that found the resend (on PostgreSQL BEGIN and the
    // insert with the identities' read; on SQLite BEGIN, the read, the insert), then the group
    // again with the stored keys read first (in the read's round trip on PostgreSQL, one
    // statement more on SQLite); as that insert skips the resend, the new users' writes follow
    // it on their own.
    let expected = if on_postgres() { 2 + 6 } else { 3 + 9 };
    assert_eq!(trips, expected, "round trips of a group holding a resend");
}

#[tokio::test]
async fn a_group_holding_a_resend_that_writes_nothing_runs_once() {
    // Naming whom its original named: its identities are already that user's, so deciding it
    // writes nothing and changes nothing the group's other batches are decided against.
    let (trips, users, _db) = with_a_resend_naming("first-0").await;
    assert_eq!(users, 3 + 45);
    // The insert skips the resend, so the new users' writes follow it on their own.
    let expected = if on_postgres() { 5 } else { 8 };
    assert_eq!(
        trips, expected,
        "round trips of a group holding a harmless resend"
    );
}

/// PostgreSQL: an ingest group's statements run on the generic plan kept for the lane's
/// connection, not planned afresh at every run; a delivery group's on the plans the server
/// chooses (see `Plans`).
#[tokio::test]
async fn an_ingest_groups_statements_are_not_planned_afresh_at_every_run() {
    let (ingests, _answers) = requests(0, 2);
    let (reply, _claimed) = oneshot::channel();
    let claim = Command::Claim {
        limit: 10,
        of: ClaimOf::Drain(ConnectionId::new()),
        reply,
    };
    assert_eq!(plans_for(&ingests), Plans::Generic);
    assert_eq!(plans_for(&[claim]), Plans::Chosen);
    if !on_postgres() {
        // SQLite has no plan cache to choose from: each statement is planned when prepared.
        return;
    }
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    let show = Sql::postgres_only("SHOW plan_cache_mode");
    let mut modes = Vec::new();
    for plans in [Plans::Generic, Plans::Chosen] {
        let mut tx = connection.begin(&db.store, plans).await.expect("begin");
        let (mode,): (String,) = tx.fetch_one(show, &[]).await.expect("show");
        tx.commit().await.expect("commit");
        modes.push(mode);
    }
    assert_eq!(modes, ["force_generic_plan", "auto"]);
}
