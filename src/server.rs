//! Wiring: the router, and `run`, which starts the writer, the pipeline, delivery and the HTTP
//! server and stops them in order on shutdown.
//!
//! Shutdown has a deadline (`shutdown_deadline_secs`), counted from the signal: requests and
//! webhook deliveries in flight get until then to finish. At the deadline the HTTP connections
//! still open are cut ([`connections`]), so a slow or stalled client cannot hold the process, and the
//! deliveries still waiting for an answer are released to the table (see `delivery::run`).
//! Operator alerts still queued once delivery has stopped are sent within the same deadline. The
//! writer then commits what it was sent, closes its connection and ends its thread, within
//! [`WRITER_DRAIN`]. The data catalog's tally and the charts' figures are then written one last
//! time (each wait bounded by [`WRITER_DRAIN`]), and the background checkpoint and the pool are
//! closed (each within [`POOL_CLOSE`]). So the process exits within the deadline plus at most
//! about a minute of bounded waits, each of which normally takes milliseconds.
//! Every SQLite connection is closed before the process exits (the writer's, the background
//! checkpoint's, then the pool's), so the last one to close copies the WAL back and deletes it.

mod body_deadline;
mod connections;
mod headers;
mod minutes;
mod prune;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;
use rand::RngCore;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

use crate::access::{AdminAccess, NewUserCaps, NewUserLimits, Peer, hash_token};
use crate::admin;
use crate::config::{Config, HttpConfig};
use crate::delivery::alerts::{OperatorAlerts, OperatorWebhook};
use crate::delivery::health::Health;
use crate::delivery::webhook::WebhookClient;
use crate::delivery::{self, Crowded, DeliveryContext};
use crate::ingest;
use crate::live::LiveStream;
use crate::pipeline::catalog::Catalog;
use crate::pipeline::{Pipeline, data_catalog};
use crate::state::AppState;
use crate::store::Store;
use crate::store::writer::{Writer, WriterTask};
use crate::telemetry::Metrics;

const ADMIN_TOKEN_HASH_KEY: &str = "admin_token_sha256";
/// How long shutdown waits for the writer to commit what it holds.
const WRITER_DRAIN: Duration = Duration::from_secs(10);
/// How long the HTTP server gets to wind down once its connections were cut at the deadline
/// (a handler that is not waiting on its client, e.g. on a commit, still runs to its end).
const CUT_GRACE: Duration = Duration::from_secs(2);
/// How long closing the database pool may take at the very end.
const POOL_CLOSE: Duration = Duration::from_secs(5);

/// The whole HTTP surface.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .merge(ingest::router(state.config.ingest.max_body_bytes))
        .merge(crate::identity::router(state.config.ingest.max_body_bytes))
        .merge(
            crate::dashboard::router()
                .merge(admin::router(state.clone()))
                .layer(axum::middleware::from_fn(headers::security_headers)),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if !state.pipeline.is_running() {
        (StatusCode::SERVICE_UNAVAILABLE, "writer stopped")
    } else if state.store.ping().await {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "database unavailable")
    }
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let (depth, oldest) = state.store.queue_stats().await.unwrap_or((0, None));
    let body = state.metrics.render(depth, oldest);
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
}

