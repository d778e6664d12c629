//! Command-line arguments.
//!
//! Everything has a default so `cargo run --release -p boson-load` alone does a
//! reasonable closed-loop run against the workspace's release build of Boson.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::payload::{EVENTS_PER_BATCH, Identities, Payload};

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

    /// Throughput: give the output a signing secret, so every request is signed (Standard
    /// Webhooks), to measure what signing costs.
    #[arg(long)]
    pub(crate) sign: bool,

    /// Throughput: give the connection a Data Filter of 50 rules and every forwarding rule
    /// (attribute, login identity, GDPR purpose, CCPA, sampling), all of which the load's events
    /// pass, and send consent with every batch (implies `--consent`), to measure what the rules
    /// cost.
    #[arg(long)]
    pub(crate) rules: bool,

    /// Throughput: every batch states consent (GDPR `marketing`, no CCPA opt-out), as with
    /// `--rules` but without the rules: compare `--consent` with `--rules` so the two runs send
    /// the same batches and the rules are the only difference.
    #[arg(long)]
    pub(crate) consent: bool,

    /// Throughput and recovery: the connection keeps each user's batches in order (`ordering`
    /// = `per_user`), to measure what ordering costs, and whether a drain keeps it.
    #[arg(long)]
    pub(crate) per_user: bool,

    /// Throughput: the connection's `batch_window_secs` (with `--send-as-batch`): each user's
    /// batches within the window go out as one request. Use with `--users`.
    #[arg(long, default_value_t = 0, value_name = "SECS", value_parser = clap::value_parser!(u32).range(0..=3600))]
    pub(crate) batch_window_secs: u32,

    /// Throughput: batch k comes from user k mod N (MPID k mod N + 1), so each user sends
    /// several batches. Default: every batch from a user of its own.
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..))]
    pub(crate) users: Option<u64>,

    /// Throughput: the receiver answers 500 to every request of the first user (MPID 1, needs
    /// `--users`); its events are not waited for, and the latency reported is the other users'.
    #[arg(long, requires = "users")]
    pub(crate) failing_user: bool,

    /// Throughput: no output and no connection, so Boson only accepts and stores: measures
    /// acceptance alone (nothing is delivered or waited for).
    #[arg(long, conflicts_with_all = ["send_as_batch", "sign", "rules", "per_user", "failing_user"])]
    pub(crate) ingest_only: bool,

    /// Throughput: the batches' shape: `small` (about 2 KB of bare events) or `sdk` (about
    /// 4.3 KB, with `device_info`, `application_info` and session fields, like an SDK's).
    #[arg(long, value_enum, default_value_t = Payload::Small)]
    pub(crate) payload: Payload,

    /// Throughput: whom the batches name: `mpid` (an MPID and a customer id), `returning` (no
    /// MPID; the customer id and email of one of `--users` known users, 64 by default) or `new`
    /// (no MPID; a user never seen before in every batch).
    #[arg(long, value_enum, default_value_t = Identities::Mpid)]
    pub(crate) identities: Identities,

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

    /// Boson processes sharing the database (PostgreSQL only; on SQLite there is one). Defaults:
    /// 3 for propagation and for isolation on PostgreSQL, otherwise 1. Throughput runs spread
    /// their batches over the nodes, each user's to every node.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub(crate) nodes: Option<u64>,

    /// Propagation: setting changes saved on node 1 (inactive, active, …; an odd number is
    /// rounded up, so the run ends active).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) changes: u64,

    /// Propagation: time between two changes.
    #[arg(long, default_value_t = 500, value_name = "MS", value_parser = clap::value_parser!(u64).range(50..))]
    pub(crate) change_every_ms: u64,

    /// Isolation: connections from the one input, each to its own receiver (send as batch).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=100))]
    pub(crate) connections: u64,

    /// Isolation: how many of the connections fail in the failure phase.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=99))]
    pub(crate) failing: u64,

    /// Isolation and recovery: how the failing endpoints fail (defaults: 500 for isolation, 503
    /// for recovery).
    #[arg(long, value_enum)]
    pub(crate) failure: Option<Failure>,

    /// Isolation: length of each phase (baseline, failure, recovery).
    #[arg(long, default_value_t = 20, value_name = "SECS", value_parser = clap::value_parser!(u64).range(2..=600))]
    pub(crate) phase_secs: u64,

    /// Isolation: stop after the failure phase, without the recovery phase.
    #[arg(long)]
    pub(crate) no_recovery_phase: bool,

    /// Recovery: how long the receiver is down.
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) outage_secs: u64,

    /// Isolation and recovery: also print, per second of load, the time to 202 on stderr.
    #[arg(long)]
    pub(crate) timeline: bool,

    /// Log filter (`RUST_LOG`) for the Boson processes; their logs go to stderr.
    #[arg(long, default_value = "warn", value_name = "FILTER")]
    pub(crate) boson_log: String,
}

/// A benchmark scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    /// Events in, webhooks out: acceptance and delivery rates and latency on one node.
    Throughput,
    /// How soon a connection setting saved on node 1 applies on the other nodes, under load
    /// (PostgreSQL, several nodes).
    Propagation,
    /// Whether failing connections slow the healthy ones: N connections, K of them failing
    /// (see `isolation.rs`).
    Isolation,
    /// How soon a backlog is delivered after an outage of the receiver (see `recovery.rs`).
    Recovery,
}

/// How an endpoint fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Failure {
    /// It answers 500.
    #[value(name = "500")]
    Status500,
    /// It answers 503.
    #[value(name = "503")]
    Status503,
    /// It never answers (Boson's request timeout ends each request).
    Hang,
    /// Nothing listens: connections are refused.
    Refuse,
    /// It does not fail: a control run, to see how much the phases differ by chance.
    None,
}

impl Failure {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Status500 => "500",
            Self::Status503 => "503",
            Self::Hang => "hang",
            Self::Refuse => "refuse",
            Self::None => "none",
        }
    }
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

    /// How many Boson processes to run: `--nodes`, else the scenario's default.
    pub(crate) fn node_count(&self) -> u64 {
        let on_postgres = self.database_url.is_some();
        self.nodes.unwrap_or(match self.scenario {
            Scenario::Propagation => 3,
            Scenario::Isolation if on_postgres => 3,
            _ => 1,
        })
    }

    /// Offered load in events/s: `--rate`, else `default`.
    pub(crate) fn rate_or(&self, default: f64) -> f64 {
        self.rate.unwrap_or(default)
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
