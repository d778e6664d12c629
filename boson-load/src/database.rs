//! A fresh PostgreSQL database per run (`--database-url`), so a run never depends on what an
//! earlier one left behind, dropped again at the end.

use anyhow::{Context as _, Result, ensure};
use sqlx::{Connection as _, Executor as _, PgConnection};

use crate::clock::unix_micros;

/// A database made for this run on the server `--database-url` names.
#[derive(Debug)]
pub(crate) struct FreshDatabase {
    server: String,
    name: String,
    url: String,
}

impl FreshDatabase {
    /// Creates `boson_load_<pid>_<time>` on `server` (a `postgres://` URL; its own database is
    /// only used to connect).
    pub(crate) async fn create(server: &str) -> Result<Self> {
        ensure!(
            server.starts_with("postgres://") || server.starts_with("postgresql://"),
            "--database-url must be a postgres:// URL, not {server:?}"
        );
        let name = format!("boson_load_{}_{}", std::process::id(), unix_micros());
        let mut admin = PgConnection::connect(server)
            .await
            .with_context(|| format!("connecting to {server}"))?;
        admin
            .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .with_context(|| format!("creating database {name}"))?;
        let url = with_database(server, &name);
        eprintln!("boson-load: fresh database {name}");
        Ok(Self {
            server: server.to_owned(),
            name,
            url,
        })
    }

    /// The URL Boson connects to.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Drops the database (ending any connection still open to it).
    pub(crate) async fn drop_now(self) -> Result<()> {
        let mut admin = PgConnection::connect(&self.server)
            .await
            .with_context(|| format!("connecting to {}", self.server))?;
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        admin
            .execute(sqlx::AssertSqlSafe(drop))
            .await
            .with_context(|| format!("dropping database {}", self.name))?;
        Ok(())
    }
}

/// `server` with its database name replaced by `name`, any `?query` kept.
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
    use super::with_database;

    #[test]
    fn the_database_name_is_replaced_or_added() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@host", "x"),
            "postgres://u@host/x"
        );
        assert_eq!(
            with_database("postgresql://u@h/db?sslmode=disable", "x"),
            "postgresql://u@h/x?sslmode=disable"
        );
    }
}
