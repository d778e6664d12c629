//! Writes this node's per-minute figures (`telemetry::minutes`) to the database every
//! [`FLUSH_INTERVAL`], and samples the delivery backlog every [`BACKLOG_INTERVAL`]: jobs
//! waiting per connection, read from the shared queue, kept per minute as the greatest sample.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::model::metrics::Subject;
use crate::model::now_ms;
use crate::store::Store;
use crate::telemetry::Metrics;

/// How often the tally is written: a chart shows traffic within about this long.
pub(super) const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// How often the backlog is counted: a scan of the jobs table, so not at every flush.
const BACKLOG_INTERVAL: Duration = Duration::from_secs(15);

/// Writes what is pending; on failure keeps it for the next flush and says so.
pub(super) async fn flush(metrics: &Metrics, store: &Store) -> bool {
    let pending = metrics.minutes().take();
    if pending.is_empty() {
        return true;
    }
    match store.merge_minutes(&pending).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, "Writing the per-minute figures failed; it is retried.");
            metrics.minutes().restore(pending);
            false
        }
    }
}

/// Adds a backlog sample to the tally (flushed with the rest).
async fn sample_backlog(metrics: &Metrics, store: &Store) {
    match store.backlog_by_connection().await {
        Ok(backlog) => {
            let now = now_ms();
            for (connection, jobs) in backlog {
                metrics
                    .minutes()
                    .update(Subject::Connection(connection), now, |f| {
                        f.backlog = f.backlog.max(jobs);
                    });
            }
        }
        Err(error) => tracing::warn!(%error, "Counting the delivery backlog failed."),
    }
}

/// Flushes every [`FLUSH_INTERVAL`] until `cancel`; the last flush is the caller's (after the
/// HTTP server and delivery stopped, so nothing adds to the tally behind it).
pub(super) async fn flush_periodically(
    metrics: Arc<Metrics>,
    store: Store,
    cancel: CancellationToken,
) {
    let mut sampled: Option<Instant> = None;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(FLUSH_INTERVAL) => {}
        }
        if sampled.is_none_or(|at| at.elapsed() >= BACKLOG_INTERVAL) {
            sampled = Some(Instant::now());
            sample_backlog(&metrics, &store).await;
        }
        flush(&metrics, &store).await;
    }
}
