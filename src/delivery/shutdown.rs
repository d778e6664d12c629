//! Delivery's last step at shutdown: the tasks still running (lanes, passes, drains) are waited
//! for until the deadline, and the jobs still held then are released to the table.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Lanes;

/// How long delivery waits, at the shutdown deadline, for the passes it cut off to be dropped.
const PASSES_CUT_OFF: Duration = Duration::from_secs(1);

/// Waits for the tasks `lanes.tracker` tracks to end (it must be closed, or only the deadline
/// ends the wait), but only until `overdue` (the shutdown deadline): the jobs still held then,
/// those of the passes it cut off and those waiting behind them, are released to the table
/// through the writer, to be sent again by a restart or another node.
pub(super) async fn finish_passes(lanes: &Lanes, overdue: &CancellationToken) {
    debug_assert!(lanes.tracker.is_closed(), "the tracker takes no more tasks");
    if passes_end(&lanes.tracker, overdue).await == Ended::CutOff {
        release_held(lanes).await;
        // The passes cut off count what they delivered as they are dropped; waited for, so that
        // their counts are in the node's last flush of its figures. Bounded: a pass between its
        // requests may still be recording an outcome.
        let _ = tokio::time::timeout(PASSES_CUT_OFF, lanes.tracker.wait()).await;
    }
}

/// How the tasks still running at shutdown came to an end.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Every one ended before the deadline (each pass with its outcome recorded).
    Finished,
    /// The deadline passed first.
    CutOff,
}

/// Waits until every task `tracker` tracks has ended, or the deadline has passed.
async fn passes_end(tracker: &TaskTracker, overdue: &CancellationToken) -> Ended {
    tokio::select! {
        // The deadline is asked first: a pass it cuts off returns at the deadline too, without
        // its outcome, so by the time this is polled the tracker can be empty while the job
        // that pass held is still leased to this node, and must be released.
        biased;
        () = overdue.cancelled() => Ended::CutOff,
        () = tracker.wait() => Ended::Finished,
    }
}

/// At the shutdown deadline: releases every job this node still holds.
async fn release_held(lanes: &Lanes) {
    let held: Vec<i64> = lanes.held().keys().copied().collect();
    if held.is_empty() {
        return;
    }
    tracing::warn!(
        jobs = held.len(),
        "The shutdown deadline has passed; deliveries still in flight are released to be sent again."
    );
    for job_id in held {
        lanes.release(job_id).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pass as `Lanes::drive_lane` spawns it: it returns at the deadline, its outcome dropped.
    fn spawn_pass(
        tracker: &TaskTracker,
        overdue: &CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let overdue = overdue.clone();
        tracker.spawn(async move { overdue.cancelled().await })
    }

    #[tokio::test]
    async fn passes_that_returned_at_the_deadline_count_as_cut_off() {
        // Each round the pass has returned before the wait is asked: the tracker is empty
        // and the deadline has passed, both at once. Many rounds, because an unordered wait
        // would pick either.
        for round in 0..64 {
            let (tracker, overdue) = (TaskTracker::new(), CancellationToken::new());
            let pass = spawn_pass(&tracker, &overdue);
            tracker.close();
            overdue.cancel();
            pass.await.expect("the pass");
            assert!(tracker.is_empty(), "round {round}: the pass still counts");
            assert_eq!(
                passes_end(&tracker, &overdue).await,
                Ended::CutOff,
                "round {round}"
            );
        }
    }

    #[tokio::test]
    async fn passes_that_ended_before_the_deadline_count_as_finished() {
        let (tracker, overdue) = (TaskTracker::new(), CancellationToken::new());
        tracker.spawn(async {}).await.expect("the pass");
        tracker.close();
        assert_eq!(passes_end(&tracker, &overdue).await, Ended::Finished);
    }

    #[tokio::test]
    async fn a_pass_still_running_at_the_deadline_is_cut_off() {
        let (tracker, overdue) = (TaskTracker::new(), CancellationToken::new());
        tracker.spawn(std::future::pending::<()>());
        tracker.close();
        let waiting = tokio::spawn({
            let (tracker, overdue) = (tracker.clone(), overdue.clone());
            async move { passes_end(&tracker, &overdue).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the wait ended with a pass running");
        overdue.cancel();
        assert_eq!(waiting.await.expect("the wait"), Ended::CutOff);
    }
}
