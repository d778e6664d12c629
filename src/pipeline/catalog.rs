//! The in-memory catalog: inputs by API key, connections by input, outputs by id, and settings
//! revisions. Ingest authenticates and routes from it and delivery reads settings from it, so the
//! hot path never queries configuration tables.
//!
//! Every admin change reloads it before the admin API answers, which is what makes activation
//! immediate: the next event ingested after a save is routed by the new settings. With several
//! nodes on one PostgreSQL, each node follows the changes the others commit
//! ([`Catalog::follow_changes`]): PostgreSQL announces every changed input, output and
//! connection, and the node re-reads that row alone. A whole reload every few seconds stays as a
//! safety net.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::output::Output;
use crate::model::Platform;
use crate::model::ids::{ConnectionId, InputId, OutputId};
use crate::model::settings::{
    ConnectionSettings, ConnectionStatus, Hours, InputSettings, Ordering,
};
use crate::store::{
    CatalogChange, ConnectionRow, InputRow, OutputRow, Store, StoreError, StoreResult,
};
use crate::supervise::{self, Task};

/// How often a node on a shared database reloads the whole catalog although no change was
/// announced: a safety net for a listener that stopped hearing without noticing. Three reads of
/// the configuration tables per node every few seconds cost next to nothing.
const SAFETY_NET: Duration = Duration::from_secs(5);
/// The follower's name in the log and in a test's fault.
const TASK: Task = "catalog follower";
/// After a failed read (the database is unreachable), how soon everything is read again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// More changes than this at once are applied by one whole reload (three reads) rather than
/// one read each.
const MOST_CHANGES_ONE_BY_ONE: usize = 16;
/// Most announced changes taken at once (any more than `MOST_CHANGES_ONE_BY_ONE` are applied
/// by a whole reload anyway).
const ANNOUNCED_AT_ONCE: usize = 256;

/// A connection a batch is routed to, with the settings revision current at acceptance.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) connection_id: ConnectionId,
    pub(crate) revision_id: i64,
    /// The revision's rules decide on the user's consent (its jobs carry it from the commit).
    pub(crate) reads_consent: bool,
    /// The revision keeps each user's batches in order: its jobs carry their batch's MPID.
    pub(crate) per_user: bool,
    /// How long the revision gathers one user's batches into one request (ms; 0: it does not).
    pub(crate) window_ms: i64,
}

/// An input as ingest needs it.
#[derive(Debug, Clone)]
pub(crate) struct InputEntry {
    pub(crate) id: InputId,
    pub(crate) secret: String,
    pub(crate) name: String,
    pub(crate) platform: Platform,
    pub(crate) settings: Arc<InputSettings>,
}

/// A connection as delivery needs it.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionEntry {
    pub(crate) input_id: InputId,
    pub(crate) output_id: OutputId,
    /// Milliseconds of continuous failure after which it is paused (`None`: never).
    pub(crate) auto_pause_ms: Option<i64>,
}

/// A settings revision read with its connection, to be cached.
type Revision = (i64, Arc<ConnectionSettings>);

/// What the catalog holds at one moment. Readers take the whole of it (an `Arc`), so a reader
/// never sees half of a change.
#[derive(Debug, Default, Clone)]
struct Snapshot {
    inputs_by_key: HashMap<String, InputEntry>,
    /// Each input's API key, so a changed input's entry is found without a scan.
    keys_by_input: HashMap<InputId, String>,
    /// Each input's active connections, in connection id order.
    routes_by_input: HashMap<InputId, Vec<Route>>,
    /// Each input's inactive connections, in id order.
    inactive_by_input: HashMap<InputId, Vec<ConnectionId>>,
    /// Connections Boson paused after failing: routed (their jobs are stored) but not delivered.
    paused: HashSet<ConnectionId>,
    connections: HashMap<ConnectionId, ConnectionEntry>,
    outputs: HashMap<OutputId, Arc<Output>>,
}

impl Snapshot {
    /// A snapshot of whole tables, and the settings revisions it read.
    fn of(
        inputs: Vec<InputRow>,
        outputs: Vec<OutputRow>,
        connections: Vec<ConnectionRow>,
    ) -> (Self, Vec<Revision>) {
        let mut snapshot = Self::default();
        for row in inputs {
            snapshot.put_input(row);
        }
        for row in outputs {
            snapshot.put_output(row);
        }
        let revisions = connections
            .into_iter()
            .filter_map(|row| snapshot.put_connection(row))
            .collect();
        (snapshot, revisions)
    }

