//! Deterministic tests of the delivery queue through the group-commit writer: each one does a
//! few operations and reads back what the database holds.

use std::time::Duration;

use super::harness::{
    BatchRow, HOUR, JobRow, MINUTE, TestStore, attempt, batch, dead_letter, key, on_postgres,
};
use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{BatchId, ConnectionId};
use crate::model::now_ms;
use crate::store::StoreError;
use crate::store::queue::{IngestOutcome, JobUpdate};

const LEASE: Duration = Duration::from_secs(3600);
const LEASE_MS: i64 = HOUR;
const DAY: i64 = 24 * HOUR;

/// The batch id of a stored outcome.
fn stored(outcome: IngestOutcome) -> BatchId {
    match outcome {
        IngestOutcome::Stored { batch_id } => batch_id,
        IngestOutcome::Duplicate => panic!("expected the batch to be stored"),
    }
}

/// The jobs of `batch_id`, in id order.
fn of_batch(jobs: &[JobRow], batch_id: BatchId) -> Vec<&JobRow> {
    jobs.iter().filter(|j| j.batch_id == batch_id).collect()
}

/// The one job of `batch_id`.
fn only_job(jobs: &[JobRow], batch_id: BatchId) -> JobRow {
    match of_batch(jobs, batch_id)[..] {
        [job] => job.clone(),
        ref other => panic!("expected one job of batch {batch_id}, found {other:?}"),
    }
}

/// A listed dead letter: job, batch, payload index, body, status, error.
type Listed<'a> = (i64, BatchId, i64, &'a [u8], Option<i64>, &'a str);

fn batch_ids(rows: &[BatchRow]) -> Vec<BatchId> {
    rows.iter().map(|b| b.id).collect()
}

/// A connection the tests name.
fn conn(id: &str) -> ConnectionId {
    ConnectionId::trusted(id)
}

