//! Shutdown's last steps, on the store itself rather than through a process.

use std::time::Duration;

use tokio::sync::mpsc;

use super::drain_writer;
use crate::store::Store;
use crate::store::writer::Writer;

/// The SQLite writer keeps a connection of its own. Once its drain has returned, that
/// connection must be closed: a process that exits with it still open leaves the WAL (and its
/// shared-memory file) behind, uncopied, for the next start to recover.
#[tokio::test]
async fn the_writers_connection_is_closed_when_its_drain_returns() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("boson.db");
    let store = Store::connect(&format!("sqlite://{}", file.display()))
        .await
        .expect("store");
    let (committed, _jobs) = mpsc::unbounded_channel();
    let (writer, task) = Writer::spawn(
        store.clone(),
        Duration::from_secs(60),
        committed,
        1,
        Duration::ZERO,
    );
    // The writer opens its connection at its first group.
    writer.flush().await.expect("an empty group commits");
    // With the pool closed, the writer's is the last connection open: SQLite copies the WAL
    // back and deletes it when the last connection closes, and not before.
    store.close().await;
    let wal = file.with_file_name("boson.db-wal");
    assert!(wal.exists(), "the writer's connection keeps the WAL");

    drain_writer(&writer, task).await;
    assert!(
        !wal.exists(),
        "the WAL is still there: the writer's connection was not closed when its drain returned"
    );
}
