//! Test-only faults injected into the store, for the failures a real database produces too
//! rarely to test by waiting for them. Thread-local: `#[tokio::test]` runs a test and the writer
//! it spawns on one thread, so tests running side by side do not see each other's faults.

use std::cell::Cell;

/// How the next COMMIT on this thread goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitFault {
    /// The database commits, but the answer is lost (the connection dropped after the server
    /// committed): the caller sees an error.
    AnswerLost,
    /// The transaction is rolled back and the caller sees an error.
    RolledBack,
}

thread_local! {
    static NEXT_COMMIT: Cell<Option<CommitFault>> = const { Cell::new(None) };
}

/// Makes the next COMMIT on this thread fail as `fault` says.
pub(crate) fn inject_commit_fault(fault: CommitFault) {
    NEXT_COMMIT.with(|next| next.set(Some(fault)));
}

/// The fault to apply to this COMMIT, if one was injected (once).
pub(super) fn take_commit_fault() -> Option<CommitFault> {
    NEXT_COMMIT.with(Cell::take)
}

/// The error a faulty COMMIT reports.
pub(super) fn commit_error() -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "injected: connection lost during COMMIT",
    ))
}
