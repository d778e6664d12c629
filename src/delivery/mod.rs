//! Delivery: jobs in, webhook requests out.
//!
//! Jobs reach a connection's *lane* two ways: straight from the writer when their batch commits
//! (already leased to this node, so real-time delivery costs no queue round trip), and from the
//! poller, which claims due retries and jobs nobody holds (after a restart, or when a lane was
//! full). Each lane has its own bounded queue and in-flight budget, so a slow or failing endpoint
//! only ever delays its own connection.
//!
//! On shutdown, lanes stop taking work, queued jobs are released back to the table, and requests
//! in flight are allowed to finish.

pub(crate) mod retry;
pub(crate) mod webhook;
mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::catalog::Catalog;
use crate::config::DeliveryConfig;
use crate::store::queue::{Job, JobUpdate};
use crate::store::writer::Writer;
use crate::telemetry::Metrics;
use retry::Backoff;
use webhook::WebhookClient;

/// Jobs a lane holds beyond those in flight before new ones are sent back to the table.
const LANE_CAPACITY: usize = 4096;
/// Most jobs claimed by one poll.
const CLAIM_LIMIT: i64 = 512;

/// What workers need, shared by all lanes.
#[derive(Debug)]
pub(crate) struct DeliveryContext {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) client: WebhookClient,
    pub(crate) writer: Writer,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) backoff: Backoff,
    pub(crate) retry_window_ms: i64,
}

impl DeliveryContext {
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        client: WebhookClient,
        writer: Writer,
        metrics: Arc<Metrics>,
        config: &DeliveryConfig,
    ) -> Self {
        Self {
            catalog,
            client,
            writer,
            metrics,
            backoff: Backoff {
                initial: Duration::from_millis(config.initial_backoff_ms),
                max: Duration::from_secs(config.max_backoff_secs),
            },
            retry_window_ms: i64::try_from(config.retry_window_secs.saturating_mul(1000))
                .unwrap_or(i64::MAX),
        }
    }
}

/// The running delivery service.
#[derive(Debug)]
struct Lanes {
    ctx: Arc<DeliveryContext>,
    lanes: Mutex<HashMap<String, mpsc::Sender<Job>>>,
    max_in_flight: usize,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

/// Runs delivery until `cancel` fires, then drains as described in the module docs.
pub(crate) async fn run(
    ctx: Arc<DeliveryContext>,
    config: DeliveryConfig,
    mut committed: mpsc::UnboundedReceiver<Vec<Job>>,
    cancel: CancellationToken,
) {
    let lanes = Arc::new(Lanes {
        ctx,
        lanes: Mutex::new(HashMap::new()),
        max_in_flight: config.max_in_flight_per_connection,
        tracker: TaskTracker::new(),
        cancel: cancel.clone(),
    });
    let poller = tokio::spawn(poll(
        Arc::clone(&lanes),
        Duration::from_millis(config.poll_interval_ms),
    ));
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            jobs = committed.recv() => match jobs {
                Some(jobs) => for job in jobs { lanes.offer(job).await },
                None => break,
            },
        }
    }
    // Jobs committed but not yet handed over stay leased; give them back.
    committed.close();
    while let Ok(jobs) = committed.try_recv() {
        for job in jobs {
            lanes.release(job.id).await;
        }
    }
    let _ = poller.await;
    lanes.tracker.close();
    lanes.tracker.wait().await;
    tracing::info!("Delivery stopped.");
}

impl Lanes {
    /// Hands a leased job to its connection's lane, or releases it if the lane is full.
    async fn offer(self: &Arc<Self>, job: Job) {
        let lane = self.lane(&job.connection_id);
        if let Err(error) = lane.try_send(job) {
            let job = match error {
                mpsc::error::TrySendError::Full(job) | mpsc::error::TrySendError::Closed(job) => {
                    job
                }
            };
            self.release(job.id).await;
        }
    }

    async fn release(&self, job_id: i64) {
        if let Err(error) = self.ctx.writer.update(JobUpdate::Release { job_id }).await {
            tracing::warn!(job_id, %error, "Could not release a job; it will be retried after its lease.");
        }
    }

    fn lane(self: &Arc<Self>, connection_id: &str) -> mpsc::Sender<Job> {
        let mut lanes = self
            .lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(lane) = lanes.get(connection_id) {
            return lane.clone();
        }
        let (sender, receiver) = mpsc::channel(LANE_CAPACITY);
        lanes.insert(connection_id.to_owned(), sender.clone());
        self.tracker.spawn(Arc::clone(self).drive_lane(receiver));
        sender
    }

    /// Takes jobs off one connection's queue, at most `max_in_flight` at a time.
    async fn drive_lane(self: Arc<Self>, mut jobs: mpsc::Receiver<Job>) {
        let budget = Arc::new(Semaphore::new(self.max_in_flight));
        loop {
            let job = tokio::select! {
                () = self.cancel.cancelled() => break,
                job = jobs.recv() => match job { Some(job) => job, None => break },
            };
            let permit = tokio::select! {
                () = self.cancel.cancelled() => { self.release(job.id).await; break }
                permit = Arc::clone(&budget).acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            };
            let ctx = Arc::clone(&self.ctx);
            self.tracker.spawn(async move {
                let update = worker::work(&ctx, job).await;
                if let Err(error) = ctx.writer.update(update).await {
                    tracing::warn!(%error, "Could not record a delivery; it will be retried after its lease.");
                }
                drop(permit);
            });
        }
        jobs.close();
        while let Ok(job) = jobs.try_recv() {
            self.release(job.id).await;
        }
    }
}

/// Claims due jobs (retries, and anything unleased) and offers them to their lanes.
async fn poll(lanes: Arc<Lanes>, interval: Duration) {
    loop {
        let claimed = match lanes.ctx.writer.claim(CLAIM_LIMIT).await {
            Ok(jobs) => jobs,
            Err(error) => {
                tracing::warn!(%error, "Claiming due jobs failed.");
                Vec::new()
            }
        };
        let full = i64::try_from(claimed.len()).unwrap_or(i64::MAX) >= CLAIM_LIMIT;
        for job in claimed {
            lanes.offer(job).await;
        }
        // A full claim means more is due; a short pause keeps a full lane from turning this into a spin.
        let pause = if full {
            Duration::from_millis(10)
        } else {
            interval
        };
        tokio::select! {
            () = lanes.cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}
