//! Retention: the batch log, attempts, dead letters and alias requests are deleted once older
//! than the cutoff, without ever holding the writer up for long (issue 16 item 5).
//!
//! Every step is index-backed and bounded by a chunk, whatever the table's size: an index on
//! the time column finds the newest row older than the cutoff (ids grow with time, so every
//! older row has a smaller id, give or take a clock's skew), the primary key finds the oldest
//! row, and each delete covers at most [`CHUNK`] consecutive ids. On SQLite every delete takes
//! the database's one write lock, which the group-commit writer needs for every ingest, so the
//! server sends each chunk's delete to the writer ([`Store::prune_through`]), which runs it
//! inside a group commit (see [`super::prune_step`]); on PostgreSQL, where a delete of old rows
//! takes no lock an insert of new ones waits for, each chunk commits on its own. Chunks are
//! small, so a group grows by a few milliseconds at most; on SQLite each chunk's pages are then
//! copied from the WAL into the database file (a `Copier`, one chunk's worth at a time), and a
//! pause follows each chunk. A row whose id is in range but whose time is not old (a clock that
//! went back) is left for a later prune: each delete still checks the time.

use std::time::{Duration, Instant};

use super::backend::{Sql, args};
use super::prune_step::{self, Bounds, PruneChunk};
use super::writer::Writer;
use super::{Store, StoreResult};

/// A log that retention deletes oldest first, by id range.
#[derive(Debug, Clone, Copy)]
pub(in crate::store) struct Log {
    /// `$1` the cutoff: the id of the newest row older than it (through the time index).
    pub(in crate::store) last_old: Sql,
    /// `$1` an id: the first row's id at or after it (through the primary key).
    pub(in crate::store) first_from: Sql,
    /// `$1`, `$2` the first and last id of a range, `$3` the cutoff: reads the rows the delete
    /// will free, bodies included (`substr(…, -1)` walks a long body's overflow pages). A
    /// reader waits for no lock, so the disk reads of old, cold pages happen here rather than
    /// inside the delete, which holds the write lock.
    pub(in crate::store) warm: Sql,
    /// `$1`, `$2` the first and last id of a range, `$3` the cutoff: deletes the range's old rows.
    pub(in crate::store) delete: Sql,
    /// `$1`, `$2`, `$3` as for `delete`: locks the rows the delete may take, in a statement of
    /// the delete's transaction before it, where a concurrent writer may add a row that keeps
    /// them (see [`BATCHES`]); `None`: the delete runs alone.
    pub(in crate::store) lock: Option<Sql>,
}

/// Batches: the newest old one is clamped below the first batch a pending job needs (see
/// [`FIRST_NEEDED_BATCH`]), and each delete checks that bound again itself, so a job enqueued
/// for an old batch (a replay) while the prune runs keeps its batch. On PostgreSQL the delete
/// alone would not be enough: under READ COMMITTED its job check reads the snapshot taken when
/// it started, before it waited for a row a replay's job insert holds (`FOR KEY SHARE`, see
/// `Store::enqueue_replayed_batch`). So the chunk's rows are first locked `FOR UPDATE` in a
/// statement of their own; the delete that follows takes its snapshot after every such insert
/// committed, and sees its job. (SQLite's one writer makes the two serial anyway.)
pub(in crate::store) const BATCHES: Log = Log {
    last_old: Sql::shared(
        "SELECT id FROM batches WHERE received_at < $1 ORDER BY received_at DESC LIMIT 1",
    ),
    first_from: Sql::shared("SELECT id FROM batches WHERE id >= $1 ORDER BY id LIMIT 1"),
    warm: Sql::shared(
        "SELECT COUNT(*) FROM batches WHERE id >= $1 AND id <= $2 AND received_at < $3 \
         AND substr(body, -1) IS NOT NULL",
    ),
    delete: Sql::shared(
        "DELETE FROM batches WHERE id >= $1 AND id <= $2 AND received_at < $3 \
         AND id < (SELECT COALESCE(MIN(batch_id), 9223372036854775807) FROM jobs)",
    ),
    lock: Some(Sql::postgres_only(
        "SELECT id FROM batches WHERE id >= $1 AND id <= $2 AND received_at < $3 \
         ORDER BY id FOR UPDATE",
    )),
};
/// The smallest batch id a pending job references (through `jobs_batch`, migration 0021).
pub(in crate::store) const FIRST_NEEDED_BATCH: Sql = Sql::shared("SELECT MIN(batch_id) FROM jobs");