/// Runs Boson on `listener` until `shutdown` completes, then stops accepting requests, lets
/// requests and deliveries in flight finish until the shutdown deadline (queued deliveries are
/// released to the table at once, those still in flight at the deadline then) and commits what
/// the writer holds.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // One process-wide TLS provider for the webhook client and the HTTPS server (set once).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store = Store::connect(&config.database_url.0).await?;
    if !store.is_shared_by_nodes() {
        // One process owns an embedded database, so leases of a previous run are stale.
        let released = store
            .release_all_leases()
            .await
            .context("failed to release stale leases")?;
        if released > 0 {
            tracing::info!(
                released,
                "Pending deliveries of the previous run are resumed."
            );
        }
        let replays = store
            .release_all_replays()
            .await
            .context("failed to release stale replay leases")?;
        if replays > 0 {
            tracing::info!(replays, "Replays of the previous run are resumed.");
        }
    }
    let admin_token_hash = admin_token_hash(&config, &store).await?;
    let catalog = Arc::new(
        Catalog::load(store.clone())
            .await
            .context("failed to load the catalog")?,
    );
    let metrics = Arc::new(Metrics::new());
    let lease = Duration::from_secs(config.delivery.lease_secs);
    let (committed, committed_jobs) = mpsc::unbounded_channel();
    let crowded = Arc::new(Crowded::default());
    let (writer, writer_task) = Writer::spawn(
        store.clone(),
        lease,
        committed,
        config.ingest.postgres_lanes,
        config.ingest.commit_gather(),
    );
    // Kept to flush the writer at the end: other handles may outlive the deadline.
    let flusher = writer.clone();
    let client = WebhookClient::new(
        config.allow_private_destinations,
        Duration::from_secs(config.delivery.request_timeout_secs),
    )
    .context("failed to build the webhook client")?;
    let webhooks = client.clone();
    let live = Arc::new(LiveStream::default());
    let pipeline = Pipeline::new(
        Arc::clone(&catalog),
        writer.clone(),
        Arc::clone(&live),
        Arc::clone(&metrics),
        Arc::clone(&crowded) as _,
        config.ingest.max_events_per_batch,
    );
    let cancel = CancellationToken::new();
    // Cancelled when the shutdown deadline has passed.
    let overdue = CancellationToken::new();
    // Cancelled once delivery has stopped: the alerts still queued are sent, then the task ends.
    let alerts_closing = CancellationToken::new();
    let (alerts, alerts_task) = operator_alerts(&config, &store, &alerts_closing, &overdue)?;
    let health = Arc::new(Health::new(
        store.clone(),
        Arc::clone(&catalog),
        alerts,
        config.alerts.clone(),
    ));
    // Before the first request: the catalog's caps count what earlier runs stored.
    let stored_points = store
        .data_point_keys()
        .await
        .context("failed to read the data catalog")?;
    pipeline.data_catalog().seed(stored_points);
    let ctx = Arc::new(DeliveryContext::new(
        Arc::clone(&catalog),
        store.clone(),
        client,
        writer,
        Arc::clone(&metrics),
        Arc::clone(&live),
        &config.delivery,
        health,
    ));
    let stopping = CancellationToken::new();
    let shutdown_deadline = Duration::from_secs(config.shutdown_deadline_secs);
    let deadline = tokio::spawn(count_down(
        stopping.clone(),
        shutdown_deadline,
        overdue.clone(),
    ));
    let delivery = tokio::spawn(delivery::run(
        ctx,
        config.delivery.clone(),
        committed_jobs,
        crowded,
        cancel.clone(),
        overdue.clone(),
    ));
    // Other nodes' catalog changes (PostgreSQL); nothing to follow on SQLite.
    tokio::spawn(Arc::clone(&catalog).follow_changes(cancel.clone()));
    // Replays by time range: this node drives those no other node drives.
    let replay_wake = crate::replay::Wake::default();
    let replays = tokio::spawn(crate::replay::run(
        store.clone(),
        webhooks.clone(),
        replay_wake.clone(),
        cancel.clone(),
    ));
    let data_catalog = Arc::clone(pipeline.data_catalog());
    let data_catalog_flusher = tokio::spawn(data_catalog::flush_periodically(
        Arc::clone(&data_catalog),
        store.clone(),
        cancel.clone(),
    ));
    let minutes_flusher = tokio::spawn(minutes::flush_periodically(
        Arc::clone(&metrics),
        store.clone(),
        cancel.clone(),
    ));
    // SQLite: the WAL is copied back here rather than inside the writer's commits.
    let checkpoints = tokio::spawn(crate::store::checkpoint::checkpoint_periodically(
        store.clone(),
        cancel.clone(),
    ));
    tokio::spawn(prune::prune_periodically(
        store.clone(),
        flusher.clone(),
        config.retention.clone(),
        cancel.clone(),
    ));

    let shutdown = {
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            stopping.cancel();
        }
    };
    let new_users = NewUserLimits::new(NewUserCaps {
        per_input: config.identity.max_new_users_per_input,
        per_client: config.identity.max_new_users_per_client,
        window: Duration::from_secs(config.identity.new_user_window_secs.max(1)),
    });
    // Kept for the last flush: the state (and its handle) is gone by then.
    let metrics_for_flush = Arc::clone(&metrics);
    let state = AppState {
        config: Arc::new(config),
        store: store.clone(),
        pipeline,
        metrics,
        access: Arc::new(AdminAccess::new(admin_token_hash, store.clone())),
        new_users: Arc::new(new_users),
        live: Arc::clone(&live),
        stopping: stopping.clone(),
        webhooks,
        replay_wake,
    };
    let tls = match (&state.config.tls_cert, &state.config.tls_key) {
        (Some(cert), Some(key)) => Some(
            RustlsConfig::from_pem_file(cert, key)
                .await
                .context("failed to load the TLS certificate and key")?,
        ),
        _ => None,
    };
    announce(listener.local_addr().ok(), tls.is_some());
    let http = state.config.http.clone();
    let (listener, app) = guarded(listener, router(state), &http, &overdue);
    let header_read = Duration::from_secs(http.header_read_timeout_secs);
    let server = serve(listener, app, tls, header_read, shutdown, shutdown_deadline);
    let served = finish_by(server, &overdue).await;

    tracing::info!("Shutting down: delivering or releasing in-flight work.");
    cancel.cancel();
    delivery.await.context("delivery task failed")?;
    // Before the deadline's countdown stops: it bounds the last alerts and the replay step in
    // hand. A replay abandoned at the deadline keeps its lease, and is resumed when it ends.
    alerts_closing.cancel();
    if let Some(alerts_task) = alerts_task {
        let _ = alerts_task.await;
    }
    tokio::select! {
        // The replays' end first: once both have come, no step was abandoned.
        biased;
        _ = replays => {}
        () = overdue.cancelled() => tracing::warn!("The shutdown deadline has passed; a replay step in flight is abandoned."),
    }
    deadline.abort();
    drain_writer(&flusher, writer_task).await;
    // After the last request recorded its data points; a periodic flush still writing is
    // waited for (within the drain), so the two do not write the same rows at once.
    let _ = tokio::time::timeout(WRITER_DRAIN, data_catalog_flusher).await;
    let flushed = tokio::time::timeout(WRITER_DRAIN, data_catalog.flush(&store)).await;
    if !matches!(flushed, Ok(true)) {
        tracing::warn!("The data catalog's last counts could not be stored.");
    }
    let _ = tokio::time::timeout(WRITER_DRAIN, minutes_flusher).await;
    let flushed =
        tokio::time::timeout(WRITER_DRAIN, minutes::flush(&metrics_for_flush, &store)).await;
    if !matches!(flushed, Ok(true)) {
        tracing::warn!("The last per-minute figures could not be stored.");
    }
    // Its connection closed (it stopped at `cancel`), so that the pool's last connection is the
    // database's last, which copies the WAL back and deletes it.
    let _ = tokio::time::timeout(POOL_CLOSE, checkpoints).await;
    if tokio::time::timeout(POOL_CLOSE, store.close())
        .await
        .is_err()
    {
        tracing::warn!("Closing the database connections took too long; they are dropped.");
    }
    served.context("HTTP server failed")
}

