//! The SQLite files hold input secrets and webhook credentials: only their owner may read them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::store::Store;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn the_data_directory_and_database_are_private_to_their_owner() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let db = data.join("nested/boson.db");
    let store = Store::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    assert_eq!(mode(&data), 0o700, "data directory");
    assert_eq!(mode(&data.join("nested")), 0o700, "nested data directory");
    assert_eq!(mode(&db), 0o600, "database");
    // SQLite gives its WAL and shared-memory files the database's mode.
    for companion in ["boson.db-wal", "boson.db-shm"] {
        let path = data.join("nested").join(companion);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{companion}");
        }
    }
    store.close().await;
}

#[tokio::test]
async fn an_existing_database_readable_by_others_is_made_private() {
    let root = tempfile::tempdir().unwrap();
    let db = root.path().join("boson.db");
    let url = format!("sqlite://{}", db.display());
    Store::connect(&url).await.unwrap().close().await;
    let shm = root.path().join("boson.db-shm");
    if !shm.exists() {
        // An empty shared-memory file is rebuilt by the first connection.
        std::fs::write(&shm, b"").unwrap();
    }
    for file in [&db, &shm] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let store = Store::connect(&url).await.unwrap();
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&shm), 0o600);
    store.close().await;
}
