//! Each group-commit step on its own, against a real database: SQLite by default, PostgreSQL
//! when `TEST_DATABASE_URL` is set (CI runs both).

use std::collections::HashMap;
use std::sync::LazyLock;

use super::*;
use crate::model::attempt::AttemptOutcome;
use crate::store::Store;
use crate::store::backend::Sql;
use crate::store::queue::{AttemptRecord, DeadLetter, JobKey};
use crate::store::tests::harness::TestStore;

const NODE: &str = "node-a";
const OTHER_NODE: &str = "node-b";

static CONN_A: LazyLock<ConnectionId> = LazyLock::new(|| ConnectionId::trusted("conn_a"));
static CONN_B: LazyLock<ConnectionId> = LazyLock::new(|| ConnectionId::trusted("conn_b"));
static CONN_CROWDED: LazyLock<ConnectionId> =
    LazyLock::new(|| ConnectionId::trusted("conn_crowded"));

/// A job as the table holds it: id, lease end, lease owner, progress, attempts, next attempt.
type JobState = (i64, i64, Option<String>, i64, i64, i64);

const SELECT_JOBS: Sql = Sql::shared(
    "SELECT id, lease_until, leased_by, progress, attempts, next_attempt_at FROM jobs ORDER BY id",
);

async fn jobs(store: &Store) -> Vec<JobState> {
    store.fetch_all(SELECT_JOBS, &[]).await.expect("read jobs")
}

pub(super) fn job_row(batch_id: i64, connection_id: &ConnectionId, lease_until: i64) -> JobRow<'_> {
    JobRow {
        batch_id: BatchId::new(batch_id),
        connection_id,
        revision_id: 1,
        created_at: 1_000,
        lease_until,
        leased_by: (lease_until > 0).then_some(NODE),
        mpid: None,
        next_attempt_at: 1_000,
        coalesce_head: None,
    }
}

/// A job of user `mpid` on a connection that keeps each user's batches in order.
fn user_job(batch_id: i64, mpid: i64, lease_until: i64) -> JobRow<'static> {
    JobRow {
        mpid: Some(Mpid::new(mpid)),
        ..job_row(batch_id, &CONN_A, lease_until)
    }
}

/// A store with `count` jobs of connection `conn_a` (batch ids 1..), leased until `lease_until`
/// (0: unleased); returns their ids.
async fn store_with_jobs(count: usize, lease_until: i64) -> (TestStore, Vec<i64>) {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let rows: Vec<JobRow<'_>> = (1..=count)
        .map(|b| job_row(i64::try_from(b).expect("small"), &CONN_A, lease_until))
        .collect();
    let inserted = insert_jobs(&mut tx, &rows).await.expect("insert jobs");
    tx.commit().await.expect("commit");
    let mut ids: Vec<i64> = inserted.into_iter().map(|(id, ..)| id).collect();
    ids.sort_unstable();
    (db, ids)
}

#[tokio::test]
async fn inserted_jobs_are_leased_or_left_for_the_poller() {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let rows = vec![job_row(7, &CONN_A, 5_000), job_row(7, &CONN_B, 0)];
    let mut inserted = insert_jobs(&mut tx, &rows).await.expect("insert");
    tx.commit().await.expect("commit");
    inserted.sort();
    assert_eq!(inserted.len(), 2);
    assert_eq!((inserted[0].1.get(), inserted[0].2.as_str()), (7, "conn_a"));
    assert_eq!((inserted[1].1.get(), inserted[1].2.as_str()), (7, "conn_b"));
    let state = jobs(store).await;
    assert_eq!((state[0].1, state[0].2.as_deref()), (5_000, Some(NODE)));
    assert_eq!((state[1].1, state[1].2.clone()), (0, None));
    // `next_attempt_at` starts at creation: due at once.
    assert!(state.iter().all(|job| job.5 == 1_000));
}

