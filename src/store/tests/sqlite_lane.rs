//! The SQLite writer's lane: a thread of its own with a runtime of its own, and a connection of
//! its own, on which that thread runs the group's statements itself. It commits while every
//! worker of the server's runtime is busy, and while every pooled connection is taken by
//! readers. (On PostgreSQL the lanes are tasks on the server's runtime, taking pooled
//! connections, so these tests are SQLite's only.)

use std::sync::{Arc, Barrier};
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::oneshot;

use crate::store::Store;
use crate::store::backend::{Plans, Sql, Tx};
use crate::store::group::{ClaimOf, Command};
use crate::store::queue::{IngestOutcome, ProfileUpdate, Unresolved};

use super::harness::{TestStore, batch, on_postgres};

const LEASE: Duration = Duration::from_secs(60);
/// Bounds a wait that never ends when the lane shares the blocked workers (or the exhausted
/// pool): not a speed limit, it only turns a hang into a failure.
const NEVER: Duration = Duration::from_secs(20);
const WORKERS: usize = 2;

#[test]
fn an_ingest_is_committed_while_every_runtime_worker_is_blocked() {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .expect("runtime");
    let db = server.block_on(TestStore::open());
    if on_postgres() {
        return;
    }
    let node = server.block_on(async { db.node(LEASE) });
    // Every worker runs a task that blocks its thread (as a long parse or a blocking call
    // would) until the ingest has been answered or given up on.
    let all_blocked = Arc::new(Barrier::new(WORKERS + 1));
    let release = Arc::new(Barrier::new(WORKERS + 1));
    for _ in 0..WORKERS {
        let (all_blocked, release) = (Arc::clone(&all_blocked), Arc::clone(&release));
        server.spawn(async move {
            all_blocked.wait();
            release.wait();
        });
    }
    all_blocked.wait();
    // From outside the server's runtime: the writer must make progress on its own.
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let answered = client.block_on(async {
        tokio::time::timeout(
            NEVER,
            node.writer()
                .ingest(vec![batch("in_a", Some("r1"), 1_000, &["conn_a"])]),
        )
        .await
    });
    release.wait();
    let outcomes = answered
        .expect("the ingest is answered while the server's workers are blocked")
        .expect("stored");
    assert!(matches!(outcomes[..], [IngestOutcome::Stored { .. }]));
    let stored = server.block_on(db.batches());
    assert_eq!(stored.len(), 1, "the batch is committed");
}

#[tokio::test]
async fn an_ingest_is_committed_while_readers_hold_every_pooled_connection() {
    let db = TestStore::open().await;
    if on_postgres() {
        return;
    }
    let node = db.node(LEASE);
    node.ingest(vec![batch("in_a", Some("r1"), 1_000, &["conn_a"])])
        .await;
    let Store::Sqlite(pool) = &db.store else {
        unreachable!("on SQLite")
    };
    let mut readers = Vec::new();
    while let Some(connection) = pool.try_acquire() {
        readers.push(connection);
    }
    while readers.len() < usize::try_from(pool.options().get_max_connections()).expect("small") {
        readers.push(pool.acquire().await.expect("a reader's connection"));
    }
    let outcomes = tokio::time::timeout(
        NEVER,
        node.writer()
            .ingest(vec![batch("in_a", Some("r2"), 2_000, &["conn_a"])]),
    )
    .await
    .expect("the ingest does not wait for a pooled connection")
    .expect("stored");
    assert!(matches!(outcomes[..], [IngestOutcome::Stored { .. }]));
    drop(readers);
    assert_eq!(db.batches().await.len(), 2, "both batches are committed");
}

/// An ingest command of `batches`, and where its answer goes.
fn ingest(
    batches: Vec<crate::store::queue::NewBatch>,
) -> (
    Command,
    oneshot::Receiver<crate::store::StoreResult<Vec<IngestOutcome>>>,
) {
    let (reply, answer) = oneshot::channel();
    (Command::Ingest { batches, reply }, answer)
}

