//! The operator webhook (`operator_webhook_url`): alerts are queued here and posted by one
//! background task, in order, signed like an output's requests (Standard Webhooks, with
//! `operator_webhook_secret`), each retried a few times with a growing pause.
//!
//! Nothing here can slow delivery: queueing never waits (a full queue drops the alert, logged),
//! the task has a client of its own, and a failing operator endpoint only delays other alerts.
//!
//! At shutdown the alerts still queued are sent, not dropped: once delivery has stopped (so no
//! more can be queued) the task posts what is left and ends, or gives up at the shutdown
//! deadline, logging how many it could not send.
//! The client allows private addresses: the URL comes from the operator's configuration, not
//! from the admin API, and an alerting endpoint on the internal network is the common case.

use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::webhook::WebhookClient;
use crate::model::ids::ConnectionId;
use crate::model::now_ms;
use crate::model::operator_event::{AlertKind, AlertSubject, OperatorAlert};
use crate::model::settings::WebhookSettings;
use crate::model::signing::{Signer, SigningKey};
use crate::pipeline::output::Output;
use crate::store::Store;

/// Alerts queued and not yet sent; beyond this new ones are dropped (and logged).
const QUEUE: usize = 1024;
/// Tries per alert, and the pause before the second (doubling after each failure).
const TRIES: u32 = 6;
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// An alert waiting to be sent: its kind, its connection and what it says beyond them.
type Queued = (AlertKind, ConnectionId, Map<String, Value>);

/// Where alerts are queued; does nothing when no operator webhook is configured.
#[derive(Debug, Clone)]
pub(crate) struct OperatorAlerts {
    queue: Option<mpsc::Sender<Queued>>,
}

/// The operator webhook's address and secret, as configured.
#[derive(Debug)]
pub(crate) struct OperatorWebhook<'a> {
    pub(crate) url: &'a str,
    pub(crate) secret: Option<&'a str>,
    pub(crate) timeout: Duration,
}

impl OperatorAlerts {
    /// No operator webhook: alerts go nowhere.
    pub(crate) fn disabled() -> Self {
        Self { queue: None }
    }

    /// Starts the task that posts alerts to `webhook`; `store` gives the names of the
    /// connections alerts are about. Once `closing` is cancelled the task sends what is queued
    /// and ends; `overdue` (the shutdown deadline) ends it even with alerts left. Await the
    /// handle to let it finish.
    pub(crate) fn start(
        webhook: &OperatorWebhook<'_>,
        store: Store,
        closing: CancellationToken,
        overdue: CancellationToken,
    ) -> anyhow::Result<(Self, JoinHandle<()>)> {
        let settings = WebhookSettings::parse(serde_json::json!({ "url": webhook.url }))
            .map_err(|e| anyhow::anyhow!("operator_webhook_url: {e}"))?;
        let signer = match webhook.secret {
            Some(secret) => Some(Signer::new(
                SigningKey::from_secret(secret)
                    .map_err(|e| anyhow::anyhow!("operator_webhook_secret: {e}"))?,
                None,
            )),
            None => None,
        };
        let output = Output::new(settings, signer).map_err(|e| anyhow::anyhow!(e))?;
        let client = WebhookClient::new(true, webhook.timeout)?;
        let (queue, alerts) = mpsc::channel(QUEUE);
        let task = tokio::spawn(post_alerts(client, output, store, alerts, closing, overdue));
        Ok((Self { queue: Some(queue) }, task))
    }

    /// Whether alerts go anywhere (work that only feeds alerts can be skipped otherwise).
    pub(crate) fn enabled(&self) -> bool {
        self.queue.is_some()
    }

    /// Queues an alert about `connection`, without waiting.
    pub(crate) fn send(
        &self,
        kind: AlertKind,
        connection: &ConnectionId,
        details: Map<String, Value>,
    ) {
        let Some(queue) = &self.queue else {
            return;
        };
        if queue.try_send((kind, connection.clone(), details)).is_err() {
            tracing::warn!(alert = kind.as_str(), connection = %connection, "The operator alert queue is full; an alert was dropped.");
        }
    }
}

/// Posts each queued alert in turn, retrying it until it is accepted or its tries run out;
/// after `closing`, until the queue is empty (or `overdue`).
async fn post_alerts(
    client: WebhookClient,
    output: Output,
    store: Store,
    mut alerts: mpsc::Receiver<Queued>,
    closing: CancellationToken,
    overdue: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = overdue.cancelled() => return given_up(&alerts, 0),
            next = alerts.recv() => next,
            // Delivery has stopped and nothing is queued: nothing more can come.
            () = closing.cancelled() => alerts.try_recv().ok(),
        };
        let Some((kind, connection_id, details)) = next else {
            return;
        };
        let names = store.connection_names(&connection_id).await.ok().flatten();
        let (input_name, output_name) = names.unzip();
        let alert = OperatorAlert {
            kind,
            subject: AlertSubject {
                connection_id,
                input_name,
                output_name,
            },
            details,
        };
        tokio::select! {
            // The post first: one that has just ended was sent, not given up.
            biased;
            () = post_one(&client, &output, &alert) => {}
            () = overdue.cancelled() => return given_up(&alerts, 1),
        }
    }
}

/// Logs the alerts left unsent at the shutdown deadline: those queued and `in_hand`.
fn given_up(alerts: &mpsc::Receiver<Queued>, in_hand: usize) {
    let left = alerts.len() + in_hand;
    if left > 0 {
        tracing::warn!(
            alerts = left,
            "The shutdown deadline has passed; operator alerts not yet sent are dropped."
        );
    }
}

async fn post_one(client: &WebhookClient, output: &Output, alert: &OperatorAlert) {
    // One message id for every try: receivers de-duplicate by it (Standard Webhooks).
    let id = format!("msg_{}", uuid::Uuid::now_v7().simple());
    let mut pause = FIRST_PAUSE;
    for attempt in 1..=TRIES {
        let body = alert.body(now_ms());
        let problem = match client.post(output, &id, body.into()).await {
            Ok(answer) if (200..300).contains(&answer.status) => return,
            Ok(answer) => format!("answered {}", answer.status),
            Err(error) => error.to_string(),
        };
        tracing::warn!(
            alert = alert.kind.as_str(),
            attempt,
            problem,
            "The operator webhook did not accept an alert."
        );
        if attempt < TRIES {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }
    tracing::error!(alert = alert.kind.as_str(), connection = %alert.subject.connection_id, "An operator alert was given up on.");
}
