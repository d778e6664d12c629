//! The `boson` command: parses the CLI, loads configuration, and calls the library.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

// glibc's allocator spent a fifth of the server's CPU under load (many threads, short-lived
// JSON values); mimalloc's thread-local heaps remove most of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "boson",
    version,
    about = "A self-hosted customer data platform that speaks mParticle's protocols"
)]
struct Cli {
    /// Optional TOML configuration file (also BOSON_CONFIG); environment variables override it.
    #[arg(long, global = true, env = "BOSON_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server: Events API, admin API, delivery.
    Serve,
    /// Run database migrations and exit.
    Migrate,
    /// Print the default configuration, documented.
    PrintDefaultConfig,
    /// Run a webhook receiver for trying Boson out: answers 200, prints each request.
    Receive {
        /// The port to listen on, on 127.0.0.1.
        #[arg(long, default_value_t = 9000)]
        port: u16,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    boson::telemetry::init_logging();
    match cli.command {
        Command::PrintDefaultConfig => {
            print!("{}", boson::config::DEFAULT_CONFIG);
            Ok(())
        }
        Command::Receive { port } => {
            runtime(None)?.block_on(boson::receive::run(port, shutdown_signal()))
        }
        Command::Migrate => {
            let config = boson::Config::load(cli.config.as_deref())?;
            runtime(Some(&config))?.block_on(boson::migrate(&config))
        }
        Command::Serve => {
            let config = boson::Config::load(cli.config.as_deref())?;
            runtime(Some(&config))?.block_on(serve(config))
        }
    }
}

async fn serve(config: boson::Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("failed to listen on {}", config.listen))?;
    boson::run(config, listener, shutdown_signal()).await
}

/// The async runtime, with the worker threads `config` sets, or tokio's default (one per CPU,
/// or `TOKIO_WORKER_THREADS`) when it sets none or there is no configuration (the `receive`
/// tool).
fn runtime(config: Option<&boson::Config>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = config.and_then(boson::Config::worker_threads) {
        builder.worker_threads(workers);
    }
    let runtime = builder
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    if config.is_some() {
        let workers = runtime.metrics().num_workers();
        tracing::info!(workers, "Started the async runtime.");
    }
    Ok(runtime)
}

/// Completes on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("Shutdown signal received.");
}
