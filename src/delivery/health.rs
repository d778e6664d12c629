//! Connection health across nodes: failing spells, auto-pause, and the operator alerts they
//! raise (see [`super::alerts`] for the sending).
//!
//! A connection is failing from its first failed request with no success since. Each lane keeps
//! its spell ([`Spell`], pure); when its breaker opens the spell is written to the database
//! (`connection_health.failing_since_ms`, only if not failing already), and its first success
//! clears it. Both are conditional statements, so with several nodes exactly one wins each
//! transition and sends `connection.failing` or `connection.recovered`. Every second, every
//! node looks for connections failing longer than their `auto_pause_after_hours` and tries to
//! pause them (again one wins: `Store::pause_connection`), which sends `connection.paused`.
//! Dead letters are counted per connection in memory and announced at most once per
//! `alerts.window_secs` per connection (a window claimed in the database, so across nodes
//! too; a node that loses the claim keeps its count for the next window). Backlogs are counted
//! every `alerts.backlog_check_secs`, with the same window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::alerts::OperatorAlerts;
use super::breaker::Transition;
use crate::config::AlertsConfig;
use crate::model::ids::ConnectionId;
use crate::model::now_ms;
use crate::model::operator_event::AlertKind;
use crate::model::settings::{ConnectionSettings, ConnectionStatus};
use crate::pipeline::catalog::Catalog;
use crate::store::Store;
use crate::store::health_sql::{AlertWindow, PauseRevision};
use crate::store::queue::JobUpdate;

/// How often pauses and dead-letter alerts are looked at.
const TICK: Duration = Duration::from_secs(1);

/// What one node's lane knows of its connection's failing spell.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) enum Spell {
    /// Nothing seen yet (a new lane): the first success asks the store whether a spell ended.
    #[default]
    Unknown,
    Healthy,
    Failing {
        since_ms: i64,
        last_error: String,
        /// Whether it was written to the store (done once, when the breaker opens).
        recorded: bool,
    },
}

impl Spell {
    /// A request found the endpoint working; true if a spell may have ended with it.
    pub(super) fn succeeded(&mut self) -> bool {
        let ended = *self != Self::Healthy;
        *self = Self::Healthy;
        ended
    }

    /// A request failed at `now_ms` with `error`.
    pub(super) fn failed(&mut self, now_ms: i64, error: String) {
        match self {
            Self::Failing { last_error, .. } => *last_error = error,
            _ => {
                *self = Self::Failing {
                    since_ms: now_ms,
                    last_error: error,
                    recorded: false,
                }
            }
        }
    }

    /// The spell to record, once: its start and last error.
    pub(super) fn take_unrecorded(&mut self) -> Option<(i64, String)> {
        match self {
            Self::Failing {
                since_ms,
                last_error,
                recorded: recorded @ false,
            } => {
                *recorded = true;
                Some((*since_ms, last_error.clone()))
            }
            _ => None,
        }
    }
}

/// Health tracking and alerting, shared by every lane of this node.
#[derive(Debug)]
pub(crate) struct Health {
    store: Store,
    catalog: Arc<Catalog>,
    alerts: OperatorAlerts,
    config: AlertsConfig,
    /// Dead letters not announced yet, per connection.
    dead_letters: Mutex<HashMap<ConnectionId, i64>>,
}

impl Health {
    pub(crate) fn new(
        store: Store,
        catalog: Arc<Catalog>,
        alerts: OperatorAlerts,
        config: AlertsConfig,
    ) -> Self {
        Self {
            store,
            catalog,
            alerts,
            config,
            dead_letters: Mutex::new(HashMap::new()),
        }
    }

    /// Takes note of how a job ended on `connection_id` (`answered`: whether the endpoint
    /// worked, if a request was made) and of what it did to the breaker. Never waits: what
    /// needs the store runs in a task of its own.
    pub(super) fn observe(
        self: &Arc<Self>,
        connection_id: &ConnectionId,
        update: &JobUpdate,
        answered: Option<bool>,
        transition: Transition,
        spell: &Mutex<Spell>,
    ) {
        self.count_dead_letters(connection_id, update);
        let mut spell = spell.lock().unwrap_or_else(PoisonError::into_inner);
        match answered {
            Some(true) if spell.succeeded() => {
                let (health, id) = (Arc::clone(self), connection_id.clone());
                tokio::spawn(async move { health.recovered(&id).await });
            }
            Some(false) => spell.failed(now_ms(), last_error(update)),
            _ => {}
        }
        if transition == Transition::Opened
            && let Some((since_ms, error)) = spell.take_unrecorded()
        {
            let (health, id) = (Arc::clone(self), connection_id.clone());
            tokio::spawn(async move { health.failing(&id, since_ms, &error).await });
        }
    }

