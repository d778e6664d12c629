//! Retention at any table size (issue 16 item 5): every maintenance statement has an
//! index-backed plan, so none reads a whole table while it holds the write lock ingest needs;
//! and the chunked prune deletes every old row across many chunks yet keeps what a pending job
//! needs and what is not old.

use std::time::Duration;

use super::harness::{BatchRow, HOUR, TestStore, batch, on_postgres};
use crate::model::ids::BatchId;
use crate::store::Store;
use crate::store::backend::Sql;
use crate::store::group::Command;
use crate::store::prune_step::{self, Bounds, PruneChunk};
use crate::store::queue::IngestOutcome;
use crate::store::writer::Writer;
use crate::store::{forwarding_sql, metrics_sql, retention_sql, sessions_sql};

/// Every statement retention and the other maintenance run, with how many integer arguments
/// it takes.
fn maintenance() -> Vec<(&'static str, Sql, usize)> {
    let mut statements = vec![
        ("first needed batch", retention_sql::FIRST_NEEDED_BATCH, 0),
        ("metric minutes", metrics_sql::PRUNE_MINUTES, 2),
        ("metric latency", metrics_sql::PRUNE_LATENCY, 2),
        ("sessions", sessions_sql::PRUNE_SESSIONS, 1),
        ("forwarding stats", forwarding_sql::PRUNE, 2),
    ];
    for (name, log) in [
        ("batches", retention_sql::BATCHES),
        ("attempts", retention_sql::ATTEMPTS),
        ("dead letters", retention_sql::DEAD_LETTERS),
        ("aliases", retention_sql::ALIASES),
    ] {
        statements.push((name, log.last_old, 1));
        statements.push((name, log.first_from, 1));
        statements.push((name, log.warm, 3));
        statements.push((name, log.delete, 3));
        if let Some(lock) = log.lock.filter(|_| on_postgres()) {
            statements.push((name, lock, 3));
        }
    }
    statements
}

/// The plan of `sql` as text, one line per step (the statement texts are the store's own
/// constants). On PostgreSQL sequential scans are disabled
/// first, so a plan still showing one has no index to use (an empty test table would
/// otherwise be scanned whatever the indexes).
async fn plan(store: &Store, sql: Sql, arity: usize) -> Vec<String> {
    match store {
        Store::Sqlite(pool) => {
            let text = format!("EXPLAIN QUERY PLAN {}", sql.sqlite_text());
            let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(text));
            for _ in 0..arity {
                query = query.bind(1_i64);
            }
            let rows = query.fetch_all(pool).await.expect("explain");
            rows.into_iter().map(|(_, _, _, detail)| detail).collect()
        }
        Store::Postgres(pool) => {
            let mut conn = pool.acquire().await.expect("connection");
            sqlx::query("SET enable_seqscan = off")
                .execute(&mut *conn)
                .await
                .expect("set");
            let text = format!("EXPLAIN {}", sql.postgres_text());
            let mut query = sqlx::query_as::<_, (String,)>(sqlx::AssertSqlSafe(text));
            for _ in 0..arity {
                query = query.bind(1_i64);
            }
            let rows = query.fetch_all(&mut *conn).await.expect("explain");
            sqlx::query("RESET enable_seqscan")
                .execute(&mut *conn)
                .await
                .expect("reset");
            rows.into_iter().map(|(line,)| line).collect()
        }
    }
}

/// Whether a plan line reads a whole table: SQLite's `SCAN t` (with or without an index: a
/// full index scan grows with the table too) or a `SEARCH t` the min/max shortcut cannot
/// serve without an index (`SEARCH t` with no `USING`); PostgreSQL's `Seq Scan`.
fn reads_whole_table(line: &str) -> bool {
    let line = line.trim();
    let sqlite_scan = line.starts_with("SCAN") && !line.starts_with("SCAN CONSTANT ROW");
    let sqlite_unindexed = line.starts_with("SEARCH") && !line.contains(" USING ");
    sqlite_scan || sqlite_unindexed || line.contains("Seq Scan")
}

