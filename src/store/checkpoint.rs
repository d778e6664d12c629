//! SQLite's WAL checkpoint, moved off the group-commit writer's path (issue 16 item 1).
//!
//! Left to its defaults, SQLite copies the WAL back into the database file from inside the
//! COMMIT that takes the WAL past 1,000 pages, on the connection that committed: the writer's,
//! so the next group waits for the copy (4.9% of Boson's CPU at saturation, all of it on the
//! one path that serialises ingest). Here a background task copies the WAL with a PASSIVE
//! checkpoint, which neither waits for the writer nor holds it up, on a connection of its own
//! outside the pool ([`Checkpointer`]): a checkpoint's copy and fsyncs take tens of
//! milliseconds, and on a pool connection they kept one of the pool's four from the writer and
//! the readers meanwhile. The wait between two runs halves (down to [`MIN_INTERVAL`]) while each run finds
//! [`BUSY_FRAMES`] or more new frames, and doubles (up to [`MAX_INTERVAL`]) while it finds fewer,
//! so that a quiet server does not sync its files ten times a second for a handful of pages.
//!
//! A passive checkpoint alone cannot bound the WAL under a steady stream of commits: SQLite
//! starts the WAL over only when a write transaction begins and finds every frame copied, and
//! with the writer appending all the time the background copy is always a few frames behind.
//! So the automatic checkpoint stays on the commit path as the bound, at [`BOUND_PAGES`] instead
//! of 1,000: when a commit reaches it, the background task has already copied all but the
//! frames of its last interval, the commit's checkpoint copies only those, and the next
//! transaction starts the WAL over. If the background task falls behind or stops, the commit
//! path does the whole copy, as before, and the WAL still ends at the bound.
//!
//! A run that fails (or a connection that cannot be opened) gives up the connection: the next
//! run opens another, after a wait that doubles from [`RETRY_MIN`] to [`RETRY_MAX`] while the
//! failures go on. A streak of failures is logged once, as a warning, when it starts, and once
//! when it ends; the runs between are logged at debug level.

use std::time::{Duration, Instant};

use sqlx::ConnectOptions;
use sqlx::sqlite::SqliteConnection;
use tokio_util::sync::CancellationToken;

use super::Store;
use crate::supervise::{self, Task};

/// The checkpoint's name in the log and in a test's fault.
pub(super) const TASK: Task = "WAL checkpoint";

/// How many WAL pages (4 KB each) the commit path lets the WAL grow to before it checkpoints
/// itself: about 32 MB, well over what the background task leaves between two of its runs at
/// full ingest rate.
pub(super) const BOUND_PAGES: u32 = 8192;

/// The shortest wait between two runs, under load.
const MIN_INTERVAL: Duration = Duration::from_millis(100);
/// The longest wait, when little is written.
const MAX_INTERVAL: Duration = Duration::from_secs(5);
/// New WAL frames since the last run (256 KB) that count as load: fewer, and the wait doubles.
/// Small, so that under a steady load each run copies little: a run's copy ends in an fsync
/// of the database file, and the writer's commit, whose fsync of the WAL waits for the same
/// disk, waited behind a copy of a few thousand scattered pages (at 2 MB, 500 events/s let
/// the wait grow to seconds and each copy to 1,000-2,000 pages).
const BUSY_FRAMES: i64 = 64;
/// WAL pages past which every run follows soon, whatever it found ([`CATCH_UP_WAIT`], or the
/// shortest interval while a reader holds the copy back): the WAL only starts over once a run
/// has copied all of it, and the commit path copies what is left itself at [`BOUND_PAGES`]
/// (inside a commit ingest waits for); a quarter of it.
const CATCH_UP_PAGES: i64 = 2048;
/// The wait before the next run while the WAL is past [`CATCH_UP_PAGES`] and a run copied all
/// it found.
const CATCH_UP_WAIT: Duration = Duration::from_millis(10);
/// The wait before the first retry after a failure; it doubles with each failure that follows.
const RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest wait between two retries.
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What one passive checkpoint did: the frames in the WAL, and how many of them are now in the
/// database file (all, unless the writer appended while it ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpointed {
    pub(crate) wal_frames: i64,
    pub(crate) copied_frames: i64,
}

