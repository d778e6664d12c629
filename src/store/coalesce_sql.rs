//! Coalesced groups in the queue (a connection's `batch_window_secs`; see migration 0019).
//!
//! A gathered job is inserted unleased, due at the end of its window, with `coalesce_head` 0
//! and its user's MPID. Per-user ordering's rule in every claim (`user_is_free!` in
//! [`super::steps`]) lets only a user's first job in the table be claimed, so a claim takes at
//! most one job per (connection, user): the group's head. In the same transaction,
//! [`claim_groups`] forms the group around a head that has none yet (the head and every later
//! job of its user waiting with `coalesce_head` 0, at most [`MOST_IN_GROUP`], marked with the
//! head's id) and leases the group's other jobs to the claiming node. From then on the group is
//! fixed: a retry or a claim after a crash takes exactly the same jobs, so the same requests go
//! out again under the same delivery ids. The group is renewed and released with its head (by
//! `coalesce_head`), and finished or retried with it (by the mates' ids the head's update names),
//! always in the writer's one transaction.

use std::collections::{HashMap, HashSet};

use super::backend::{Sql, Tx, args, json};
use super::queue::ClaimedJob;

// On PostgreSQL ids and heads are matched with `= ANY(ARRAY(…))`, not `IN (…)` (see the note in
// `super::steps`: `IN` could be planned as a sequential scan of `jobs`).

/// Most jobs (batches) in one coalesced group; a user's later jobs form the next group.
pub(crate) const MOST_IN_GROUP: i64 = 500;

/// Most mates one claim takes with the heads it claims. A claim holds every batch of its
/// groups in memory until they are delivered, and up to 512 heads of 500 batches each would
/// be far more than a node should hold; the heads over it go back to the table, due, for the
/// next claim (the poller is woken as groups finish).
pub(crate) const MOST_MATES_PER_CLAIM: i64 = 2_000;

