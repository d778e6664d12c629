//! Each dashboard-session statement on a real database (SQLite, or PostgreSQL when
//! `TEST_DATABASE_URL` is set).

use super::harness::{HOUR, TestStore};
use crate::store::sessions_sql::NewSession;

fn session<'a>(id_hash: &'a str, csrf: &'a str, expires_at: i64) -> NewSession<'a> {
    NewSession {
        id_hash,
        csrf,
        created_at: expires_at - 12 * HOUR,
        expires_at,
    }
}

#[tokio::test]
async fn a_stored_session_answers_its_csrf_until_it_expires() {
    let db = TestStore::open().await;
    let store = &db.store;
    store
        .insert_session(session("hash-a", "csrf-a", 10 * HOUR))
        .await
        .expect("insert");
    let at = |now| store.session_csrf("hash-a", now);
    assert_eq!(at(HOUR).await.expect("read").as_deref(), Some("csrf-a"));
    assert_eq!(
        at(10 * HOUR - 1).await.expect("read").as_deref(),
        Some("csrf-a")
    );
    assert_eq!(
        at(10 * HOUR).await.expect("read"),
        None,
        "expired at its end"
    );
    let unknown = store.session_csrf("hash-b", HOUR).await.expect("read");
    assert_eq!(unknown, None);
}

#[tokio::test]
async fn a_deleted_session_is_gone_and_others_stay() {
    let db = TestStore::open().await;
    let store = &db.store;
    for (hash, csrf) in [("hash-a", "csrf-a"), ("hash-b", "csrf-b")] {
        store
            .insert_session(session(hash, csrf, 10 * HOUR))
            .await
            .expect("insert");
    }
    store.delete_session("hash-a").await.expect("delete");
    store
        .delete_session("hash-none")
        .await
        .expect("deleting nothing is fine");
    assert_eq!(
        store.session_csrf("hash-a", HOUR).await.expect("read"),
        None
    );
    let other = store.session_csrf("hash-b", HOUR).await.expect("read");
    assert_eq!(other.as_deref(), Some("csrf-b"));
}

#[tokio::test]
async fn pruning_deletes_only_expired_sessions() {
    let db = TestStore::open().await;
    let store = &db.store;
    for (hash, expires_at) in [("old", HOUR), ("ends-now", 2 * HOUR), ("live", 3 * HOUR)] {
        store
            .insert_session(session(hash, "csrf", expires_at))
            .await
            .expect("insert");
    }
    assert_eq!(store.prune_sessions(2 * HOUR).await.expect("prune"), 2);
    assert_eq!(store.prune_sessions(2 * HOUR).await.expect("prune"), 0);
    let live = store.session_csrf("live", 2 * HOUR).await.expect("read");
    assert_eq!(live.as_deref(), Some("csrf"));
}

#[tokio::test]
async fn a_session_id_hash_is_stored_once() {
    let db = TestStore::open().await;
    let store = &db.store;
    store
        .insert_session(session("hash-a", "csrf-a", 10 * HOUR))
        .await
        .expect("insert");
    let again = store
        .insert_session(session("hash-a", "csrf-b", 10 * HOUR))
        .await;
    assert!(
        again.is_err(),
        "a second session with the same id is refused"
    );
    let kept = store.session_csrf("hash-a", HOUR).await.expect("read");
    assert_eq!(kept.as_deref(), Some("csrf-a"));
}
