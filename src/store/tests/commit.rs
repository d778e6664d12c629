//! A group commit whose COMMIT reports an error: the database may have committed anyway (the
//! connection can drop after the server committed), or not. Either way every batch must be
//! stored exactly once and every request told the truth about it.

use std::time::Duration;

use super::harness::{TestStore, batch};
use crate::store::faults::{CommitFault, group_next, inject_commit_fault};
use crate::store::queue::IngestOutcome;

const LEASE: Duration = Duration::from_secs(3600);

fn stored_ids(outcomes: &[IngestOutcome]) -> Vec<i64> {
    outcomes
        .iter()
        .map(|outcome| match outcome {
            IngestOutcome::Stored { batch_id } => batch_id.get(),
            IngestOutcome::Duplicate => panic!("a batch without a request id is never a duplicate"),
        })
        .collect()
}

/// Two ingests without `source_request_id` (nothing de-duplicates them) sent so that the writer
/// takes them as one group (one ingest lane: on PostgreSQL several would commit them apart; and
/// the writer told to wait for both, or its thread may take the first alone), whose commit fails
/// in the way `fault` says.
async fn two_ingests_with(fault: CommitFault) -> (TestStore, Vec<i64>, usize) {
    let db = TestStore::open().await;
    let mut node = db.node_with_lanes(LEASE, 1);
    inject_commit_fault(fault);
    group_next(2);
    let (first, second) = tokio::join!(
        node.ingest(vec![batch("in_a", None, 1_000, &["conn_a"])]),
        node.ingest(vec![batch("in_a", None, 2_000, &["conn_a"])]),
    );
    let mut answered = stored_ids(&first);
    answered.extend(stored_ids(&second));
    let handed_over = node.handed_over().len();
    (db, answered, handed_over)
}

async fn assert_stored_once(db: &TestStore, answered: &[i64], handed_over: usize) {
    let stored: Vec<i64> = db.batches().await.iter().map(|b| b.id.get()).collect();
    assert_eq!(
        stored.len(),
        2,
        "each batch is stored exactly once: {stored:?}"
    );
    let mut answered = answered.to_vec();
    answered.sort_unstable();
    assert_eq!(
        answered, stored,
        "each request is answered with its stored batch"
    );
    assert_eq!(db.jobs().await.len(), 2, "each batch has its one job");
    assert_eq!(handed_over, 2, "the leased jobs reach delivery");
}

#[tokio::test]
async fn a_commit_that_succeeded_but_reported_an_error_stores_nothing_twice() {
    let (db, answered, handed_over) = two_ingests_with(CommitFault::AnswerLost).await;
    assert_stored_once(&db, &answered, handed_over).await;
}

#[tokio::test]
async fn a_commit_that_failed_is_retried_command_by_command() {
    let (db, answered, handed_over) = two_ingests_with(CommitFault::RolledBack).await;
    assert_stored_once(&db, &answered, handed_over).await;
}

#[tokio::test]
async fn a_lone_ingest_whose_commit_answer_was_lost_is_answered_as_stored() {
    let db = TestStore::open().await;
    let mut node = db.node(LEASE);
    inject_commit_fault(CommitFault::AnswerLost);
    let outcomes = node
        .ingest(vec![batch("in_a", None, 1_000, &["conn_a"])])
        .await;
    let answered = stored_ids(&outcomes);
    let stored: Vec<i64> = db.batches().await.iter().map(|b| b.id.get()).collect();
    assert_eq!(answered, stored);
    assert_eq!(node.handed_over().len(), 1);
}
