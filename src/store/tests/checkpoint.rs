//! The WAL checkpoint off the writer's commit path (issue 16 item 1): the commit path only
//! checkpoints past a bound, a passive checkpoint copies everything once the writer is idle,
//! and the next write then starts the WAL over, so it does not grow while both run.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::harness::{TestStore, batch};
use crate::store::Store;
use crate::store::checkpoint::{
    self, BOUND_PAGES, Checkpointed, Checkpointer, checkpoint_periodically,
};
use crate::store::faults;
use crate::supervise::{panic_next_round, panic_pending};

/// Bounds a wait that never ends when the checkpoint stays broken: not a speed limit.
const NEVER: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_commit_path_checkpoints_only_past_the_bound() {
    let test = TestStore::open().await;
    let Store::Sqlite(pool) = &test.store else {
        let none = Checkpointer::open(&test.store).await.unwrap();
        assert!(none.is_none(), "PostgreSQL checkpoints itself");
        return;
    };
    // Every connection of the pool (the writer may commit on any of them).
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut connection = pool.acquire().await.unwrap();
        let (pages,): (i64,) = sqlx::query_as("PRAGMA wal_autocheckpoint")
            .fetch_one(&mut *connection)
            .await
            .unwrap();
        assert_eq!(pages, i64::from(BOUND_PAGES));
        held.push(connection);
    }
}

#[tokio::test]
async fn a_passive_checkpoint_copies_the_wal_and_the_next_write_starts_it_over() {
    let test = TestStore::open().await;
    let Some(file) = test.sqlite_file() else {
        return;
    };
    let wal = file.with_file_name("boson.db-wal");
    let node = test.node(Duration::from_secs(60));
    let mut checkpointer = Checkpointer::open(&test.store).await.unwrap().unwrap();
    // About 1 MB of WAL, far below the bound: only the passive checkpoint copies it.
    let mut big = batch("in_1", Some("big"), 1, &[]);
    big.body = Arc::from(vec![b' '; 1 << 20]);
    node.ingest(vec![big]).await;
    let grown = std::fs::metadata(&wal).unwrap().len();
    assert!(grown > 1 << 20, "the WAL holds the batch: {grown} bytes");

    let Checkpointed {
        wal_frames,
        copied_frames,
    } = checkpointer.checkpoint().await.unwrap();
    assert!(wal_frames > 200, "{wal_frames} frames in the WAL");
    assert_eq!(
        copied_frames, wal_frames,
        "an idle writer leaves nothing behind"
    );

    // Everything was copied, so the next transaction writes from the WAL's start again.
    for i in 0..20 {
        let request = format!("small-{i}");
        node.ingest(vec![batch("in_1", Some(&request), 2, &[])])
            .await;
    }
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), grown);
    let after = checkpointer.checkpoint().await.unwrap();
    assert!(
        after.wal_frames < 256,
        "the WAL started over: {after:?} after {wal_frames} frames"
    );
}

#[tokio::test]
async fn a_checkpoint_runs_while_every_pool_connection_is_taken() {
    let test = TestStore::open().await;
    let Store::Sqlite(pool) = &test.store else {
        return;
    };
    let node = test.node(Duration::from_secs(60));
    node.ingest(vec![batch("in_1", Some("a"), 1, &[])]).await;
    let mut checkpointer = Checkpointer::open(&test.store).await.unwrap().unwrap();
    // Readers and the writer hold every connection of the pool: the checkpoint, on a
    // connection of its own, neither waits for them nor makes them wait for it.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(pool.acquire().await.unwrap());
    }
    let done = tokio::time::timeout(Duration::from_secs(20), checkpointer.checkpoint())
        .await
        .expect("the checkpoint waited for a pool connection");
    let done = done.unwrap();
    assert_eq!(done.copied_frames, done.wal_frames);
    drop(held);
}

/// A checkpoint connection that fails (its database thread died, say) is replaced: the
/// background checkpoint goes on copying the WAL instead of failing at every run until the
/// process restarts.
#[tokio::test]
async fn the_background_checkpoint_reopens_its_connection_after_a_failure() {
    assert_the_wal_is_copied_after(
        || faults::break_next_checkpointers(1),
        "the checkpoint's connection broke",
    )
    .await;
}

/// A round that panics (a bug) does not end the background checkpoint for the node's life.
#[tokio::test]
async fn the_background_checkpoint_starts_again_after_a_round_panicked() {
    let on_sqlite = assert_the_wal_is_copied_after(
        || panic_next_round(checkpoint::TASK),
        "a checkpoint round panicked",
    )
    .await;
    assert!(!on_sqlite || !panic_pending(), "no round panicked");
}

/// Starts the background checkpoint after `fault` and asserts that it copies about 1 MB of WAL
/// into the database file all the same; answers false, having done nothing, on PostgreSQL,
/// which checkpoints itself.
async fn assert_the_wal_is_copied_after(fault: impl FnOnce(), what: &str) -> bool {
    let test = TestStore::open().await;
    let Some(file) = test.sqlite_file() else {
        return false;
    };
    let node = test.node(Duration::from_secs(60));
    node.ingest(vec![batch("in_1", Some("a"), 1, &[])]).await;
    fault();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(checkpoint_periodically(test.store.clone(), cancel.clone()));
    let before = std::fs::metadata(&file).unwrap().len();
    // About 1 MB of WAL, far below the commit path's bound: only the background checkpoint
    // copies it into the database file.
    let mut big = batch("in_1", Some("big"), 1, &[]);
    big.body = Arc::from(vec![b' '; 1 << 20]);
    node.ingest(vec![big]).await;
    let copied = tokio::time::timeout(NEVER, async {
        while std::fs::metadata(&file).unwrap().len() < before + (1 << 20) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(copied.is_ok(), "the WAL was never copied after {what}");
    cancel.cancel();
    task.await.expect("the checkpoint task ended");
    true
}