    /// Puts an input in place of what it was. One with an unknown platform is left out (as if
    /// absent); unreadable settings become the defaults.
    fn put_input(&mut self, row: InputRow) {
        self.remove_input(&row.id);
        let Some(platform) = Platform::parse(&row.platform) else {
            tracing::error!(input = %row.id, "Stored input has an unknown platform.");
            return;
        };
        let settings = Arc::new(serde_json::from_str(&row.settings).unwrap_or_else(|error| {
            tracing::error!(input = %row.id, %error, "Stored input settings are unreadable; using defaults.");
            InputSettings::default()
        }));
        let entry = InputEntry {
            id: row.id.clone(),
            secret: row.api_secret,
            name: row.name,
            platform,
            settings,
        };
        self.keys_by_input.insert(row.id, row.api_key.clone());
        self.inputs_by_key.insert(row.api_key, entry);
    }

    fn remove_input(&mut self, id: &InputId) {
        if let Some(key) = self.keys_by_input.remove(id) {
            self.inputs_by_key.remove(&key);
        }
    }

    /// Puts an output in place of what it was, prepared for sending (its custom headers and
    /// signing keys made once here, not per request); one that cannot be read is left out.
    fn put_output(&mut self, row: OutputRow) {
        match Output::from_row(&row) {
            Ok(output) => {
                self.outputs.insert(row.id, Arc::new(output));
            }
            Err(error) => {
                tracing::error!(output = %row.id, %error, "Stored output is unreadable.");
                self.remove_output(&row.id);
            }
        }
    }

    fn remove_output(&mut self, id: &OutputId) {
        self.outputs.remove(id);
    }

    /// Puts a connection in place of what it was: among its input's routes if active, among
    /// its inactive connections if not. Answers its settings revision, to be cached; one with
    /// unreadable settings is left out.
    fn put_connection(&mut self, row: ConnectionRow) -> Option<Revision> {
        self.remove_connection(&row.id);
        let settings = match ConnectionSettings::from_json_str(&row.settings) {
            Ok(settings) => Arc::new(settings),
            Err(error) => {
                tracing::error!(connection = %row.id, %error, "Stored connection settings are unreadable.");
                return None;
            }
        };
        if settings.status == ConnectionStatus::Paused {
            self.paused.insert(row.id.clone());
        }
        if settings.status.takes_jobs() {
            let routes = self
                .routes_by_input
                .entry(row.input_id.clone())
                .or_default();
            let at = routes.partition_point(|route| route.connection_id < row.id);
            let route = Route {
                connection_id: row.id.clone(),
                revision_id: row.revision_id,
                reads_consent: settings.forwarding_rules.reads_consent(),
                per_user: settings.ordering == Ordering::PerUser,
                window_ms: settings.batch_window_ms(),
            };
            routes.insert(at, route);
        } else {
            let inactive = self
                .inactive_by_input
                .entry(row.input_id.clone())
                .or_default();
            let at = inactive.partition_point(|id| *id < row.id);
            inactive.insert(at, row.id.clone());
        }
        let entry = ConnectionEntry {
            input_id: row.input_id,
            output_id: row.output_id,
            auto_pause_ms: settings.auto_pause_after_hours.map(Hours::as_ms),
        };
        self.connections.insert(row.id, entry);
        Some((row.revision_id, settings))
    }

    fn remove_connection(&mut self, id: &ConnectionId) {
        self.paused.remove(id);
        let Some(entry) = self.connections.remove(id) else {
            return;
        };
        retain_in(&mut self.routes_by_input, &entry.input_id, |route| {
            route.connection_id != *id
        });
        retain_in(&mut self.inactive_by_input, &entry.input_id, |other| {
            other != id
        });
    }
}

/// Keeps what `keep` accepts in `key`'s list, and drops the list once it is empty.
fn retain_in<K: Eq + Hash, V>(
    lists: &mut HashMap<K, Vec<V>>,
    key: &K,
    keep: impl FnMut(&V) -> bool,
) {
    if let Some(list) = lists.get_mut(key) {
        list.retain(keep);
        if list.is_empty() {
            lists.remove(key);
        }
    }
}

