//! A delivery pass that panics, at each point of it, on a real store with delivery running as a
//! node runs it: the job is not lost, nor held for ever, and the lane goes on.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::delivery::alerts::OperatorAlerts;
use crate::delivery::faults::{Point, panic_next_pass_at};
use crate::delivery::health::Health;
use crate::delivery::webhook::WebhookClient;
use crate::delivery::{Crowded, DeliveryContext, run};
use crate::live::LiveStream;
use crate::model::ids::Mpid;
use crate::pipeline::catalog::Catalog;
use crate::store::tests::harness::{AttemptLog, TestStore, batch};
use crate::telemetry::Metrics;

/// How long the jobs may take to be worked. Not a measure of speed: without the fix they are
/// never worked, and with it they are within a few polls.
const PATIENCE: Duration = Duration::from_secs(20);

/// Delivery running on a test store, as `server::run` starts it: one request in flight per
/// connection (so a place never freed stops the lane) and frequent polls.
struct Node {
    db: TestStore,
    cancel: CancellationToken,
    delivery: tokio::task::JoinHandle<()>,
    writer: crate::store::writer::Writer,
}

impl Node {
    async fn start() -> Self {
        let db = TestStore::open().await;
        let mut config = Config::defaults().expect("default configuration");
        config.delivery.max_in_flight_per_connection = 1;
        config.delivery.poll_interval_ms = 20;
        let lease = Duration::from_secs(config.delivery.lease_secs);
        let (writer, committed) = db.writer(lease);
        let catalog = Arc::new(Catalog::load(db.store.clone()).await.expect("catalog"));
        let health = Arc::new(Health::new(
            db.store.clone(),
            Arc::clone(&catalog),
            OperatorAlerts::disabled(),
            config.alerts.clone(),
        ));
        let ctx = Arc::new(DeliveryContext::new(
            catalog,
            db.store.clone(),
            WebhookClient::new(true, Duration::from_secs(1)).expect("client"),
            writer.clone(),
            Arc::new(Metrics::new()),
            Arc::new(LiveStream::default()),
            &config.delivery,
            health,
        ));
        let cancel = CancellationToken::new();
        let delivery = tokio::spawn(run(
            ctx,
            config.delivery.clone(),
            committed,
            Arc::new(Crowded::default()),
            cancel.clone(),
            CancellationToken::new(),
        ));
        Self {
            db,
            cancel,
            delivery,
            writer,
        }
    }

    /// Waits until no job is left in the table; panics with the ones left after `PATIENCE`.
    async fn until_the_queue_is_empty(&self) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let left = self.db.jobs().await;
            if left.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "jobs never worked: {left:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) -> TestStore {
        self.cancel.cancel();
        self.delivery.await.expect("delivery stops");
        self.db
    }
}

/// Two jobs of one user, on a connection ordered per user whose output is gone (each pass then
/// drops its job: nothing is sent, and the pass is all that is tested); the first pass panics at
/// `point`. Both jobs must then be worked, in order, once each.
async fn a_pass_that_panics_at(point: Point) {
    let node = Node::start().await;
    let user = Mpid::new(7);
    let mut first = batch("input", Some("r1"), 1, &["conn_gone"]);
    let mut second = batch("input", Some("r2"), 2, &["conn_gone"]);
    for job in first.jobs.iter_mut().chain(second.jobs.iter_mut()) {
        job.mpid = Some(user);
    }
    panic_next_pass_at(point);
    node.writer
        .ingest(vec![first, second])
        .await
        .expect("ingest");
    node.until_the_queue_is_empty().await;
    let db = node.stop().await;
    let attempts: Vec<(i64, String)> = db
        .attempts()
        .await
        .into_iter()
        .map(
            |AttemptLog {
                 job_id, outcome, ..
             }| (job_id, outcome),
        )
        .collect();
    let [(first_job, first), (second_job, second)] = attempts.as_slice() else {
        panic!("one recorded pass per job: {attempts:?}");
    };
    assert!(first_job < second_job, "in order: {attempts:?}");
    assert_eq!((first.as_str(), second.as_str()), ("dropped", "dropped"));
}

#[tokio::test]
async fn a_pass_that_panics_while_it_delivers_releases_its_job() {
    a_pass_that_panics_at(Point::Working).await;
}

#[tokio::test]
async fn a_pass_that_panics_before_recording_releases_its_job() {
    a_pass_that_panics_at(Point::Settling).await;
}

#[tokio::test]
async fn a_pass_that_panics_after_recording_frees_its_place() {
    a_pass_that_panics_at(Point::Recorded).await;
}

#[tokio::test]
async fn a_pass_that_panics_after_freeing_its_place_gives_the_user_their_turn() {
    a_pass_that_panics_at(Point::Freed).await;
}