/// The lane's thread runs its group's statements itself: a group commit is done within one
/// poll of its future, never waiting for another thread to answer. (Through sqlx every
/// statement was a round trip to the connection's worker thread, two thread wake-ups each,
/// most of the CPU per event at 500 events/s: issue 16 items 1 and 6.) The groups cover a
/// batch with a user, one naming its user by identities only, a duplicate, and a claim.
#[tokio::test]
async fn a_group_commits_without_waiting_for_another_thread() {
    let db = TestStore::open().await;
    if on_postgres() {
        return;
    }
    let mut connection = db.store.writer_connection();
    let (first, _first) = ingest(vec![batch("in_a", Some("r1"), 1_000, &["conn_a"])]);
    let mut group = vec![first];
    // The first group also opens the connection.
    let done = db
        .commit_alone(&mut connection, &mut group)
        .now_or_never()
        .expect("the first group commits within one poll, without waiting for another thread");
    assert!(done.is_ok(), "the first group commits");

    let mut known = batch("in_a", Some("r2"), 2_000, &["conn_a"]);
    let mpid = crate::model::ids::Mpid::new(7);
    known.profile = Some(ProfileUpdate {
        mpid,
        patch: serde_json::Map::from_iter([("plan".to_owned(), serde_json::json!("pro"))]),
        consent: serde_json::Map::new(),
    });
    let mut unnamed = batch("in_a", Some("r3"), 3_000, &["conn_a"]);
    let profile = ProfileUpdate {
        mpid: crate::model::ids::Mpid::new(0),
        patch: serde_json::Map::new(),
        consent: serde_json::Map::new(),
    };
    unnamed.unresolved = Some(Box::new(Unresolved {
        identities: vec![("email".to_owned(), "who@example.com".to_owned())],
        device: None,
        may_create: true,
        said_zero: false,
        body: Arc::clone(&unnamed.body),
        user_jobs: unnamed
            .jobs
            .iter()
            .cloned()
            .map(|mut job| {
                job.mpid = Some(crate::model::ids::Mpid::new(0));
                job
            })
            .collect(),
        anonymous_jobs: unnamed.jobs.clone(),
        profile,
        resolved: Arc::default(),
    }));
    let (second, _second) = ingest(vec![known, unnamed]);
    let (again, _again) = ingest(vec![batch("in_a", Some("r1"), 4_000, &["conn_a"])]);
    let (reply, _claimed) = oneshot::channel();
    let claim = Command::Claim {
        limit: 10,
        of: ClaimOf::Due {
            skip: "[]".to_owned(),
        },
        reply,
    };
    let mut group = vec![second, again, claim];
    let done = db
        .commit_alone(&mut connection, &mut group)
        .now_or_never()
        .expect("the second group commits within one poll, without waiting for another thread");
    assert!(done.is_ok(), "the second group commits");
    connection.close().await;
    let stored = db.batches().await;
    assert_eq!(stored.len(), 3, "r1, r2 and r3 once each: {stored:?}");
}

const JOURNAL_MODE: Sql = Sql::sqlite_only("PRAGMA journal_mode");
/// The settings read back as numbers.
const NUMBERS: [Sql; 3] = [
    Sql::sqlite_only("PRAGMA synchronous"),
    Sql::sqlite_only("PRAGMA wal_autocheckpoint"),
    Sql::sqlite_only("PRAGMA foreign_keys"),
];
/// SQLite's own busy handler's timeout, in ms; 0 when a handler of the connection's own
/// replaced it.
const BUSY_TIMEOUT: Sql = Sql::sqlite_only("PRAGMA busy_timeout");

/// The settings of the connection under `tx`, and its busy timeout.
async fn settings_in(tx: &mut Tx<'_>) -> ((String, Vec<i64>), i64) {
    let (mode,): (String,) = tx.fetch_one(JOURNAL_MODE, &[]).await.expect("journal mode");
    let mut numbers = Vec::new();
    for sql in NUMBERS {
        let (number,): (i64,) = tx.fetch_one(sql, &[]).await.expect("a setting");
        numbers.push(number);
    }
    let (busy,): (i64,) = tx.fetch_one(BUSY_TIMEOUT, &[]).await.expect("busy timeout");
    ((mode, numbers), busy)
}

/// The writer's connection is not one of sqlx's, but it syncs, checkpoints and checks foreign
/// keys exactly as the pool's connections do. It waits for a lock with a busy handler of its
/// own (`store::direct`), which leaves SQLite's timeout at 0: a `busy_timeout` set after it would
/// have replaced the handler.
#[tokio::test]
async fn the_writers_connection_has_the_pools_settings() {
    let db = TestStore::open().await;
    if on_postgres() {
        return;
    }
    let mut pooled = db.store.begin().await.expect("a pooled transaction");
    let (pool, pool_busy) = settings_in(&mut pooled).await;
    pooled.commit().await.expect("commit");
    let mut connection = db.store.writer_connection();
    let mut group = connection
        .begin(&db.store, Plans::Chosen)
        .await
        .expect("the writer's BEGIN");
    let (writer, writer_busy) = settings_in(&mut group).await;
    group.commit().await.expect("commit");
    connection.close().await;
    assert_eq!(writer, pool, "the writer's settings against the pool's");
    assert_eq!(
        pool,
        (
            "wal".to_owned(),
            vec![2, i64::from(crate::store::checkpoint::BOUND_PAGES), 1]
        ),
        "the pool's settings: WAL, FULL, the checkpoint's bound, foreign keys"
    );
    assert_eq!(
        pool_busy, 10_000,
        "the pool waits 10 s with SQLite's handler"
    );
    assert_eq!(writer_busy, 0, "the writer waits with its own handler");
}

/// The SQLite Boson links keeps a statement's journal in memory up to 1 MiB
/// (`SQLITE_STMTJRNL_SPILL`, set by `.cargo/config.toml` for the bundled build): the writer's
/// group upsert of its users journals more than SQLite's default 64 KiB in about a third of
/// groups at saturation, and each time made, wrote and unlinked a temporary file.
#[tokio::test]
async fn statement_journals_stay_in_memory_up_to_a_mebibyte() {
    let db = TestStore::open().await;
    if on_postgres() {
        return;
    }
    let mut tx = db.store.begin().await.expect("a pooled transaction");
    let options: Vec<(String,)> = tx
        .fetch_all(Sql::sqlite_only("PRAGMA compile_options"), &[])
        .await
        .expect("compile options");
    tx.commit().await.expect("commit");
    assert!(
        options.iter().any(|(o,)| o == "STMTJRNL_SPILL=1048576"),
        "built with the bundled SQLite's options: {options:?}"
    );
}
