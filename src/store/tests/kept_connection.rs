//! A writer lane keeps its own connection between groups (no pool ping per group). When the
//! server closes that connection while the lane is idle (a restart, a failover, an idle
//! timeout), the next group must still commit: its BEGIN fails before anything was sent, so it
//! is safe to start again on a fresh connection. Otherwise a lone request after every restart
//! would get an error, a group of one not being retried.
//!
//! On PostgreSQL the lane also ends and begins its transactions itself (`store::pg_lane`): a
//! COMMIT with the next group queued begins that group's transaction, which then runs in it;
//! a transaction left open, or begun with other settings, is rolled back before the next BEGIN.

use super::harness::{TestStore, batch, on_postgres};
use crate::store::backend::{Plans, Sql, Tx, WriterConnection, round_trips};
use crate::store::faults::{CommitFault, inject_commit_fault};
use crate::store::group::Command;
use tokio::sync::oneshot;

fn one_ingest(request: &str) -> Vec<Command> {
    let (reply, _answer) = oneshot::channel();
    vec![Command::Ingest {
        batches: vec![batch("in_a", Some(request), 1_000, &["conn_a"])],
        reply,
    }]
}

#[tokio::test]
async fn a_lone_group_commits_after_the_server_closed_the_lanes_connection() {
    if !on_postgres() {
        // SQLite's connection is in-process: nothing outside can close it.
        return;
    }
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    db.commit_alone(&mut connection, &mut one_ingest("first"))
        .await
        .unwrap_or_else(|_| panic!("the first group commits"));
    a_lone_group_commits_after_a_restart(&db, &mut connection).await;
}

/// Every other session of the test's database ends, the lane's kept connection among them, as
/// in a server restart; then a lone group must still commit on the lane.
async fn a_lone_group_commits_after_a_restart(db: &TestStore, connection: &mut WriterConnection) {
    let crate::store::Store::Postgres(pool) = &db.store else {
        unreachable!("PostgreSQL only");
    };
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(pool)
    .await
    .expect("terminate the other sessions");
    let second = db.commit_alone(connection, &mut one_ingest("second")).await;
    if let Err(failure) = second {
        panic!("a lone group after the lane's connection was closed: {failure:?}");
    }
    assert_eq!(db.batches().await.len(), 2);
}

/// The statements a group of one ingest sends, counted ([`round_trips`]).
async fn trips_of(
    db: &TestStore,
    connection: &mut WriterConnection,
    request: &str,
    queued: bool,
) -> u64 {
    round_trips::take();
    db.commit_group(connection, &mut one_ingest(request), queued)
        .await
        .unwrap_or_else(|_| panic!("group {request} commits"));
    round_trips::take()
}

/// A setting of `tx`'s session, as `SHOW` answers it.
async fn setting(tx: &mut Tx<'_>, show: &'static str) -> String {
    let (value,): (String,) = tx
        .fetch_one(Sql::postgres_only(show), &[])
        .await
        .expect(show);
    value
}

#[tokio::test]
async fn a_group_committed_with_the_next_one_queued_begins_it_in_the_same_round_trip() {
    if !on_postgres() {
        // SQLite's writer holds the one write lock from its BEGIN: it never begins early.
        return;
    }
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    // The first group opens the connection; the counts compare the groups after it.
    trips_of(&db, &mut connection, "first", false).await;
    let alone = trips_of(&db, &mut connection, "alone", false).await;
    let before_queued = trips_of(&db, &mut connection, "before queued", true).await;
    let queued = trips_of(&db, &mut connection, "queued", false).await;
    assert_eq!(before_queued, alone, "the COMMIT carries the next BEGIN");
    assert_eq!(
        queued,
        alone - 1,
        "the queued group sends no BEGIN of its own"
    );

    // On the server: a lane that committed alone is idle; one whose COMMIT began the next
    // group's transaction waits in it, with the group's settings.
    assert_eq!(lane_sessions_in_a_transaction(&db).await, 0);
    trips_of(&db, &mut connection, "before settings", true).await;
    assert_eq!(lane_sessions_in_a_transaction(&db).await, 1);
    let mut tx = connection
        .begin(&db.store, Plans::Generic)
        .await
        .expect("begin");
    for (show, expected) in [
        ("SHOW plan_cache_mode", "force_generic_plan"),
        ("SHOW transaction_isolation", "read committed"),
        ("SHOW enable_seqscan", "off"),
    ] {
        assert_eq!(setting(&mut tx, show).await, expected, "{show}");
    }
    drop(tx);

    // The queued group runs in that transaction: rolled back, it leaves nothing.
    trips_of(&db, &mut connection, "before rolled back", true).await;
    inject_commit_fault(CommitFault::RolledBack);
    let failed = db
        .commit_alone(&mut connection, &mut one_ingest("rolled back"))
        .await;
    assert!(failed.is_err(), "the injected fault fails the group");
    let stored: Vec<Option<String>> = db
        .batches()
        .await
        .into_iter()
        .map(|batch| batch.source_request_id)
        .collect();
    assert_eq!(stored.len(), 6, "{stored:?}");
    assert!(
        !stored.contains(&Some("rolled back".to_owned())),
        "{stored:?}"
    );
}

#[tokio::test]
async fn a_transaction_left_open_on_the_lanes_connection_is_rolled_back_before_the_next_group() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let crate::store::Store::Postgres(pool) = &db.store else {
        unreachable!("checked above");
    };
    sqlx::query("CREATE TABLE left_open (x INT)")
        .execute(pool)
        .await
        .expect("a scratch table");
    let mut connection = db.store.writer_connection();
    {
        // A group's transaction that ends neither way (a try given up, to run the group again).
        let mut tx = connection
            .begin(&db.store, Plans::Generic)
            .await
            .expect("begin");
        tx.execute(Sql::postgres_only("INSERT INTO left_open VALUES (1)"), &[])
            .await
            .expect("insert");
    }
    trips_of(&db, &mut connection, "after", false).await;
    let (left,): (i64,) = sqlx::query_as("SELECT count(*) FROM left_open")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(
        left, 0,
        "the abandoned insert was committed with the next group"
    );
    assert_eq!(db.batches().await.len(), 1);
}

#[tokio::test]
async fn a_transaction_begun_with_other_settings_is_begun_again_with_the_groups() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    // Ingests force the generic plan; the COMMIT begins the next transaction alike.
    trips_of(&db, &mut connection, "ingests", true).await;
    let mut tx = connection
        .begin(&db.store, Plans::Chosen)
        .await
        .expect("begin");
    assert_eq!(
        setting(&mut tx, "SHOW plan_cache_mode").await,
        "auto",
        "a delivery group plans as the server chooses"
    );
}

/// The sessions of the test's database, other than this one, inside a transaction.
async fn lane_sessions_in_a_transaction(db: &TestStore) -> i64 {
    let crate::store::Store::Postgres(pool) = &db.store else {
        unreachable!("PostgreSQL only");
    };
    let (count,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(pool)
    .await
    .expect("count");
    count
}

#[tokio::test]
async fn a_group_in_a_transaction_begun_early_commits_after_the_server_closed_the_connection() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let mut connection = db.store.writer_connection();
    trips_of(&db, &mut connection, "first", true).await;
    a_lone_group_commits_after_a_restart(&db, &mut connection).await;
}
