//! Test support: a fresh store on the backend under test, a SQLite file in a temporary folder,
//! or, when `TEST_DATABASE_URL` names a PostgreSQL server, a new database on it (CI runs the
//! store's tests both ways).

use sqlx::Connection;

use super::Store;

/// A fresh, migrated store. Keep the returned folder alive as long as the store.
pub(crate) async fn fresh_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = match std::env::var("TEST_DATABASE_URL") {
        Ok(server) if server.starts_with("postgres") => fresh_postgres(&server).await,
        _ => format!("sqlite://{}/boson.db", dir.path().display()),
    };
    let store = Store::connect(&url).await.expect("open the test store");
    (store, dir)
}

async fn fresh_postgres(server: &str) -> String {
    let name = format!("boson_unit_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(server)
        .await
        .unwrap_or_else(|e| panic!("TEST_DATABASE_URL is set but PostgreSQL is unreachable: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create the test database");
    let base = server.rsplit_once('/').map_or(server, |(base, _)| base);
    format!("{base}/{name}")
}
