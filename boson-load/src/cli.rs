//! Command-line arguments.
//!
//! Everything has a default so `cargo run --release -p boson-load` alone does a
//! reasonable closed-loop run against the workspace's release build of Boson.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Number of custom events in every batch sent to `/v2/events`.
///
/// Fixed rather than a flag so results stay comparable between runs.
pub(crate) const EVENTS_PER_BATCH: usize = 10;

/// Benchmark Boson: send event batches, measure acceptance and webhook delivery.
#[derive(Debug, Parser)]
#[command(name = "boson-load", version, about)]
pub(crate) struct Args {
    /// Number of batches to send (each holds 10 custom events).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) batches: u64,

    /// Maximum number of requests in flight at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) concurrency: u64,

    /// Offered load in events per second (open loop). Omit to send as fast as
    /// the concurrency allows (closed loop).
    #[arg(long, value_parser = parse_rate)]
    pub(crate) rate: Option<f64>,

    /// Path of the Boson binary. Defaults to the workspace's target/release/boson.
    #[arg(long)]
    pub(crate) boson_bin: Option<PathBuf>,

    /// Configure the connection to deliver whole batches rather than one event per request.
    #[arg(long)]
    pub(crate) send_as_batch: bool,

    /// How long to wait, after sending, for the receiver to see every accepted event.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub(crate) drain_timeout_secs: u64,

    /// What to measure.
    #[arg(long, value_enum, default_value_t = Scenario::Throughput)]
    pub(crate) scenario: Scenario,

    /// Run on PostgreSQL: a fresh database is created on the server this URL names for the run,
    /// and dropped after it. Without it, Boson gets a temporary SQLite file.
    #[arg(long, value_name = "URL")]
    pub(crate) database_url: Option<String>,

    /// Propagation: Boson processes sharing the database (node 1 takes the setting changes,
    /// the others the load).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=16))]
    pub(crate) nodes: u64,

    /// Propagation: setting changes saved on node 1 (inactive, active, …; an odd number is
    /// rounded up, so the run ends active).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) changes: u64,

    /// Propagation: time between two changes.
    #[arg(long, default_value_t = 500, value_name = "MS", value_parser = clap::value_parser!(u64).range(50..))]
    pub(crate) change_every_ms: u64,
}

/// A benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// Events in, webhooks out: acceptance and delivery rates and latency on one node.
    Throughput,
    /// How soon a connection setting saved on node 1 applies on the other nodes, under load
    /// (PostgreSQL, several nodes).
    Propagation,
}

impl Args {
    /// Resolves the Boson binary, falling back to `<workspace>/target/release/boson`.
    ///
    /// `CARGO_MANIFEST_DIR` is baked in at compile time, so the default works
    /// regardless of the directory the tool is started from.
    pub(crate) fn boson_bin(&self) -> PathBuf {
        self.boson_bin.clone().unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/boson")
        })
    }

    pub(crate) fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_timeout_secs)
    }

    /// Total number of events the run will send.
    pub(crate) fn total_events(&self) -> u64 {
        self.batches * EVENTS_PER_BATCH as u64
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let rate: f64 = s.parse().map_err(|e| format!("not a number: {e}"))?;
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err("must be a positive number of events per second".to_owned())
    }
}