fn ids(jobs: &[crate::store::queue::Job]) -> Vec<i64> {
    let mut ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn the_suite_runs_on_the_backend_it_was_asked_for() {
    let db = TestStore::open().await;
    assert_eq!(db.store.is_shared_by_nodes(), on_postgres());
}

#[tokio::test]
async fn ingest_stores_batches_and_leases_their_jobs_to_this_node() {
    let db = TestStore::open().await;
    let mut node = db.node(LEASE);
    let now = now_ms();
    let before = now_ms();
    let outcomes = node
        .ingest(vec![
            batch("in", Some("r1"), now - MINUTE, &["c1", "c2"]),
            batch("in", None, now, &["c1"]),
        ])
        .await;
    let after = now_ms();
    let (first, second) = (stored(outcomes[0]), stored(outcomes[1]));
    assert_eq!(outcomes.len(), 2);
    assert!(second > first, "batch ids grow: {first}, {second}");

    let batches = db.batches().await;
    assert_eq!(batches.len(), 2);
    let expected = batch("in", Some("r1"), now - MINUTE, &[]);
    assert_eq!(batches[0].id, first);
    assert_eq!(batches[0].input_id, "in");
    assert_eq!(batches[0].source_request_id.as_deref(), Some("r1"));
    assert_eq!(batches[0].received_at, now - MINUTE);
    assert_eq!(batches[0].event_count, 3);
    assert_eq!(batches[0].body, &*expected.body);
    assert_eq!(batches[1].id, second);
    assert_eq!(batches[1].source_request_id, None);

    let jobs = db.jobs().await;
    let shape: Vec<(BatchId, &str, i64, i64, i64)> = jobs
        .iter()
        .map(|j| {
            let c = j.connection_id.as_str();
            (
                j.batch_id,
                c,
                j.revision_id,
                j.created_at,
                j.next_attempt_at,
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (first, "c1", 10, now - MINUTE, now - MINUTE),
            (first, "c2", 11, now - MINUTE, now - MINUTE),
            (second, "c1", 10, now, now),
        ]
    );
    let node_name = jobs[0].leased_by.clone();
    assert!(node_name.is_some());
    for job in &jobs {
        assert_eq!((job.progress, job.attempts, &job.last_error), (0, 0, &None));
        assert!((before + LEASE_MS..=after + LEASE_MS).contains(&job.lease_until));
        assert_eq!(
            job.leased_by, node_name,
            "every new job is leased to this node"
        );
    }

    // Delivery gets the same jobs, with their batch's body, without claiming them.
    let handed = node.handed_over();
    assert_eq!(ids(&handed), jobs.iter().map(|j| j.id).collect::<Vec<_>>());
    for job in &handed {
        let row = jobs
            .iter()
            .find(|j| j.id == job.id)
            .expect("handed-over job is stored");
        assert_eq!(job.batch_id, row.batch_id);
        assert_eq!(job.connection_id, row.connection_id);
        assert_eq!(job.revision_id, row.revision_id);
        assert_eq!(job.created_at, row.created_at);
        let body = &batches
            .iter()
            .find(|b| b.id == job.batch_id)
            .expect("batch")
            .body;
        assert_eq!(&*job.body, &body[..]);
    }
    let bodies = db
        .store
        .batch_bodies(&[first, second, BatchId::new(second.get() + 100)])
        .await
        .expect("bodies");
    assert_eq!(bodies.len(), 2);
    assert_eq!(&*bodies[&first], &batches[0].body[..]);

    // Another node's jobs carry that node's name.
    let other = db.node(LEASE);
    let third = stored(other.ingest(vec![batch("in", None, now, &["c1"])]).await[0]);
    let theirs = only_job(&db.jobs().await, third);
    assert!(theirs.leased_by.is_some());
    assert_ne!(theirs.leased_by, node_name);
}

#[tokio::test]
async fn a_crowded_connections_new_jobs_stay_unleased_in_the_table() {
    let db = TestStore::open().await;
    let mut node = db.node(LEASE);
    node.crowd("c2", true);
    let now = now_ms();
    let id = stored(
        node.ingest(vec![batch("in", None, now, &["c1", "c2"])])
            .await[0],
    );
    let jobs = db.jobs().await;
    let (c1, c2) = (&jobs[0], &jobs[1]);
    assert_eq!((c1.batch_id, c1.connection_id.as_str()), (id, "c1"));
    assert!(c1.lease_until > now && c1.leased_by.is_some());
    assert_eq!((c2.batch_id, c2.connection_id.as_str()), (id, "c2"));
    assert_eq!((c2.lease_until, &c2.leased_by), (0, &None));
    assert_eq!(
        ids(&node.handed_over()),
        [c1.id],
        "only the uncrowded job is handed over"
    );
    assert_eq!(
        ids(&node.claim(10, &[]).await),
        [c2.id],
        "the poller finds the other"
    );
}

#[tokio::test]
async fn a_duplicate_source_request_id_stores_nothing_new() {
    let db = TestStore::open().await;
    let mut node = db.node(LEASE);
    let now = now_ms();
    let first = stored(
        node.ingest(vec![batch("in", Some("r1"), now, &["c1"])])
            .await[0],
    );
    node.handed_over();

    let again = node
        .ingest(vec![batch("in", Some("r1"), now + 1, &["c1", "c2"])])
        .await;
    assert_eq!(again, [IngestOutcome::Duplicate]);
    assert!(node.handed_over().is_empty());
    let batches = db.batches().await;
    assert_eq!(batches.iter().map(|b| b.id).collect::<Vec<_>>(), [first]);
    assert_eq!(
        batches[0].received_at, now,
        "the first batch is kept as it was"
    );
    assert_eq!(db.jobs().await.len(), 1);

    // The id is per input; batches without one are never duplicates; a repeat within one
    // request is one.
    let mixed = node
        .ingest(vec![
            batch("other", Some("r1"), now, &["c1"]),
            batch("in", None, now, &["c1"]),
            batch("in", None, now, &["c1"]),
            batch("in", Some("r2"), now, &["c1"]),
            batch("in", Some("r2"), now, &["c2"]),
        ])
        .await;
    assert!(
        mixed[..4]
            .iter()
            .all(|o| matches!(o, IngestOutcome::Stored { .. }))
    );
    assert_eq!(mixed[4], IngestOutcome::Duplicate);
    assert_eq!(db.batches().await.len(), 5);
    let jobs = db.jobs().await;
    assert_eq!(jobs.len(), 5);
    assert!(jobs.iter().all(|j| j.connection_id == "c1"), "{jobs:?}");
}

#[tokio::test]
async fn claim_leases_only_due_unleased_jobs_and_skips_the_given_connections() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    for connection in ["c1", "c2", "c3"] {
        a.crowd(connection, true);
    }
    let now = now_ms();
    let outcomes = a
        .ingest(vec![
            batch("in", None, now - 3 * MINUTE, &["c1"]),
            batch("in", None, now - 2 * MINUTE, &["c2"]),
            batch("in", None, now + HOUR, &["c1"]),
            batch("in", None, now - MINUTE, &["c3"]),
        ])
        .await;
    // The oldest job of all, but leased (to b).
    let held = stored(
        b.ingest(vec![batch("in", None, now - 4 * MINUTE, &["c1"])])
            .await[0],
    );
    let jobs = db.jobs().await;
    let job = |i: usize| only_job(&jobs, stored(outcomes[i]));
    let (old_c1, old_c2, future, old_c3) = (job(0), job(1), job(2), job(3));
    let held = only_job(&jobs, held);

    let before = now_ms();
    assert_eq!(
        ids(&a.claim(1, &["c2"]).await),
        [old_c1.id],
        "oldest due job first"
    );
    assert_eq!(ids(&a.claim(10, &["c2"]).await), [old_c3.id]);
    assert_eq!(ids(&a.claim(10, &[]).await), [old_c2.id]);
    let after = now_ms();
    assert!(a.claim(10, &[]).await.is_empty());
    assert!(b.claim(10, &[]).await.is_empty());

    let jobs = db.jobs().await;
    let row = |id: i64| jobs.iter().find(|j| j.id == id).expect("job").clone();
    let name = row(old_c1.id).leased_by;
    assert!(name.is_some());
    for id in [old_c1.id, old_c2.id, old_c3.id] {
        let claimed = row(id);
        assert_eq!(claimed.leased_by, name);
        assert!((before + LEASE_MS..=after + LEASE_MS).contains(&claimed.lease_until));
    }
    assert_ne!(row(held.id).leased_by, name);
    assert_eq!(row(held.id), held, "a leased job is left alone");
    assert_eq!(row(future.id), future, "a job not due yet is left alone");
    assert_eq!((future.lease_until, future.leased_by), (0, None));

    // A limit of 0 claims nothing.
    db.store.release_all_leases().await.expect("release");
    assert!(a.claim(0, &[]).await.is_empty());
}

#[tokio::test]
async fn a_leased_job_is_not_claimed_again_until_its_lease_runs_out() {
    let mut db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    let id = stored(
        a.ingest(vec![batch("in", None, now_ms() - MINUTE, &["c1"])])
            .await[0],
    );
    let leased = only_job(&db.jobs().await, id);
    assert!(a.claim(10, &[]).await.is_empty(), "not by its own node");
    assert!(b.claim(10, &[]).await.is_empty(), "not by another");

    db.advance(LEASE_MS - MINUTE).await;
    assert!(
        b.claim(10, &[]).await.is_empty(),
        "a minute before the lease ends"
    );

    db.advance(2 * MINUTE).await;
    let before = now_ms();
    assert_eq!(ids(&b.claim(10, &[]).await), [leased.id]);
    let after = now_ms();
    let taken = only_job(&db.jobs().await, id);
    assert!(taken.leased_by.is_some());
    assert_ne!(taken.leased_by, leased.leased_by, "now b's");
    assert!((before + LEASE_MS..=after + LEASE_MS).contains(&taken.lease_until));
    assert!(a.claim(10, &[]).await.is_empty());
}

#[tokio::test]
async fn renew_extends_only_this_nodes_leases() {
    let mut db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    let now = now_ms();
    let outcomes = a
        .ingest(vec![
            batch("in", None, now - MINUTE, &["c1"]),
            batch("in", None, now - 2 * MINUTE, &["c1"]),
        ])
        .await;
    let jobs = db.jobs().await;
    let (kept, lost) = (
        only_job(&jobs, stored(outcomes[0])),
        only_job(&jobs, stored(outcomes[1])),
    );

    // a's leases run out (say it could not renew for a while) and b takes the older job.
    db.advance(LEASE_MS + MINUTE).await;
    assert_eq!(ids(&b.claim(1, &[]).await), [lost.id]);
    let lost = db.job(lost.id).await.expect("job");

    let before = now_ms();
    let still_held = a.renew(vec![kept.id, lost.id]).await;
    let after = now_ms();
    assert_eq!(
        still_held,
        [kept.id],
        "the renewal says which lease was lost"
    );
    let renewed = db.job(kept.id).await.expect("job");
    assert!((before + LEASE_MS..=after + LEASE_MS).contains(&renewed.lease_until));
    assert_eq!(renewed.leased_by, kept.leased_by);
    assert_eq!(db.job(lost.id).await, Some(lost), "b's lease stays b's");
    assert!(b.claim(10, &[]).await.is_empty(), "the renewed lease holds");
}

#[tokio::test]
async fn renew_does_not_revive_a_released_retried_or_finished_job() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    let now = now_ms();
    let outcomes = a
        .ingest(vec![
            batch("in", None, now - 4 * MINUTE, &["c1"]),
            batch("in", None, now - 3 * MINUTE, &["c1"]),
            batch("in", None, now - 2 * MINUTE, &["c1"]),
            batch("in", None, now - MINUTE, &["c1"]),
        ])
        .await;
    let jobs = db.jobs().await;
    let job = |i: usize| only_job(&jobs, stored(outcomes[i]));
    let (released, retried, finished, held) = (job(0), job(1), job(2), job(3));
    a.update(JobUpdate::Release {
        job_id: released.id,
    })
    .await;
    a.update(JobUpdate::Retry {
        job: retried.key(),
        progress: 0,
        attempts: 1,
        next_attempt_at: now - MINUTE,
        attempt: attempt(now, AttemptOutcome::Retry, Some("status 503")),
        dead: Vec::new(),
    })
    .await;
    a.update(JobUpdate::Finished {
        job: finished.key(),
        attempt: attempt(now, AttemptOutcome::Delivered, None),
        dead: Vec::new(),
    })
    .await;

    let before = now_ms();
    let still_held = a
        .renew(vec![released.id, retried.id, finished.id, held.id])
        .await;
    assert_eq!(still_held, [held.id]);
    let after = now_ms();
    let jobs = db.jobs().await;
    let row = |id: i64| jobs.iter().find(|j| j.id == id).cloned();
    assert_eq!(row(released.id).map(|j| j.lease_until), Some(0));
    assert_eq!(row(retried.id).map(|j| j.lease_until), Some(0));
    assert_eq!(row(finished.id), None);
    let held = row(held.id).expect("held job");
    assert!((before + LEASE_MS..=after + LEASE_MS).contains(&held.lease_until));
    assert_eq!(
        ids(&b.claim(10, &[]).await),
        [released.id, retried.id],
        "released and retried jobs are free to claim"
    );
}