pub(in crate::store) const ATTEMPTS: Log = Log {
    last_old: Sql::shared(
        "SELECT id FROM attempts WHERE attempted_at < $1 ORDER BY attempted_at DESC LIMIT 1",
    ),
    first_from: Sql::shared("SELECT id FROM attempts WHERE id >= $1 ORDER BY id LIMIT 1"),
    warm: Sql::shared(
        "SELECT COUNT(*) FROM attempts WHERE id >= $1 AND id <= $2 AND attempted_at < $3",
    ),
    delete: Sql::shared("DELETE FROM attempts WHERE id >= $1 AND id <= $2 AND attempted_at < $3"),
    lock: None,
};

pub(in crate::store) const DEAD_LETTERS: Log = Log {
    last_old: Sql::shared(
        "SELECT id FROM dead_letters WHERE created_at < $1 ORDER BY created_at DESC LIMIT 1",
    ),
    first_from: Sql::shared("SELECT id FROM dead_letters WHERE id >= $1 ORDER BY id LIMIT 1"),
    warm: Sql::shared(
        "SELECT COUNT(*) FROM dead_letters WHERE id >= $1 AND id <= $2 AND created_at < $3 \
         AND substr(body, -1) IS NOT NULL",
    ),
    delete: Sql::shared("DELETE FROM dead_letters WHERE id >= $1 AND id <= $2 AND created_at < $3"),
    lock: None,
};

/// Alias requests: nothing reads them but the admin's inspection, so age is the only rule.
pub(in crate::store) const ALIASES: Log = Log {
    last_old: Sql::shared(
        "SELECT id FROM aliases WHERE created_at < $1 ORDER BY created_at DESC LIMIT 1",
    ),
    first_from: Sql::shared("SELECT id FROM aliases WHERE id >= $1 ORDER BY id LIMIT 1"),
    warm: Sql::shared(
        "SELECT COUNT(*) FROM aliases WHERE id >= $1 AND id <= $2 AND created_at < $3",
    ),
    delete: Sql::shared("DELETE FROM aliases WHERE id >= $1 AND id <= $2 AND created_at < $3"),
    lock: None,
};

/// Ids one delete covers. Small, because on SQLite the delete holds the write lock ingest
/// needs (inside a group commit: adds to the group's latency): 500 batches of ~4 KB took about
/// 5 ms at 5M rows (docs/PERFORMANCE.md, "Retention at any table size").
const CHUNK: i64 = 500;

/// The least pause after each delete; the pause is never shorter than the delete took either.
/// A writer that found the lock taken sleeps in SQLite's busy handler, up to 100 ms a time
/// (its steps grow from 1 ms to 100 ms): a shorter pause let the next delete take the lock
/// again while the writer slept, and at 5 ms ingest p99 was 254 ms (docs/PERFORMANCE.md,
/// "Retention at any table size"). 100 ms lets a waiting writer in before every next chunk.
const MIN_PAUSE: Duration = Duration::from_millis(100);

/// Ids one delete covers inside a group commit, where the delete adds to the group's latency.
/// At 5M rows (`retention-bench chunkcost`, docs/PERFORMANCE.md) a one-row commit with a chunk
/// of 100 took at most 7–9 ms, with a chunk of 500 up to 22–37 ms.
const CHUNK_IN_GROUP: i64 = 100;

/// The least pause after a chunk the writer deleted in a group commit: no lock was taken
/// besides the writer's, so the pause only spreads the chunks over groups; a fifth of
/// [`MIN_PAUSE`] for a fifth of [`CHUNK`] keeps the rate at which old rows go.
const MIN_PAUSE_IN_GROUP: Duration = Duration::from_millis(20);

impl Store {
    /// Deletes batches, attempts and dead letters older than `cutoff` (Unix ms); returns how
    /// many rows went. A batch some job still needs is never pruned: every batch id at or
    /// above the smallest one a pending job references is kept.
    /// Each chunk is deleted in a transaction of its own (as on PostgreSQL).
    #[cfg(test)]
    pub(crate) async fn prune(&self, cutoff: i64) -> StoreResult<u64> {
        self.prune_logs(cutoff, None).await
    }