/// The checkpoint's own connection to the SQLite database, opened with the pool's options but
/// not taken from the pool, so that the writer and the readers never wait for a connection
/// while it copies and syncs.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    connection: SqliteConnection,
    /// A test's broken connection (`faults::break_next_checkpointers`).
    #[cfg(test)]
    broken: bool,
}

impl Checkpointer {
    /// Opens the connection (SQLite only; PostgreSQL checkpoints itself).
    pub(crate) async fn open(store: &Store) -> Result<Option<Self>, sqlx::Error> {
        let Store::Sqlite(pool) = store else {
            return Ok(None);
        };
        let connection = pool.connect_options().connect().await?;
        Ok(Some(Self {
            connection,
            #[cfg(test)]
            broken: super::faults::take_broken_checkpointer(),
        }))
    }

    /// Closes the connection (dropped, it would be closed later on its database thread, which
    /// a process exiting meanwhile cuts short).
    pub(crate) async fn close(self) {
        use sqlx::Connection;
        if let Err(error) = self.connection.close().await {
            tracing::debug!(%error, "The checkpoint's connection did not close cleanly.");
        }
    }

    /// Copies what it can of the WAL into the database file without waiting for anyone.
    pub(crate) async fn checkpoint(&mut self) -> Result<Checkpointed, sqlx::Error> {
        #[cfg(test)]
        if self.broken {
            return Err(super::faults::checkpoint_error());
        }
        let (_busy, wal_frames, copied_frames): (i64, i64, i64) =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(&mut self.connection)
                .await?;
        Ok(Checkpointed {
            wal_frames,
            copied_frames,
        })
    }
}

/// Checkpoints the WAL until cancelled, then closes its connection; returns at once on
/// PostgreSQL. A round that panics (a bug) does not stop the checkpoints: they start again on
/// a new connection (see [`crate::supervise`]), and meanwhile the commit path's own checkpoint
/// bounds the WAL.
pub(crate) async fn checkpoint_periodically(store: Store, cancel: CancellationToken) {
    supervise::restarting(TASK, cancel.clone(), || checkpoint_rounds(&store, &cancel)).await;
}

/// [`checkpoint_periodically`]'s loop, until `cancel` or a panic.
async fn checkpoint_rounds(store: &Store, cancel: &CancellationToken) {
    let mut checkpointer = match Checkpointer::open(store).await {
        Ok(None) => return,
        Ok(Some(checkpointer)) => Some(checkpointer),
        Err(error) => {
            // The commit path's own checkpoint still bounds the WAL meanwhile.
            tracing::warn!(%error, "Could not open the WAL checkpoint's connection; retrying.");
            None
        }
    };
    let mut failures = Failures(u32::from(checkpointer.is_none()));
    let mut interval = MIN_INTERVAL;
    let mut last_frames = 0;
    loop {
        let wait = failures.retry_wait().unwrap_or(interval);
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(wait) => {}
        }
        supervise::round(TASK);
        let started = Instant::now();
        let done = match checkpointer.as_mut() {
            Some(open) => open.checkpoint().await,
            None => match Checkpointer::open(store).await {
                Ok(Some(open)) => checkpointer.insert(open).checkpoint().await,
                Ok(None) => return,
                Err(error) => Err(error),
            },
        };
        match done {
            Ok(done) => {
                if let Some(failed) = failures.ended() {
                    tracing::info!(failed, "Checkpointing the WAL works again.");
                }
                // How long a copy takes and how much it copied, to line up with slow commits.
                tracing::debug!(
                    wal_frames = done.wal_frames,
                    copied_frames = done.copied_frames,
                    ms = started.elapsed().as_secs_f64() * 1000.0,
                    "Checkpointed the WAL."
                );
                (interval, last_frames) = paced(interval, last_frames, done);
            }
            Err(error) => {
                // The connection may be what failed: the next run opens another.
                if let Some(broken) = checkpointer.take() {
                    broken.close().await;
                }
                // The commit path's own checkpoint still bounds the WAL meanwhile.
                if failures.failed() {
                    tracing::warn!(%error, "Checkpointing the WAL failed; retrying on a new connection until it works.");
                } else {
                    tracing::debug!(%error, failed = failures.0, "Checkpointing the WAL failed again.");
                }
            }
        }
    }
    if let Some(checkpointer) = checkpointer {
        checkpointer.close().await;
    }
}

