//! The retention prune: what is older than the retention is deleted in rounds, off the
//! writer's critical path (each chunk is a group of its own; see `Store::prune_through`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::store::Store;
use crate::store::writer::Writer;
use crate::supervise::{self, Task};

/// The prune's name in the log and in a test's fault.
const TASK: Task = "retention prune";

/// Deletes what is older than the retention, every `interval_secs`: the batch log, attempts
/// and dead letters, and what public keys write outside batches (forwarding statistics,
/// aliases), so none of it grows without end. A round that panics (a bug) does not stop the
/// pruning: it starts again (see [`crate::supervise`]).
pub(super) async fn prune_periodically(
    store: Store,
    writer: Writer,
    retention: RetentionConfig,
    cancel: CancellationToken,
) {
    supervise::restarting(TASK, cancel.clone(), || {
        prune_rounds(&store, &writer, &retention, &cancel)
    })
    .await;
}

/// [`prune_periodically`]'s loop, until `cancel` or a panic.
async fn prune_rounds(
    store: &Store,
    writer: &Writer,
    retention: &RetentionConfig,
    cancel: &CancellationToken,
) {
    let keep_ms = i64::try_from(retention.hours.saturating_mul(3_600_000)).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(retention.interval_secs)) => {}
        }
        supervise::round(TASK);
        let now = crate::model::now_ms();
        // Each kind is pruned even when another one's statement failed.
        let run = async {
            [
                store
                    .prune_through(writer, now.saturating_sub(keep_ms))
                    .await,
                store
                    .prune_forwarding_stats(
                        writer,
                        now.saturating_sub(retention.forwarding_stats_ms()),
                    )
                    .await,
                store
                    .prune_aliases(writer, now.saturating_sub(retention.aliases_ms()))
                    .await,
                store
                    .prune_minutes(writer, now.saturating_sub(retention.metrics_ms()))
                    .await,
            ]
        };
        // A shutdown stops a run between its chunks, before the writer it sends them to stops:
        // a chunk cut short deleted nothing (its transaction rolls back) or all of itself.
        let results = tokio::select! {
            () = cancel.cancelled() => return,
            results = run => results,
        };
        let mut deleted = 0;
        for result in results {
            match result {
                Ok(n) => deleted += n,
                Err(error) => tracing::warn!(%error, "Pruning old rows failed."),
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "Pruned rows past the retention.");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::store::tests::harness::{TestStore, batch};
    use crate::supervise::{panic_next_round, panic_pending, within_patience};

    #[tokio::test]
    async fn the_prune_goes_on_after_a_round_panicked() {
        let db = TestStore::open().await;
        let (writer, _jobs) = db.writer(Duration::from_secs(60));
        // Received 1 ms after the epoch: past any retention.
        let received_long_ago = batch("in_1", Some("old"), 1, &[]);
        writer
            .ingest(vec![received_long_ago])
            .await
            .expect("ingest");
        assert_eq!(db.batches().await.len(), 1);
        let mut retention = Config::defaults().expect("defaults").retention;
        retention.interval_secs = 1;
        panic_next_round(TASK);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(prune_periodically(
            db.store.clone(),
            writer.clone(),
            retention,
            cancel.clone(),
        ));
        let pruned = within_patience(async || db.batches().await.is_empty()).await;
        assert!(!panic_pending(), "no round panicked");
        assert!(pruned, "the batch was never pruned after a round panicked");
        cancel.cancel();
        task.await.expect("the prune ended");
    }
}