    /// Deletes batches, attempts and dead letters older than `cutoff` (Unix ms), as `prune`
    /// does, but with each chunk deleted in one of `writer`'s group commits on SQLite (on
    /// PostgreSQL each in a transaction of its own all the same); returns how many rows went.
    pub(crate) async fn prune_through(&self, writer: &Writer, cutoff: i64) -> StoreResult<u64> {
        self.prune_logs(cutoff, self.deletes_in_groups(writer))
            .await
    }

    /// Deletes alias requests that arrived before `cutoff` (Unix ms); returns how many went.
    pub(crate) async fn prune_aliases(&self, writer: &Writer, cutoff: i64) -> StoreResult<u64> {
        let writer = self.deletes_in_groups(writer);
        self.prune_log(ALIASES, cutoff, i64::MAX, writer).await
    }

    /// Deletes the rows `delete` finds older than `cutoff`, oldest first and a chunk at a time
    /// with a pause after each, as the logs are; each chunk in a group commit of `writer` on
    /// SQLite. For the tables with no id to range over (forwarding statistics, metric
    /// minutes): `delete` takes `$1` the cutoff and `$2` the most rows (see [`Bounds::Oldest`]).
    pub(in crate::store) async fn prune_oldest(
        &self,
        delete: Sql,
        cutoff: i64,
        writer: &Writer,
    ) -> StoreResult<u64> {
        let writer = self.deletes_in_groups(writer);
        let (rows, least) = if writer.is_some() {
            (CHUNK_IN_GROUP, MIN_PAUSE_IN_GROUP)
        } else {
            (CHUNK, MIN_PAUSE)
        };
        let mut copier = Copier::new(self);
        let mut deleted = 0;
        loop {
            let started = Instant::now();
            let chunk = PruneChunk {
                delete,
                lock: None,
                bounds: Bounds::Oldest { cutoff, rows },
            };
            let went = self.delete_chunk(chunk, writer, &mut copier).await?;
            deleted += went;
            // Fewer than a chunk: nothing older is left (new rows are not old).
            if went < rows.unsigned_abs() {
                return Ok(deleted);
            }
            tokio::time::sleep(started.elapsed().max(least)).await;
        }
    }