#[tokio::test]
async fn every_maintenance_statement_has_an_index_backed_plan() {
    let db = TestStore::open().await;
    let mut full_scans = Vec::new();
    for (name, sql, arity) in maintenance() {
        let lines = plan(&db.store, sql, arity).await;
        if lines.iter().any(|line| reads_whole_table(line)) {
            full_scans.push(format!("{name}: {lines:?}"));
        }
    }
    assert!(
        full_scans.is_empty(),
        "statements that read a whole table:\n{}",
        full_scans.join("\n")
    );
}

fn ids(rows: &[BatchRow]) -> Vec<BatchId> {
    rows.iter().map(|b| b.id).collect()
}

fn stored(outcome: IngestOutcome) -> BatchId {
    match outcome {
        IngestOutcome::Stored { batch_id } => batch_id,
        IngestOutcome::Duplicate => panic!("expected the batch to be stored"),
    }
}

#[tokio::test]
async fn a_prune_over_many_chunks_deletes_every_old_batch_before_the_first_one_needed() {
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(3600));
    let old = db.stored(0);
    let young = db.stored(10 * HOUR);
    // 1,300 old batches (more than two chunks), one of them young (a clock that went back),
    // then one with a pending job, then old ones after it.
    let mut batches: Vec<_> = (0..1_300).map(|_| batch("in", None, old, &[])).collect();
    batches[7] = batch("in", None, young, &[]);
    batches[1_200] = batch("in", None, old, &["c1"]);
    let mut all = Vec::new();
    for group in batches.chunks(100) {
        all.extend(node.ingest(group.to_vec()).await.into_iter().map(stored));
    }
    let (straggler, needed) = (all[7], all[1_200]);

    let deleted = db.store.prune(db.stored(HOUR)).await.expect("prune");

    let mut kept = vec![straggler];
    kept.extend_from_slice(&all[1_200..]);
    assert_eq!(ids(&db.batches().await), kept);
    assert_eq!(deleted, 1_199);
    assert_eq!(db.jobs().await[0].batch_id, needed);
    // Nothing more is old enough, so a second prune deletes nothing.
    assert_eq!(db.store.prune(db.stored(HOUR)).await.expect("prune"), 0);
}

/// A chunk delete for the writer: `BATCHES`' ids `first..=last` older than `cutoff`.
fn chunk(delete: Sql, first: BatchId, last: BatchId, cutoff: i64) -> PruneChunk {
    PruneChunk {
        delete,
        lock: None,
        bounds: Bounds::Ids {
            first: first.get(),
            last: last.get(),
            cutoff,
        },
    }
}

#[tokio::test]
async fn a_prune_chunk_committed_by_the_writer_deletes_its_old_rows_but_not_what_a_job_needs() {
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(3600));
    let (old, young) = (db.stored(0), db.stored(10 * HOUR));
    let mut batches: Vec<_> = (0..10).map(|_| batch("in", None, old, &[])).collect();
    batches[3] = batch("in", None, young, &[]);
    batches[7] = batch("in", None, old, &["c1"]);
    let all: Vec<_> = node.ingest(batches).await.into_iter().map(stored).collect();

    let whole = chunk(
        retention_sql::BATCHES.delete,
        all[0],
        all[9],
        db.stored(HOUR),
    );
    let deleted = node.writer().prune_chunk(whole).await.expect("prune chunk");

    // Batches 0-2 and 4-6 go; the young one stays, and so does everything from the one a job
    // still needs on.
    assert_eq!(deleted, 6);
    assert_eq!(ids(&db.batches().await), [all[3], all[7], all[8], all[9]]);
}

