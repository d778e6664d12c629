//! Retention's deletes as a step of the writer's group commit (issue 16 item 5).
//!
//! On SQLite a chunk deleted in a transaction of its own holds the database's one write lock
//! through its own fsync, and the group-commit writer waits for it. Sent to the writer, the
//! chunk is deleted inside the group's transaction instead: it shares the group's commit (no
//! fsync of its own, no second holder of the lock) and adds only the delete itself to the
//! group's latency, which [`super::retention_sql`] keeps small by bounding the chunk. The read
//! steps (finding the range, reading its pages) stay outside the writer.

use super::backend::{Sql, Tx, args};

/// One bounded delete: the rows of a log with ids from `first` to `last` older than `cutoff`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PruneChunk {
    /// `$1`, `$2` the first and last id, `$3` the cutoff (a `retention_sql::Log`'s `delete`,
    /// which re-checks what a pending job needs itself).
    pub(crate) delete: Sql,
    /// Locks the rows the delete may take, run just before it (the log's `lock`; on
    /// PostgreSQL only, see `retention_sql::BATCHES`).
    pub(crate) lock: Option<Sql>,
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) cutoff: i64,
}

/// Runs the group's chunk deletes, after its other steps, so the delete's check of the jobs
/// still pending sees the jobs the group itself enqueued. Returns the rows each one deleted.
pub(super) async fn delete_chunks<'a>(
    tx: &mut Tx<'_>,
    chunks: impl Iterator<Item = &'a PruneChunk>,
) -> Result<Vec<u64>, sqlx::Error> {
    let mut deleted = Vec::new();
    for chunk in chunks {
        let range = args![chunk.first, chunk.last, chunk.cutoff];
        if let Some(lock) = chunk.lock {
            tx.execute(lock, range).await?;
        }
        deleted.push(tx.execute(chunk.delete, range).await?);
    }
    Ok(deleted)
}
