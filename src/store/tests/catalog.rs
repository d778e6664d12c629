//! Announced catalog changes: on PostgreSQL every committed change to an input, output or
//! connection is announced with its id, a lost listening connection is followed by "reload
//! everything", and nothing is announced for a rolled-back change; SQLite announces nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::harness::{TestStore, input_row, on_postgres, output_row};
use crate::model::ids::{ConnectionId, OutputId};
use crate::store::CatalogChange;
use crate::store::backend::{Sql, args};
use crate::store::catalog_changes::LISTENER;
use crate::supervise::{PATIENCE, panic_next_round, panic_pending};

/// How long an announcement may take to arrive (it takes milliseconds).
const ARRIVES_WITHIN: Duration = Duration::from_secs(5);
/// How long to wait before concluding nothing more is announced.
const QUIET_FOR: Duration = Duration::from_millis(300);

async fn next(changes: &mut UnboundedReceiver<CatalogChange>) -> CatalogChange {
    tokio::time::timeout(ARRIVES_WITHIN, changes.recv())
        .await
        .expect("a change is announced in time")
        .expect("the listener is running")
}

async fn assert_quiet(changes: &mut UnboundedReceiver<CatalogChange>) {
    if let Ok(Some(change)) = tokio::time::timeout(QUIET_FOR, changes.recv()).await {
        panic!("unexpected announcement: {change:?}");
    }
}

/// A store whose listener has started (its first announcement, "everything", has arrived).
async fn listening() -> Option<(TestStore, UnboundedReceiver<CatalogChange>)> {
    let db = TestStore::open().await;
    let mut changes = db.store.catalog_changes()?;
    assert_eq!(next(&mut changes).await, CatalogChange::Everything);
    Some((db, changes))
}

#[tokio::test]
async fn only_a_shared_database_announces_changes() {
    let db = TestStore::open().await;
    assert_eq!(db.store.catalog_changes().is_some(), on_postgres());
}

#[tokio::test]
async fn every_committed_change_is_announced_with_what_it_changed() {
    let Some((db, mut changes)) = listening().await else {
        return;
    };
    let input = input_row();
    db.store.insert_input(&input).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Input(input.id.clone())
    );
    let output = output_row();
    db.store.insert_output(&output).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Output(output.id.clone())
    );

    let connection = ConnectionId::new();
    db.store
        .insert_connection(&connection, &input.id, &output.id, "{}", 2)
        .await
        .unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Connection(connection.clone())
    );
    db.store
        .update_connection(&connection, &output.id, r#"{"status":"inactive"}"#, 3)
        .await
        .unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Connection(connection.clone())
    );
    db.store
        .set_input_secret(&input.id, "rotated")
        .await
        .unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Input(input.id.clone())
    );
    // A signing secret's rotation reaches every node like any change to its output.
    db.store
        .rotate_signing_secret(&output.id, "whsec_AAAA", 4)
        .await
        .unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Output(output.id.clone())
    );
    db.store.delete_connection(&connection).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Connection(connection)
    );
    db.store.delete_output(&output.id).await.unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Output(output.id));
    assert_quiet(&mut changes).await;
}

#[tokio::test]
async fn a_rolled_back_change_is_not_announced() {
    let Some((db, mut changes)) = listening().await else {
        return;
    };
    let input = input_row();
    db.store.insert_input(&input).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        CatalogChange::Input(input.id.clone())
    );
    // A transaction that deletes the input, then rolls back (dropped without a commit).
    let mut tx = db.store.begin().await.unwrap();
    tx.execute(
        Sql::shared("DELETE FROM inputs WHERE id = $1"),
        args![&input.id],
    )
    .await
    .unwrap();
    drop(tx);
    assert_quiet(&mut changes).await;
}

#[tokio::test]
async fn a_lost_listening_connection_is_followed_by_a_whole_reload() {
    let Some((db, mut changes)) = listening().await else {
        return;
    };
    let ended = Sql::shared(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    );
    let (terminated,): (i64,) = db.store.fetch_one(ended, &[]).await.unwrap();
    assert_eq!(terminated, 1, "one listening connection");
    // Whatever was committed while it was down was not announced: the next word is "reload
    // everything", and changes are announced again after it.
    assert_eq!(next(&mut changes).await, CatalogChange::Everything);
    let input = input_row();
    db.store.insert_input(&input).await.unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Input(input.id));
}