#[tokio::test]
async fn finish_deletes_the_job_and_records_an_attempt() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let now = now_ms();
    let id = stored(
        a.ingest(vec![batch("in", None, now - MINUTE, &["c1", "c2"])])
            .await[0],
    );
    let jobs = db.jobs().await;
    let (done, open) = (jobs[0].clone(), jobs[1].clone());
    let at = now_ms();
    a.update(JobUpdate::Finished {
        job: done.key(),
        attempt: attempt(at, AttemptOutcome::Delivered, None),
        dead: Vec::new(),
    })
    .await;

    assert_eq!(db.jobs().await, std::slice::from_ref(&open));
    let log = db.attempts().await;
    assert_eq!(log.len(), 1);
    let entry = &log[0];
    assert_eq!(
        (entry.job_id, entry.connection_id.as_str()),
        (done.id, "c1")
    );
    assert_eq!(
        (entry.attempted_at, entry.outcome.as_str()),
        (at, "delivered")
    );
    assert_eq!((entry.status, &entry.error), (Some(200), &None));
    assert_eq!((entry.requests, entry.latency_ms, entry.events), (2, 17, 3));
    let listed = db.store.attempts(&conn("c1"), 10).await.expect("attempts");
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id, listed[0].job_id), (entry.id, done.id));
    assert!(
        db.store
            .attempts(&conn("c2"), 10)
            .await
            .expect("attempts")
            .is_empty()
    );
    let stats = db.store.connection_stats().await.expect("stats");
    let stats: Vec<_> = stats
        .into_iter()
        .map(|s| {
            let outcome = (s.last_outcome, s.last_error, s.last_attempt_at);
            (s.connection_id, s.events_forwarded, outcome)
        })
        .collect();
    assert_eq!(stats, [(conn("c1"), 3, ("delivered".to_owned(), None, at))]);
    assert_eq!(
        db.store.queue_stats().await.expect("stats"),
        (1, Some(now - MINUTE))
    );
    assert_eq!(
        db.batches().await.len(),
        1,
        "the batch stays for its other job"
    );
    assert_eq!(open.batch_id, id);
}