#[tokio::test]
async fn a_users_job_behind_a_pending_one_is_not_leased_at_insert() {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let first = insert_jobs(&mut tx, &[user_job(1, 5, 5_000)])
        .await
        .expect("insert");
    let later = insert_jobs(&mut tx, &[user_job(2, 5, 5_000), user_job(3, 6, 5_000)])
        .await
        .expect("insert");
    tx.commit().await.expect("commit");
    assert_eq!(first[0].3, 5_000);
    let leases: HashMap<i64, i64> = later.iter().map(|j| (j.1.get(), j.3)).collect();
    assert_eq!(leases[&2], 0, "user 5 still has job 1 pending");
    assert_eq!(leases[&3], 5_000, "user 6 has nothing pending");
}

#[tokio::test]
async fn claims_take_only_each_users_earliest_pending_job() {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let rows = [
        user_job(1, 5, 0),
        user_job(2, 5, 0),
        user_job(3, 6, 0),
        job_row(4, &CONN_A, 0),
        job_row(5, &CONN_A, 0),
    ];
    let mut ids: Vec<i64> = insert_jobs(&mut tx, &rows)
        .await
        .expect("insert")
        .into_iter()
        .map(|(id, ..)| id)
        .collect();
    ids.sort_unstable();
    let batches = |claimed: &[ClaimedJob]| -> Vec<i64> {
        let mut b: Vec<i64> = claimed.iter().map(|c| c.batch_id().get()).collect();
        b.sort_unstable();
        b
    };
    let claimed = claim_jobs(&mut tx, 10, "[]", 2_000, 9_000, NODE)
        .await
        .expect("claim");
    assert_eq!(batches(&claimed), [1, 3, 4, 5], "user 5's second job waits");
    // Leased or waiting out a backoff, the first job still holds the second back.
    let retry = RetryRow {
        job_id: ids[0],
        progress: 0,
        attempts: 1,
        next_attempt_at: 50_000,
        error: None,
    };
    retry_jobs(&mut tx, &[retry], NODE).await.expect("retry");
    let none = claim_jobs(&mut tx, 10, "[]", 3_000, 9_000, NODE)
        .await
        .expect("claim");
    assert!(none.is_empty(), "{none:?}");
    let probe = claim_probe(&mut tx, &CONN_A, "[]", 3_000, 9_000, NODE)
        .await
        .expect("probe");
    assert_eq!(
        batches(&probe),
        [1],
        "a probe takes the head, not the job behind it"
    );
    // Once the first is finished (delivered or dead-lettered), the second may go.
    delete_jobs(&mut tx, &[ids[0]], NODE).await.expect("delete");
    let next = claim_jobs(&mut tx, 10, "[]", 3_000, 9_000, NODE)
        .await
        .expect("claim");
    tx.commit().await.expect("commit");
    assert_eq!(batches(&next), [2]);
}

#[tokio::test]
async fn a_probe_prefers_a_user_that_has_not_failed_recently() {
    let db = TestStore::open().await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    // Users 5 and 6 failed recently, and their jobs are the oldest.
    let failing = [user_job(1, 5, 0), user_job(2, 6, 0), user_job(3, 6, 0)];
    let inserted = insert_jobs(&mut tx, &failing).await.expect("insert");
    let claimed =
        |c: Vec<ClaimedJob>| -> Vec<i64> { c.iter().map(|c| c.batch_id().get()).collect() };
    // Only failing users have jobs: the oldest goes, as before.
    let first = claim_probe(&mut tx, &CONN_A, "[5,6]", 3_000, 9_000, NODE)
        .await
        .expect("probe");
    assert_eq!(claimed(first), [1]);
    let job_1 = inserted.iter().find(|j| j.1.get() == 1).expect("job 1").0;
    release_jobs(&mut tx, &[job_1], NODE)
        .await
        .expect("release");
    // User 7 has not failed; a job without a user is newer still.
    insert_jobs(&mut tx, &[user_job(4, 7, 0), job_row(5, &CONN_A, 0)])
        .await
        .expect("insert");
    let healthy = claim_probe(&mut tx, &CONN_A, "[5,6]", 3_000, 9_000, NODE)
        .await
        .expect("probe");
    assert_eq!(
        claimed(healthy),
        [4],
        "the oldest job of a user that has not failed"
    );
    let unordered = claim_probe(&mut tx, &CONN_A, "[5,6]", 3_000, 9_000, NODE)
        .await
        .expect("probe");
    assert_eq!(claimed(unordered), [5], "then one without a user");
    tx.commit().await.expect("commit");
}