    fn count_dead_letters(&self, connection_id: &ConnectionId, update: &JobUpdate) {
        let dead = match update {
            JobUpdate::Finished { dead, .. } | JobUpdate::Retry { dead, .. } => dead.len(),
            JobUpdate::Release { .. } => 0,
        };
        if dead == 0 || !self.alerts.enabled() {
            return;
        }
        let mut pending = self.pending();
        *pending.entry(connection_id.clone()).or_default() += i64::try_from(dead).unwrap_or(0);
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<ConnectionId, i64>> {
        self.dead_letters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn failing(&self, id: &ConnectionId, since_ms: i64, error: &str) {
        match self.store.mark_failing(id, since_ms, error).await {
            Ok(true) => {
                tracing::warn!(connection = %id, "Connection failing.");
                let details =
                    details([("since_ms", json!(since_ms)), ("last_error", json!(error))]);
                self.alerts.send(AlertKind::ConnectionFailing, id, details);
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(connection = %id, %error, "Could not record a failing connection.")
            }
        }
    }

    async fn recovered(&self, id: &ConnectionId) {
        match self.store.mark_recovered(id).await {
            Ok(Some(since_ms)) => {
                tracing::info!(connection = %id, "Connection recovered.");
                let failed_for = now_ms().saturating_sub(since_ms);
                let details = details([
                    ("since_ms", json!(since_ms)),
                    ("failed_for_ms", json!(failed_for)),
                ]);
                self.alerts
                    .send(AlertKind::ConnectionRecovered, id, details);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(connection = %id, %error, "Could not record a recovered connection.")
            }
        }
    }

    /// Runs the periodic checks until `cancel`; then announces the dead letters counted and
    /// not yet announced, so a shutdown does not swallow them (queued, they are sent before
    /// the process exits).
    pub(crate) async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let backlog_every = Duration::from_secs(self.config.backlog_check_secs);
        let mut next_backlog = tokio::time::Instant::now() + backlog_every;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(TICK) => {}
            }
            if let Err(error) = self.pause_long_failing().await {
                tracing::warn!(%error, "Could not check connections for auto-pause.");
            }
            if !self.alerts.enabled() {
                continue;
            }
            self.announce_dead_letters().await;
            if tokio::time::Instant::now() >= next_backlog {
                next_backlog += backlog_every;
                if let Err(error) = self.announce_backlogs().await {
                    tracing::warn!(%error, "Could not count backlogs.");
                }
            }
        }
        if self.alerts.enabled() {
            self.announce_dead_letters().await;
        }
    }

    /// Pauses the connections that have failed longer than their `auto_pause_after_hours`.
    /// Asks the store only if this node knows a connection with the setting: another node's
    /// newer one is paused by that node, and by this one once its catalog has it.
    async fn pause_long_failing(&self) -> Result<(), crate::store::StoreError> {
        if !self.catalog.any_auto_pause() {
            return Ok(());
        }
        let now = now_ms();
        for (id, since_ms) in self.store.unpaused_failing().await? {
            let Some(after_ms) = self.catalog.auto_pause_ms(&id) else {
                continue;
            };
            if now.saturating_sub(since_ms) >= after_ms {
                self.pause(&id, now, after_ms).await?;
            }
        }
        Ok(())
    }

    async fn pause(
        &self,
        id: &ConnectionId,
        now: i64,
        after_ms: i64,
    ) -> Result<(), crate::store::StoreError> {
        let row = self.store.get_connection(id).await?;
        let Ok(mut settings) = ConnectionSettings::from_json_str(&row.settings) else {
            return Ok(());
        };
        if settings.status != ConnectionStatus::Active {
            return Ok(());
        }
        settings.status = ConnectionStatus::Paused;
        let Ok(paused_settings) = serde_json::to_string(&settings) else {
            return Ok(());
        };
        let revision = PauseRevision {
            current_revision: row.revision_id,
            paused_settings: &paused_settings,
        };
        let failing_by = now.saturating_sub(after_ms);
        let Some(paused) = self
            .store
            .pause_connection(id, failing_by, revision, now)
            .await?
        else {
            return Ok(());
        };
        tracing::warn!(connection = %id, "Connection paused after failing for auto_pause_after_hours; its deliveries wait until it is set active.");
        // This node stops at once; the others follow the catalog change.
        self.catalog.reload().await?;
        let details = details([
            ("since_ms", json!(paused.failing_since_ms)),
            ("last_error", json!(paused.last_error)),
            (
                "auto_pause_after_hours",
                json!(settings.auto_pause_after_hours),
            ),
        ]);
        self.alerts.send(AlertKind::ConnectionPaused, id, details);
        Ok(())
    }

    /// At shutdown, once the last request in flight has ended: the dead letters counted after
    /// `run` said its last (those of requests still in flight then).
    pub(crate) async fn announce_remaining(&self) {
        if self.alerts.enabled() {
            self.announce_dead_letters().await;
        }
    }

    /// Sends the dead-letter counts whose connection's window is free, keeping the others.
    async fn announce_dead_letters(&self) {
        let counts: Vec<(ConnectionId, i64)> = self
            .pending()
            .iter()
            .map(|(id, n)| (id.clone(), *n))
            .collect();
        let now = now_ms();
        for (id, count) in counts {
            match self.claim(&id, AlertWindow::DeadLetters, now).await {
                Ok(true) => {}
                Ok(false) => continue,
                Err(error) => {
                    tracing::warn!(connection = %id, %error, "Could not claim a dead-letter alert window.");
                    continue;
                }
            }
            {
                let mut pending = self.pending();
                // More may have been counted meanwhile: they wait for the next window.
                if let Some(left) = pending.get_mut(&id) {
                    *left -= count;
                    if *left <= 0 {
                        pending.remove(&id);
                    }
                }
            }
            let details = details([
                ("count", json!(count)),
                ("window_secs", json!(self.config.window_secs)),
            ]);
            self.alerts.send(AlertKind::DeadLetterCreated, &id, details);
        }
    }

    async fn announce_backlogs(&self) -> Result<(), crate::store::StoreError> {
        let threshold = i64::try_from(self.config.backlog_threshold).unwrap_or(i64::MAX);
        let now = now_ms();
        for (id, jobs) in self.store.backlogs(threshold).await? {
            if self.claim(&id, AlertWindow::Backlog, now).await? {
                let details = details([("jobs", json!(jobs)), ("threshold", json!(threshold))]);
                self.alerts
                    .send(AlertKind::BacklogOverThreshold, &id, details);
            }
        }
        Ok(())
    }

    async fn claim(
        &self,
        id: &ConnectionId,
        kind: AlertWindow,
        now: i64,
    ) -> Result<bool, crate::store::StoreError> {
        let window_ms =
            i64::try_from(self.config.window_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        self.store
            .claim_alert_window(id, kind, now, now.saturating_sub(window_ms))
            .await
    }
}

/// The last error a job's attempt reported.
fn last_error(update: &JobUpdate) -> String {
    let attempt = match update {
        JobUpdate::Finished { attempt, .. } | JobUpdate::Retry { attempt, .. } => attempt,
        JobUpdate::Release { .. } => return String::new(),
    };
    match (&attempt.error, attempt.status) {
        (Some(error), _) => error.clone(),
        (None, Some(status)) => format!("the receiver answered {status}"),
        (None, None) => String::new(),
    }
}

fn details<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spell_starts_at_the_first_failure_and_is_recorded_once() {
        let mut spell = Spell::default();
        assert!(spell.take_unrecorded().is_none());
        spell.failed(10, "503".into());
        spell.failed(20, "timeout".into());
        assert_eq!(spell.take_unrecorded(), Some((10, "timeout".into())));
        assert_eq!(spell.take_unrecorded(), None, "once");
        assert!(spell.succeeded());
        assert!(!spell.succeeded(), "a second success ends nothing");
        spell.failed(30, "503".into());
        assert_eq!(spell.take_unrecorded(), Some((30, "503".into())));
    }

    #[test]
    fn a_new_lane_asks_at_its_first_success() {
        assert!(Spell::default().succeeded());
    }
}