#[tokio::test]
async fn retry_keeps_the_job_with_its_progress_and_frees_its_lease() {
    let mut db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    let id = stored(
        a.ingest(vec![batch("in", None, now_ms() - MINUTE, &["c1"])])
            .await[0],
    );
    let job = only_job(&db.jobs().await, id);
    let at = now_ms();
    a.update(JobUpdate::Retry {
        job: job.key(),
        progress: 2,
        attempts: 1,
        next_attempt_at: at + HOUR,
        attempt: attempt(at, AttemptOutcome::Retry, Some("status 503")),
        dead: Vec::new(),
    })
    .await;

    let retried = only_job(&db.jobs().await, id);
    let expected = JobRow {
        progress: 2,
        attempts: 1,
        next_attempt_at: at + HOUR,
        lease_until: 0,
        last_error: Some("status 503".to_owned()),
        ..job.clone()
    };
    assert_eq!(retried, expected);
    let log = db.attempts().await;
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].job_id,
            log[0].outcome.as_str(),
            log[0].error.as_deref()
        ),
        (job.id, "retry", Some("status 503"))
    );

    assert!(
        b.claim(10, &[]).await.is_empty(),
        "not before its next attempt"
    );
    db.advance(HOUR).await;
    let claimed = b.claim(10, &[]).await;
    assert_eq!(ids(&claimed), [job.id]);
    assert_eq!((claimed[0].progress, claimed[0].attempts), (2, 1));
}