/// Cancels `overdue` once `deadline` has passed since shutdown began (`stopping`).
async fn count_down(stopping: CancellationToken, deadline: Duration, overdue: CancellationToken) {
    stopping.cancelled().await;
    tokio::time::sleep(deadline).await;
    overdue.cancel();
}

/// The listener and the app held to the `[http]` limits: the connection cap, the idle timeout
/// and the cut at the deadline (`overdue`) on every connection, the body deadline on every
/// request.
fn guarded(
    listener: TcpListener,
    app: Router,
    http: &HttpConfig,
    overdue: &CancellationToken,
) -> (connections::GuardedListener, Router) {
    let guards = connections::Guards {
        max_connections: http.max_connections,
        idle: Duration::from_secs(http.idle_timeout_secs),
        cut: overdue.clone(),
    };
    let app = app.layer(axum::middleware::from_fn_with_state(
        Duration::from_secs(http.body_read_timeout_secs),
        body_deadline::limit_body_time,
    ));
    (connections::GuardedListener::new(listener, guards), app)
}

/// Serves HTTP, or HTTPS with `tls`, on the guarded `listener` (connection cap, idle timeout,
/// the cut at the deadline). hyper closes a connection that has not sent a complete request head
/// within `header_read` (it needs a timer for that, which axum's own `serve` cannot be given).
/// On `shutdown`, stops accepting and lets requests in flight finish for `grace` (the shutdown
/// deadline), after which the connections left are dropped.
async fn serve(
    listener: connections::GuardedListener,
    app: Router,
    tls: Option<RustlsConfig>,
    header_read: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::<connections::GuardedAddr>::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(grace));
    });
    let mut server = axum_server::Server::from_listener(listener).handle(handle);
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read);
    // The peer's address, for the sign-in throttle.
    let app = app.into_make_service_with_connect_info::<Peer>();
    match tls {
        None => server.serve(app).await,
        Some(tls) => {
            let tls = axum_server::tls_rustls::RustlsAcceptor::new(tls);
            server.acceptor(tls).serve(app).await
        }
    }
}

