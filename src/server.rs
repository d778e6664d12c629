//! Wiring: the router, and `run`, which starts the writer, the pipeline, delivery and the HTTP
//! server and stops them in order on shutdown.

use std::future::Future;
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
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

use crate::access::{AdminAccess, hash_token};
use crate::admin;
use crate::config::{Config, RetentionConfig};
use crate::delivery::webhook::WebhookClient;
use crate::delivery::{self, Crowded, DeliveryContext};
use crate::ingest;
use crate::live::LiveStream;
use crate::pipeline::Pipeline;
use crate::pipeline::catalog::Catalog;
use crate::state::AppState;
use crate::store::Store;
use crate::store::writer::Writer;
use crate::telemetry::Metrics;

const ADMIN_TOKEN_HASH_KEY: &str = "admin_token_sha256";
/// How long shutdown waits for the writer to commit what it holds.
const WRITER_DRAIN: Duration = Duration::from_secs(10);

/// The whole HTTP surface.
pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .merge(ingest::router(state.config.ingest.max_body_bytes))
        .merge(crate::identity::router())
        .merge(crate::dashboard::router())
        .merge(admin::router(state.clone()))
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
/// in-flight deliveries finish (queued ones are released to the table) and commits what the
/// writer holds.
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
    let (writer, writer_task) = Writer::spawn(store.clone(), lease, committed);
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
        store.clone(),
        Arc::clone(&live),
        Arc::clone(&metrics),
        Arc::clone(&crowded) as _,
    );
    let ctx = Arc::new(DeliveryContext::new(
        Arc::clone(&catalog),
        store.clone(),
        client,
        writer,
        Arc::clone(&metrics),
        Arc::clone(&live),
        &config.delivery,
    ));
    let cancel = CancellationToken::new();
    let delivery = tokio::spawn(delivery::run(
        ctx,
        config.delivery.clone(),
        committed_jobs,
        crowded,
        cancel.clone(),
    ));
    // Other nodes' catalog changes (PostgreSQL); nothing to follow on SQLite.
    tokio::spawn(Arc::clone(&catalog).follow_changes(cancel.clone()));
    tokio::spawn(prune_periodically(
        store.clone(),
        config.retention.clone(),
        cancel.clone(),
    ));

    let stopping = CancellationToken::new();
    let shutdown = {
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            stopping.cancel();
        }
    };
    let state = AppState {
        config: Arc::new(config),
        store: store.clone(),
        pipeline,
        metrics,
        access: Arc::new(AdminAccess::new(admin_token_hash)),
        live: Arc::clone(&live),
        stopping: stopping.clone(),
        webhooks,
    };
    let tls = match (&state.config.tls_cert, &state.config.tls_key) {
        (Some(cert), Some(key)) => Some(
            RustlsConfig::from_pem_file(cert, key)
                .await
                .context("failed to load the TLS certificate and key")?,
        ),
        _ => None,
    };
    let address = listener.local_addr().ok();
    tracing::info!(?address, https = tls.is_some(), "Boson is listening.");
    let app = router(state);
    let served = match tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        Some(tls) => serve_tls(listener, app, tls, shutdown).await,
    };

    tracing::info!("Shutting down: delivering or releasing in-flight work.");
    cancel.cancel();
    delivery.await.context("delivery task failed")?;
    if tokio::time::timeout(WRITER_DRAIN, writer_task)
        .await
        .is_err()
    {
        tracing::warn!(
            "The writer did not stop in time; uncommitted job updates will be redone after restart."
        );
    }
    store.close().await;
    served.context("HTTP server failed")
}

/// Serves HTTPS; on `shutdown`, stops accepting and lets requests in flight finish.
async fn serve_tls(
    listener: TcpListener,
    app: Router,
    tls: RustlsConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(Duration::from_secs(30)));
    });
    axum_server::from_tcp_rustls(listener.into_std()?, tls)?
        .handle(handle)
        .serve(app.into_make_service())
        .await
}

/// Deletes what is older than the retention, every `interval_secs`.
async fn prune_periodically(store: Store, retention: RetentionConfig, cancel: CancellationToken) {
    let keep_ms = i64::try_from(retention.hours.saturating_mul(3_600_000)).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(retention.interval_secs)) => {}
        }
        match store
            .prune(crate::model::now_ms().saturating_sub(keep_ms))
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "Pruned rows past the retention."),
            Err(error) => tracing::warn!(%error, "Pruning old rows failed."),
        }
    }
}

/// The admin token's hash: from config, else the stored one, else a new token that is stored
/// (hashed) and printed this once.
async fn admin_token_hash(config: &Config, store: &Store) -> anyhow::Result<[u8; 32]> {
    use secrecy::ExposeSecret;
    if let Some(token) = &config.admin_token {
        return Ok(hash_token(token.expose_secret()));
    }
    if let Some(stored) = store.get_meta(ADMIN_TOKEN_HASH_KEY).await? {
        return decode_hash(&stored);
    }
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    let token = hex::encode(bytes);
    let stored = store
        .init_meta(ADMIN_TOKEN_HASH_KEY, &hex::encode(hash_token(&token)))
        .await?;
    let hash = decode_hash(&stored)?;
    if hash == hash_token(&token) {
        // Printed on stdout, once: only its hash is kept.
        println!("Generated admin token (shown only now; keep it): {token}");
    }
    Ok(hash)
}

fn decode_hash(stored: &str) -> anyhow::Result<[u8; 32]> {
    let bytes = hex::decode(stored).context("stored admin token hash is not hex")?;
    bytes
        .try_into()
        .map_err(|_| anyhow::anyhow!("stored admin token hash has the wrong length"))
}