/// `$1` JSON array of head ids whose group is not formed yet, `$2` the most jobs in a group.
/// A group stops before the user's first job accepted without a window (`coalesce_head` NULL:
/// the window was switched off and on again meanwhile): gathering a later batch past it would
/// let that batch overtake it. The probe uses `jobs_user_order` (a job without a window has
/// its MPID only where the connection orders per user, the one case order is promised).
///
/// Locks: it changes only jobs at 0 of a user whose first job (the head) this claim holds, and
/// no other statement locks those while waiting (claims skip locked rows and take only a
/// user's first job), so it waits for no one.
const FORM_GROUPS: Sql = Sql::each(
    "UPDATE jobs SET coalesce_head = g.head FROM ( \
     SELECT m.id AS id, h.id AS head, ROW_NUMBER() OVER (PARTITION BY h.id ORDER BY m.id) AS n \
     FROM jobs h JOIN jobs m ON m.connection_id = h.connection_id AND m.mpid = h.mpid \
     AND m.coalesce_head = 0 AND m.id >= h.id \
     WHERE h.id IN (SELECT value FROM json_each($1)) AND h.coalesce_head = 0 \
     AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.connection_id = h.connection_id \
     AND o.mpid = h.mpid AND o.id > h.id AND o.id < m.id AND o.coalesce_head IS NULL)) AS g \
     WHERE jobs.id = g.id AND g.n <= $2",
    "UPDATE jobs SET coalesce_head = g.head FROM ( \
     SELECT m.id AS id, h.id AS head, ROW_NUMBER() OVER (PARTITION BY h.id ORDER BY m.id) AS n \
     FROM jobs h JOIN jobs m ON m.connection_id = h.connection_id AND m.mpid = h.mpid \
     AND m.coalesce_head = 0 AND m.id >= h.id \
     WHERE h.id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) \
     AND h.coalesce_head = 0 \
     AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.connection_id = h.connection_id \
     AND o.mpid = h.mpid AND o.id > h.id AND o.id < m.id AND o.coalesce_head IS NULL)) AS g \
     WHERE jobs.id = g.id AND g.n <= $2",
);
/// `$1` lease end, `$2` this node, `$3` JSON array of head ids: leases their groups' other jobs.
///
/// On PostgreSQL the mates are taken in id order and a mate another transaction holds is
/// skipped, never waited for. Only another node's transaction can hold one: a node whose lease
/// on the group ran out, recording its outcome or renewal, and such a transaction may be
/// waiting for the head this claim holds (its statements name head and mates together, in no
/// fixed order), so waiting here could close a deadlock cycle. A group missing a mate is given
/// back whole ([`GIVE_BACK`]): the group must stay what it was formed as.
const CLAIM_MATES: Sql = Sql::each(
    "UPDATE jobs SET lease_until = $1, leased_by = $2 \
     WHERE coalesce_head IS NOT NULL AND coalesce_head IN (SELECT value FROM json_each($3)) \
     AND id <> coalesce_head \
     RETURNING id, batch_id, connection_id, revision_id, progress, attempts, created_at, \
     lease_until, mpid, coalesce_head",
    "UPDATE jobs SET lease_until = $1, leased_by = $2 WHERE id = ANY(ARRAY(SELECT id FROM jobs \
     WHERE coalesce_head IS NOT NULL \
     AND coalesce_head = ANY(ARRAY(SELECT jsonb_array_elements_text($3::jsonb)::bigint)) \
     AND id <> coalesce_head ORDER BY id FOR UPDATE SKIP LOCKED)) \
     RETURNING id, batch_id, connection_id, revision_id, progress, attempts, created_at, \
     lease_until, mpid, coalesce_head",
);
/// `$1` JSON array of head ids: how many mates each group has (a plain read: it waits for no
/// one on PostgreSQL).
const GROUP_SIZES: Sql = Sql::each(
    "SELECT coalesce_head, COUNT(*) FROM jobs WHERE coalesce_head IS NOT NULL \
     AND coalesce_head IN (SELECT value FROM json_each($1)) AND id <> coalesce_head \
     GROUP BY coalesce_head",
    "SELECT coalesce_head, COUNT(*) FROM jobs WHERE coalesce_head IS NOT NULL \
     AND coalesce_head = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) \
     AND id <> coalesce_head GROUP BY coalesce_head",
);
/// `$1` JSON array of job ids this claim just leased, `$2` this node: unleased again (rows this
/// transaction already holds, so it waits for no one).
const GIVE_BACK: Sql = Sql::each(
    "UPDATE jobs SET lease_until = 0 WHERE id IN (SELECT value FROM json_each($1)) \
     AND leased_by = $2",
    "UPDATE jobs SET lease_until = 0 \
     WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) \
     AND leased_by = $2",
);
/// `$1` JSON array of head ids, `$2` the new lease end, `$3` this node (fenced like a renewal).
const RENEW_MATES: Sql = Sql::each(
    "UPDATE jobs SET lease_until = $2 \
     WHERE coalesce_head IS NOT NULL AND coalesce_head IN (SELECT value FROM json_each($1)) \
     AND id <> coalesce_head AND lease_until > 0 AND leased_by = $3",
    "UPDATE jobs SET lease_until = $2 WHERE coalesce_head IS NOT NULL \
     AND coalesce_head = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) \
     AND id <> coalesce_head AND lease_until > 0 AND leased_by = $3",
);
/// `$1` JSON array of head ids, `$2` this node.
const RELEASE_MATES: Sql = Sql::each(
    "UPDATE jobs SET lease_until = 0 \
     WHERE coalesce_head IS NOT NULL AND coalesce_head IN (SELECT value FROM json_each($1)) \
     AND id <> coalesce_head AND leased_by = $2",
    "UPDATE jobs SET lease_until = 0 WHERE coalesce_head IS NOT NULL \
     AND coalesce_head = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)::bigint)) \
     AND id <> coalesce_head AND leased_by = $2",
);