/// Says where Boson answers, as URLs a person can open: the server's and the dashboard's.
fn announce(address: Option<SocketAddr>, https: bool) {
    let Some(address) = address else {
        tracing::info!("Boson is listening.");
        return;
    };
    let base = base_url(address, https);
    tracing::info!("Boson is listening on {base}");
    tracing::info!("Dashboard: {base}/ (sign in with the admin token)");
}

/// `scheme://host:port`; a wildcard address (listening on every interface) is shown as the
/// loopback one, which a browser on the same machine can open.
fn base_url(address: SocketAddr, https: bool) -> String {
    let scheme = if https { "https" } else { "http" };
    let mut shown = address;
    if address.ip().is_unspecified() {
        shown.set_ip(match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("{scheme}://{shown}")
}

/// Waits for the HTTP server to finish, but once `overdue` has fired (its connections are being
/// cut) for at most [`CUT_GRACE`] more: a handler that never ends must not hold the process.
async fn finish_by(
    server: impl Future<Output = std::io::Result<()>>,
    overdue: &CancellationToken,
) -> std::io::Result<()> {
    let mut server = std::pin::pin!(server);
    tokio::select! {
        // The server's end first: once both have come, nothing is left to drop.
        biased;
        served = &mut server => return served,
        () = overdue.cancelled() => {}
    }
    tracing::warn!("The shutdown deadline has passed; HTTP connections still open are dropped.");
    match tokio::time::timeout(CUT_GRACE, server).await {
        Ok(served) => served,
        Err(_) => {
            tracing::warn!("HTTP requests still running after the deadline are abandoned.");
            Ok(())
        }
    }
}

/// Commits what the writer was sent, then stops it, all within [`WRITER_DRAIN`]. The writer
/// answers an ingest only after committing every command queued before it, so an empty one
/// marks the end of the work sent so far. Handles held by requests or deliveries abandoned at
/// the deadline would keep the writer alive, so it is told to stop: it finishes the group in
/// hand, closes its connection and (SQLite) ends its thread, which this waits for. Whatever
/// those handles send from now on is not committed, which is safe: their jobs were released
/// (or stay leased) and are delivered again after a restart.
async fn drain_writer(writer: &Writer, task: WriterTask) {
    let by = tokio::time::Instant::now() + WRITER_DRAIN;
    let flushed = tokio::time::timeout_at(by, writer.flush()).await;
    if !matches!(flushed, Ok(Ok(_))) {
        tracing::warn!(
            "The writer did not drain in time; uncommitted job updates will be redone after restart."
        );
    }
    let left = by.saturating_duration_since(tokio::time::Instant::now());
    if !task.stop(left).await {
        tracing::warn!(
            "The writer did not stop in time; its connection is left to the process's exit."
        );
    }
}

/// The operator webhook's sender, or one that sends nothing when none is configured.
fn operator_alerts(
    config: &Config,
    store: &Store,
    closing: &CancellationToken,
    overdue: &CancellationToken,
) -> anyhow::Result<(OperatorAlerts, Option<JoinHandle<()>>)> {
    let Some(url) = &config.operator_webhook_url else {
        return Ok((OperatorAlerts::disabled(), None));
    };
    let secret = config
        .operator_webhook_secret
        .as_ref()
        .map(secrecy::ExposeSecret::expose_secret);
    if secret.is_none() {
        tracing::warn!("operator_webhook_secret is unset: operator alerts are sent unsigned.");
    }
    let webhook = OperatorWebhook {
        url,
        secret,
        timeout: Duration::from_secs(config.delivery.request_timeout_secs),
    };
    let (alerts, task) =
        OperatorAlerts::start(&webhook, store.clone(), closing.clone(), overdue.clone())
            .context("failed to start the operator webhook")?;
    Ok((alerts, Some(task)))
}

/// Where the admin token in force came from, said at start-up so a person knows what to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenOrigin {
    Generated,
    Configured,
    Kept,
}

impl TokenOrigin {
    fn describe(self) -> &'static str {
        match self {
            Self::Generated => "generated now and printed once above; only its hash is stored",
            Self::Configured => "from BOSON_ADMIN_TOKEN (or admin_token in the config file)",
            Self::Kept => {
                "kept from an earlier start (printed then; set BOSON_ADMIN_TOKEN to replace it)"
            }
        }
    }
}