#[tokio::test]
async fn claims_take_due_unleased_jobs_up_to_the_limit_and_skip_crowded_connections() {
    let (db, ids) = store_with_jobs(3, 0).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    insert_jobs(&mut tx, &[job_row(9, &CONN_CROWDED, 0)])
        .await
        .expect("insert");
    let first = claim_jobs(&mut tx, 2, r#"["conn_crowded"]"#, 2_000, 9_000, NODE)
        .await
        .expect("claim");
    let second = claim_jobs(&mut tx, 10, r#"["conn_crowded"]"#, 2_000, 9_000, NODE)
        .await
        .expect("claim again");
    tx.commit().await.expect("commit");
    assert_eq!(first.len(), 2);
    assert_eq!(second.len(), 1, "leased jobs are not claimed twice");
    let claimed: HashSet<i64> = first.iter().chain(&second).map(|c| c.key().id).collect();
    assert_eq!(claimed, ids.iter().copied().collect());
    for job in jobs(store).await {
        if claimed.contains(&job.0) {
            assert_eq!((job.1, job.2.as_deref()), (9_000, Some(NODE)));
        } else {
            assert_eq!(job.1, 0, "the crowded connection's job stays in the table");
        }
    }
}

#[tokio::test]
async fn expired_leases_and_future_attempts_decide_what_is_due() {
    let (db, ids) = store_with_jobs(2, 5_000).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let retry = RetryRow {
        job_id: ids[1],
        progress: 1,
        attempts: 1,
        next_attempt_at: 50_000,
        error: Some("receiver answered 500"),
    };
    retry_jobs(&mut tx, &[retry], NODE).await.expect("retry");
    let before_expiry = claim_jobs(&mut tx, 10, "[]", 4_999, 20_000, OTHER_NODE)
        .await
        .expect("claim");
    let after_expiry = claim_jobs(&mut tx, 10, "[]", 5_000, 90_000, OTHER_NODE)
        .await
        .expect("claim");
    let after_backoff = claim_jobs(&mut tx, 10, "[]", 50_000, 60_000, OTHER_NODE)
        .await
        .expect("claim");
    tx.commit().await.expect("commit");
    assert!(before_expiry.is_empty(), "a live lease keeps its job");
    let ids_of = |claims: &[ClaimedJob]| claims.iter().map(|c| c.key().id).collect::<Vec<_>>();
    assert_eq!(
        ids_of(&after_expiry),
        [ids[0]],
        "an expired lease frees its job"
    );
    assert_eq!(
        ids_of(&after_backoff),
        [ids[1]],
        "a retry waits for its time"
    );
}

#[tokio::test]
async fn renewals_extend_only_this_nodes_live_leases() {
    let (db, ids) = store_with_jobs(3, 5_000).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    release_jobs(&mut tx, &[ids[1]], NODE)
        .await
        .expect("release");
    // Another node took the third job over after its lease ran out.
    tx.execute(
        Sql::shared("UPDATE jobs SET leased_by = $2 WHERE id = $1"),
        args![ids[2], OTHER_NODE],
    )
    .await
    .expect("take over");
    let renewed = renew_leases(&mut tx, &ids, 9_000, NODE)
        .await
        .expect("renew");
    tx.commit().await.expect("commit");
    assert_eq!(
        renewed,
        HashSet::from([ids[0]]),
        "only the lease this node still holds"
    );
    let leases: Vec<i64> = jobs(store).await.iter().map(|job| job.1).collect();
    assert_eq!(leases, [9_000, 0, 5_000]);
}

#[tokio::test]
async fn finished_jobs_leave_retried_jobs_wait_released_jobs_are_free() {
    let (db, ids) = store_with_jobs(3, 5_000).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    assert_eq!(
        delete_jobs(&mut tx, &[ids[0]], NODE).await.expect("delete"),
        1
    );
    let retry = RetryRow {
        job_id: ids[1],
        progress: 2,
        attempts: 3,
        next_attempt_at: 77_000,
        error: Some("timeout"),
    };
    retry_jobs(&mut tx, &[retry], NODE).await.expect("retry");
    assert_eq!(
        release_jobs(&mut tx, &[ids[2]], NODE)
            .await
            .expect("release"),
        1
    );
    tx.commit().await.expect("commit");
    let state = jobs(store).await;
    assert_eq!(state.len(), 2);
    assert_eq!(state[0], (ids[1], 0, Some(NODE.to_owned()), 2, 3, 77_000));
    assert_eq!((state[1].0, state[1].1), (ids[2], 0));
    let (error,): (Option<String>,) = store
        .fetch_one(
            Sql::shared("SELECT last_error FROM jobs WHERE id = $1"),
            args![ids[1]],
        )
        .await
        .expect("read");
    assert_eq!(error.as_deref(), Some("timeout"));
}

#[tokio::test]
async fn attempts_and_dead_letters_are_logged() {
    let db = TestStore::open().await;
    let store = &db.store;
    let job = JobKey {
        id: 11,
        batch_id: BatchId::new(4),
        connection_id: CONN_A.clone(),
        mates: Vec::new(),
    };
    let attempt = AttemptRecord {
        attempted_at: 3_000,
        outcome: AttemptOutcome::DeadLetter,
        status: Some(400),
        error: Some("receiver answered 400".into()),
        requests: 2,
        latency_ms: 12,
        events: 1,
    };
    let letter = DeadLetter {
        payload_index: 1,
        body: b"{\"events\":[1]}".to_vec(),
        status: Some(400),
        error: "receiver answered 400".into(),
    };
    let mut tx = store.begin().await.expect("begin");
    insert_attempts(&mut tx, &[AttemptRow::new(&job, &attempt)])
        .await
        .expect("attempts");
    insert_dead_letters(&mut tx, &[(&job, &letter)], 3_000)
        .await
        .expect("dead letters");
    tx.commit().await.expect("commit");

    let attempts = store.attempts(&CONN_A, 10).await.expect("attempts");
    assert_eq!(attempts.len(), 1);
    let logged = &attempts[0];
    assert_eq!(
        (
            logged.job_id,
            logged.outcome.as_str(),
            logged.status,
            logged.requests
        ),
        (11, "dead_letter", Some(400), 2)
    );
    assert_eq!(logged.error.as_deref(), Some("receiver answered 400"));
    let letters = store.dead_letters(&CONN_A, 10).await.expect("letters");
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0].job_id,
            letters[0].batch_id.get(),
            letters[0].payload_index
        ),
        (11, 4, 1)
    );
    assert_eq!(letters[0].body, letter.body);
}