/// Forms the groups of the coalesced heads among `claimed` that have none yet, and leases every
/// claimed head's mates to `node`, appending them to `claimed` (see the module docs).
pub(super) async fn claim_groups(
    tx: &mut Tx<'_>,
    claimed: &mut Vec<ClaimedJob>,
    lease_until: i64,
    node: &str,
) -> Result<(), sqlx::Error> {
    let unformed: Vec<i64> = claimed
        .iter()
        .filter(|job| job.coalesce_head() == Some(0))
        .map(ClaimedJob::id)
        .collect();
    if !unformed.is_empty() {
        tx.execute(FORM_GROUPS, args![json(&unformed).as_str(), MOST_IN_GROUP])
            .await?;
        for job in claimed.iter_mut().filter(|j| j.coalesce_head() == Some(0)) {
            job.heads_its_group();
        }
    }
    let heads: Vec<i64> = claimed
        .iter()
        .filter(|job| job.coalesce_head() == Some(job.id()))
        .map(ClaimedJob::id)
        .collect();
    if heads.is_empty() {
        return Ok(());
    }
    let sizes: Vec<(i64, i64)> = tx
        .fetch_all(GROUP_SIZES, args![json(&heads).as_str()])
        .await?;
    let (heads, over) = within_budget(heads, &sizes, MOST_MATES_PER_CLAIM);
    if !over.is_empty() {
        tx.execute(GIVE_BACK, args![json(&over).as_str(), node])
            .await?;
        claimed.retain(|job| !over.contains(&job.id()));
    }
    if heads.is_empty() {
        return Ok(());
    }
    let mates: Vec<ClaimedJob> = tx
        .fetch_all(CLAIM_MATES, args![lease_until, node, json(&heads).as_str()])
        .await?;
    claimed.extend(mates);
    let incomplete = incomplete_groups(claimed, &sizes);
    if !incomplete.is_empty() {
        let back: Vec<i64> = claimed
            .iter()
            .filter(|job| job.coalesce_head().is_some_and(|h| incomplete.contains(&h)))
            .map(ClaimedJob::id)
            .collect();
        tx.execute(GIVE_BACK, args![json(&back).as_str(), node])
            .await?;
        claimed.retain(|job| !job.coalesce_head().is_some_and(|h| incomplete.contains(&h)));
    }
    Ok(())
}

/// The heads (oldest first) whose groups fit in `budget` mates together, and the others, to
/// give back: claimed again once this node has worked the ones it holds. The first group always
/// fits, however large, so a claim never takes nothing for want of room.
fn within_budget(mut heads: Vec<i64>, sizes: &[(i64, i64)], budget: i64) -> (Vec<i64>, Vec<i64>) {
    heads.sort_unstable();
    let size: HashMap<i64, i64> = sizes.iter().copied().collect();
    let (mut kept, mut over, mut total) = (Vec::new(), Vec::new(), 0i64);
    for head in heads {
        let mates = size.get(&head).copied().unwrap_or(0);
        if kept.is_empty() || total.saturating_add(mates) <= budget {
            total = total.saturating_add(mates);
            kept.push(head);
        } else {
            over.push(head);
        }
    }
    (kept, over)
}

/// The heads among `claimed` with fewer of their mates claimed than `sizes` (head, mates)
/// counts: a mate was skipped as locked (see [`CLAIM_MATES`]).
fn incomplete_groups(claimed: &[ClaimedJob], sizes: &[(i64, i64)]) -> HashSet<i64> {
    let mut taken: HashMap<i64, i64> = HashMap::new();
    for job in claimed {
        if let Some(head) = job.coalesce_head().filter(|&h| h != job.id()) {
            *taken.entry(head).or_default() += 1;
        }
    }
    sizes
        .iter()
        .filter(|(head, size)| taken.get(head).copied().unwrap_or(0) < *size)
        .map(|(head, _)| *head)
        .collect()
}

