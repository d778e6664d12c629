//! Kit forwarding statistics on a real database (SQLite, or PostgreSQL when `TEST_DATABASE_URL`
//! is set): the cap on kits per input holds under concurrent requests, and pruning goes by the
//! last report.

use std::collections::BTreeMap;

use super::harness::TestStore;
use crate::model::forwarding::Kit;
use crate::model::ids::InputId;
use crate::store::Store;

/// Every row of an input's statistics, as `(kit, events)`.
async fn rows(store: &Store, input: &InputId) -> Vec<(Kit, i64)> {
    let page = store
        .forwarding_stats(input, None, 1000)
        .await
        .expect("list");
    assert!(page.next.is_none());
    page.items
        .iter()
        .map(|row| (row.kit(), row.events))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_never_keep_more_kits_than_the_cap() {
    let db = TestStore::open().await;
    let input = InputId::new();
    let requests: Vec<_> = (0..16)
        .map(|i| {
            let (store, input) = (db.store.clone(), input.clone());
            // Each request reports three kits no other request reports.
            let counts: BTreeMap<Kit, i64> =
                (1..=3).map(|k| (Kit::Module(i * 10 + k), 1)).collect();
            tokio::spawn(async move { store.record_forwarding(&input, counts, 5, 1_000).await })
        })
        .collect();
    for request in requests {
        request.await.expect("task").expect("record");
    }
    let rows = rows(&db.store, &input).await;
    let kits = rows.iter().filter(|(kit, _)| kit.module_id().is_some());
    assert_eq!(kits.count(), 5, "{rows:?}");
    assert_eq!(
        rows[0],
        (Kit::Overflow, 48 - 5),
        "every report counted once"
    );
}

#[tokio::test]
async fn statistics_are_pruned_by_their_last_report() {
    let db = TestStore::open().await;
    let node = db.node(std::time::Duration::from_secs(60));
    let store = &db.store;
    let input = InputId::new();
    let record = |kit: i64, at: i64| {
        let counts = BTreeMap::from([(Kit::Module(kit), 1)]);
        store.record_forwarding(&input, counts, 100, at)
    };
    record(1, 1_000).await.expect("record");
    record(2, 1_000).await.expect("record");
    record(2, 5_000).await.expect("a later report");
    assert_eq!(
        store
            .prune_forwarding_stats(node.writer(), 2_000)
            .await
            .expect("prune"),
        1
    );
    assert_eq!(rows(store, &input).await, vec![(Kit::Module(2), 2)]);
}
