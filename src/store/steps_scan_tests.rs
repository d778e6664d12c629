//! What the delivery statements read with a failing connection's jobs in the table (issue 11,
//! item 3): on PostgreSQL no statement scans `jobs` whole, and the due claim does not read the
//! jobs of a connection it skips. The figures are PostgreSQL's own per-transaction counters
//! (`pg_stat_xact_user_tables`), so the test checks plans, not timings; on SQLite it checks
//! only what the claims take.

use super::tests::job_row;
use super::*;
use crate::store::backend::Sql;
use crate::store::tests::harness::{TestStore, on_postgres};

const NODE: &str = "node-a";
/// The failing connection's waiting jobs: enough that a plan reading them stands out.
const FAILING_JOBS: i64 = 3_000;

/// Sequential scans of `jobs`, rows they read, and rows read through its indexes, as this
/// connection counted them and has not reported yet (PostgreSQL 15: earlier transactions'
/// too, so only differences mean something).
const JOBS_READS: Sql = Sql::postgres_only(
    "SELECT seq_scan, seq_tup_read, COALESCE(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables \
     WHERE relid = 'jobs'::regclass",
);
const ANALYZE_JOBS: Sql = Sql::shared("ANALYZE jobs");
/// A prepared statement's plan once PostgreSQL stops planning it for each call's values (after
/// five calls, when it finds the generic plan no worse): a claim must hold to it both ways.
const GENERIC_PLANS: Sql = Sql::shared("SET LOCAL plan_cache_mode = force_generic_plan");

async fn reads(tx: &mut Tx<'_>) -> (i64, i64, i64) {
    tx.fetch_optional(JOBS_READS, &[])
        .await
        .expect("read statistics")
        .unwrap_or((0, 0, 0))
}

/// What was read since `before`.
async fn since(tx: &mut Tx<'_>, before: (i64, i64, i64)) -> (i64, i64, i64) {
    let now = reads(tx).await;
    (now.0 - before.0, now.1 - before.1, now.2 - before.2)
}

/// The failure phase of the isolation scenario in small: a failing connection's jobs, all due
/// and unleased (its breaker turns them away), oldest first; a healthy connection's few due
/// jobs and the ones in flight; statistics as the server's autovacuum would have them.
async fn failure_phase() -> (TestStore, Vec<i64>, Vec<i64>) {
    let db = TestStore::open().await;
    let failing = ConnectionId::trusted("conn_failing");
    let healthy = ConnectionId::trusted("conn_healthy");
    let mut rows: Vec<JobRow<'_>> = (1..=FAILING_JOBS)
        .map(|b| job_row(b, &failing, 0))
        .collect();
    rows.extend((1..=10).map(|b| job_row(FAILING_JOBS + b, &healthy, 0)));
    rows.extend((11..=30).map(|b| job_row(FAILING_JOBS + b, &healthy, 900_000)));
    let mut tx = db.store.begin().await.expect("begin");
    let inserted = insert_jobs(&mut tx, &rows).await.expect("insert jobs");
    tx.commit().await.expect("commit");
    if on_postgres() {
        let mut tx = db.store.begin().await.expect("begin");
        tx.execute(ANALYZE_JOBS, &[]).await.expect("analyze");
        tx.commit().await.expect("commit");
    }
    let mut held = Vec::new();
    let mut due = Vec::new();
    for (id, _, connection_id, lease_until) in inserted {
        if connection_id == healthy {
            if lease_until > 0 {
                held.push(id)
            } else {
                due.push(id)
            }
        }
    }
    held.sort_unstable();
    due.sort_unstable();
    (db, held, due)
}

#[tokio::test]
async fn the_due_claim_does_not_read_a_skipped_connections_jobs() {
    let (db, _, due) = failure_phase().await;
    let mut tx = db.store.begin().await.expect("begin");
    let before = reads(&mut tx).await;
    let claimed = claim_jobs(&mut tx, 64, r#"["conn_failing"]"#, 2_000, 60_000, NODE)
        .await
        .expect("claim");
    let mut ids: Vec<i64> = claimed.iter().map(|c| c.key().id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids, due,
        "the healthy connection's due jobs, none of the skipped one's"
    );
    if on_postgres() {
        tx.execute(GENERIC_PLANS, &[]).await.expect("generic plans");
        let again = claim_jobs(&mut tx, 64, r#"["conn_failing"]"#, 2_000, 60_000, NODE)
            .await
            .expect("claim");
        assert!(again.is_empty(), "all claimed already");
        let (seq_scans, seq_rows, index_rows) = since(&mut tx, before).await;
        assert_eq!(
            (seq_scans, seq_rows),
            (0, 0),
            "no sequential scan of jobs (index rows read: {index_rows})"
        );
        assert!(
            index_rows < FAILING_JOBS / 10,
            "read {index_rows} rows through indexes for 10 due jobs, claimed twice: the \
             skipped ones were walked"
        );
    }
    tx.commit().await.expect("commit");
}

#[tokio::test]
async fn job_updates_and_the_probe_and_drain_read_jobs_through_indexes() {
    updates_probe_and_drain(false).await;
}

#[tokio::test]
async fn so_do_their_generic_plans() {
    updates_probe_and_drain(true).await;
}

async fn updates_probe_and_drain(generic: bool) {
    let (db, held, due) = failure_phase().await;
    let failing = ConnectionId::trusted("conn_failing");
    let healthy = ConnectionId::trusted("conn_healthy");
    let mut tx = db.store.begin().await.expect("begin");
    let before = reads(&mut tx).await;
    if generic && on_postgres() {
        tx.execute(GENERIC_PLANS, &[]).await.expect("generic plans");
    }
    let renewed = renew_leases(&mut tx, &held, 950_000, NODE)
        .await
        .expect("renew");
    assert_eq!(renewed.len(), held.len());
    let probe = claim_probe(&mut tx, &failing, "[7]", 2_000, 60_000, NODE)
        .await
        .expect("probe");
    assert_eq!(probe.len(), 1, "the failing connection's oldest job");
    let plain = claim_probe(&mut tx, &failing, "[]", 2_000, 60_000, NODE)
        .await
        .expect("probe");
    assert_eq!(plain.len(), 1);
    assert!(plain[0].key().id > probe[0].key().id, "the next oldest");
    let drained = claim_drain(&mut tx, &healthy, 4, 2_000, 60_000, NODE)
        .await
        .expect("drain");
    let mut drained: Vec<i64> = drained.iter().map(|c| c.key().id).collect();
    drained.sort_unstable();
    assert_eq!(drained, due[..4], "oldest first, up to the limit");
    let retries = [RetryRow {
        job_id: held[0],
        progress: 0,
        attempts: 1,
        next_attempt_at: 5_000,
        error: Some("500"),
    }];
    assert_eq!(retry_jobs(&mut tx, &retries, NODE).await.expect("retry"), 1);
    assert_eq!(
        release_jobs(&mut tx, &held[1..5], NODE)
            .await
            .expect("release"),
        4
    );
    assert_eq!(
        delete_jobs(&mut tx, &held[5..], NODE)
            .await
            .expect("delete"),
        15
    );
    if on_postgres() {
        let (seq_scans, seq_rows, _) = since(&mut tx, before).await;
        assert_eq!((seq_scans, seq_rows), (0, 0), "no sequential scan of jobs");
    }
    tx.commit().await.expect("commit");
}