#[tokio::test]
async fn a_failing_prune_chunk_does_not_fail_the_ingests_of_its_group() {
    // Only SQLite sends chunks to the writer, and only there do they share the ingests' group
    // (on PostgreSQL ingests commit on a lane of their own).
    if on_postgres() {
        return;
    }
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(3600));
    let old = db.stored(0);
    let first = stored(node.ingest(vec![batch("in", None, old, &[])]).await[0]);
    // A statement the database refuses, sent with ingests, and the writer told to take the
    // three as one group (its thread could take the first alone).
    let broken = Sql::shared("DELETE FROM no_such_table WHERE id >= $1 AND id <= $2 AND at < $3");
    let writer = node.writer();
    crate::store::faults::group_next(3);
    let (pruned, a, b) = tokio::join!(
        writer.prune_chunk(chunk(broken, first, first, db.stored(HOUR))),
        writer.ingest(vec![batch("in", Some("a"), old, &[])]),
        writer.ingest(vec![batch("in", Some("b"), old, &["c1"])]),
    );

    assert!(pruned.is_err(), "the broken delete reports its error");
    let a = stored(a.expect("ingest a")[0]);
    let b = stored(b.expect("ingest b")[0]);
    assert_eq!(ids(&db.batches().await), [first, a, b]);
    assert_eq!(db.jobs().await[0].batch_id, b);
}

#[tokio::test]
async fn a_prune_through_the_writer_deletes_every_old_batch_across_chunks() {
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(3600));
    let old = db.stored(0);
    let mut batches: Vec<_> = (0..1_100).map(|_| batch("in", None, old, &[])).collect();
    batches[1_050] = batch("in", None, old, &["c1"]);
    let mut all = Vec::new();
    for group in batches.chunks(100) {
        all.extend(node.ingest(group.to_vec()).await.into_iter().map(stored));
    }

    let cutoff = db.stored(HOUR);
    let deleted = db.store.prune_through(node.writer(), cutoff).await;

    assert_eq!(deleted.expect("prune"), 1_050);
    assert_eq!(ids(&db.batches().await), all[1_050..]);
}

/// A replay inserts a job for an old batch while a prune is deleting it: whichever takes the
/// batch row first, the job and its batch end up both there or both gone. Here the replay's
/// insert holds the row (uncommitted) when the prune reaches it; the prune waits, and must then
/// see the committed job and keep the batch (on PostgreSQL a delete reads its job check from
/// the snapshot it took before waiting, hence the lock statement before it).
#[tokio::test]
async fn a_replay_job_inserted_while_the_prune_waits_keeps_its_batch() {
    use crate::store::backend::args;
    let db = TestStore::open().await;
    let node = db.node(Duration::from_secs(3600));
    let old = db.stored(0);
    let replayed = stored(
        node.ingest(vec![batch("in", None, old, &[])])
            .await
            .remove(0),
    );
    let connection = crate::model::ids::ConnectionId::trusted("c1");

    let mut replay = db.store.begin().await.expect("begin");
    let made = replay
        .execute(
            crate::store::replays_sql::INSERT_JOB,
            args![
                replayed,
                &connection,
                10_i64,
                old,
                old,
                None::<i64>,
                None::<i64>
            ],
        )
        .await
        .expect("insert the replay's job");
    assert_eq!(made, 1);
    let store = db.store.clone();
    let cutoff = db.stored(HOUR);
    let prune = tokio::spawn(async move { store.prune(cutoff).await });
    // Long enough for the prune to reach the batch row and wait for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    replay.commit().await.expect("commit");
    prune.await.expect("the prune task").expect("prune");

    assert_eq!(ids(&db.batches().await), [replayed]);
    assert_eq!(db.jobs().await[0].batch_id, replayed);
}

