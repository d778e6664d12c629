//! `boson-load`: a benchmark for Boson's events-in, webhooks-out path.
//!
//! One run: start a fresh Boson on a temporary SQLite database, start a
//! webhook receiver in this process, wire input → webhook output → connection
//! through the admin API, send `--batches` batches of 10 events to
//! `/v2/events`, wait for the receiver to see every accepted event, and print
//! one JSON line of results on stdout. Progress and diagnostics go to stderr.
//!
//! `--database-url` runs it on a fresh PostgreSQL database instead, with `--nodes` Boson
//! processes sharing it (batches spread over them, each user's to every node). Other
//! scenarios (`--scenario`): `propagation` measures how soon a setting saved on
//! one of several nodes applies on the others (see `propagation.rs`),
//! `isolation` whether failing connections slow the healthy ones
//! (`isolation.rs`), and `recovery` how soon a backlog is delivered after an
//! outage of the receiver (`recovery.rs`).
//!
//! Note that on a small machine the generator competes with Boson for CPU;
//! compare runs made on the same machine, not absolute numbers across machines.

mod admin;
mod boson;
mod cli;
mod clock;
mod cluster;
mod cpu;
mod database;
mod endpoint;
mod isolation;
mod metrics;
mod openloop;
mod payload;
mod propagation;
mod receiver;
mod recovery;
mod report;
mod sender;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use clap::Parser as _;

use crate::cli::{Args, Scenario};
use crate::cluster::Cluster;
use crate::receiver::{Receiver, Summary};
use crate::report::{Report, per_second};

/// Upper bound on a single HTTP request, so a wedged server fails the run
/// instead of hanging it.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often to report drain progress on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    // reqwest is built without a default TLS provider (see Cargo.toml); a second install is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(usize::try_from(args.concurrency).unwrap_or(usize::MAX))
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("building HTTP client")?;
    match args.scenario {
        Scenario::Throughput => {}
        Scenario::Propagation => return propagation::run(&args, &http).await,
        Scenario::Isolation => return isolation::run(&args, &http).await,
        Scenario::Recovery => return recovery::run(&args, &http).await,
    }
    let total_events = usize::try_from(args.total_events()).context("too many batches")?;
    let receiver = Receiver::start(total_events).await?;
    if args.failing_user {
        // User 0 of `--users` sends as MPID 1.
        receiver.fail_user(1);
    }
    let cluster = Cluster::start(&args, &http).await?;
    eprintln!(
        "boson-load: Boson ready at {}, receiver at {}",
        cluster.event_urls().join(", "),
        receiver.url()
    );

    // Whatever happens during the run, read the peak RSS and stop Boson
    // gracefully before reporting (or propagating the error).
    let measured = measure(&args, &http, &cluster, &receiver).await;
    let peak_rss_mb = cluster
        .peak_rss_mb()
        .inspect_err(|e| eprintln!("boson-load: peak RSS unavailable: {e:#}"))
        .ok();
    let shutdown = cluster.shutdown().await;
    let summary = receiver.stop();
    let sent = measured?;
    shutdown?;

    let Measured {
        accepted_events,
        errors,
        send_secs,
        started,
        cpu,
    } = sent;
    log_receiver_anomalies(&summary);
    let delivered_secs = summary
        .last_delivery
        .map_or(0.0, |t| t.saturating_duration_since(started).as_secs_f64());
    let report = Report {
        batches: args.batches,
        concurrency: args.concurrency,
        offered_events_per_s: args.rate,
        accepted_events_per_s: per_second(accepted_events, send_secs),
        delivered_events_per_s: per_second(summary.delivered, delivered_secs),
        errors,
        delivered: summary.delivered,
        latency_ms: summary.latency_ms.into(),
        peak_rss_mb,
        cpu_us_per_event: per_event_us(cpu.total(), accepted_events),
        sending_cpu_us_per_event: per_event_us(cpu.sending, accepted_events),
        draining_cpu_us_per_event: per_event_us(cpu.draining, accepted_events),
        ingest_only: args.ingest_only,
        payload: args.payload,
        identities: args.identities,
        send_as_batch: args.send_as_batch,
        signed: args.sign,
        rules: args.rules,
        consent: args.rules || args.consent,
        per_user: args.per_user,
        batch_window_secs: args.batch_window_secs,
        users: args.users,
        requests_per_event: (summary.delivered > 0)
            .then(|| summary.requests as f64 / summary.delivered as f64),
        failed_requests: args.failing_user.then_some(summary.failed_requests),
        nodes: args.node_count(),
    }
    .rounded();
    println!("{}", report.to_json_line());
    Ok(())
}

/// Sending-phase results needed for the report.
#[derive(Debug)]
struct Measured {
    accepted_events: u64,
    errors: u64,
    /// Wall time of the sending phase.
    send_secs: f64,
    /// Start of the sending phase; delivery throughput is measured from here.
    started: Instant,
    /// Boson's CPU time in each phase.
    cpu: PhaseCpu,
}

/// Boson's CPU time (user + system) while the batches were sent, and after that until every
/// accepted event was delivered.
#[derive(Debug, Clone, Copy)]
struct PhaseCpu {
    sending: Option<f64>,
    draining: Option<f64>,
}

