//! The due claim beside another node's uncommitted claim of the same connection (PostgreSQL:
//! `FOR UPDATE SKIP LOCKED`; on SQLite one writer holds the write lock, so there is no such
//! moment). The claim must take the jobs after the locked ones, as another node would leave
//! them, not come back empty while thousands are due. And the read a poller asks before a
//! claim (`Store::anything_to_claim`): it must never say no where the claim would take a job.

use std::time::Duration;

use crate::model::now_ms;
use crate::store::backend::{Sql, args};

use super::harness::{HOUR, MINUTE, Node, TestStore, batch, on_postgres};

const LEASE: Duration = Duration::from_secs(60);
/// `$1` how many: locks the oldest due jobs, as another node's claim does until it commits.
const LOCK_OLDEST: Sql =
    Sql::shared("SELECT id FROM jobs ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE");

#[tokio::test]
async fn a_claim_takes_the_due_jobs_after_the_ones_another_claim_has_locked() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let node = db.node(LEASE);
    // New jobs stay in the table unleased, all due, oldest first.
    node.crowd("c1", true);
    let now = now_ms();
    let batches = (0..4)
        .map(|i| batch("in", None, now - (10 - i) * MINUTE, &["c1"]))
        .collect();
    node.ingest(batches).await;
    let mut jobs = db.jobs().await;
    jobs.sort_by_key(|job| (job.next_attempt_at, job.id));
    let mut locker = db.idle_transaction().await;
    let locked: Vec<(i64,)> = locker
        .fetch_all(LOCK_OLDEST, args![2_i64])
        .await
        .expect("lock the two oldest jobs");
    assert_eq!(locked.len(), 2);

    let mut claimed: Vec<i64> = node.claim(2, &[]).await.iter().map(|j| j.id).collect();
    claimed.sort_unstable();
    assert_eq!(
        claimed,
        [jobs[2].id, jobs[3].id],
        "the two due jobs nobody has locked are claimed"
    );
    drop(locker);
}

/// Whether the poller's read finds a job to claim now.
async fn claimable(db: &TestStore) -> bool {
    db.store.anything_to_claim(now_ms()).await.expect("read")
}

/// The read says no, and a claim then takes nothing either.
async fn nothing_to_claim(db: &TestStore, node: &Node, why: &str) {
    assert!(!claimable(db).await, "{why}");
    assert!(node.claim(10, &[]).await.is_empty(), "{why}: yet claimed");
}

#[tokio::test]
async fn only_a_due_job_nobody_holds_is_there_to_claim() {
    let db = TestStore::open().await;
    let node = db.node(LEASE);
    nothing_to_claim(&db, &node, "nothing is queued").await;
    // Handed over to this node at its commit: leased.
    node.ingest(vec![batch("in", None, now_ms(), &["c1"])])
        .await;
    assert_eq!(db.jobs().await.len(), 1);
    nothing_to_claim(&db, &node, "the only job is leased").await;
    // Nobody's (crowded here), but gathered for an hour first (a coalescing window): not due.
    node.crowd("c2", true);
    let mut gathered = batch("in", None, now_ms(), &["c2"]);
    gathered.jobs[0].window_ms = HOUR;
    node.ingest(vec![gathered]).await;
    nothing_to_claim(&db, &node, "the unleased job is not due").await;
    // Left in the table, as for a crowded lane: due, and nobody's.
    node.crowd("c3", true);
    node.ingest(vec![batch("in", None, now_ms(), &["c3"])])
        .await;
    assert!(claimable(&db).await, "a due job left in the table");
    assert_eq!(node.claim(10, &[]).await.len(), 1);
    nothing_to_claim(&db, &node, "every due job is leased again").await;
}
