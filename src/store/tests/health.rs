//! Connection health transitions (`store::health_sql`) on a real database: each is one
//! conditional statement, so of several nodes trying the same transition at once exactly one
//! wins (and sends the alert).

use super::harness::TestStore;
use crate::store::health_sql::{AlertWindow, PauseRevision};

#[tokio::test]
async fn of_concurrent_nodes_one_begins_a_spell_and_one_ends_it() {
    let db = TestStore::open().await;
    let id = db.connection("http://127.0.0.1:9/hook").await;
    let tries = (0..4).map(|n| db.store.mark_failing(&id, 100 + n, "503"));
    let won = futures_util::future::join_all(tries).await;
    assert_eq!(won.iter().filter(|w| *w.as_ref().unwrap()).count(), 1);
    assert!(!db.store.mark_failing(&id, 500, "503").await.unwrap());
    let ends = (0..4).map(|_| db.store.mark_recovered(&id));
    let ended: Vec<Option<i64>> = futures_util::future::join_all(ends)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ended.iter().flatten().count(), 1, "{ended:?}");
    assert_eq!(db.store.mark_recovered(&id).await.unwrap(), None);
    assert!(
        db.store.mark_failing(&id, 600, "timeout").await.unwrap(),
        "a new spell"
    );
}

#[tokio::test]
async fn a_connection_is_paused_once_only_after_failing_long_enough() {
    let db = TestStore::open().await;
    let id = db.connection("http://127.0.0.1:9/hook").await;
    let revision = db.store.get_connection(&id).await.unwrap().revision_id;
    let paused = r#"{"status":"paused"}"#;
    let swap = PauseRevision {
        current_revision: revision,
        paused_settings: paused,
    };
    assert!(db.store.mark_failing(&id, 1_000, "503").await.unwrap());
    let early = db
        .store
        .pause_connection(&id, 999, swap, 2_000)
        .await
        .unwrap();
    assert_eq!(early, None, "not failing long enough");
    let tries = (0..3).map(|_| db.store.pause_connection(&id, 1_000, swap, 2_000));
    let won: Vec<_> = futures_util::future::join_all(tries).await;
    let winners: Vec<_> = won.into_iter().filter_map(Result::unwrap).collect();
    assert_eq!(winners.len(), 1);
    assert_eq!(winners[0].failing_since_ms, 1_000);
    assert_eq!(winners[0].last_error.as_deref(), Some("503"));
    let row = db.store.get_connection(&id).await.unwrap();
    assert_eq!(row.settings, paused);
    assert!(db.store.unpaused_failing().await.unwrap().is_empty());
    // Resumed by an operator: the clock starts again, and a new spell can pause it again.
    db.store.restart_failure_clock(&id, 5_000).await.unwrap();
    assert_eq!(
        db.store.unpaused_failing().await.unwrap(),
        [(id.clone(), 5_000)]
    );
}

#[tokio::test]
async fn a_pause_loses_to_a_settings_change_made_meanwhile() {
    let db = TestStore::open().await;
    let id = db.connection("http://127.0.0.1:9/hook").await;
    let stale = db.store.get_connection(&id).await.unwrap().revision_id;
    let output = db.store.get_connection(&id).await.unwrap().output_id;
    db.store
        .update_connection(&id, &output, r#"{"send_as_batch":true}"#, 2)
        .await
        .unwrap();
    assert!(db.store.mark_failing(&id, 1, "503").await.unwrap());
    let swap = PauseRevision {
        current_revision: stale,
        paused_settings: r#"{"status":"paused"}"#,
    };
    assert_eq!(
        db.store.pause_connection(&id, 10, swap, 20).await.unwrap(),
        None
    );
    assert_eq!(
        db.store.unpaused_failing().await.unwrap().len(),
        1,
        "rolled back"
    );
}

#[tokio::test]
async fn an_alert_window_is_claimed_once_per_window() {
    let db = TestStore::open().await;
    let id = db.connection("http://127.0.0.1:9/hook").await;
    let claim = |now: i64| {
        db.store
            .claim_alert_window(&id, AlertWindow::DeadLetters, now, now - 60_000)
    };
    let tries = (0..3).map(|_| claim(100_000));
    let won = futures_util::future::join_all(tries).await;
    assert_eq!(won.iter().filter(|w| *w.as_ref().unwrap()).count(), 1);
    assert!(!claim(159_999).await.unwrap(), "within the minute");
    assert!(claim(160_000).await.unwrap(), "the next minute");
    let backlog = db
        .store
        .claim_alert_window(&id, AlertWindow::Backlog, 160_000, 100_000)
        .await
        .unwrap();
    assert!(backlog, "each kind has its own window");
}
