//! The writer's lanes on PostgreSQL: ingest has lanes of its own, so a delivery statement that
//! waits (here for a row lock another transaction holds, as another node's claim or a slow scan
//! would make it wait) cannot hold up the commit of accepted batches; and there are several
//! ingest lanes, so one ingest group waiting (for a unique key another transaction holds) does
//! not hold up the next, and duplicates sent on two lanes at once are still stored once. On
//! SQLite there is one lane (one write lock anyway), so these tests are PostgreSQL's only.

use std::time::Duration;

use crate::model::attempt::AttemptOutcome;
use crate::model::now_ms;
use crate::store::backend::{Sql, Tx, args};
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
const LOCK_JOB: Sql = Sql::shared("SELECT id FROM jobs WHERE id = $1 FOR UPDATE");
/// `$1` a `source_request_id` of input `in`, taken (not committed) by another transaction.
const TAKE_KEY: Sql = Sql::shared(
    "INSERT INTO batches (input_id, source_request_id, received_at, event_count, body) \
     VALUES ('in', $1, 0, 1, ''::bytea)",
);

/// A transaction that holds `request`'s unique key without committing, as another node's (or
/// lane's) group storing the same request would: an insert of that key waits for it.
async fn hold_key(db: &TestStore, request: &str) -> Tx<'static> {
    let mut locker = db.idle_transaction().await;
    locker
        .execute(TAKE_KEY, args![request])
        .await
        .expect("take the key");
    locker
}

/// Waits until `count` statements of other sessions wait for a lock (bounded by `NEVER`: a
/// lane that never gets there makes the test fail instead of hang); whether they got there.
async fn until_waiting(db: &TestStore, count: usize) -> bool {
    let waiting = async {
        while db
            .store
            .fetch_all::<(i64,)>(WAITING, &[])
            .await
            .expect("read pg_stat_activity")
            .len()
            < count
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(NEVER, waiting).await.is_ok()
}

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
    let mut locker = db.idle_transaction().await;
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

/// Ingest lanes for the tests of several (the default is one).
const SEVERAL_LANES: usize = 4;

#[tokio::test]
async fn an_ingest_is_committed_while_another_lanes_group_waits_for_a_key() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let node = db.node_with_lanes(LEASE, SEVERAL_LANES);
    let now = now_ms();
    let locker = hold_key(&db, "held").await;

    let held = node.ingest(vec![batch("in", Some("held"), now, &[])]);
    let meanwhile = async {
        // Once the first group waits for the key, another request comes in.
        let waited = until_waiting(&db, 1).await;
        let other = node.ingest(vec![batch("in", Some("other"), now, &[])]);
        let answered = tokio::time::timeout(NEVER, other).await;
        // The key is let go either way (rolled back), so the first ingest can finish.
        drop(locker);
        (waited, answered)
    };
    let (held, (waited, answered)) = tokio::join!(held, meanwhile);

    assert!(waited, "the first ingest's group waited for the held key");
    let other = answered.expect("the second ingest was committed on another lane meanwhile");
    assert!(matches!(other[..], [IngestOutcome::Stored { .. }]));
    assert!(
        matches!(held[..], [IngestOutcome::Stored { .. }]),
        "the key was rolled back, so the first batch is stored: {held:?}"
    );
    assert_eq!(db.batches().await.len(), 2);
}

#[tokio::test]
async fn the_same_request_on_two_lanes_at_once_is_stored_once() {
    if !on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let node = db.node_with_lanes(LEASE, SEVERAL_LANES);
    let now = now_ms();
    let locker = hold_key(&db, "dup").await;

    let first = node.ingest(vec![batch("in", Some("dup"), now, &["c1"])]);
    let second = node.ingest(vec![batch("in", Some("dup"), now, &["c1"])]);
    let release = async {
        // Both groups wait for the key at once: they are on two lanes, two transactions.
        let waited = until_waiting(&db, 2).await;
        drop(locker);
        waited
    };
    let (first, second, waited) = tokio::join!(first, second, release);

    assert!(waited, "both requests' groups waited for the key at once");
    let mut outcomes: Vec<_> = first.into_iter().chain(second).collect();
    outcomes.sort_by_key(|o| matches!(o, IngestOutcome::Duplicate));
    assert!(
        matches!(
            outcomes[..],
            [IngestOutcome::Stored { .. }, IngestOutcome::Duplicate]
        ),
        "one stored, one duplicate: {outcomes:?}"
    );
    let batches = db.batches().await;
    assert_eq!(batches.len(), 1, "the request is stored once");
    assert_eq!(db.jobs().await.len(), 1, "with one job");
}
