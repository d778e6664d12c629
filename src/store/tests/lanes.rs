//! The writer's lanes on PostgreSQL: ingest has a lane of its own, so a delivery statement that
//! waits (here for a row lock another transaction holds, as another node's claim or a slow scan
//! would make it wait) cannot hold up the commit of accepted batches. On SQLite there is one
//! lane (one write lock anyway), so these tests are PostgreSQL's only.

use std::time::Duration;

use crate::model::attempt::AttemptOutcome;
use crate::model::now_ms;
use crate::store::backend::{Sql, args};
use crate::store::queue::{IngestOutcome, JobUpdate};

use super::harness::{TestStore, attempt, batch, key, on_postgres};

const LEASE: Duration = Duration::from_secs(60);
/// Bounds a wait that never ends on a single lane: the ingest would queue behind the blocked
/// group for as long as the row stays locked. Not a speed limit: it only turns a hang into a
/// failure.
const NEVER: Duration = Duration::from_secs(20);

/// Statements of this database's other sessions that wait for a lock.
const WAITING: Sql = Sql::shared(
    "SELECT pid::bigint FROM pg_stat_activity WHERE datname = current_database() \
     AND wait_event_type = 'Lock'",
);
const STAY_IDLE: Sql = Sql::shared("SET LOCAL idle_in_transaction_session_timeout = 0");
const LOCK_JOB: Sql = Sql::shared("SELECT id FROM jobs WHERE id = $1 FOR UPDATE");

#[tokio::test]
async fn an_ingest_is_committed_while_a_job_update_waits_for_a_locked_row() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let mut node = db.node(LEASE);
    let now = now_ms();
    node.ingest(vec![batch("in", Some("first"), now, &["c1"])])
        .await;
    let job = node
        .handed_over()
        .pop()
        .expect("the first batch's job is leased");

    // Another transaction holds the job's row, as another node's uncommitted claim would.
    let mut locker = db.store.begin().await.expect("begin");
    // The store ends a session idle in a transaction after a while; this one must wait.
    locker
        .execute(STAY_IDLE, &[])
        .await
        .expect("keep the locker's transaction open");
    let locked: Vec<(i64,)> = locker
        .fetch_all(LOCK_JOB, args![job.id])
        .await
        .expect("lock the job's row");
    assert_eq!(locked, [(job.id,)]);

    let finish = node.update(JobUpdate::Finished {
        job: key(&job),
        attempt: attempt(now, AttemptOutcome::Delivered, None),
        dead: Vec::new(),
    });
    let meanwhile = async {
        // Once the update's group waits for the row, a batch is accepted.
        while db
            .store
            .fetch_all::<(i64,)>(WAITING, &[])
            .await
            .expect("read pg_stat_activity")
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ingest = node.ingest(vec![batch("in", Some("second"), now, &["c1"])]);
        let answered = tokio::time::timeout(NEVER, ingest).await;
        // The row is let go either way, so the update (and a failing test) can finish.
        drop(locker);
        answered
    };
    let ((), answered) = tokio::join!(finish, meanwhile);

    let outcomes = answered.expect("the ingest was answered while the update waited for the row");
    assert!(matches!(outcomes[..], [IngestOutcome::Stored { .. }]));
    let jobs = db.jobs().await;
    assert!(
        jobs.iter().all(|j| j.id != job.id),
        "the update went through once the row was let go"
    );
    assert_eq!(jobs.len(), 1, "the second batch's job waits");
}
