//! The SQLite writer's lane: a thread of its own with a runtime of its own, and a connection of
//! its own. It commits while every worker of the server's runtime is busy, and while every
//! pooled connection is taken by readers. (On PostgreSQL the lanes are tasks on the server's
//! runtime, taking pooled connections, so these tests are SQLite's only.)

use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::store::Store;
use crate::store::queue::IngestOutcome;

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