#[tokio::test]
async fn profiles_merge_attributes_and_delete_nulls() {
    let db = TestStore::open().await;
    let store = &db.store;
    let patch = |value: serde_json::Value| match value {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("test patches are objects"),
    };
    let mut tx = store.begin().await.expect("begin");
    let first = ProfileRow {
        mpid: Mpid::new(42),
        patch: patch(serde_json::json!({"plan": "free", "age": 30})),
        consent: serde_json::Map::new(),
    };
    upsert_profiles(&mut tx, &[first], 1_000)
        .await
        .expect("first");
    let second = ProfileRow {
        mpid: Mpid::new(42),
        patch: patch(serde_json::json!({"plan": "pro", "age": null})),
        consent: serde_json::Map::new(),
    };
    upsert_profiles(&mut tx, &[second], 2_000)
        .await
        .expect("second");
    tx.commit().await.expect("commit");
    let user = store.get_user(Mpid::new(42)).await.expect("user");
    let attributes: serde_json::Value = serde_json::from_str(&user.user_attributes).expect("json");
    assert_eq!(attributes, serde_json::json!({"plan": "pro"}));
    assert_eq!((user.created_at, user.last_seen_at), (1_000, 2_000));
}

#[tokio::test]
async fn a_node_cannot_change_a_job_another_node_took_over() {
    // NODE's leases ran out (at 5 000) and OTHER_NODE claimed the jobs at 6 000.
    let (db, ids) = store_with_jobs(3, 5_000).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    let taken = claim_jobs(&mut tx, 10, "[]", 6_000, 60_000, OTHER_NODE)
        .await
        .expect("claim");
    assert_eq!(taken.len(), 3);
    // The stalled node wakes up and reports what it did with them.
    assert_eq!(
        delete_jobs(&mut tx, &[ids[0]], NODE).await.expect("delete"),
        0
    );
    let retry = RetryRow {
        job_id: ids[1],
        progress: 1,
        attempts: 1,
        next_attempt_at: 99_000,
        error: Some("late"),
    };
    retry_jobs(&mut tx, &[retry], NODE).await.expect("retry");
    assert_eq!(
        release_jobs(&mut tx, &[ids[2]], NODE)
            .await
            .expect("release"),
        0
    );
    let renewed = renew_leases(&mut tx, &ids, 90_000, NODE)
        .await
        .expect("renew");
    tx.commit().await.expect("commit");
    assert!(renewed.is_empty(), "every lease is the other node's");
    for job in jobs(store).await {
        assert_eq!(
            (job.1, job.2.as_deref(), job.3, job.5),
            (60_000, Some(OTHER_NODE), 0, 1_000),
            "job {} is untouched",
            job.0
        );
    }
}

