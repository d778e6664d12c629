//! Delivery's long-running tasks panicking, on a real store with delivery running as a node
//! runs it: a lane's driver taking up a job, the poller, the renewer. Each goes on (the driver
//! at once, the others after `supervise::RESTART_PAUSE`), and no job is lost, held for ever or
//! sent twice.

use crate::delivery::faults::{Point, armed, panic_next_at};
use crate::delivery::test_node::{Node, Receiver, batch_to, two_jobs_of_one_user_after_a_panic_at};
use crate::model::now_ms;

#[tokio::test]
async fn a_driver_that_panics_taking_up_a_job_gives_it_back_and_the_user_their_turn() {
    two_jobs_of_one_user_after_a_panic_at(Point::TakingUp).await;
}

#[tokio::test]
async fn a_driver_that_panicked_goes_on_and_its_job_is_delivered_once() {
    let receiver = Receiver::start(0).await;
    let (node, connection) = Node::delivering_to(&receiver, |_| {}).await;
    panic_next_at(Point::TakingUp);
    node.ingest_to(&connection, "r1").await;
    node.until_the_queue_is_empty().await;
    assert!(!armed(), "the driver panicked");
    // The same lane takes up the next job.
    node.ingest_to(&connection, "r2").await;
    node.until_the_queue_is_empty().await;
    let outcomes = node.outcomes().await;
    node.stop().await;
    assert_eq!(outcomes, ["delivered", "delivered"]);
    assert_eq!(receiver.requests(), 2, "each sent once");
}

#[tokio::test]
async fn a_poller_that_panicked_claims_the_retries_after_it() {
    // The first request fails: its retry waits in the table for the poller.
    let receiver = Receiver::start(1).await;
    let (node, connection) = Node::delivering_to(&receiver, |delivery| {
        delivery.initial_backoff_ms = 10;
    })
    .await;
    // Armed once the node runs: its first round may have gone already, a later one panics.
    panic_next_at(Point::Polling);
    node.until("the poller panicked", async || !armed()).await;
    node.ingest_to(&connection, "r1").await;
    node.until_the_queue_is_empty().await;
    let outcomes = node.outcomes().await;
    node.stop().await;
    assert_eq!(outcomes, ["retry", "delivered"]);
}

#[tokio::test]
async fn a_renewer_that_panicked_renews_the_leases_before_they_run_out() {
    // The receiver holds the first request; the second job waits in the lane meanwhile, and
    // only the renewer keeps its lease (a job's own request renews it when the lease is shorter
    // than a request may take, but the second job's request has not started). Renewals every
    // 6 s: the first with jobs held panics, the renewer starts again a second later, at least
    // two seconds before the first request times out.
    let receiver = Receiver::holding(0).await;
    let (node, connection) = Node::delivering_to(&receiver, |delivery| {
        delivery.lease_secs = 18;
        delivery.request_timeout_secs = 9;
    })
    .await;
    panic_next_at(Point::Renewing);
    node.ingest(vec![
        batch_to(&node.db, &connection, "r1").await,
        batch_to(&node.db, &connection, "r2").await,
    ])
    .await;
    let jobs = node.db.jobs().await;
    let [_, waiting] = jobs.as_slice() else {
        panic!("two jobs: {jobs:#?}");
    };
    let (id, first_lease) = (waiting.id, waiting.lease_until);
    // A lease that ran out could also be extended by a claim of the job, which says nothing of
    // the renewer: the renewal must come before.
    node.until("the waiting job's lease renewed", async || {
        assert!(
            now_ms() < first_lease,
            "the lease ran out before it was renewed"
        );
        // Once the first request timed out (9 s), the waiting job is sent, and its own request
        // renews its lease: that says nothing of the renewer either.
        assert!(
            receiver.requests() <= 1,
            "the waiting job was sent before the renewer renewed its lease"
        );
        let jobs = node.db.jobs().await;
        jobs.iter()
            .any(|job| job.id == id && job.lease_until > first_lease)
    })
    .await;
    assert!(!armed(), "the renewer panicked");
    receiver.let_go();
    node.until_the_queue_is_empty().await;
    let attempts = node.attempts().await;
    node.stop().await;
    // The first request may have timed out meanwhile on a slow machine (then it was retried).
    let delivered: Vec<i64> = attempts
        .iter()
        .filter(|(_, outcome)| outcome == "delivered")
        .map(|(job, _)| *job)
        .collect();
    assert_eq!(delivered.len(), 2, "each delivered once: {attempts:?}");
    assert_ne!(
        delivered[0], delivered[1],
        "each delivered once: {attempts:?}"
    );
}
