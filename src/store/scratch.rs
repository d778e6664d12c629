//! Throwaway PostgreSQL databases for the in-process app of the fuzz targets and property tests
//! (the `fuzzing` module): a new, empty database on a server, and its removal afterwards.

use sqlx::Connection;

/// Creates an empty database on the PostgreSQL `server` (a `postgres://` URL); returns its
/// name and URL.
pub(crate) async fn create_database(server: &str) -> anyhow::Result<(String, String)> {
    let name = format!("boson_fuzzing_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(server).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    let url = with_database(server, &name);
    Ok((name, url))
}

/// Drops a database made by `create_database`, ending the connections still open to it.
pub(crate) async fn drop_database(server: &str, name: &str) -> anyhow::Result<()> {
    let mut admin = sqlx::PgConnection::connect(server).await?;
    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(&mut admin)
        .await?;
    Ok(())
}

/// `server` with its database name (the path after the host) replaced by `name`.
fn with_database(server: &str, name: &str) -> String {
    let (address, query) = server
        .split_once('?')
        .map_or((server, None), |(a, q)| (a, Some(q)));
    let host_start = address.find("://").map_or(0, |i| i + 3);
    let root = match address[host_start..].find('/') {
        Some(path) => &address[..host_start + path],
        None => address,
    };
    match query {
        Some(query) => format!("{root}/{name}?{query}"),
        None => format!("{root}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_database_name_is_replaced_and_the_query_kept() {
        let url = super::with_database("postgres://u@h:5432/postgres?sslmode=disable", "x");
        assert_eq!(url, "postgres://u@h:5432/x?sslmode=disable");
        assert_eq!(super::with_database("postgres://h", "x"), "postgres://h/x");
    }
}
