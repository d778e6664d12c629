//! Long-running tasks that outlive a panic: a loop that runs for the node's whole life (the
//! delivery poller, the lease renewer, the health checks) and panics once, on a bug or an
//! input nobody foresaw, must not stop for the rest of that life while the node goes on
//! answering 202. Such a task is restarted, after a pause, and the panic is logged where an
//! operator looks.
//!
//! What such a task shares (state behind an `Arc`, the store) survives a restart; what it held
//! in its own future is lost with it, and a task is written so that losing it costs only time:
//! jobs the poller had claimed and not yet offered come back when their lease runs out, and
//! the health task's backlog timer starts over. The pause keeps a bug that fires at every start
//! from spinning a core and flooding the log.
//!
//! The node's other long-running tasks run the same way, each named by a [`Task`]: the
//! retention prune, SQLite's WAL checkpoints, the replay driver, the catalog's listener for
//! other nodes' changes and its follower, and the flushers of the data catalog and the
//! per-minute metrics. Each calls [`round`] once in every round of its loop, where a test can
//! make it panic.
//!
//! What a restart loses beyond time: a flusher that panics while it writes loses the tally it
//! had taken (figures for the dashboard's charts and the data catalog's counts, not events);
//! putting it back on the way out could count it twice, had the write committed.

use std::any::Any;
#[cfg(test)]
use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio_util::sync::CancellationToken;

/// How long a task that panicked waits before it starts again: about a poll interval, so a
/// poller that panics once costs the node one round.
pub(crate) const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Runs the task `start` makes until it returns; after a panic, logs it and runs a fresh one
/// once `RESTART_PAUSE` has passed, unless `stop` fired meanwhile (a task whose token fired
/// is not restarted: it would only see the token and return).
pub(crate) async fn restarting<F, Fut>(task: Task, stop: CancellationToken, mut start: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    while let Err(panic) = AssertUnwindSafe(start()).catch_unwind().await {
        tracing::error!(
            task,
            panic = panic_message(panic.as_ref()),
            "A long-running task panicked; it starts again in {} s.",
            RESTART_PAUSE.as_secs()
        );
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RESTART_PAUSE) => {}
        }
    }
}

/// A long-running task's name, as the log says it and as a test's fault names it.
pub(crate) type Task = &'static str;

#[cfg(test)]
thread_local! {
    /// The task whose next rounds on this thread panic, and how many of them (a test's fault).
    /// Per thread, as delivery's and the store's faults are: `#[tokio::test]` runs a test and
    /// the tasks it spawns on one thread, so tests running side by side do not see each
    /// other's faults.
    static PANIC_IN: Cell<Option<(Task, usize)>> = const { Cell::new(None) };
}

/// Called by a long-running task once in each round: in a test, panics there if the test
/// asked for it, standing for a bug anywhere in the round. Nothing in a build for use.
pub(crate) fn round(task: Task) {
    #[cfg(test)]
    if let Some((armed, left)) = PANIC_IN.with(Cell::get)
        && armed == task
    {
        PANIC_IN.with(|at| at.set((left > 1).then_some((task, left - 1))));
        panic!("injected: {task} panicked in a round");
    }
    #[cfg(not(test))]
    let _ = task;
}

/// Test-only: makes the next round of `task` on this thread panic (once).
#[cfg(test)]
pub(crate) fn panic_next_round(task: Task) {
    panic_next_rounds(task, 1);
}

/// Test-only: makes the next `count` rounds of `task` on this thread panic.
#[cfg(test)]
pub(crate) fn panic_next_rounds(task: Task, count: usize) {
    PANIC_IN.with(|at| at.set((count > 0).then_some((task, count))));
}

/// Test-only: how long a task started again after a panic may take to show it works. Not a
/// measure of speed: a task that is not started again never does, and one that is does within
/// its pause and a round or two.
#[cfg(test)]
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// Test-only: whether `done` answers true within [`PATIENCE`], asked every 50 ms.
#[cfg(test)]
pub(crate) async fn within_patience(done: impl AsyncFn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done().await {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// Test-only: whether a panic asked for has not happened yet.
#[cfg(test)]
pub(crate) fn panic_pending() -> bool {
    PANIC_IN.with(Cell::get).is_some()
}

/// What a panic said, when it said it with a string (as `panic!` and `expect` do).
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message
    } else {
        "(not a string)"
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A task that panics on its first `panicking` starts and returns on the next; how many
    /// times it started.
    async fn run_task(panicking: usize, stop: CancellationToken) -> usize {
        let starts = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&starts);
        restarting("test", stop, move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                assert!(n >= panicking, "injected: start {n} panics");
            }
        })
        .await;
        starts.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_is_started_again() {
        let started = tokio::time::Instant::now();
        assert_eq!(run_task(2, CancellationToken::new()).await, 3);
        assert!(
            started.elapsed() >= RESTART_PAUSE * 2,
            "a pause before each restart"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_returns_is_not_started_again() {
        assert_eq!(run_task(0, CancellationToken::new()).await, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_panics_after_its_stop_is_not_started_again() {
        let stop = CancellationToken::new();
        stop.cancel();
        assert_eq!(run_task(5, stop).await, 1);
    }

    #[test]
    fn the_panic_message_is_read_from_either_string_type() {
        let owned: Box<dyn Any + Send> = Box::new(String::from("owned"));
        let fixed: Box<dyn Any + Send> = Box::new("fixed");
        let other: Box<dyn Any + Send> = Box::new(7);
        assert_eq!(panic_message(owned.as_ref()), "owned");
        assert_eq!(panic_message(fixed.as_ref()), "fixed");
        assert_eq!(panic_message(other.as_ref()), "(not a string)");
    }
}
