//! Catalog changes made by any node, as PostgreSQL announces them: the triggers of migration
//! `0008_catalog_notify` notify channel `boson_catalog` with `<table>:<id>` when a transaction
//! that changed an input, output or connection commits. One task per node listens on a
//! connection of its own and hands the pipeline plain [`CatalogChange`]s; the pipeline reloads
//! just what changed.
//!
//! Notifications are not stored: those sent while the listening connection was down are lost.
//! So every time the task (re)starts listening it first says [`CatalogChange::Everything`], and
//! the pipeline reloads the whole catalog once.
//!
//! A listening connection can also die without either end noticing (half open: a firewall or
//! NAT forgot it, the server's host vanished): it then hears nothing, and nothing says so. So
//! the task sends itself a heartbeat through the store's pool every [`HEARTBEAT`], on a channel
//! of its own that its listener also listens to; when a heartbeat sent has not come back within
//! [`HEARD_WITHIN`] (see [`Watchdog`]), the listener is taken for dead: it is dropped, a new one
//! connects, and the catalog is reloaded whole. A dead listener is thus noticed within about
//! 2 s, not at the pipeline's next 5 s reload.
//!
//! A panic in the task (a bug) does not end it: it starts again (see [`crate::supervise`]),
//! with a new connection, and says [`CatalogChange::Everything`] first, as after any
//! reconnection.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Store;
use crate::model::ids::{ConnectionId, InputId, OutputId};
use crate::supervise::{self, Task};

/// The listener's name in the log and in a test's fault.
pub(super) const LISTENER: Task = "catalog listener";
/// The channel the triggers notify.
const CHANNEL: &str = "boson_catalog";
/// The first wait before listening again after a failure; it doubles up to `RETRY_MAX`.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// How often the listener's heartbeat is sent.
const HEARTBEAT: Duration = Duration::from_millis(500);
/// How soon a heartbeat sent must be heard, or the listener is taken for dead.
const HEARD_WITHIN: Duration = Duration::from_millis(1500);
/// The longest a heartbeat's send may take (a stuck pool must not hold the relay).
const SEND_WITHIN: Duration = Duration::from_secs(1);

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
        Some(listen_with(pool.clone(), options))
    }

    /// The same, with the listener connecting through `port` on the database's host (a test's
    /// proxy), while heartbeats go through the store's pool as usual.
    #[cfg(test)]
    pub(crate) fn catalog_changes_through(
        &self,
        port: u16,
    ) -> Option<mpsc::UnboundedReceiver<CatalogChange>> {
        let Store::Postgres(pool) = self else {
            return None;
        };
        let options = (*pool.connect_options()).clone().port(port);
        Some(listen_with(pool.clone(), options))
    }
}

/// Spawns the listening task: started again after a panic (see [`crate::supervise`]), so the
/// receiver stays open for the node's life, and each new start's first word is "everything".
fn listen_with(pool: PgPool, options: PgConnectOptions) -> mpsc::UnboundedReceiver<CatalogChange> {
    let (changes, received) = mpsc::unbounded_channel();
    // It ends with its receiver, so nothing else stops it.
    let never = CancellationToken::new();
    tokio::spawn(async move {
        supervise::restarting(LISTENER, never, || {
            listen(pool.clone(), options.clone(), changes.clone())
        })
        .await;
    });
    received
}

/// Whether the listening connection still hears: a heartbeat sent and not heard within
/// [`HEARD_WITHIN`] says it does not. Pure, with the time passed in. A heartbeat that could not
/// be sent (the database is unreachable) proves nothing either way, so it is not counted.
#[derive(Debug, Clone, Default)]
pub(super) struct Watchdog {
    /// When the oldest heartbeat sent since the last one heard went out.
    unheard_since: Option<Instant>,
}

impl Watchdog {
    /// A heartbeat was sent at `at`.
    pub(super) fn sent(&mut self, at: Instant) {
        self.unheard_since.get_or_insert(at);
    }

    /// A heartbeat came back: the connection hears (every earlier one counts as heard).
    pub(super) fn heard(&mut self) {
        self.unheard_since = None;
    }