    /// The writer to send chunk deletes to: on SQLite only, where a delete of its own would
    /// hold the one write lock the writer needs.
    fn deletes_in_groups<'a>(&self, writer: &'a Writer) -> Option<&'a Writer> {
        matches!(self, Store::Sqlite(_)).then_some(writer)
    }

    async fn prune_logs(&self, cutoff: i64, writer: Option<&Writer>) -> StoreResult<u64> {
        let (needed,): (Option<i64>,) = self.fetch_one(FIRST_NEEDED_BATCH, &[]).await?;
        let below = needed.unwrap_or(i64::MAX);
        let attempts = self.prune_log(ATTEMPTS, cutoff, i64::MAX, writer).await?;
        let letters = self
            .prune_log(DEAD_LETTERS, cutoff, i64::MAX, writer)
            .await?;
        let batches = self.prune_log(BATCHES, cutoff, below, writer).await?;
        Ok(attempts + letters + batches)
    }

    /// Deletes `log`'s rows older than `cutoff` with an id below `below`, a chunk of ids at a
    /// time with a pause after each; each chunk in a group commit of `writer` if given.
    async fn prune_log(
        &self,
        log: Log,
        cutoff: i64,
        below: i64,
        writer: Option<&Writer>,
    ) -> StoreResult<u64> {
        let newest: Option<(i64,)> = self.fetch_optional(log.last_old, args![cutoff]).await?;
        let Some(last) = newest.map(|(id,)| id.min(below.saturating_sub(1))) else {
            return Ok(0);
        };
        let (size, least) = if writer.is_some() {
            (CHUNK_IN_GROUP, MIN_PAUSE_IN_GROUP)
        } else {
            (CHUNK, MIN_PAUSE)
        };
        let mut copier = Copier::new(self);
        self.delete_range(log, cutoff, (last, size, least), writer, &mut copier)
            .await
    }

    /// [`Store::prune_log`]'s chunks, up to the id `last`: `size` ids each, a pause of at least
    /// `least` after each.
    async fn delete_range(
        &self,
        log: Log,
        cutoff: i64,
        (last, size, least): (i64, i64, Duration),
        writer: Option<&Writer>,
        copier: &mut Copier<'_>,
    ) -> StoreResult<u64> {
        let mut deleted = 0;
        let mut from = i64::MIN;
        while let Some((first,)) = self
            .fetch_optional::<(i64,)>(log.first_from, args![from])
            .await?
        {
            if first > last {
                break;
            }
            let to = first.saturating_add(size - 1).min(last);
            let _: (i64,) = self.fetch_one(log.warm, args![first, to, cutoff]).await?;
            let started = Instant::now();
            let chunk = PruneChunk {
                delete: log.delete,
                lock: log.lock,
                bounds: Bounds::Ids {
                    first,
                    last: to,
                    cutoff,
                },
            };
            deleted += self.delete_chunk(chunk, writer, copier).await?;
            if to == i64::MAX {
                break;
            }
            from = to + 1;
            tokio::time::sleep(started.elapsed().max(least)).await;
        }
        Ok(deleted)
    }

    /// Deletes one chunk: in a group commit of `writer` if given, after which `copier` copies
    /// the deleted pages into the database file (not the writer's commit); else in a
    /// transaction of its own, after locking its rows when the log asks for it.
    async fn delete_chunk(
        &self,
        chunk: PruneChunk,
        writer: Option<&Writer>,
        copier: &mut Copier<'_>,
    ) -> StoreResult<u64> {
        if let Some(writer) = writer {
            let deleted = writer.prune_chunk(chunk).await?;
            if deleted > 0 {
                copier.copy().await;
            }
            return Ok(deleted);
        }
        if chunk.lock.is_none() {
            let (values, n) = chunk.bounds.args();
            return Ok(self.execute(chunk.delete, &values[..n]).await?);
        }
        // The lock and the delete in one transaction, as the writer's step runs them.
        let mut tx = self.begin().await?;
        let deleted = prune_step::delete_chunks(&mut tx, std::iter::once(&chunk)).await?;
        tx.commit().await?;
        Ok(deleted.into_iter().sum())
    }
}

/// Copies each chunk's pages from the WAL into the database file once the writer committed it,
/// before the pause that precedes the next chunk (SQLite, chunks deleted in group commits).
/// Left to the background checkpoint (`store/checkpoint.rs`), the pages of all the chunks of
/// its last interval were copied and synced at once, and the writer's commits meanwhile waited
/// for the disk behind that copy (docs/PERFORMANCE.md, "What maintenance holds"). Copied here, a
/// run copies one chunk's pages, and the copy's time counts in the chunk's, which the pause after
/// it matches: a slow disk slows the prune down. Each copy borrows a pooled connection: nothing
/// outlives it, so a prune cut short at shutdown leaves no connection open beside the pool's, whose
/// last one to close must be the database's last (it copies the WAL back and deletes it).
struct Copier<'a> {
    store: &'a Store,
    /// A copy failed: the background checkpoint copies the rest of this prune's chunks.
    gave_up: bool,
}

impl<'a> Copier<'a> {
    fn new(store: &'a Store) -> Self {
        Self {
            store,
            gave_up: false,
        }
    }

    /// Copies what the WAL holds (the chunk's pages, and ingest's since the last copy).
    async fn copy(&mut self) {
        let Store::Sqlite(pool) = self.store else {
            return;
        };
        if self.gave_up {
            return;
        }
        let started = Instant::now();
        let copied: Result<(i64, i64, i64), sqlx::Error> =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                .fetch_one(pool)
                .await;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        match copied {
            // Another checkpoint (the background one) held SQLite's checkpoint lock.
            Ok((busy, ..)) if busy != 0 => {
                tracing::debug!(ms, "A retention chunk's pages were not copied: busy.");
            }
            Ok((_, wal_frames, copied_frames)) => tracing::debug!(
                wal_frames,
                copied_frames,
                ms,
                "Copied a retention chunk's pages."
            ),
            Err(error) => {
                tracing::debug!(%error, "Copying a retention chunk's pages failed.");
                self.gave_up = true;
            }
        }
    }
}
