//! A delivery pass that panics, at each point of it, on a real store with delivery running as a
//! node runs it: the job is neither lost, nor held for ever, nor sent again once delivered, and
//! the lane and the connection go on.

use crate::delivery::faults::{Point, armed, panic_at, panic_next_at};
use crate::delivery::test_node::{Node, Receiver, two_jobs_of_one_user_after_a_panic_at};

#[tokio::test]
async fn a_pass_that_panics_while_it_delivers_releases_its_job() {
    two_jobs_of_one_user_after_a_panic_at(Point::Working).await;
}

#[tokio::test]
async fn a_pass_that_panics_before_recording_records_its_outcome() {
    two_jobs_of_one_user_after_a_panic_at(Point::Settling).await;
}

#[tokio::test]
async fn a_pass_that_panics_after_recording_frees_its_place() {
    two_jobs_of_one_user_after_a_panic_at(Point::Recorded).await;
}

#[tokio::test]
async fn a_pass_that_panics_after_freeing_its_place_gives_the_user_their_turn() {
    two_jobs_of_one_user_after_a_panic_at(Point::Freed).await;
}

#[tokio::test]
async fn a_delivered_job_whose_pass_panics_is_not_sent_again() {
    let receiver = Receiver::start(0).await;
    let (node, connection) = Node::delivering_to(&receiver, |_| {}).await;
    panic_next_at(Point::Settling);
    node.ingest_to(&connection, "r1").await;
    node.until_the_queue_is_empty().await;
    assert!(!armed(), "the pass panicked");
    let attempts = node.attempts().await;
    node.stop().await;
    assert_eq!(receiver.requests(), 1, "sent once: {attempts:?}");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].1, "delivered");
}

#[tokio::test]
async fn a_connection_whose_recovering_pass_panics_is_resumed() {
    // One failure opens the breaker; its probe, the job sent again, succeeds and panics after
    // its outcome is recorded, before the lanes hear that the endpoint is back.
    let receiver = Receiver::start(1).await;
    let (node, connection) =
        Node::delivering_to(&receiver, |delivery| delivery.circuit_breaker_failures = 1).await;
    // The second pass to reach that point: the first is the failure's.
    panic_at(Point::Recorded, 1);
    node.ingest_to(&connection, "r1").await;
    // The probe's outcome is committed before its pass reaches the point: wait for both.
    node.until(
        "the probe was delivered and its pass panicked",
        async || node.db.jobs().await.is_empty() && !armed(),
    )
    .await;
    // A connection still taken for failing would leave this job in the table for good.
    node.ingest_to(&connection, "r2").await;
    node.until_the_queue_is_empty().await;
    let outcomes = node.outcomes().await;
    node.stop().await;
    assert_eq!(outcomes, ["retry", "delivered", "delivered"]);
    assert_eq!(receiver.requests(), 3);
}
