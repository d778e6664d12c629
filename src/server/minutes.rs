//! Writes this node's per-minute figures (`telemetry::minutes`) to the database every
//! [`FLUSH_INTERVAL`], and samples the delivery backlog every [`BACKLOG_INTERVAL`]: jobs
//! waiting per connection, read from the shared queue, kept per minute as the greatest sample.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::model::metrics::Subject;
use crate::model::now_ms;
use crate::store::Store;
use crate::supervise::{self, Task};
use crate::telemetry::Metrics;

/// The flusher's name in the log and in a test's fault.
const TASK: Task = "per-minute figures flusher";

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
/// HTTP server and delivery stopped, so nothing adds to the tally behind it). A round that
/// panics (a bug) does not stop the flushes: they start again (see [`crate::supervise`]).
pub(super) async fn flush_periodically(
    metrics: Arc<Metrics>,
    store: Store,
    cancel: CancellationToken,
) {
    supervise::restarting(TASK, cancel.clone(), || {
        flush_rounds(&metrics, &store, &cancel)
    })
    .await;
}

/// [`flush_periodically`]'s loop, until `cancel` or a panic.
async fn flush_rounds(metrics: &Metrics, store: &Store, cancel: &CancellationToken) {
    let mut sampled: Option<Instant> = None;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(FLUSH_INTERVAL) => {}
        }
        supervise::round(TASK);
        if sampled.is_none_or(|at| at.elapsed() >= BACKLOG_INTERVAL) {
            sampled = Some(Instant::now());
            sample_backlog(metrics, store).await;
        }
        flush(metrics, store).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::InputId;
    use crate::store::tests::harness::TestStore;
    use crate::supervise::{panic_next_round, panic_pending, within_patience};

    #[tokio::test]
    async fn the_figures_are_written_after_a_round_panicked() {
        let db = TestStore::open().await;
        let metrics = Arc::new(Metrics::new());
        let at = now_ms();
        let input = Subject::Input(InputId::new());
        metrics.minutes().update(input, at, |f| f.received += 7);
        panic_next_round(TASK);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(flush_periodically(
            Arc::clone(&metrics),
            db.store.clone(),
            cancel.clone(),
        ));
        let written = within_patience(async || {
            let stored = db.store.minutes_between(0, at + 60_000, None).await;
            let received: i64 = stored.expect("minutes").iter().map(|m| m.2.received).sum();
            received == 7
        })
        .await;
        assert!(!panic_pending(), "no round panicked");
        assert!(
            written,
            "the figures were never written after a round panicked"
        );
        cancel.cancel();
        task.await.expect("the flusher ended");
    }
}