/// A row read by id: `None` when it no longer exists.
fn found<T>(read: StoreResult<T>) -> StoreResult<Option<T>> {
    match read {
        Ok(row) => Ok(Some(row)),
        Err(StoreError::NotFound) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Waits for the next changes the store announces and adds them to `into`. Once the listener
/// has stopped (it is started again after a panic and stops only with its receiver, so only
/// the runtime's end can stop it), waits for ever: the safety net alone then keeps the catalog
/// current.
async fn announced(
    changes: &mut Option<mpsc::UnboundedReceiver<CatalogChange>>,
    into: &mut Vec<CatalogChange>,
) {
    if let Some(receiver) = changes {
        if receiver.recv_many(into, ANNOUNCED_AT_ONCE).await > 0 {
            return;
        }
        tracing::error!(
            "The catalog listener stopped; only the periodic reload keeps the catalog current."
        );
        *changes = None;
    }
    std::future::pending().await
}

/// The catalog; shared by reference.
#[derive(Debug)]
pub(crate) struct Catalog {
    store: Store,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Settings revisions never change once written, so they are cached for good.
    revisions: Mutex<HashMap<i64, Arc<ConnectionSettings>>>,
    /// Serialises every read of the store into the snapshot (whole reloads and single rows),
    /// each one applied before the next one starts reading: an older read can never replace
    /// what a newer one put in place.
    reloading: tokio::sync::Mutex<()>,
}

impl Catalog {
    /// Loads the catalog from the store.
    pub(crate) async fn load(store: Store) -> StoreResult<Self> {
        let catalog = Self {
            store,
            snapshot: RwLock::new(Arc::default()),
            revisions: Mutex::new(HashMap::new()),
            reloading: tokio::sync::Mutex::new(()),
        };
        catalog.reload().await?;
        Ok(catalog)
    }

    /// Re-reads inputs, outputs and connections.
    pub(crate) async fn reload(&self) -> StoreResult<()> {
        let _one_at_a_time = self.reloading.lock().await;
        self.read_everything().await
    }

    /// Applies the catalog changes other nodes commit, as the store announces them, until
    /// `cancel`; reloads everything every `SAFETY_NET` as well. Returns at once when no other
    /// node can change the catalog (SQLite). A round that panics (a bug) does not stop the
    /// following: it starts again (see [`crate::supervise`]) with a new listener, whose first
    /// word is a whole reload, so no change announced meanwhile is missed.
    pub(crate) async fn follow_changes(self: Arc<Self>, cancel: CancellationToken) {
        supervise::restarting(TASK, cancel.clone(), || self.follow_rounds(&cancel)).await;
    }

    /// [`Self::follow_changes`]' loop, until `cancel` or a panic.
    async fn follow_rounds(&self, cancel: &CancellationToken) {
        let Some(changes) = self.store.catalog_changes() else {
            return;
        };
        let mut changes = Some(changes);
        let mut safety_net = tokio::time::interval_at(Instant::now() + SAFETY_NET, SAFETY_NET);
        safety_net.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut pending = Vec::new();
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = safety_net.tick() => pending.push(CatalogChange::Everything),
                () = announced(&mut changes, &mut pending) => {}
            }
            supervise::round(TASK);
            if let Err(error) = self.apply_all(&mut pending).await {
                tracing::warn!(%error, "Applying catalog changes failed; reloading everything shortly.");
                safety_net.reset_after(RETRY_AFTER_FAILURE);
            }
        }
    }

    /// Applies `changes` (and empties it): one by one when they are few, else by one whole
    /// reload, which is cheaper than many single reads. Stops at the first failure; the caller
    /// reloads everything later.
    async fn apply_all(&self, changes: &mut Vec<CatalogChange>) -> StoreResult<()> {
        if changes.len() > MOST_CHANGES_ONE_BY_ONE || changes.contains(&CatalogChange::Everything) {
            changes.clear();
            return self.reload().await;
        }
        let mut seen = HashSet::new();
        for change in changes.drain(..) {
            if seen.insert(change.clone()) {
                self.apply(&change).await?;
            }
        }
        Ok(())
    }

    /// Re-reads what one change names.
    async fn apply(&self, change: &CatalogChange) -> StoreResult<()> {
        let _one_at_a_time = self.reloading.lock().await;
        match change {
            CatalogChange::Input(id) => {
                let row = found(self.store.get_input(id).await)?;
                self.update(|snapshot| match row {
                    Some(row) => snapshot.put_input(row),
                    None => snapshot.remove_input(id),
                });
            }
            CatalogChange::Output(id) => {
                let row = found(self.store.get_output(id).await)?;
                self.update(|snapshot| match row {
                    Some(row) => snapshot.put_output(row),
                    None => snapshot.remove_output(id),
                });
            }
            CatalogChange::Connection(id) => {
                let row = found(self.store.get_connection(id).await)?;
                let mut revision = None;
                self.update(|snapshot| match row {
                    Some(row) => revision = snapshot.put_connection(row),
                    None => snapshot.remove_connection(id),
                });
                self.remember_revisions(revision.into_iter().collect());
            }
            CatalogChange::Everything => self.read_everything().await?,
        }
        tracing::debug!(?change, "Applied a catalog change.");
        Ok(())
    }

    /// Reads the whole catalog into a new snapshot. The caller holds `reloading`.
    async fn read_everything(&self) -> StoreResult<()> {
        let inputs = self.store.list_inputs().await?;
        let outputs = self.store.list_outputs().await?;
        let connections = self.store.list_connections().await?;
        let (snapshot, revisions) = Snapshot::of(inputs, outputs, connections);
        self.remember_revisions(revisions);
        *self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
        Ok(())
    }

    /// Changes the snapshot in place. Readers holding the current one keep it unchanged: it is
    /// copied first if any does (copy on write).
    fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut current = self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(Arc::make_mut(&mut current));
    }

    fn current(&self) -> Arc<Snapshot> {
        Arc::clone(
            &self
                .snapshot
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn remember_revisions(&self, revisions: Vec<Revision>) {
        let mut cache = self
            .revisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.extend(revisions);
    }

    /// The input an API key belongs to.
    pub(crate) fn input_by_key(&self, api_key: &str) -> Option<InputEntry> {
        self.current().inputs_by_key.get(api_key).cloned()
    }

    /// The active connections of an input, each with its current settings revision.
    pub(crate) fn routes(&self, input_id: &InputId) -> Vec<Route> {
        self.current()
            .routes_by_input
            .get(input_id)
            .cloned()
            .unwrap_or_default()
    }

    /// The inactive connections of an input (for the Live Stream's "filtered: status").
    pub(crate) fn inactive_connections(&self, input_id: &InputId) -> Vec<ConnectionId> {
        self.current()
            .inactive_by_input
            .get(input_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Connections set to inactive or paused: their deliveries wait in the table.
    pub(crate) fn paused_connections(&self) -> Vec<ConnectionId> {
        let snapshot = self.current();
        let inactive = snapshot.inactive_by_input.values().flatten();
        inactive.chain(&snapshot.paused).cloned().collect()
    }

    /// Whether a connection is set to inactive or paused (its deliveries wait until it is
    /// active again).
    pub(crate) fn is_paused(&self, id: &ConnectionId) -> bool {
        let snapshot = self.current();
        snapshot.paused.contains(id)
            || snapshot
                .inactive_by_input
                .values()
                .any(|connections| connections.contains(id))
    }

    /// After how many milliseconds of continuous failure a connection is paused, if ever.
    pub(crate) fn auto_pause_ms(&self, id: &ConnectionId) -> Option<i64> {
        self.current().connections.get(id)?.auto_pause_ms
    }

    /// Whether any connection is ever paused for failing (`auto_pause_after_hours`, unset by
    /// default): if none is, nothing needs to look for long failures.
    pub(crate) fn any_auto_pause(&self) -> bool {
        self.current()
            .connections
            .values()
            .any(|connection| connection.auto_pause_ms.is_some())
    }

    /// A connection and its output, if both still exist.
    pub(crate) fn connection(&self, id: &ConnectionId) -> Option<(ConnectionEntry, Arc<Output>)> {
        let snapshot = self.current();
        let connection = snapshot.connections.get(id)?.clone();
        let output = Arc::clone(snapshot.outputs.get(&connection.output_id)?);
        Some((connection, output))
    }

    /// Whether a connection and its output still exist in the store (for a catalog miss, which
    /// may only mean this node has not reloaded yet).
    pub(crate) async fn connection_exists(&self, id: &ConnectionId) -> StoreResult<bool> {
        match self.store.get_connection(id).await {
            Ok(connection) => match self.store.get_output(&connection.output_id).await {
                Ok(_) => Ok(true),
                Err(StoreError::NotFound) => Ok(false),
                Err(error) => Err(error),
            },
            Err(StoreError::NotFound) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// A settings revision, from the cache or the store.
    pub(crate) async fn revision(&self, id: i64) -> StoreResult<Arc<ConnectionSettings>> {
        let cached = self
            .revisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .cloned();
        if let Some(settings) = cached {
            return Ok(settings);
        }
        let text = self.store.get_revision(id).await?;
        let settings = ConnectionSettings::from_json_str(&text)
            .map(Arc::new)
            .map_err(|_| StoreError::Conflict("unreadable_settings"))?;
        self.remember_revisions(vec![(id, Arc::clone(&settings))]);
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::harness::TestStore;
    use crate::supervise::{panic_next_round, panic_pending, within_patience};

    /// Another node's change reaches this node's catalog after the follower panicked (the
    /// panic comes at its first round, the listener's opening reload). PostgreSQL only: on
    /// SQLite no other node changes the catalog, and nothing follows.
    #[tokio::test]
    async fn another_nodes_change_is_followed_after_a_round_panicked() {
        let db = TestStore::open().await;
        if !matches!(db.store, Store::Postgres(_)) {
            return;
        }
        let catalog = Arc::new(Catalog::load(db.store.clone()).await.expect("catalog"));
        panic_next_round(TASK);
        let cancel = CancellationToken::new();
        let follower = tokio::spawn(Arc::clone(&catalog).follow_changes(cancel.clone()));
        let id = InputId::new();
        db.store
            .insert_input(&input(&id, "followed-key", "secret"))
            .await
            .expect("insert");
        let followed =
            within_patience(async || catalog.input_by_key("followed-key").is_some()).await;
        assert!(!panic_pending(), "no round panicked");
        assert!(
            followed,
            "the change was never followed after a round panicked"
        );
        cancel.cancel();
        follower.await.expect("the follower ended");
    }

    fn input(id: &InputId, key: &str, secret: &str) -> InputRow {
        InputRow {
            id: id.clone(),
            name: "in".to_owned(),
            platform: "custom_feed".to_owned(),
            api_key: key.to_owned(),
            api_secret: secret.to_owned(),
            created_at: 1,
            settings: "{}".to_owned(),
        }
    }

    fn output(id: &OutputId, url: &str) -> OutputRow {
        OutputRow {
            id: id.clone(),
            name: "out".to_owned(),
            kind: "webhook".to_owned(),
            settings: format!(r#"{{"url":"{url}"}}"#),
            created_at: 1,
            updated_at: 1,
            signing_secret: None,
            previous_signing_secret: None,
            signing_rotated_at: None,
        }
    }

    fn connection(
        id: &ConnectionId,
        input: &InputId,
        output: &OutputId,
        revision_id: i64,
        status: &str,
    ) -> ConnectionRow {
        ConnectionRow {
            id: id.clone(),
            input_id: input.clone(),
            output_id: output.clone(),
            revision_id,
            settings: format!(r#"{{"status":"{status}"}}"#),
            created_at: 1,
            updated_at: 1,
        }
    }

    /// Everything a snapshot holds, in one comparable, ordered text.
    fn contents(snapshot: &Snapshot) -> Vec<String> {
        let mut lines: Vec<String> = snapshot
            .inputs_by_key
            .iter()
            .map(|(key, e)| format!("input {key} {} {}", e.id, e.secret))
            .chain(
                snapshot
                    .keys_by_input
                    .iter()
                    .map(|(id, key)| format!("key {id} {key}")),
            )
            .chain(snapshot.routes_by_input.iter().map(|(input, routes)| {
                let routes: Vec<String> = routes
                    .iter()
                    .map(|r| format!("{}@{}", r.connection_id, r.revision_id))
                    .collect();
                format!("routes {input} {routes:?}")
            }))
            .chain(
                snapshot
                    .inactive_by_input
                    .iter()
                    .map(|(input, ids)| format!("inactive {input} {ids:?}")),
            )
            .chain(
                snapshot
                    .connections
                    .iter()
                    .map(|(id, e)| format!("connection {id} {} {}", e.input_id, e.output_id)),
            )
            .chain(
                snapshot
                    .outputs
                    .iter()
                    .map(|(id, output)| format!("output {id} {:?}", output.settings)),
            )
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn changes_applied_one_by_one_leave_what_a_whole_read_gives() {
        let (a, b, d) = (InputId::new(), InputId::new(), InputId::new());
        let (o1, o2) = (OutputId::new(), OutputId::new());
        let (c1, c2, c3, c4) = (
            ConnectionId::new(),
            ConnectionId::new(),
            ConnectionId::new(),
            ConnectionId::new(),
        );
        let (mut snapshot, revisions) = Snapshot::of(
            vec![input(&a, "ka", "s1"), input(&b, "kb", "s2")],
            vec![output(&o1, "http://one/"), output(&o2, "http://two/")],
            vec![
                connection(&c1, &a, &o1, 1, "active"),
                connection(&c2, &a, &o2, 2, "inactive"),
                connection(&c3, &b, &o1, 3, "active"),
            ],
        );
        assert_eq!(revisions.len(), 3);

        assert!(
            snapshot
                .put_connection(connection(&c1, &a, &o1, 4, "inactive"))
                .is_some()
        );
        assert!(
            snapshot
                .put_connection(connection(&c2, &a, &o2, 5, "active"))
                .is_some()
        );
        snapshot.put_input(input(&a, "ka", "rotated"));
        snapshot.remove_connection(&c3);
        snapshot.remove_input(&b);
        snapshot.put_output(output(&o2, "http://two-moved/"));
        snapshot.put_input(input(&d, "kd", "s4"));
        assert!(
            snapshot
                .put_connection(connection(&c4, &d, &o2, 6, "active"))
                .is_some()
        );

        let (whole, _) = Snapshot::of(
            vec![input(&a, "ka", "rotated"), input(&d, "kd", "s4")],
            vec![output(&o1, "http://one/"), output(&o2, "http://two-moved/")],
            vec![
                connection(&c1, &a, &o1, 4, "inactive"),
                connection(&c2, &a, &o2, 5, "active"),
                connection(&c4, &d, &o2, 6, "active"),
            ],
        );
        assert_eq!(contents(&snapshot), contents(&whole));
        let routes: Vec<_> = snapshot.routes_by_input[&a]
            .iter()
            .map(|r| (r.connection_id.clone(), r.revision_id))
            .collect();
        assert_eq!(routes, [(c2, 5)]);
        assert_eq!(snapshot.inactive_by_input[&a], [c1]);
        assert_eq!(snapshot.inputs_by_key["ka"].secret, "rotated");
        assert!(!snapshot.inputs_by_key.contains_key("kb"));
        assert!(
            !snapshot.routes_by_input.contains_key(&b),
            "no empty lists stay"
        );
    }

    #[test]
    fn routes_keep_connection_id_order_whatever_order_changes_come_in() {
        let a = InputId::new();
        let o = OutputId::new();
        let mut ids: Vec<ConnectionId> = (0..4).map(|_| ConnectionId::new()).collect();
        ids.sort();
        let mut snapshot = Snapshot::default();
        for (revision, id) in ids.iter().enumerate().rev() {
            let revision = i64::try_from(revision).unwrap();
            snapshot.put_connection(connection(id, &a, &o, revision, "active"));
        }
        snapshot.put_connection(connection(&ids[1], &a, &o, 9, "active"));
        let order: Vec<_> = snapshot.routes_by_input[&a]
            .iter()
            .map(|r| r.connection_id.clone())
            .collect();
        assert_eq!(order, ids);
    }

    #[test]
    fn a_row_that_cannot_be_read_leaves_nothing_of_its_previous_version() {
        let a = InputId::new();
        let o = OutputId::new();
        let c = ConnectionId::new();
        let (mut snapshot, _) = Snapshot::of(
            vec![input(&a, "ka", "s")],
            vec![output(&o, "http://one/")],
            vec![connection(&c, &a, &o, 1, "active")],
        );
        let mut unreadable = connection(&c, &a, &o, 2, "active");
        unreadable.settings = "not json".to_owned();
        assert!(snapshot.put_connection(unreadable).is_none());
        assert!(!snapshot.connections.contains_key(&c));
        assert!(!snapshot.routes_by_input.contains_key(&a));

        let mut unknown = input(&a, "ka", "s");
        unknown.platform = "palm_os".to_owned();
        snapshot.put_input(unknown);
        assert!(snapshot.inputs_by_key.is_empty());

        let mut broken = output(&o, "x");
        broken.settings = "[]".to_owned();
        snapshot.put_output(broken);
        assert!(snapshot.outputs.is_empty());
    }
}