/// How many runs in a row have failed.
#[derive(Debug, Default)]
struct Failures(u32);

impl Failures {
    /// Counts a failure; answers whether it starts a streak (the one to warn of).
    fn failed(&mut self) -> bool {
        self.0 = self.0.saturating_add(1);
        self.0 == 1
    }

    /// Ends a streak at a success; answers how many failed in it, if any did.
    fn ended(&mut self) -> Option<u32> {
        let failed = std::mem::take(&mut self.0);
        (failed > 0).then_some(failed)
    }

    /// The wait before the next try while failing: doubles from [`RETRY_MIN`] with each
    /// failure, up to [`RETRY_MAX`].
    fn retry_wait(&self) -> Option<Duration> {
        let doublings = self.0.checked_sub(1)?;
        Some(
            RETRY_MIN
                .checked_mul(1 << doublings.min(16))
                .map_or(RETRY_MAX, |wait| wait.min(RETRY_MAX)),
        )
    }
}

/// The wait before the next run and the frames to count from, after a run that did `done`
/// following one that saw `last_frames`. A run that found the checkpoint busy (another one, the
/// commit path's own, was copying: SQLite answers -1 frames) tells nothing of the load, so the
/// pace stays as it was rather than slowing down in the middle of the busiest moments.
fn paced(interval: Duration, last_frames: i64, done: Checkpointed) -> (Duration, i64) {
    if done.wal_frames < 0 {
        return (interval, last_frames);
    }
    let new = new_frames(last_frames, done.wal_frames);
    // Nothing written since the last run: the WAL waits for the next write to start over, and
    // running soon would copy nothing (a quiet server after a burst ran 87 times a second).
    if done.wal_frames >= CATCH_UP_PAGES && new > 0 {
        // Copied whole, the WAL is long only because the writer committed during the run (the
        // WAL starts over at a write that finds every frame copied): the next run, soon, copies
        // just those commits, and shorter runs soon leave none behind. Left to the shortest
        // interval, each run copied 100 ms of the prune's writes, a commit always fell inside
        // it, and the WAL reached the commit path's bound, whose copy made that commit 12-39 ms
        // (docs/PERFORMANCE.md, "What maintenance holds"). Short of the end, a reader holds the
        // copy back: no use in running soon.
        let wait = if done.copied_frames == done.wal_frames {
            CATCH_UP_WAIT
        } else {
            MIN_INTERVAL
        };
        return (wait, done.wal_frames);
    }
    (next_interval(interval, new), done.wal_frames)
}

/// The wait before the next run, after one that found `new_frames` frames written since the
/// run before.
fn next_interval(interval: Duration, new_frames: i64) -> Duration {
    if new_frames >= BUSY_FRAMES {
        (interval / 2).max(MIN_INTERVAL)
    } else {
        // From a catch-up run's short wait, back to the shortest interval at once.
        (interval * 2).clamp(MIN_INTERVAL, MAX_INTERVAL)
    }
}

