//! What a recovering connection's drain is told is left for it to claim
//! (`Store::drain_left`): on a connection ordered per user a claim takes only each user's head,
//! so a short claim alone does not say the backlog is claimed.

use std::time::Duration;

use super::harness::{HOUR, MINUTE, Node, TestStore, attempt, batch};
use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{ConnectionId, Mpid};
use crate::model::now_ms;
use crate::store::queue::{JobKey, JobUpdate, NewBatch};

const LEASE: Duration = Duration::from_secs(3600);

/// A batch for connection `c1` of user `mpid` (or of none).
fn of_user(mpid: Option<i64>, at: i64) -> NewBatch {
    let mut batch = batch("in", None, at, &["c1"]);
    batch.jobs[0].mpid = mpid.map(Mpid::new);
    batch
}

async fn left(db: &TestStore) -> bool {
    left_up_to(db, i64::MAX).await
}

async fn left_up_to(db: &TestStore, backlog_end: i64) -> bool {
    db.store
        .drain_left(&ConnectionId::trusted("c1"), now_ms(), backlog_end)
        .await
        .expect("drain_left")
}

/// `job` failed just now (a 503) and waits out an hour's backoff.
async fn fail_for_an_hour(node: &Node, job: JobKey) {
    let at = now_ms();
    node.update(JobUpdate::Retry {
        job,
        progress: 0,
        attempts: 1,
        next_attempt_at: at + HOUR,
        attempt: attempt(at, AttemptOutcome::Retry, Some("status 503")),
        dead: Vec::new(),
    })
    .await;
}

/// Where a recovery's backlog would end now.
async fn last_job(db: &TestStore) -> i64 {
    db.store
        .backlog_of(&ConnectionId::trusted("c1"), u64::MAX)
        .await
        .expect("backlog_of")
        .end
}

#[tokio::test]
async fn a_job_behind_its_users_job_in_flight_is_left_but_not_one_behind_a_backoff() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    assert!(!left(&db).await, "nothing queued");
    let now = now_ms();
    // The user's head is leased at insert; the next one stays in the table behind it.
    a.ingest(vec![of_user(Some(7), now - 2 * MINUTE)]).await;
    a.ingest(vec![of_user(Some(7), now - MINUTE)]).await;
    let jobs = db.jobs().await;
    let (head, next) = (&jobs[0], &jobs[1]);
    assert!(head.lease_until > now && next.lease_until == 0, "{jobs:?}");
    // The head is in flight; the next one is due, and claimable once the head is done.
    assert!(
        left(&db).await,
        "a job waiting behind its user's job in flight"
    );

    // The head fails and waits out a backoff: the job behind it goes after that, not now.
    fail_for_an_hour(&a, head.key()).await;
    assert!(!left(&db).await, "only jobs behind a backoff");

    // A job without a user waits behind nobody (left in the table, as on a draining
    // connection).
    a.crowd("c1", true);
    a.ingest(vec![of_user(None, now_ms())]).await;
    assert!(left(&db).await, "an unordered job, due and not held");
}

#[tokio::test]
async fn a_job_accepted_after_the_backlog_ended_is_not_left_for_the_drain() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    a.crowd("c1", true);
    assert_eq!(last_job(&db).await, 0, "no job yet");
    a.ingest(vec![of_user(None, now_ms())]).await;
    let backlog_end = last_job(&db).await;
    assert!(backlog_end > 0);
    assert!(left_up_to(&db, backlog_end).await, "the backlog's own job");

    // A job accepted while the drain runs waits in the table too, but is not the backlog's:
    // under steady traffic such jobs would keep the drain from ever ending.
    a.ingest(vec![of_user(None, now_ms())]).await;
    assert!(last_job(&db).await > backlog_end);
    assert!(!left_up_to(&db, backlog_end - 1).await, "only newer jobs");
    assert!(left_up_to(&db, backlog_end).await);
}

#[tokio::test]
async fn a_recoverys_backlog_counts_the_jobs_the_breaker_held_back_untried() {
    // While the breaker is open a connection's new jobs wait in the table untried (due, never
    // claimed); only the few that failed wait out a backoff. The drain's pace is set by the
    // whole backlog: counted as the jobs brought forward alone, an outage's 100,000 jobs were
    // claimed from the least rate up, and took 20 s to reach full speed.
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let now = now_ms();
    // The first is sent (leased at insert) and fails; the breaker opens and holds the rest.
    a.ingest(vec![of_user(None, now - 3 * MINUTE)]).await;
    a.crowd("c1", true);
    for at in [now - 2 * MINUTE, now - MINUTE] {
        a.ingest(vec![of_user(None, at)]).await;
    }
    let first = db.jobs().await[0].key();
    fail_for_an_hour(&a, first).await;
    let jobs = db.jobs().await;
    assert!(jobs[0].next_attempt_at > now_ms(), "backing off: {jobs:?}");
    let c1 = ConnectionId::trusted("c1");
    let moved = db.store.bring_forward(&c1, now_ms()).await;
    assert_eq!(
        moved.expect("bring_forward"),
        1,
        "only the one backing off moves"
    );
    let backlog = db
        .store
        .backlog_of(&c1, u64::MAX)
        .await
        .expect("backlog_of");
    let newest = jobs.iter().map(|job| job.id).max();
    assert_eq!(backlog.jobs, 3, "one backing off, two never tried");
    assert_eq!(Some(backlog.end), newest);
    let counted = db.store.backlog_of(&c1, 2).await;
    assert_eq!(counted.expect("backlog_of").jobs, 2, "counted up to 2");
}