#[tokio::test]
async fn release_makes_a_job_claimable_at_once() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    let id = stored(
        a.ingest(vec![batch("in", None, now_ms() - MINUTE, &["c1"])])
            .await[0],
    );
    let job = only_job(&db.jobs().await, id);
    assert!(b.claim(10, &[]).await.is_empty());
    a.update(JobUpdate::Release { job_id: job.id }).await;
    let released = only_job(&db.jobs().await, id);
    assert_eq!(released.lease_until, 0);
    assert_eq!((released.progress, released.attempts), (0, 0));
    assert_eq!(ids(&b.claim(10, &[]).await), [job.id]);
    assert!(db.attempts().await.is_empty(), "a release is no attempt");
}

#[tokio::test]
async fn updates_sent_before_a_claim_apply_before_it() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    a.crowd("c1", true);
    let now = now_ms();
    let outcomes = a
        .ingest(vec![
            batch("in", None, now - 2 * MINUTE, &["c1"]),
            batch("in", None, now - MINUTE, &["c1"]),
        ])
        .await;
    let claimed = a.claim(10, &[]).await;
    assert_eq!(claimed.len(), 2);
    let (done, back) = (
        claimed
            .iter()
            .find(|j| j.batch_id == stored(outcomes[0]))
            .expect("job"),
        claimed
            .iter()
            .find(|j| j.batch_id == stored(outcomes[1]))
            .expect("job"),
    );
    // Neither update is awaited to commit; whether they share the claim's group or not, the
    // claim must see both.
    a.send_update(JobUpdate::Finished {
        job: key(done),
        attempt: attempt(now, AttemptOutcome::Delivered, None),
        dead: Vec::new(),
    })
    .await;
    a.send_update(JobUpdate::Release { job_id: back.id }).await;
    assert_eq!(ids(&a.claim(10, &[]).await), [back.id]);
}

