//! Test-only: delivery running as a node runs it, on a test store, with a webhook receiver on
//! loopback, for the tests of what delivery survives (a pass, a lane's driver, the poller or
//! the renewer panicking).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, DeliveryConfig};
use crate::delivery::alerts::OperatorAlerts;
use crate::delivery::faults::{Point, armed, panic_next_at};
use crate::delivery::health::Health;
use crate::delivery::webhook::WebhookClient;
use crate::delivery::{Crowded, DeliveryContext, run};
use crate::live::LiveStream;
use crate::model::ids::{ConnectionId, Mpid};
use crate::pipeline::Handoff as _;
use crate::pipeline::catalog::Catalog;
use crate::store::queue::NewBatch;
use crate::store::tests::harness::{AttemptLog, TestStore, batch};
use crate::store::writer::Writer;
use crate::telemetry::Metrics;

/// How long the jobs may take to be worked. Not a measure of speed: without the fix they are
/// never worked, and with it they are within a few polls.
pub(super) const PATIENCE: Duration = Duration::from_secs(20);

/// Delivery running on a test store, as `server::run` starts it.
pub(super) struct Node {
    pub(super) db: TestStore,
    cancel: CancellationToken,
    delivery: tokio::task::JoinHandle<()>,
    writer: Writer,
    crowded: Arc<Crowded>,
}