/// Metric minutes have no id range, yet their prune deletes a bounded number of the oldest at a
/// time, each chunk sent to the writer (to share a group commit) rather than committed beside
/// it: 250 old minutes go in chunks of 100, 100 and 50, the young one stays.
#[tokio::test]
async fn metric_minutes_are_pruned_in_bounded_chunks_sent_to_the_writer() {
    // Only SQLite sends chunks to the writer (on PostgreSQL each commits on its own).
    let db = TestStore::open().await;
    let Store::Sqlite(pool) = &db.store else {
        return;
    };
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 251) \
         INSERT INTO metric_minutes (subject, minute_ms, received, forwarded, requests, \
         failures, dead_letters, backlog) SELECT 'in_' || (i % 7), i * 60000, 1, 0, 0, 0, 0, 0 \
         FROM n",
    )
    .execute(pool)
    .await
    .expect("minutes");
    let cutoff = 251 * 60_000;

    let (writer, mut commands) = Writer::into_channel();
    let store = db.store.clone();
    let prune = tokio::spawn(async move { store.prune_minutes(&writer, cutoff).await });
    let mut chunks = Vec::new();
    // The prune's writer handle is its only one: the commands end when the prune does.
    while let Some(command) = commands.recv().await {
        let Command::Prune { chunk, reply } = command else {
            panic!("a prune sends only chunk deletes: {command:?}");
        };
        // Deleted in a transaction, as the writer's group does.
        let mut tx = db.store.begin().await.expect("begin");
        let deleted = prune_step::delete_chunks(&mut tx, std::iter::once(&chunk))
            .await
            .expect("delete");
        tx.commit().await.expect("commit");
        chunks.push((chunk.bounds, deleted[0]));
        reply.send(Ok(deleted[0])).expect("the prune waits");
    }

    assert_eq!(prune.await.expect("task").expect("prune"), 250);
    let oldest = |rows| Bounds::Oldest { cutoff, rows };
    assert_eq!(
        chunks,
        [
            (oldest(100), 100),
            (oldest(100), 100),
            (oldest(100), 50),
            (oldest(100), 0), // metric latency: nothing there
        ]
    );
    let (left,): (i64,) = sqlx::query_as("SELECT minute_ms FROM metric_minutes")
        .fetch_one(pool)
        .await
        .expect("the young minute");
    assert_eq!(left, cutoff);
}

/// The number of free pages the database file's own header records (bytes 36-39): what the
/// last copy from the WAL into the file brought, not what the WAL holds since.
fn free_pages_in_file(file: &std::path::Path) -> u32 {
    let bytes = std::fs::read(file).expect("the database file");
    u32::from_be_bytes(bytes[36..40].try_into().expect("a header"))
}

/// Issue 16 item 5: a chunk's deleted pages are copied from the WAL into the database file
/// before the next chunk goes to the writer, so no copy ever has more than one chunk's pages to
/// write and sync beside the writer's commits (the background checkpoint copied all the chunks
/// of its last interval at once). Seen in the file's own header: the pages the first chunk
/// freed are counted there by the time the second chunk is sent.
#[tokio::test]
async fn each_chunk_is_copied_into_the_database_file_before_the_next_is_sent() {
    // Only SQLite sends chunks to the writer and has a WAL to copy.
    let db = TestStore::open().await;
    let Some(file) = db.sqlite_file() else {
        return;
    };
    let node = db.node(Duration::from_secs(3600));
    let old = db.stored(0);
    // 16 KB bodies: each batch freed takes its overflow pages to the free list.
    for _ in 0..3 {
        let group = (0..50)
            .map(|_| {
                let mut big = batch("in", None, old, &[]);
                big.body = std::sync::Arc::from(vec![b' '; 16 << 10]);
                big
            })
            .collect();
        node.ingest(group).await;
    }
    let (writer, mut commands) = Writer::into_channel();
    let store = db.store.clone();
    let cutoff = db.stored(HOUR);
    let prune = tokio::spawn(async move { store.prune_through(&writer, cutoff).await });
    let mut free_when_sent = Vec::new();
    while let Some(command) = commands.recv().await {
        let Command::Prune { chunk, reply } = command else {
            panic!("a prune sends only chunk deletes: {command:?}");
        };
        free_when_sent.push(free_pages_in_file(&file));
        let mut tx = db.store.begin().await.expect("begin");
        let deleted = prune_step::delete_chunks(&mut tx, std::iter::once(&chunk))
            .await
            .expect("delete");
        tx.commit().await.expect("commit");
        reply.send(Ok(deleted[0])).expect("the prune waits");
    }

    assert_eq!(prune.await.expect("task").expect("prune"), 150);
    assert_eq!(free_when_sent.len(), 2, "two chunks of at most 100 ids");
    assert!(
        free_when_sent[1] > free_when_sent[0] + 100,
        "the file had {free_when_sent:?} free pages when each chunk was sent: the first \
         chunk's pages were not copied before the second"
    );
}