/// The admin token's hash: from config, else the stored one, else a new token that is stored
/// (hashed) and printed this once.
async fn admin_token_hash(config: &Config, store: &Store) -> anyhow::Result<[u8; 32]> {
    let (hash, origin) = resolve_admin_token(config, store).await?;
    tracing::info!("Admin token: {}.", origin.describe());
    Ok(hash)
}

async fn resolve_admin_token(
    config: &Config,
    store: &Store,
) -> anyhow::Result<([u8; 32], TokenOrigin)> {
    use secrecy::ExposeSecret;
    let stored = store.get_meta(ADMIN_TOKEN_HASH_KEY).await?;
    if let Some(token) = &config.admin_token {
        let hash = hash_token(token.expose_secret());
        // The stored token keeps working again once the setting is removed; a person who
        // forgot they set it would otherwise wonder why the generated one is refused.
        if stored.is_some_and(|s| decode_hash(&s).ok() != Some(hash)) {
            tracing::warn!(
                "BOSON_ADMIN_TOKEN replaces the admin token generated on an earlier start; \
                 that one is refused while the setting is in force."
            );
        }
        return Ok((hash, TokenOrigin::Configured));
    }
    if let Some(stored) = stored {
        return Ok((decode_hash(&stored)?, TokenOrigin::Kept));
    }
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    let token = hex::encode(bytes);
    let stored = store
        .init_meta(ADMIN_TOKEN_HASH_KEY, &hex::encode(hash_token(&token)))
        .await?;
    let hash = decode_hash(&stored)?;
    if hash != hash_token(&token) {
        // Another node generated and stored one first.
        return Ok((hash, TokenOrigin::Kept));
    }
    // Printed on stdout, once: only its hash is kept.
    println!("Generated admin token (shown only now; keep it): {token}");
    Ok((hash, TokenOrigin::Generated))
}

fn decode_hash(stored: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = hex::decode(stored).context("stored admin token hash is not hex")?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("stored admin token hash has the wrong length"))
}
