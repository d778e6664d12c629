//! What the HTTP handlers share. It sits below every handler module and imports none of them,
//! so the router (in `server`) can import the handlers without an import circle.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::access::{AdminAccess, NewUserLimits};
use crate::config::Config;
use crate::delivery::webhook::WebhookClient;
use crate::live::LiveStream;
use crate::pipeline::Pipeline;
use crate::pipeline::catalog::Catalog;
use crate::store::Store;
use crate::telemetry::Metrics;

/// The handlers' shared state; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) config: Arc<Config>,
    /// Reads and admin writes; ingest goes through the pipeline.
    pub(crate) store: Store,
    pub(crate) pipeline: Pipeline,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) access: Arc<AdminAccess>,
    /// How many users IDSync may still create for public-key callers.
    pub(crate) new_users: Arc<NewUserLimits>,
    pub(crate) live: Arc<LiveStream>,
    /// Cancelled when shutdown begins, so long-lived responses (the Live Stream) end and the
    /// server can drain.
    pub(crate) stopping: CancellationToken,
    /// For replays requested from the admin API.
    pub(crate) webhooks: WebhookClient,
    /// Rung when the admin API starts a replay, for this node's replay driver.
    pub(crate) replay_wake: crate::replay::Wake,
}

impl AppState {
    /// Inputs, outputs and connections as the hot path sees them.
    pub(crate) fn catalog(&self) -> &Arc<Catalog> {
        self.pipeline.catalog()
    }
}
