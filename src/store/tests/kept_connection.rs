//! A writer lane keeps its own connection between groups (no pool ping per group). When the
//! server closes that connection while the lane is idle (a restart, a failover, an idle
//! timeout), the next group must still commit: its BEGIN fails before anything was sent, so it
//! is safe to start again on a fresh connection. Otherwise a lone request after every restart
//! would get an error, a group of one not being retried.

use super::harness::{TestStore, batch, on_postgres};
use crate::store::group::{Command, commit};
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
    commit(
        &db.store,
        &mut connection,
        &mut one_ingest("first"),
        60_000,
        "node",
    )
    .await
    .unwrap_or_else(|_| panic!("the first group commits"));
    // Every other session of this database ends, the lane's kept connection among them, as
    // in a server restart.
    let crate::store::Store::Postgres(pool) = &db.store else {
        unreachable!("checked above");
    };
    sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .execute(pool)
    .await
    .expect("terminate the other sessions");
    let second = commit(
        &db.store,
        &mut connection,
        &mut one_ingest("second"),
        60_000,
        "node",
    )
    .await;
    if let Err(failure) = second {
        panic!("a lone group after the lane's connection was closed: {failure:?}");
    }
    assert_eq!(db.batches().await.len(), 2);
}
