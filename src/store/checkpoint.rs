//! SQLite's WAL checkpoint, moved off the group-commit writer's path (issue 16 item 1).
//!
//! Left to its defaults, SQLite copies the WAL back into the database file from inside the
//! COMMIT that takes the WAL past 1,000 pages, on the connection that committed: the writer's,
//! so the next group waits for the copy (4.9% of Boson's CPU at saturation, all of it on the
//! one path that serialises ingest). Here a background task copies the WAL with a PASSIVE
//! checkpoint, which neither waits for the writer nor holds it up, on a pool connection of its
//! own, every [`INTERVAL`].
//!
//! A passive checkpoint alone cannot bound the WAL under a steady stream of commits: SQLite
//! starts the WAL over only when a write transaction begins and finds every frame copied, and
//! with the writer appending all the time the background copy is always a few frames behind.
//! So the automatic checkpoint stays on the commit path as the bound, at [`BOUND_PAGES`] instead
//! of 1,000: when a commit reaches it, the background task has already copied all but the
//! frames of its last interval, the commit's checkpoint copies only those, and the next
//! transaction starts the WAL over. If the background task falls behind or stops, the commit
//! path does the whole copy, as before, and the WAL still ends at the bound.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Store;

/// How many WAL pages (4 KB each) the commit path lets the WAL grow to before it checkpoints
/// itself: about 32 MB, well over what the background task leaves between two of its runs at
/// full ingest rate.
pub(super) const BOUND_PAGES: u32 = 8192;

/// How often the background task copies the WAL.
const INTERVAL: Duration = Duration::from_millis(100);

/// What one passive checkpoint did: the frames in the WAL, and how many of them are now in the
/// database file (all, unless the writer appended while it ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpointed {
    pub(crate) wal_frames: i64,
    pub(crate) copied_frames: i64,
}

impl Store {
    /// Copies what it can of the WAL into the database file without waiting for anyone (SQLite
    /// only; PostgreSQL checkpoints itself).
    pub(crate) async fn checkpoint_wal(&self) -> Result<Option<Checkpointed>, sqlx::Error> {
        let Store::Sqlite(pool) = self else {
            return Ok(None);
        };
        let (_busy, wal_frames, copied_frames): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(pool)
                .await?;
        Ok(Some(Checkpointed {
            wal_frames,
            copied_frames,
        }))
    }
}

/// Checkpoints the WAL every [`INTERVAL`] until cancelled; returns at once on PostgreSQL.
pub(crate) async fn checkpoint_periodically(store: Store, cancel: CancellationToken) {
    if !matches!(store, Store::Sqlite(_)) {
        return;
    }
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(INTERVAL) => {}
        }
        if let Err(error) = store.checkpoint_wal().await {
            // The commit path's own checkpoint still bounds the WAL.
            tracing::warn!(%error, "Checkpointing the WAL failed.");
        }
    }
}
