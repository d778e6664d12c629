//! Test-only: a panic injected at a chosen point of the next delivery pass, for the bugs a pass
//! must survive without losing its job, which no real input provokes. Per thread, as the
//! store's faults are: `#[tokio::test]` runs a test and the tasks it spawns on one thread, so
//! tests running side by side do not see each other's faults.

use std::cell::Cell;

/// Where in a pass the injected panic happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Point {
    /// Inside the delivery itself, before anything is sent.
    Working,
    /// After the delivery, before its outcome is recorded.
    Settling,
    /// After the outcome is recorded, before the lane's place is freed.
    Recorded,
    /// After the place is freed, before the user's next job gets its turn.
    Freed,
}

thread_local! {
    static PANIC_AT: Cell<Option<Point>> = const { Cell::new(None) };
}

/// Makes the next pass on this thread to reach `point` panic there (once).
pub(super) fn panic_next_pass_at(point: Point) {
    PANIC_AT.with(|at| at.set(Some(point)));
}

/// Called by a pass at `point`: panics if a test asked for it.
pub(super) fn reached(point: Point) {
    if PANIC_AT.with(|at| at.get()) == Some(point) {
        PANIC_AT.with(|at| at.set(None));
        panic!("injected: a delivery pass panicked at {point:?}");
    }
}