impl PhaseCpu {
    fn total(self) -> Option<f64> {
        Some(self.sending? + self.draining?)
    }
}

/// `after - before`, when both were read.
fn difference(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some(after? - before?)
}

/// Microseconds of CPU per event, `None` without CPU time or events.
fn per_event_us(cpu_secs: Option<f64>, events: u64) -> Option<f64> {
    cpu_secs
        .filter(|_| events > 0)
        .map(|secs| secs * 1e6 / events as f64)
}

/// Sets up the pipeline (through the first node), sends everything (spread over the nodes),
/// and waits for deliveries to drain.
async fn measure(
    args: &Args,
    http: &reqwest::Client,
    cluster: &Cluster,
    receiver: &Receiver,
) -> Result<Measured> {
    let first = cluster.nodes().first().context("no node started")?;
    let credentials = admin::setup_pipeline(
        http,
        first.base_url(),
        first.admin_token(),
        (!args.ingest_only).then(|| receiver.url()).as_deref(),
        admin::Options {
            send_as_batch: args.send_as_batch,
            sign: args.sign,
            rules: args.rules,
            per_user: args.per_user,
            batch_window_secs: args.batch_window_secs,
        },
    )
    .await
    .context("configuring Boson via the admin API")?;
    if cluster.nodes().len() > 1 {
        // The other nodes learn of the input from the database, a moment later.
        openloop::wait_until_known(http, &cluster.event_urls(), &credentials).await?;
    }

    eprintln!(
        "boson-load: sending {} batches ({} events), concurrency {}, {}",
        args.batches,
        args.total_events(),
        args.concurrency,
        args.rate.map_or_else(
            || "closed loop".to_owned(),
            |r| format!("offering {r} events/s")
        ),
    );
    let plan = sender::Plan {
        urls: cluster.event_urls(),
        credentials,
        batches: args.batches,
        concurrency: args.concurrency,
        rate: args.rate,
        shape: payload::Shape {
            payload: args.payload,
            identities: args.identities,
            consent: args.rules || args.consent,
            users: args.users,
            run: 0,
        },
    };
    let cpu_before = cluster.cpu_secs().ok();
    let outcome = sender::run(plan).await?;
    let send_secs = outcome
        .finished
        .duration_since(outcome.started)
        .as_secs_f64();
    eprintln!(
        "boson-load: sent in {send_secs:.2}s: {} events accepted, {} batches failed",
        outcome.accepted_events, outcome.errors
    );
    if args.rate.is_some() && outcome.max_lag > Duration::from_millis(100) {
        eprintln!(
            "boson-load: sends fell up to {:?} behind schedule; the offered rate was not met",
            outcome.max_lag
        );
    }

    // The failing user's events never arrive: user 0 sends batches 0, N, 2N, …
    let never = match (args.failing_user, args.users) {
        (true, Some(users)) => args.batches.div_ceil(users) * payload::EVENTS_PER_BATCH as u64,
        _ => 0,
    };
    let cpu_sent = cluster.cpu_secs().ok();
    if !args.ingest_only {
        let expected = outcome.accepted_events.saturating_sub(never);
        wait_for_deliveries(receiver, expected, args.drain_timeout()).await;
    }
    let cpu_drained = cluster
        .cpu_secs()
        .inspect_err(|e| eprintln!("boson-load: CPU time unavailable: {e:#}"))
        .ok();
    Ok(Measured {
        accepted_events: outcome.accepted_events,
        errors: outcome.errors,
        send_secs,
        started: outcome.started,
        cpu: PhaseCpu {
            sending: difference(cpu_before, cpu_sent),
            draining: difference(cpu_sent, cpu_drained),
        },
    })
}

/// Waits until the receiver has seen `expected` distinct events or the
/// timeout passes. A shortfall is reported, not an error: the `delivered`
/// count in the output shows it.
async fn wait_for_deliveries(receiver: &Receiver, expected: u64, timeout: Duration) {
    let begun = Instant::now();
    let mut next_progress = begun + PROGRESS_EVERY;
    loop {
        let delivered = receiver.delivered();
        if delivered >= expected {
            return;
        }
        let now = Instant::now();
        if now >= begun + timeout {
            eprintln!(
                "boson-load: gave up after {timeout:?}: {delivered} of {expected} events delivered"
            );
            return;
        }
        if now >= next_progress {
            eprintln!("boson-load: waiting for deliveries: {delivered} of {expected}");
            next_progress += PROGRESS_EVERY;
        }
        // The receiver timestamps deliveries itself, so this polling interval
        // doesn't affect the measurement.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn log_receiver_anomalies(s: &Summary) {
    if s.duplicates > 0 {
        eprintln!(
            "boson-load: receiver saw {} duplicate deliveries",
            s.duplicates
        );
    }
    if s.unrecognized > 0 {
        eprintln!(
            "boson-load: receiver saw {} events without our stamps",
            s.unrecognized
        );
    }
    if s.malformed_bodies > 0 {
        eprintln!(
            "boson-load: receiver got {} non-JSON bodies",
            s.malformed_bodies
        );
    }
}
