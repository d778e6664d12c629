//! Retention's deletes as a step of the writer's group commit (issue 16 item 5).
//!
//! On SQLite a chunk deleted in a transaction of its own holds the database's one write lock
//! through its own fsync, and the group-commit writer waits for it. Sent to the writer, the
//! chunk is deleted inside the group's transaction instead: it shares the group's commit (no
//! fsync of its own, no second holder of the lock) and adds only the delete itself to the
//! group's latency, which [`super::retention_sql`] keeps small by bounding the chunk. The read
//! steps (finding the range, reading its pages) stay outside the writer. The tables without an
//! id to range over (forwarding statistics, metric minutes) are deleted the same way, a bounded
//! number of their oldest rows at a time ([`Bounds::Oldest`]).

use std::time::Instant;

use super::backend::{Arg, Sql, Tx};

/// One bounded delete.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PruneChunk {
    /// The delete, with the placeholders its [`Bounds`] say (a `retention_sql::Log`'s
    /// `delete`, which re-checks what a pending job needs itself, or an `OldestFirst`'s).
    pub(crate) delete: Sql,
    /// Locks the rows the delete may take, run just before it with the same arguments (the
    /// log's `lock`; on PostgreSQL only, see `retention_sql::BATCHES`).
    pub(crate) lock: Option<Sql>,
    pub(crate) bounds: Bounds,
}

/// Which rows a chunk deletes, and so the delete's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bounds {
    /// `$1`, `$2`: the rows with ids from `first` to `last`; `$3`: older than `cutoff`.
    Ids { first: i64, last: i64, cutoff: i64 },
    /// `$1`: the rows older than `cutoff`; `$2`: at most `rows` of them, oldest first.
    Oldest { cutoff: i64, rows: i64 },
}

impl Bounds {
    /// The delete's arguments: the first `.1` of `.0`.
    pub(super) fn args(self) -> ([Arg<'static>; 3], usize) {
        match self {
            Bounds::Ids {
                first,
                last,
                cutoff,
            } => ([Arg::Int(first), Arg::Int(last), Arg::Int(cutoff)], 3),
            Bounds::Oldest { cutoff, rows } => ([Arg::Int(cutoff), Arg::Int(rows), Arg::Int(0)], 2),
        }
    }
}

/// Runs the group's chunk deletes, after its other steps, so the delete's check of the jobs
/// still pending sees the jobs the group itself enqueued. Returns the rows each one deleted.
pub(super) async fn delete_chunks<'a>(
    tx: &mut Tx<'_>,
    chunks: impl Iterator<Item = &'a PruneChunk>,
) -> Result<Vec<u64>, sqlx::Error> {
    let mut deleted = Vec::new();
    for chunk in chunks {
        let (values, n) = chunk.bounds.args();
        let values = &values[..n];
        let started = Instant::now();
        if let Some(lock) = chunk.lock {
            tx.execute(lock, values).await?;
        }
        let rows = tx.execute(chunk.delete, values).await?;
        // What the chunk adds to its group (the group's own log has the rest).
        tracing::debug!(
            rows,
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "Deleted a retention chunk in a group."
        );
        deleted.push(rows);
    }
    Ok(deleted)
}