#[tokio::test]
async fn retries_of_several_jobs_each_keep_their_own_progress_in_one_step() {
    let (db, ids) = store_with_jobs(3, 5_000).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    tx.execute(
        Sql::shared("UPDATE jobs SET leased_by = $2 WHERE id = $1"),
        args![ids[2], OTHER_NODE],
    )
    .await
    .expect("take over");
    let retry = |i: usize, progress, next_attempt_at, error| RetryRow {
        job_id: ids[i],
        progress,
        attempts: progress + 1,
        next_attempt_at,
        error,
    };
    let retries = [
        retry(0, 1, 70_000, Some("receiver answered 503")),
        retry(1, 4, 80_000, None),
        retry(2, 9, 90_000, Some("not this node's")),
    ];
    assert_eq!(
        retry_jobs(&mut tx, &retries, NODE).await.expect("retry"),
        2,
        "the job another node holds is not changed"
    );
    tx.commit().await.expect("commit");
    let state = jobs(store).await;
    assert_eq!(state[0], (ids[0], 0, Some(NODE.to_owned()), 1, 2, 70_000));
    assert_eq!(state[1], (ids[1], 0, Some(NODE.to_owned()), 4, 5, 80_000));
    assert_eq!(
        state[2],
        (ids[2], 5_000, Some(OTHER_NODE.to_owned()), 0, 0, 1_000)
    );
    let errors: Vec<(Option<String>,)> = store
        .fetch_all(Sql::shared("SELECT last_error FROM jobs ORDER BY id"), &[])
        .await
        .expect("read");
    assert_eq!(
        errors,
        [
            (Some("receiver answered 503".to_owned()),),
            (None,),
            (None,)
        ]
    );
}