    /// Whether the listener is to be taken for dead at `now`.
    pub(super) fn is_dead(&self, now: Instant) -> bool {
        self.unheard_since
            .is_some_and(|sent| now.saturating_duration_since(sent) >= HEARD_WITHIN)
    }
}

/// Listens until `changes` is closed, starting over (after a growing pause) whenever the
/// connection fails or stops hearing.
async fn listen(
    pool: PgPool,
    options: PgConnectOptions,
    changes: mpsc::UnboundedSender<CatalogChange>,
) {
    // This listener's own heartbeat channel (an identifier: lowercase letters and digits).
    let heartbeat = format!("boson_heartbeat_{}", uuid::Uuid::new_v4().simple());
    let mut pause = RETRY_MIN;
    while !changes.is_closed() {
        match listening(options.clone(), &heartbeat).await {
            Ok(listener) => {
                pause = RETRY_MIN;
                match relay(listener, &pool, &heartbeat, &changes).await {
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
async fn listening(options: PgConnectOptions, heartbeat: &str) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(options);
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen_all([CHANNEL, heartbeat]).await?;
    Ok(listener)
}

/// Passes notifications on until `changes` is closed (`Ok`) or the listener fails or stops
/// hearing its heartbeat. Starts with `Everything`, and says it again whenever the listener had
/// to reconnect: whatever was committed before it listened (again) was not announced to it.
async fn relay(
    mut listener: PgListener,
    pool: &PgPool,
    heartbeat: &str,
    changes: &mpsc::UnboundedSender<CatalogChange>,
) -> Result<(), sqlx::Error> {
    let mut next = Some(CatalogChange::Everything);
    let mut watchdog = Watchdog::default();
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        supervise::round(LISTENER);
        if let Some(change) = next.take()
            && changes.send(change).is_err()
        {
            return Ok(());
        }
        // One receive, kept across heartbeats: `try_recv` is not cancel-safe. Dropped while it
        // reconnected after losing the connection, it forgot the loss, and the next call went
        // on listening on the new connection without answering `None`, so whatever was
        // committed meanwhile waited for the next whole reload (a heartbeat fell in that window
        // more often the slower the reconnection; the lost-connection test caught it under load).
        let receive = listener.try_recv();
        tokio::pin!(receive);
        let received = loop {
            tokio::select! {
                () = changes.closed() => return Ok(()),
                _ = beat.tick() => {
                    if watchdog.is_dead(Instant::now()) {
                        return Err(sqlx::Error::Protocol(
                            "the catalog listener stopped hearing its heartbeat".to_owned(),
                        ));
                    }
                    if send_heartbeat(pool, heartbeat).await {
                        watchdog.sent(Instant::now());
                    }
                }
                received = &mut receive => break received?,
            }
        };
        next = match received {
            Some(notification) if notification.channel() == heartbeat => {
                watchdog.heard();
                None
            }
            Some(notification) => Some(CatalogChange::parse(notification.payload())),
            None => {
                tracing::warn!("The catalog listener reconnected; reloading the whole catalog.");
                watchdog.heard();
                Some(CatalogChange::Everything)
            }
        };
    }
}

/// Notifies the listener's own heartbeat channel through the pool; whether it was sent.
async fn send_heartbeat(pool: &PgPool, channel: &str) -> bool {
    let sent = sqlx::query("SELECT pg_notify($1, '')")
        .bind(channel)
        .execute(pool);
    matches!(tokio::time::timeout(SEND_WITHIN, sent).await, Ok(Ok(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heartbeat_not_heard_in_time_means_the_listener_is_dead() {
        let start = Instant::now();
        let mut dog = Watchdog::default();
        assert!(!dog.is_dead(start + HEARD_WITHIN * 10), "nothing sent yet");
        dog.sent(start);
        assert!(!dog.is_dead(start + HEARD_WITHIN / 2));
        dog.heard();
        assert!(!dog.is_dead(start + HEARD_WITHIN * 10), "it came back");
        // Sent twice, heard neither: the first one's deadline counts.
        dog.sent(start + HEARTBEAT);
        dog.sent(start + HEARTBEAT * 2);
        assert!(!dog.is_dead(start + HEARTBEAT + HEARD_WITHIN / 2));
        assert!(dog.is_dead(start + HEARTBEAT + HEARD_WITHIN));
    }

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