/// A TCP proxy to the database that can black-hole the connections it carries: from then on
/// their bytes are swallowed both ways, while neither end sees the connection close (what a
/// firewall that forgot a connection does). Connections made after that pass as before.
struct Proxy {
    port: u16,
    /// Connections numbered below this are black-holed.
    cut: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
}

impl Proxy {
    async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (cut, accepted) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (cut_in, accepted_in) = (Arc::clone(&cut), Arc::clone(&accepted));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let index = accepted_in.fetch_add(1, Ordering::SeqCst);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, index, Arc::clone(&cut_in)));
                tokio::spawn(pump(server_read, client_write, index, Arc::clone(&cut_in)));
            }
        });
        Self {
            port,
            cut,
            accepted,
        }
    }

    /// Black-holes every connection carried so far.
    fn black_hole(&self) {
        self.cut
            .store(self.accepted.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    index: u64,
    cut: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let Ok(read) = from.read(&mut buffer).await else {
            return;
        };
        if read == 0 {
            return;
        }
        if index < cut.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_listener_that_stops_hearing_is_replaced_and_the_catalog_reloaded() {
    let db = TestStore::open().await;
    let crate::store::Store::Postgres(pool) = &db.store else {
        return;
    };
    let options = pool.connect_options();
    let proxy = Proxy::start(format!("{}:{}", options.get_host(), options.get_port())).await;
    let mut changes = db.store.catalog_changes_through(proxy.port).unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Everything);
    let input = input_row();
    db.store.insert_input(&input).await.unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Input(input.id));

    // The listening connection goes half open: nothing it was sent arrives, and it is not
    // closed. A change made now is not heard; the listener must notice and reload everything.
    proxy.black_hole();
    let missed = input_row();
    db.store.insert_input(&missed).await.unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Everything);
    let input = input_row();
    db.store.insert_input(&input).await.unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Input(input.id));
}

/// A listener whose round panicked (a bug) starts again: it announces "everything" (what was
/// committed while it was down was not heard) and then goes on announcing changes, its
/// receiver never closed. PostgreSQL only (SQLite announces nothing).
#[tokio::test]
async fn a_listener_that_panicked_starts_again_and_reloads_everything() {
    let Some((db, mut changes)) = listening().await else {
        return;
    };
    // Its next round panics: it comes with the next thing heard (this change, or a heartbeat
    // first), before that is passed on, so the change is not announced as itself.
    panic_next_round(LISTENER);
    db.store.insert_input(&input_row()).await.unwrap();
    // Within the restart's patience: the next heartbeat, the pause and a new connection.
    let restarted = tokio::time::timeout(PATIENCE, changes.recv())
        .await
        .expect("the listener announces again in time")
        .expect("the listener is running");
    assert_eq!(restarted, CatalogChange::Everything);
    assert!(!panic_pending(), "the listener never panicked");
    let input = input_row();
    db.store.insert_input(&input).await.unwrap();
    assert_eq!(next(&mut changes).await, CatalogChange::Input(input.id));
}

#[tokio::test]
async fn a_rotation_keeps_one_previous_secret_and_a_settings_change_keeps_both() {
    let db = TestStore::open().await;
    let output = output_row();
    db.store.insert_output(&output).await.unwrap();
    let stored = db.store.get_output(&output.id).await.unwrap();
    assert_eq!(stored.signing_secret, None);
    assert_eq!(stored.signing_rotated_at, None);

    for (secret, at) in [("whsec_one", 10), ("whsec_two", 20), ("whsec_three", 30)] {
        db.store
            .rotate_signing_secret(&output.id, secret, at)
            .await
            .unwrap();
    }
    db.store
        .update_output(
            &output.id,
            "renamed",
            r#"{"url":"http://127.0.0.1:9/x"}"#,
            40,
        )
        .await
        .unwrap();
    let stored = db.store.get_output(&output.id).await.unwrap();
    assert_eq!(stored.signing_secret.as_deref(), Some("whsec_three"));
    assert_eq!(stored.previous_signing_secret.as_deref(), Some("whsec_two"));
    assert_eq!(stored.signing_rotated_at, Some(30));
    assert_eq!(stored.updated_at, 40);
    let listed = db.store.list_outputs().await.unwrap();
    assert_eq!(listed[0].signing_secret.as_deref(), Some("whsec_three"));
    assert!(
        !format!("{stored:?}").contains("whsec_"),
        "Debug shows no secret"
    );

    let unknown = db
        .store
        .rotate_signing_secret(&OutputId::new(), "whsec_x", 50)
        .await;
    assert!(matches!(unknown, Err(crate::store::StoreError::NotFound)));
}