impl Node {
    /// Delivery with one request in flight per connection (so a place never freed stops the
    /// lane) and frequent polls, on `db` as it is now (its connections are loaded).
    pub(super) async fn start(db: TestStore, configure: impl FnOnce(&mut DeliveryConfig)) -> Self {
        let mut config = Config::defaults().expect("default configuration");
        config.delivery.max_in_flight_per_connection = 1;
        config.delivery.poll_interval_ms = 20;
        config.delivery.request_timeout_secs = 1;
        configure(&mut config.delivery);
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
            WebhookClient::new(
                true,
                Duration::from_secs(config.delivery.request_timeout_secs),
            )
            .expect("client"),
            writer.clone(),
            Arc::new(Metrics::new()),
            Arc::new(LiveStream::default()),
            &config.delivery,
            health,
        ));
        let cancel = CancellationToken::new();
        let crowded = Arc::new(Crowded::default());
        let delivery = tokio::spawn(run(
            ctx,
            config.delivery.clone(),
            committed,
            Arc::clone(&crowded),
            cancel.clone(),
            CancellationToken::new(),
        ));
        Self {
            db,
            cancel,
            delivery,
            writer,
            crowded,
        }
    }

    /// [`Self::start`] on a fresh store with one connection, to `receiver`.
    pub(super) async fn delivering_to(
        receiver: &Receiver,
        configure: impl FnOnce(&mut DeliveryConfig),
    ) -> (Self, ConnectionId) {
        let db = TestStore::open().await;
        let connection = db.connection(&receiver.url).await;
        (Self::start(db, configure).await, connection)
    }

    /// Stores `batches`, their jobs leased to this node if delivery takes them at once, as the
    /// pipeline's fan-out decides (a failing connection's jobs wait in the table).
    pub(super) async fn ingest(&self, mut batches: Vec<NewBatch>) {
        for job in batches.iter_mut().flat_map(|b| b.jobs.iter_mut()) {
            job.leased = self.crowded.takes_now(&job.connection_id);
        }
        self.writer.ingest(batches).await.expect("ingest");
    }

    /// Stores one batch of `request` routed to `connection` (see [`batch_to`]).
    pub(super) async fn ingest_to(&self, connection: &ConnectionId, request: &str) {
        self.ingest(vec![batch_to(&self.db, connection, request).await])
            .await;
    }

    /// Waits until no job is left in the table; panics with the ones left after `PATIENCE`.
    pub(super) async fn until_the_queue_is_empty(&self) {
        self.until("every job worked", async || self.db.jobs().await.is_empty())
            .await;
    }

    /// Waits until `done` answers true; panics naming `what` after `PATIENCE`.
    pub(super) async fn until(&self, what: &str, done: impl AsyncFn() -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !done().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never: {what}; jobs left: {:#?}",
                self.db.jobs().await
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Each recorded attempt's job and outcome, in order.
    pub(super) async fn attempts(&self) -> Vec<(i64, String)> {
        self.db
            .attempts()
            .await
            .into_iter()
            .map(
                |AttemptLog {
                     job_id, outcome, ..
                 }| (job_id, outcome),
            )
            .collect()
    }

    /// Each recorded attempt's outcome, in order.
    pub(super) async fn outcomes(&self) -> Vec<String> {
        self.attempts()
            .await
            .into_iter()
            .map(|(_, outcome)| outcome)
            .collect()
    }

    pub(super) async fn stop(self) {
        self.cancel.cancel();
        self.delivery.await.expect("delivery stops");
    }
}

/// A webhook receiver on loopback that answers 503 to its first `failing` requests and 200 to
/// the others, and counts them; one made [`Self::holding`] answers nothing until let go.
pub(super) struct Receiver {
    pub(super) url: String,
    requests: Arc<AtomicUsize>,
    held: CancellationToken,
}

impl Receiver {
    pub(super) async fn start(failing: usize) -> Self {
        let receiver = Self::holding(failing).await;
        receiver.let_go();
        receiver
    }

    /// A receiver that holds every request until [`Self::let_go`].
    pub(super) async fn holding(failing: usize) -> Self {
        let requests = Arc::new(AtomicUsize::new(0));
        let held = CancellationToken::new();
        let (count, hold) = (Arc::clone(&requests), held.clone());
        let answer = move || {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let hold = hold.clone();
            async move {
                hold.cancelled().await;
                if n < failing {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        };
        let app = axum::Router::new().route("/hook", axum::routing::post(answer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("address"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            requests,
            held,
        }
    }

    /// Answers the requests held and every later one at once.
    pub(super) fn let_go(&self) {
        self.held.cancel();
    }

    pub(super) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// A batch with one event, received now and routed to `connection` at its current revision.
pub(super) async fn batch_to(db: &TestStore, connection: &ConnectionId, request: &str) -> NewBatch {
    let row = db
        .store
        .get_connection(connection)
        .await
        .expect("connection");
    let body = r#"{"events":[{"event_type":"custom_event","data":{"event_name":"e"}}]}"#;
    // Received now: the retry window counts from then.
    let received_at = crate::model::now_ms();
    let mut batch = batch(
        row.input_id.as_str(),
        Some(request),
        received_at,
        &[connection.as_str()],
    );
    batch.input_id = row.input_id;
    batch.body = Arc::from(body.as_bytes());
    batch.event_count = 1;
    batch.jobs[0].revision_id = row.revision_id;
    batch
}

/// Two jobs of one user, on a connection ordered per user whose output is gone (each pass then
/// drops its job: nothing is sent, and what comes before and after is all that is tested); the
/// first task to reach `point` panics there. Both jobs must then be worked, in order, once each.
pub(super) async fn two_jobs_of_one_user_after_a_panic_at(point: Point) {
    let node = Node::start(TestStore::open().await, |_| {}).await;
    let user = Mpid::new(7);
    let mut first = batch("input", Some("r1"), 1, &["conn_gone"]);
    let mut second = batch("input", Some("r2"), 2, &["conn_gone"]);
    for job in first.jobs.iter_mut().chain(second.jobs.iter_mut()) {
        job.mpid = Some(user);
    }
    panic_next_at(point);
    // In one group, so both are handed to the lane and the second waits there behind the first
    // (a job behind its user's is otherwise left in the table, and the claims order it).
    node.ingest(vec![first, second]).await;
    node.until_the_queue_is_empty().await;
    assert!(!armed(), "the panic happened");
    let attempts = node.attempts().await;
    node.stop().await;
    let [(first_job, first), (second_job, second)] = attempts.as_slice() else {
        panic!("one recorded pass per job: {attempts:?}");
    };
    assert!(first_job < second_job, "in order: {attempts:?}");
    assert_eq!((first.as_str(), second.as_str()), ("dropped", "dropped"));
}
