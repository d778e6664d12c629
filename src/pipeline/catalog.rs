//! The in-memory catalog: inputs by API key, connections by input, outputs by id, and settings
//! revisions. Ingest authenticates and routes from it and delivery reads settings from it, so the
//! hot path never queries configuration tables.
//!
//! Every admin change reloads it before the admin API answers, which is what makes activation
//! immediate: the next event ingested after a save is routed by the new settings. With several
//! nodes on one PostgreSQL, each node also reloads periodically.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::model::Platform;
use crate::model::ids::{ConnectionId, InputId, OutputId};
use crate::model::settings::{
    ConnectionSettings, ConnectionStatus, InputSettings, WebhookSettings,
};
use crate::store::{Store, StoreError, StoreResult};

/// A connection a batch is routed to, with the settings revision current at acceptance.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) connection_id: ConnectionId,
    pub(crate) revision_id: i64,
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
}

#[derive(Debug, Default)]
struct Snapshot {
    inputs_by_key: HashMap<String, InputEntry>,
    routes_by_input: HashMap<InputId, Vec<Route>>,
    inactive_by_input: HashMap<InputId, Vec<ConnectionId>>,
    connections: HashMap<ConnectionId, ConnectionEntry>,
    outputs: HashMap<OutputId, Arc<WebhookSettings>>,
}

/// The catalog; shared by reference.
#[derive(Debug)]
pub(crate) struct Catalog {
    store: Store,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Settings revisions never change once written, so they are cached for good.
    revisions: Mutex<HashMap<i64, Arc<ConnectionSettings>>>,
    /// Serialises reloads, so an older read can never replace a newer snapshot.
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
        let inputs = self.store.list_inputs().await?;
        let outputs = self.store.list_outputs().await?;
        let connections = self.store.list_connections().await?;

        let mut snapshot = Snapshot::default();
        for input in inputs {
            let Some(platform) = Platform::parse(&input.platform) else {
                tracing::error!(input = %input.id, "Stored input has an unknown platform.");
                continue;
            };
            let settings = Arc::new(serde_json::from_str(&input.settings).unwrap_or_else(|error| {
                tracing::error!(input = %input.id, %error, "Stored input settings are unreadable; using defaults.");
                InputSettings::default()
            }));
            let entry = InputEntry {
                id: input.id,
                secret: input.api_secret,
                name: input.name,
                platform,
                settings,
            };
            snapshot.inputs_by_key.insert(input.api_key, entry);
        }
        for output in outputs {
            match serde_json::from_str::<WebhookSettings>(&output.settings) {
                Ok(settings) => {
                    snapshot.outputs.insert(output.id, Arc::new(settings));
                }
                Err(error) => {
                    tracing::error!(output = %output.id, %error, "Stored output settings are unreadable.")
                }
            }
        }
        let mut revisions = Vec::new();
        for row in connections {
            let settings = match ConnectionSettings::from_json_str(&row.settings) {
                Ok(settings) => Arc::new(settings),
                Err(error) => {
                    tracing::error!(connection = %row.id, %error, "Stored connection settings are unreadable.");
                    continue;
                }
            };
            if settings.status == ConnectionStatus::Active {
                let route = Route {
                    connection_id: row.id.clone(),
                    revision_id: row.revision_id,
                };
                snapshot
                    .routes_by_input
                    .entry(row.input_id.clone())
                    .or_default()
                    .push(route);
            } else {
                snapshot
                    .inactive_by_input
                    .entry(row.input_id.clone())
                    .or_default()
                    .push(row.id.clone());
            }
            revisions.push((row.revision_id, settings));
            let entry = ConnectionEntry {
                input_id: row.input_id.clone(),
                output_id: row.output_id,
            };
            snapshot.connections.insert(row.id, entry);
        }
        self.remember_revisions(revisions);
        *self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
        Ok(())
    }

    fn current(&self) -> Arc<Snapshot> {
        Arc::clone(
            &self
                .snapshot
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn remember_revisions(&self, revisions: Vec<(i64, Arc<ConnectionSettings>)>) {
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

    /// Connections set to inactive: their deliveries are paused, so their jobs wait in the table.
    pub(crate) fn paused_connections(&self) -> Vec<ConnectionId> {
        self.current()
            .inactive_by_input
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Whether a connection is set to inactive (its deliveries wait until it is active again).
    pub(crate) fn is_paused(&self, id: &ConnectionId) -> bool {
        self.current()
            .inactive_by_input
            .values()
            .any(|connections| connections.contains(id))
    }

    /// A connection and its output's settings, if both still exist.
    pub(crate) fn connection(
        &self,
        id: &ConnectionId,
    ) -> Option<(ConnectionEntry, Arc<WebhookSettings>)> {
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