/// Frames written between two runs that saw `before` and then `now` frames in the WAL; fewer
/// now means a write transaction started the WAL over in between, so all of them are new.
fn new_frames(before: i64, now: i64) -> i64 {
    if now >= before { now - before } else { now }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_backs_off_while_little_is_written_and_returns_under_load() {
        let mut interval = MIN_INTERVAL;
        let mut waits = Vec::new();
        for _ in 0..10 {
            interval = next_interval(interval, BUSY_FRAMES - 1);
            waits.push(interval);
        }
        assert_eq!(waits[0], MIN_INTERVAL * 2);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(waits[9], MAX_INTERVAL);
        assert_eq!(next_interval(MAX_INTERVAL, BUSY_FRAMES), MAX_INTERVAL / 2);
        assert_eq!(next_interval(MIN_INTERVAL * 2, BUSY_FRAMES), MIN_INTERVAL);
        assert_eq!(next_interval(MIN_INTERVAL, 10 * BUSY_FRAMES), MIN_INTERVAL);
    }

    #[test]
    fn a_busy_checkpoint_keeps_the_pace_and_the_count() {
        let busy = Checkpointed {
            wal_frames: -1,
            copied_frames: -1,
        };
        assert_eq!(paced(MIN_INTERVAL, 3000, busy), (MIN_INTERVAL, 3000));
        let loaded = Checkpointed {
            wal_frames: 3000 + BUSY_FRAMES,
            copied_frames: 3000,
        };
        assert_eq!(
            paced(MIN_INTERVAL * 2, 3000, loaded),
            (MIN_INTERVAL, 3000 + BUSY_FRAMES)
        );
    }

    #[test]
    fn a_long_wal_copied_whole_is_copied_again_soon_until_it_starts_over() {
        // The run copied all it saw, yet the WAL is long: commits during the run kept it from
        // starting over. The next run follows soon and copies only what they added, so one
        // run ends with nothing left before the writer's next commit (docs/PERFORMANCE.md,
        // "What maintenance holds": the WAL reached the commit path's bound instead, and the
        // writer copied the rest inside a commit).
        let long = Checkpointed {
            wal_frames: CATCH_UP_PAGES + 10,
            copied_frames: CATCH_UP_PAGES + 10,
        };
        assert_eq!(
            paced(MAX_INTERVAL, CATCH_UP_PAGES, long),
            (CATCH_UP_WAIT, CATCH_UP_PAGES + 10)
        );
        // A reader kept the copy short of the end: running again soon would copy nothing.
        let held = Checkpointed {
            wal_frames: CATCH_UP_PAGES + 10,
            copied_frames: 100,
        };
        assert_eq!(
            paced(MAX_INTERVAL, CATCH_UP_PAGES, held),
            (MIN_INTERVAL, CATCH_UP_PAGES + 10)
        );
        // Once it started over, the pace follows the load again, from the shortest interval.
        let short = Checkpointed {
            wal_frames: 10,
            copied_frames: 10,
        };
        assert_eq!(
            paced(CATCH_UP_WAIT, CATCH_UP_PAGES + 10, short).0,
            MIN_INTERVAL
        );
    }

    #[test]
    fn failures_back_off_and_a_streak_is_reported_once_at_each_end() {
        let mut failures = Failures::default();
        assert_eq!(failures.retry_wait(), None, "no failure: the load's pace");
        assert!(failures.failed(), "the first failure starts a streak");
        let mut waits = vec![failures.retry_wait().unwrap()];
        for _ in 0..10 {
            assert!(!failures.failed(), "later failures are not reported again");
            waits.push(failures.retry_wait().unwrap());
        }
        assert_eq!(waits[0], RETRY_MIN);
        assert_eq!(waits[1], RETRY_MIN * 2);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(waits[10], RETRY_MAX);
        assert_eq!(failures.ended(), Some(11));
        assert_eq!(
            failures.ended(),
            None,
            "a success after a success ends nothing"
        );
        assert_eq!(failures.retry_wait(), None);
        assert!(failures.failed(), "a new streak is reported again");
    }

    #[test]
    fn new_frames_count_from_the_start_after_the_wal_started_over() {
        assert_eq!(new_frames(100, 350), 250);
        assert_eq!(new_frames(5000, 40), 40);
    }

    /// Review (issue 16 item 5): a long WAL copied whole, to which nobody writes any more (the
    /// server went quiet after a burst), is not a catch-up: nothing new comes to copy, and the
    /// WAL only starts over at the next write. The runs must back off as on a short WAL, not
    /// follow every 10 ms until someone writes.
    #[test]
    fn a_long_wal_nobody_writes_to_backs_off() {
        let quiet = Checkpointed {
            wal_frames: CATCH_UP_PAGES + 10,
            copied_frames: CATCH_UP_PAGES + 10,
        };
        let (mut interval, mut last_frames) = (CATCH_UP_WAIT, CATCH_UP_PAGES + 10);
        let mut waits = Vec::new();
        for _ in 0..10 {
            (interval, last_frames) = paced(interval, last_frames, quiet);
            waits.push(interval);
        }
        assert_eq!(waits[9], MAX_INTERVAL, "{waits:?}");
    }
}