#[tokio::test]
async fn dead_letters_are_stored_listed_and_deletable() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let now = now_ms();
    let id = stored(a.ingest(vec![batch("in", None, now, &["c1", "c2"])]).await[0]);
    let jobs = db.jobs().await;
    let (one, two) = (jobs[0].clone(), jobs[1].clone());
    a.update(JobUpdate::Finished {
        job: one.key(),
        attempt: attempt(now, AttemptOutcome::Delivered, None),
        dead: vec![dead_letter(0), dead_letter(2)],
    })
    .await;
    a.update(JobUpdate::Retry {
        job: two.key(),
        progress: 1,
        attempts: 1,
        next_attempt_at: now + HOUR,
        attempt: attempt(now, AttemptOutcome::Retry, Some("status 503")),
        dead: vec![dead_letter(0)],
    })
    .await;

    let c1 = db.store.dead_letters(&conn("c1"), 10).await.expect("list");
    let listed: Vec<Listed<'_>> = c1
        .iter()
        .map(|d| {
            (
                d.job_id,
                d.batch_id,
                d.payload_index,
                &d.body[..],
                d.status,
                &d.error[..],
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                one.id,
                id,
                2,
                &b"request 2"[..],
                Some(400),
                "rejected request 2"
            ),
            (
                one.id,
                id,
                0,
                &b"request 0"[..],
                Some(400),
                "rejected request 0"
            ),
        ],
        "newest first"
    );
    assert!(c1.iter().all(|d| d.created_at >= now));
    let limited = db.store.dead_letters(&conn("c1"), 1).await.expect("list");
    assert_eq!(limited.iter().map(|d| d.id).collect::<Vec<_>>(), [c1[0].id]);
    let c2 = db.store.dead_letters(&conn("c2"), 10).await.expect("list");
    assert_eq!(c2.len(), 1);
    assert_eq!((c2[0].job_id, c2[0].payload_index), (two.id, 0));

    let letter = c1[0].id;
    let body = db
        .store
        .dead_letter_body(letter, &conn("c1"))
        .await
        .expect("body");
    assert_eq!(body, b"request 2");
    assert!(matches!(
        db.store.dead_letter_body(letter, &conn("c2")).await,
        Err(StoreError::NotFound)
    ));
    db.store.delete_dead_letter(letter).await.expect("delete");
    let left = db.store.dead_letters(&conn("c1"), 10).await.expect("list");
    assert_eq!(left.iter().map(|d| d.id).collect::<Vec<_>>(), [c1[1].id]);
    assert!(matches!(
        db.store.dead_letter_body(letter, &conn("c1")).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        db.dead_letters().await.len(),
        2,
        "the other letters are kept"
    );
}