/// Renews the mates of the groups headed by `job_ids` with their heads.
pub(super) async fn renew_groups(
    tx: &mut Tx<'_>,
    job_ids: &[i64],
    lease_until: i64,
    node: &str,
) -> Result<(), sqlx::Error> {
    if !job_ids.is_empty() {
        tx.execute(
            RENEW_MATES,
            args![json(job_ids).as_str(), lease_until, node],
        )
        .await?;
    }
    Ok(())
}

/// Releases the mates of the groups headed by `job_ids` with their heads.
pub(super) async fn release_groups(
    tx: &mut Tx<'_>,
    job_ids: &[i64],
    node: &str,
) -> Result<(), sqlx::Error> {
    if !job_ids.is_empty() {
        tx.execute(RELEASE_MATES, args![json(job_ids).as_str(), node])
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::{BatchId, ConnectionId, Mpid};
    use crate::store::backend::{Sql, args};
    use crate::store::steps::{JobRow, claim_jobs, delete_jobs, insert_jobs};
    use crate::store::tests::harness::TestStore;

    const NODE: &str = "node-a";

    /// A gathered job of user `mpid` on `conn_a`, accepted at `at` with a window of 2 s.
    fn gathered(batch_id: i64, mpid: i64, at: i64, connection_id: &ConnectionId) -> JobRow<'_> {
        JobRow {
            batch_id: BatchId::new(batch_id),
            connection_id,
            revision_id: 1,
            created_at: at,
            lease_until: 0,
            leased_by: None,
            mpid: Some(Mpid::new(mpid)),
            next_attempt_at: at + 2_000,
            coalesce_head: Some(0),
        }
    }

    const SELECT: Sql = Sql::shared("SELECT id, coalesce_head, lease_until FROM jobs ORDER BY id");

    /// Oldest groups first while their mates fit; the first one goes even when over.
    #[test]
    fn a_claim_keeps_the_oldest_groups_that_fit_its_budget() {
        let sizes = [(10, 400), (20, 300), (30, 200), (40, 0)];
        assert_eq!(
            within_budget(vec![40, 20, 10, 30], &sizes, 700),
            (vec![10, 20, 40], vec![30])
        );
        assert_eq!(
            within_budget(vec![20, 10], &sizes, 100),
            (vec![10], vec![20])
        );
    }

    /// A due head takes its user's later jobs, due or not, and only its user's; the group is
    /// kept, released with its head, and gone when the head's update names the mates.
    #[tokio::test]
    async fn a_claim_forms_the_group_of_its_head_and_the_group_moves_together() {
        let db = TestStore::open().await;
        let conn = ConnectionId::trusted("conn_a");
        let mut tx = db.store.begin().await.expect("begin");
        let rows = [
            gathered(1, 5, 1_000, &conn),
            gathered(2, 6, 1_100, &conn),
            gathered(3, 5, 1_500, &conn),
            gathered(4, 5, 2_900, &conn),
        ];
        insert_jobs(&mut tx, &rows).await.expect("insert");
        // Before any window ends, nothing is claimed.
        let early = claim_jobs(&mut tx, 10, "[]", 2_999, 60_000, NODE)
            .await
            .expect("claim");
        assert!(early.is_empty());
        let mut claimed = claim_jobs(&mut tx, 10, "[]", 3_000, 60_000, NODE)
            .await
            .expect("claim");
        claim_groups(&mut tx, &mut claimed, 60_000, NODE)
            .await
            .expect("groups");
        let mut ids: Vec<(i64, Option<i64>)> = claimed
            .iter()
            .map(|c| (c.id(), c.coalesce_head()))
            .collect();
        ids.sort_unstable();
        let head = ids[0].0;
        assert_eq!(
            ids,
            [
                (head, Some(head)),
                (head + 2, Some(head)),
                (head + 3, Some(head))
            ],
            "user 5's three jobs; user 6's window is not over"
        );
        release_groups(&mut tx, &[head], NODE)
            .await
            .expect("release");
        let rows: Vec<(i64, Option<i64>, i64)> = tx.fetch_all(SELECT, &[]).await.expect("read");
        let leased: Vec<i64> = rows.iter().filter(|r| r.2 > 0).map(|r| r.0).collect();
        assert_eq!(
            leased,
            [head],
            "the mates went back with their head's release"
        );
        // The head's finish names its mates: all leave together.
        let mut again = claim_jobs(&mut tx, 10, "[]", 60_001, 120_000, NODE)
            .await
            .expect("claim");
        claim_groups(&mut tx, &mut again, 120_000, NODE)
            .await
            .expect("groups");
        let mut taken: Vec<i64> = again.iter().map(ClaimedJob::id).collect();
        taken.sort_unstable();
        assert_eq!(taken, [head, head + 1, head + 2, head + 3]);
        delete_jobs(&mut tx, &[head, head + 2, head + 3], NODE)
            .await
            .expect("delete");
        let rows: Vec<(i64, Option<i64>, i64)> = tx.fetch_all(SELECT, &[]).await.expect("read");
        tx.commit().await.expect("commit");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, head + 1, "only user 6's job is left");
    }

    /// On PostgreSQL a claim waits for no other transaction's rows (the lock order in
    /// `super::super::group`): a group one of whose mates another transaction holds (a node
    /// whose lease ran out, recording the group's outcome) is left whole for a later claim.
    /// Waiting for that mate while holding the head could close a deadlock cycle.
    #[tokio::test]
    async fn a_claim_waits_for_no_mate_another_transaction_holds() {
        let db = TestStore::open().await;
        if !db.store.is_shared_by_nodes() {
            // SQLite has one writer: no other transaction can hold a row meanwhile.
            return;
        }
        let conn = ConnectionId::trusted("conn_a");
        let mut tx = db.store.begin().await.expect("begin");
        let rows = [
            gathered(1, 5, 1_000, &conn),
            gathered(2, 5, 1_500, &conn),
            gathered(3, 5, 1_600, &conn),
        ];
        insert_jobs(&mut tx, &rows).await.expect("insert");
        let mut claimed = claim_jobs(&mut tx, 10, "[]", 3_000, 60_000, "node-b")
            .await
            .expect("claim");
        claim_groups(&mut tx, &mut claimed, 60_000, "node-b")
            .await
            .expect("groups");
        let head = claimed.iter().map(ClaimedJob::id).min().expect("a head");
        tx.commit().await.expect("commit");
        // node-b, its lease over, records the group's outcome: it holds the last mate's row.
        let mut stale = db.store.begin().await.expect("begin");
        stale
            .execute(
                Sql::shared("UPDATE jobs SET attempts = attempts + 1 WHERE id = $1"),
                args![head + 2],
            )
            .await
            .expect("lock the mate");
        let mut tx = db.store.begin().await.expect("begin");
        tx.execute(Sql::shared("SET LOCAL lock_timeout = '50ms'"), &[])
            .await
            .expect("lock timeout");
        let mut claimed = claim_jobs(&mut tx, 10, "[]", 60_001, 120_000, NODE)
            .await
            .expect("claim");
        claim_groups(&mut tx, &mut claimed, 120_000, NODE)
            .await
            .expect("a claim waits for no lock");
        assert!(claimed.is_empty(), "the group is left whole");
        tx.commit().await.expect("commit");
        stale.commit().await.expect("commit");
        let mut tx = db.store.begin().await.expect("begin");
        let mut claimed = claim_jobs(&mut tx, 10, "[]", 60_002, 120_000, NODE)
            .await
            .expect("claim");
        claim_groups(&mut tx, &mut claimed, 120_000, NODE)
            .await
            .expect("groups");
        tx.commit().await.expect("commit");
        let mut taken: Vec<i64> = claimed.iter().map(ClaimedJob::id).collect();
        taken.sort_unstable();
        assert_eq!(taken, [head, head + 1, head + 2], "once free, all of it");
    }
}
