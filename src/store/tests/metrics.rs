//! The per-minute figures' merging upsert on a real database (SQLite, or PostgreSQL when
//! `TEST_DATABASE_URL` is set).

use super::harness::TestStore;
use crate::model::ids::InputId;
use crate::model::metrics::{Figures, MINUTE_MS, Subject};
use crate::store::backend::Sql;

/// Makes every insert of a latency bucket fail, so a flush fails after its counts were written.
const POISON: [Sql; 2] = [
    Sql::each(
        "CREATE TRIGGER poison BEFORE INSERT ON metric_latency \
         BEGIN SELECT RAISE(ABORT, 'poisoned'); END",
        "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         RAISE EXCEPTION 'poisoned'; END $$",
    ),
    Sql::postgres_only(
        "CREATE TRIGGER poison BEFORE INSERT ON metric_latency FOR EACH ROW EXECUTE FUNCTION poison()",
    ),
];
const CURE: Sql = Sql::each(
    "DROP TRIGGER poison",
    "DROP TRIGGER poison ON metric_latency",
);

/// A flush that fails part way writes nothing, so the flush that retries the same figures
/// counts them once (it used to keep the counts written before the failing statement).
#[tokio::test]
async fn a_flush_that_fails_part_way_writes_nothing_and_its_retry_counts_once() {
    let db = TestStore::open().await;
    let store = &db.store;
    let input = InputId::new();
    let mut figures = Figures {
        received: 5,
        ..Figures::default()
    };
    figures.latency.record(12);
    let minute = 7 * MINUTE_MS;
    let pending = vec![(Subject::Input(input.clone()), minute, figures)];
    let stored = || async {
        store
            .minutes_between(0, 10 * MINUTE_MS, Some(input.as_str()))
            .await
            .expect("read")
    };

    for sql in POISON {
        store.execute(sql, &[]).await.expect("poison");
    }
    assert!(store.merge_minutes(&pending).await.is_err());
    assert!(
        stored().await.is_empty(),
        "nothing of a failed flush is kept"
    );

    store.execute(CURE, &[]).await.expect("cure");
    store.merge_minutes(&pending).await.expect("retry");
    let minutes = stored().await;
    assert_eq!(minutes.len(), 1);
    assert_eq!((minutes[0].1, minutes[0].2.received), (minute, 5));
    assert_eq!(minutes[0].2.latency.count(), 1);
}