#[tokio::test]
async fn a_probe_claims_the_connections_oldest_free_job_even_in_backoff() {
    // Jobs 1 and 2 wait out a backoff (due at 50 000), job 3 is due, job 4 is held elsewhere.
    let (db, ids) = store_with_jobs(4, 0).await;
    let store = &db.store;
    let mut tx = store.begin().await.expect("begin");
    for (&id, next_attempt_at, lease_until) in [
        (&ids[0], 50_000, 0),
        (&ids[1], 50_000, 0),
        (&ids[3], 1_000, 90_000),
    ] {
        tx.execute(
            Sql::shared("UPDATE jobs SET next_attempt_at = $2, lease_until = $3 WHERE id = $1"),
            args![id, next_attempt_at, lease_until],
        )
        .await
        .expect("set up");
    }
    let other = claim_probe(&mut tx, &CONN_B, "[]", 2_000, 60_000, NODE)
        .await
        .expect("probe");
    let probe = claim_probe(&mut tx, &CONN_A, "[]", 2_000, 60_000, NODE)
        .await
        .expect("probe");
    tx.commit().await.expect("commit");
    assert!(other.is_empty(), "another connection's jobs are not probes");
    let probed: Vec<i64> = probe.iter().map(|c| c.key().id).collect();
    assert_eq!(probed, [ids[0]], "the oldest job nobody holds, due or not");
    assert_eq!(jobs(store).await[0].1, 60_000, "leased to the prober");
}

#[tokio::test]
async fn bringing_a_connection_forward_makes_its_waiting_jobs_due_now() {
    let (db, ids) = store_with_jobs(3, 0).await;
    let store = &db.store;
    for (&id, next_attempt_at, lease_until) in [
        (&ids[0], 50_000, 0),
        (&ids[1], 1_500, 0),
        (&ids[2], 50_000, 90_000),
    ] {
        store
            .execute(
                Sql::shared("UPDATE jobs SET next_attempt_at = $2, lease_until = $3 WHERE id = $1"),
                args![id, next_attempt_at, lease_until],
            )
            .await
            .expect("set up");
    }
    assert_eq!(store.bring_forward(&CONN_B, 2_000).await.expect("other"), 0);
    assert_eq!(store.bring_forward(&CONN_A, 2_000).await.expect("bring"), 1);
    let due: Vec<i64> = jobs(store).await.iter().map(|job| job.5).collect();
    assert_eq!(
        due,
        [2_000, 1_500, 50_000],
        "only a waiting job nobody holds moves, and only forward"
    );
}

/// The object rows' fields, read as the SQLite steps read them, through `json_each` (as they
/// were read before) and through `jsonb_each` (as they are now).
const FIELDS_BY_JSON_EACH: Sql = Sql::shared(
    "SELECT value ->> 'i', value ->> 's', value ->> 'n', value ->> 'f', value ->> 'o', \
     value ->> 'b' FROM json_each($1)",
);
const FIELDS_BY_JSONB_EACH: Sql = Sql::shared(
    "SELECT value ->> 'i', value ->> 's', value ->> 'n', value ->> 'f', value ->> 'o', \
     value ->> 'b' FROM jsonb_each($1)",
);

type Fields = (
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<f64>,
    Option<String>,
    Option<i64>,
);

#[tokio::test]
async fn jsonb_each_reads_the_fields_json_each_read() {
    let db = TestStore::open().await;
    let mut tx = db.store.begin().await.expect("begin");
    if !tx.is_sqlite() {
        return; // PostgreSQL reads rows with jsonb_to_recordset.
    }
    let rows = json(&[
        serde_json::json!({"i": i64::MAX, "s": "é \"q\" \\ \u{1} \u{2028}", "n": null, "f": 0.1,
                           "o": {"a": [1, {"b": null}], "c": "x"}, "b": true}),
        serde_json::json!({"i": -1, "s": "", "f": 1e300, "b": false}),
        serde_json::json!({"i": i64::MIN, "s": "nul \u{0} 😀 日本 \u{2029} \u{7f}", "f": -0.0}),
        serde_json::json!({}),
    ]);
    let before: Vec<Fields> = tx
        .fetch_all(FIELDS_BY_JSON_EACH, args![rows.as_str()])
        .await
        .expect("json_each");
    let now: Vec<Fields> = tx
        .fetch_all(FIELDS_BY_JSONB_EACH, args![rows.as_str()])
        .await
        .expect("jsonb_each");
    assert_eq!(before.len(), 4);
    assert_eq!(before[0].0, Some(i64::MAX));
    assert_eq!(before, now);
}