#[tokio::test]
async fn prune_removes_old_rows_but_never_a_batch_a_pending_job_needs() {
    let mut db = TestStore::open().await;
    let a = db.node(LEASE);
    let then = now_ms();
    let outcomes = a
        .ingest(vec![
            batch("in", None, then, &["c1"]),
            batch("in", None, then, &["c1"]),
            batch("in", None, then, &["c1"]),
        ])
        .await;
    let (b1, b2, b3) = (
        stored(outcomes[0]),
        stored(outcomes[1]),
        stored(outcomes[2]),
    );
    let jobs = db.jobs().await;
    for done in [only_job(&jobs, b1), only_job(&jobs, b3)] {
        a.update(JobUpdate::Finished {
            job: done.key(),
            attempt: attempt(then, AttemptOutcome::Delivered, None),
            dead: vec![dead_letter(0)],
        })
        .await;
    }
    let pending = only_job(&jobs, b2);

    // Two days on: one more batch, delivered with a dead letter.
    db.advance(2 * DAY).await;
    let now = now_ms();
    let b4 = stored(a.ingest(vec![batch("in", None, now, &["c1"])]).await[0]);
    a.update(JobUpdate::Finished {
        job: only_job(&db.jobs().await, b4).key(),
        attempt: attempt(now, AttemptOutcome::Delivered, None),
        dead: vec![dead_letter(0)],
    })
    .await;
    let (attempts, letters) = (db.attempts().await, db.dead_letters().await);

    // b1 is old and unneeded. b2 is old but its job is pending, and b3 is old too but the rule
    // keeps every batch from the oldest one still needed on. Old attempts and letters go.
    let deleted = db.store.prune(now - DAY).await.expect("prune");
    assert_eq!(batch_ids(&db.batches().await), [b2, b3, b4]);
    assert_eq!(db.attempts().await, attempts[2..]);
    assert_eq!(db.dead_letters().await, letters[2..]);
    assert_eq!(deleted, 1 + 2 + 2);
    let bodies = db
        .store
        .batch_bodies(&[pending.batch_id])
        .await
        .expect("bodies");
    assert!(
        bodies.contains_key(&pending.batch_id),
        "the pending job's batch is readable"
    );

    // Once b2's job is done, b2 and b3 go too; the recent b4 stays.
    a.update(JobUpdate::Finished {
        job: pending.key(),
        attempt: attempt(now, AttemptOutcome::Delivered, None),
        dead: Vec::new(),
    })
    .await;
    assert_eq!(db.store.prune(now - DAY).await.expect("prune"), 2);
    assert_eq!(batch_ids(&db.batches().await), [b4]);

    // However old the cutoff makes everything, a batch with a pending job stays.
    let b5 = stored(a.ingest(vec![batch("in", None, now, &["c1"])]).await[0]);
    let deleted = db.store.prune(now + 10 * DAY).await.expect("prune");
    assert_eq!(batch_ids(&db.batches().await), [b5]);
    assert!(db.attempts().await.is_empty());
    assert!(db.dead_letters().await.is_empty());
    assert_eq!(deleted, 1 + 2 + 1);
}

#[tokio::test]
async fn release_all_leases_frees_every_lease() {
    let db = TestStore::open().await;
    let a = db.node(LEASE);
    let b = db.node(LEASE);
    let now = now_ms();
    a.crowd("c9", true);
    let outcomes = a
        .ingest(vec![
            batch("in", None, now - 3 * MINUTE, &["c1"]),
            batch("in", None, now - 2 * MINUTE, &["c1"]),
            batch("in", None, now - MINUTE, &["c9"]),
        ])
        .await;
    let jobs = db.jobs().await;
    let job = |i: usize| only_job(&jobs, stored(outcomes[i]));
    let (leased, retried, unleased) = (job(0), job(1), job(2));
    a.update(JobUpdate::Retry {
        job: retried.key(),
        progress: 0,
        attempts: 1,
        next_attempt_at: now + HOUR,
        attempt: attempt(now, AttemptOutcome::Retry, Some("status 503")),
        dead: Vec::new(),
    })
    .await;
    let other = stored(b.ingest(vec![batch("in", None, now, &["c2"])]).await[0]);
    let other = only_job(&db.jobs().await, other);

    assert_eq!(db.store.release_all_leases().await.expect("release"), 2);
    let jobs = db.jobs().await;
    assert!(jobs.iter().all(|j| j.lease_until == 0), "{jobs:?}");
    assert_eq!(
        ids(&a.claim(10, &[]).await),
        [leased.id, unleased.id, other.id],
        "every due job is free, whichever node held it"
    );
    assert_eq!(db.store.release_all_leases().await.expect("release"), 3);
}
