//! Catalog changes made by any node, as PostgreSQL announces them: the triggers of migration
//! `0008_catalog_notify` notify channel `boson_catalog` with `<table>:<id>` when a transaction
//! that changed an input, output or connection commits. One task per node listens on a
//! connection of its own and hands the pipeline plain [`CatalogChange`]s; the pipeline reloads
//! just what changed.
//!
//! Notifications are not stored: those sent while the listening connection was down are lost.
//! So every time the task (re)starts listening it first says [`CatalogChange::Everything`], and
//! the pipeline reloads the whole catalog once.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::mpsc;

use super::Store;
use crate::model::ids::{ConnectionId, InputId, OutputId};

/// The channel the triggers notify.
const CHANNEL: &str = "boson_catalog";
/// The first wait before listening again after a failure; it doubles up to `RETRY_MAX`.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// What changed in the catalog tables.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CatalogChange {
    Input(InputId),
    Output(OutputId),
    Connection(ConnectionId),
    /// Anything may have changed (changes may have been missed): reload the whole catalog.
    Everything,
}

impl CatalogChange {
    /// Reads a notification's payload, `<table>:<id>`. A payload this node does not understand
    /// (a table or id format of a newer version) asks for a whole reload, never for nothing.
    fn parse(payload: &str) -> Self {
        let Some((table, id)) = payload.split_once(':') else {
            return Self::Everything;
        };
        let change = match table {
            "inputs" => InputId::parse(id).ok().map(Self::Input),
            "outputs" => OutputId::parse(id).ok().map(Self::Output),
            "connections" => ConnectionId::parse(id).ok().map(Self::Connection),
            _ => None,
        };
        change.unwrap_or(Self::Everything)
    }
}

impl Store {
    /// Starts listening for catalog changes made by any node, on a connection of its own, and
    /// returns them as they are committed; the listening ends when the receiver is dropped.
    /// `None` on SQLite: one node owns an embedded database, and its own admin writes reload
    /// its catalog before they answer.
    pub(crate) fn catalog_changes(&self) -> Option<mpsc::UnboundedReceiver<CatalogChange>> {
        let Store::Postgres(pool) = self else {
            return None;
        };
        let options = (*pool.connect_options()).clone();
        let (changes, received) = mpsc::unbounded_channel();
        tokio::spawn(listen(options, changes));
        Some(received)
    }
}

/// Listens until `changes` is closed, starting over (after a growing pause) whenever the
/// connection fails.
async fn listen(options: PgConnectOptions, changes: mpsc::UnboundedSender<CatalogChange>) {
    let mut pause = RETRY_MIN;
    loop {
        match listening(options.clone()).await {
            Ok(listener) => {
                pause = RETRY_MIN;
                match relay(listener, &changes).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(%error, "Listening for catalog changes failed; starting over.");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "Cannot listen for catalog changes; retrying.");
            }
        }
        tokio::select! {
            () = changes.closed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// A listener on `CHANNEL`, on a pool of one connection that is never recycled: the pool only
/// serves to reconnect.
async fn listening(options: PgConnectOptions) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen(CHANNEL).await?;
    Ok(listener)
}

/// Passes notifications on until `changes` is closed (`Ok`) or the listener fails. Starts with
/// `Everything`, and says it again whenever the listener had to reconnect: whatever was
/// committed before it listened (again) was not announced to it.
async fn relay(
    mut listener: PgListener,
    changes: &mpsc::UnboundedSender<CatalogChange>,
) -> Result<(), sqlx::Error> {
    let mut next = CatalogChange::Everything;
    loop {
        if changes.send(next).is_err() {
            return Ok(());
        }
        let received = tokio::select! {
            () = changes.closed() => return Ok(()),
            received = listener.try_recv() => received?,
        };
        next = match received {
            Some(notification) => CatalogChange::parse(notification.payload()),
            None => {
                tracing::warn!("The catalog listener reconnected; reloading the whole catalog.");
                CatalogChange::Everything
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_the_changed_row_and_anything_unknown_reloads_everything() {
        let input = InputId::new();
        let connection = ConnectionId::new();
        let output = OutputId::new();
        let parse = CatalogChange::parse;
        assert_eq!(
            parse(&format!("inputs:{}", input.as_str())),
            CatalogChange::Input(input)
        );
        assert_eq!(
            parse(&format!("outputs:{}", output.as_str())),
            CatalogChange::Output(output)
        );
        assert_eq!(
            parse(&format!("connections:{}", connection.as_str())),
            CatalogChange::Connection(connection)
        );
        for unknown in ["*", "", "jobs:1", "inputs:not-an-id", "inputs"] {
            assert_eq!(parse(unknown), CatalogChange::Everything, "{unknown:?}");
        }
    }
}
