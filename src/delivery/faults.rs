//! Test-only: a panic injected at a chosen point of delivery (in the nth task to reach it: a
//! pass, a lane's driver, the poller or the renewer), for the bugs delivery must survive without
//! losing a job, which no real input provokes. Per thread, as the store's faults are:
//! `#[tokio::test]` runs a test and the tasks it spawns on one thread, so tests running side by
//! side do not see each other's faults.

use std::cell::Cell;

/// Where the injected panic happens: in a pass, then elsewhere in delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Point {
    /// Inside the delivery itself, before anything is sent.
    Working,
    /// After the breaker learnt the delivery's outcome, before it is recorded.
    Settling,
    /// After the outcome is recorded, before the lane's place is freed.
    Recorded,
    /// After the place is freed, before the user's next job gets its turn.
    Freed,
    /// In a lane's driver, after a job took its place, before its pass starts.
    TakingUp,
    /// In the poller, at the start of a round.
    Polling,
    /// In the renewer, before it renews the leases this node holds.
    Renewing,
}

thread_local! {
    /// The point, and how many passes may still reach it before the one that panics.
    static PANIC_AT: Cell<Option<(Point, usize)>> = const { Cell::new(None) };
}

/// Makes the next task on this thread to reach `point` panic there (once).
pub(super) fn panic_next_at(point: Point) {
    panic_at(point, 0);
}

/// Makes the task on this thread that reaches `point` after `passing` others did panic there.
pub(super) fn panic_at(point: Point, passing: usize) {
    PANIC_AT.with(|at| at.set(Some((point, passing))));
}

/// Whether a panic asked for has not happened yet.
pub(super) fn armed() -> bool {
    PANIC_AT.with(Cell::get).is_some()
}

/// Called by delivery at `point`: panics if a test asked for it.
pub(super) fn reached(point: Point) {
    match PANIC_AT.with(Cell::get) {
        Some((at, 0)) if at == point => {
            PANIC_AT.with(|at| at.set(None));
            panic!("injected: delivery panicked at {point:?}");
        }
        Some((at, passing)) if at == point => {
            PANIC_AT.with(|at| at.set(Some((point, passing - 1))));
        }
        _ => {}
    }
}
