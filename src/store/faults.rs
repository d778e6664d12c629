//! Test-only faults injected into the store, for the failures a real database produces too
//! rarely to test by waiting for them. Per thread: `#[tokio::test]` runs a test on one thread, so
//! tests running side by side do not see each other's faults. The SQLite writer runs on a thread
//! of its own; it adopts the slot of the thread that started it ([`slot`], [`adopt`]), so a
//! test's fault reaches its own writer and no other.

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

/// How the next COMMIT on this thread goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitFault {
    /// The database commits, but the answer is lost (the connection dropped after the server
    /// committed): the caller sees an error.
    AnswerLost,
    /// The transaction is rolled back and the caller sees an error.
    RolledBack,
}

/// What a thread's next faults are; shared with the writer thread a test starts.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    commit: Option<CommitFault>,
    /// The next group is taken only once it holds this many commands.
    group_of: usize,
}

/// Where a thread's next faults wait; shared with the writer thread a test starts.
pub(crate) type Slot = Arc<Mutex<Pending>>;

thread_local! {
    static NEXT: RefCell<Slot> = RefCell::default();
}

/// Makes the next COMMIT on this thread (or its writer's) fail as `fault` says.
pub(crate) fn inject_commit_fault(fault: CommitFault) {
    with_pending(|pending| pending.commit = Some(fault));
}

/// The fault to apply to this COMMIT, if one was injected (once).
pub(super) fn take_commit_fault() -> Option<CommitFault> {
    with_pending(|pending| pending.commit.take()).flatten()
}

/// Makes this thread's writer (or its lane) take its next group only once `commands` commands
/// are queued. Commands sent together are otherwise grouped as the writer's thread happens to
/// wake: it may take the first before the second is sent (1 run in 200 did).
pub(crate) fn group_next(commands: usize) {
    with_pending(|pending| pending.group_of = commands);
}

/// How many commands the next group must hold (once; 0 when nothing was asked).
pub(super) fn take_group_size() -> usize {
    with_pending(|pending| std::mem::take(&mut pending.group_of)).unwrap_or(0)
}

fn with_pending<T>(f: impl FnOnce(&mut Pending) -> T) -> Option<T> {
    NEXT.with(|slot| slot.borrow().lock().ok().map(|mut pending| f(&mut pending)))
}

/// This thread's slot, for a thread it starts to [`adopt`].
pub(super) fn slot() -> Slot {
    NEXT.with(|slot| Arc::clone(&slot.borrow()))
}

/// Makes `slot` this thread's: faults injected on the thread it came from apply here.
pub(super) fn adopt(slot: Slot) {
    NEXT.with(|mine| *mine.borrow_mut() = slot);
}

/// The error a faulty COMMIT reports.
pub(super) fn commit_error() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "injected: connection lost during COMMIT",
    ))
}

thread_local! {
    static BROKEN_CHECKPOINTERS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Makes the next `count` checkpoint connections opened on this thread broken, as a
/// connection whose database thread died is: every checkpoint on them fails.
pub(crate) fn break_next_checkpointers(count: u32) {
    BROKEN_CHECKPOINTERS.with(|broken| broken.set(count));
}

/// Whether the checkpoint connection being opened is to be broken (counts it).
pub(super) fn take_broken_checkpointer() -> bool {
    BROKEN_CHECKPOINTERS.with(|broken| {
        let left = broken.get();
        broken.set(left.saturating_sub(1));
        left > 0
    })
}

/// The error a broken checkpoint connection reports.
pub(super) fn checkpoint_error() -> sqlx::Error {
    sqlx::Error::WorkerCrashed
}
