//! The isolation scenario: does a failing connection slow ingest or the other connections?
//!
//! Setup: `--nodes` Boson processes (one on SQLite), one input, `--connections` connections from
//! it (send as batch), each to its own [`Endpoint`]. Load: batches of 10 events at `--rate`
//! (default 100 batches/s), open loop, round-robin over the nodes. After a warm-up of 2 s (not
//! counted), three phases of `--phase-secs` each: *baseline* (all healthy), *failure* (the first `--failing` endpoints
//! fail as `--failure` says: answer 500, hang, …) and *recovery* (all healthy again; left out
//! with `--no-recovery-phase`). A batch belongs to the phase in which it was due.
//!
//! Per phase, for the healthy connections: the end-to-end latency of every event (from the
//! moment its batch was due, which is its stamp, to its first arrival at the endpoint) and each
//! batch's time to its 202 (from due to answered, so it includes any lag of the generator); and
//! the ratio of each percentile to the baseline's (the target is ≤ 1.2). For the failing
//! connections: the requests their endpoints got and the attempts Boson counted as retries
//! (`/metrics`, all nodes), per phase, and how soon after the recovery their backlog arrived.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde::Serialize;

use crate::admin::{self, Admin};
use crate::boson::Boson;
use crate::cli::{Args, Failure};
use crate::clock::unix_micros;
use crate::cluster::Cluster;
use crate::cpu;
use crate::endpoint::{self, Endpoint, Mode, Record};
use crate::metrics;
use crate::openloop::{self, Load, Sent, Start, events_of};
use crate::payload::EVENTS_PER_BATCH;
use crate::report::{Spread, ms, ratio};

/// Offered load when `--rate` is not given: 100 batches/s.
const DEFAULT_RATE: f64 = 1000.0;
const PHASES: [&str; 3] = ["baseline", "failure", "recovery"];
/// Load before the baseline, not counted: the first batches pay for connections being opened.
const WARM_UP: Duration = Duration::from_secs(2);

/// Runs the scenario and prints one JSON line (and a summary on stderr).
pub(crate) async fn run(args: &Args, http: &reqwest::Client) -> Result<()> {
    let plan = Plan::new(args)?;
    let cluster = Cluster::start(args, http).await?;
    let measured = measure(args, http, &cluster, &plan).await;
    cluster.stop().await;
    let report = measured?;
    report.summarize();
    println!("{}", report.to_json_line());
    Ok(())
}

/// The run's schedule.
#[derive(Debug)]
struct Plan {
    /// Time between two batches.
    interval: Duration,
    phase: Duration,
    /// 2 or 3 (with the recovery phase).
    phases: usize,
    batches: u64,
    failure: Failure,
    connections: usize,
    /// The first `failing` connections fail.
    failing: usize,
}

impl Plan {
    fn new(args: &Args) -> Result<Self> {
        ensure!(
            args.failing < args.connections,
            "--failing {} leaves no healthy connection among --connections {}",
            args.failing,
            args.connections
        );
        let interval =
            Duration::from_secs_f64(EVENTS_PER_BATCH as f64 / args.rate_or(DEFAULT_RATE));
        let phase = Duration::from_secs(args.phase_secs);
        let phases = if args.no_recovery_phase { 2 } else { 3 };
        let span = WARM_UP + phase.mul_f64(phases as f64);
        Ok(Self {
            interval,
            phase,
            phases,
            batches: (span.as_secs_f64() / interval.as_secs_f64()).round() as u64,
            failure: args.failure.unwrap_or(Failure::Status500),
            connections: usize::try_from(args.connections)?,
            failing: usize::try_from(args.failing)?,
        })
    }

    fn total_events(&self) -> usize {
        usize::try_from(self.batches).unwrap_or(usize::MAX) * EVENTS_PER_BATCH
    }

    fn offered_events_per_s(&self) -> f64 {
        EVENTS_PER_BATCH as f64 / self.interval.as_secs_f64()
    }

    /// The phase in which a batch was due (`None`: the warm-up).
    fn phase_of(&self, sent: &Sent, start: Start) -> Option<usize> {
        let offset = sent
            .due
            .saturating_duration_since(start.at)
            .checked_sub(WARM_UP)?;
        Some(((offset.as_secs_f64() / self.phase.as_secs_f64()) as usize).min(self.phases - 1))
    }

    /// When phase `phase` (from 0) begins; `phases` is when the load ends.
    fn phase_start(&self, start: Start, phase: usize) -> Instant {
        start.at + WARM_UP + self.phase.mul_f64(phase as f64)
    }
}

/// The end of a phase.
#[derive(Debug, Clone, Copy)]
struct Boundary {
    /// When the endpoints were switched (Unix µs).
    at_us: u64,
    /// Retry attempts Boson had counted for the failing connections by then, over all nodes.
    retries: u64,
    /// CPU used during the phase (`None` if it could not be read).
    cpu: Option<cpu::Usage>,
}

async fn measure(
    args: &Args,
    http: &reqwest::Client,
    cluster: &Cluster,
    plan: &Plan,
) -> Result<Report> {
    let mut endpoints = Vec::with_capacity(plan.connections);
    for _ in 0..plan.connections {
        endpoints.push(Endpoint::start(plan.total_events()).await?);
    }
    let nodes = cluster.nodes();
    let admin = Admin {
        http,
        base_url: nodes[0].base_url(),
        admin_token: nodes[0].admin_token(),
    };
    let urls: Vec<String> = endpoints.iter().map(Endpoint::url).collect();
    let (credentials, connection_ids) = admin::setup_fan_out(&admin, &urls, true, false).await?;
    let targets = cluster.event_urls();
    openloop::wait_until_known(http, &targets, &credentials).await?;
    eprintln!(
        "boson-load: {} batches at {} events/s to {} node(s), {} connections; {} of them {} \
         for the second of {} phases of {:?}",
        plan.batches,
        plan.offered_events_per_s(),
        targets.len(),
        plan.connections,
        plan.failing,
        plan.failure.name(),
        plan.phases,
        plan.phase,
    );
    let load = Load {
        http,
        targets: &targets,
        credentials: &credentials,
        interval: plan.interval,
        batches: plan.batches,
        users: None,
    };
    let failing = Failing {
        http,
        cluster,
        endpoints: &endpoints[..plan.failing],
        connection_ids: &connection_ids[..plan.failing],
    };
    let start = Start::now();
    let (sent, boundaries) =
        tokio::join!(openloop::send(&load, start), failing.switch(plan, start));
    let (sent, boundaries) = (sent?, boundaries?);
    let accepted = sent.iter().filter(|s| s.accepted).count() as u64 * EVENTS_PER_BATCH as u64;
    // The failing endpoints' backlog is only owed when they recovered.
    let owed = if plan.phases == 3 { 0 } else { plan.failing };
    let waited: Vec<&Endpoint> = endpoints[owed..].iter().collect();
    endpoint::wait_for_all(&waited, accepted, args.drain_timeout()).await;
    let records: Vec<Record> = endpoints.iter().map(Endpoint::record).collect();
    if args.timeline {
        openloop::print_timeline(&sent, start);
    }
    Ok(Report::new(args, plan, start, &sent, &records, &boundaries))
}

/// The failing endpoints and what is needed to see what they cost Boson.
#[derive(Debug)]
struct Failing<'a> {
    http: &'a reqwest::Client,
    cluster: &'a Cluster,
    endpoints: &'a [Endpoint],
    connection_ids: &'a [String],
}

impl Failing<'_> {
    /// At the end of each phase, reads Boson's retry count and switches the failing endpoints
    /// to fail (after the baseline) or to recover (after the failure phase).
    async fn switch(&self, plan: &Plan, start: Start) -> Result<Vec<Boundary>> {
        let mut boundaries = Vec::with_capacity(plan.phases);
        tokio::time::sleep_until(plan.phase_start(start, 0).into()).await;
        let mut cpu = self.cpu();
        for phase in 1..=plan.phases {
            tokio::time::sleep_until(plan.phase_start(start, phase).into()).await;
            let previous = cpu;
            cpu = self.cpu();
            let mode = match phase {
                1 => Some(Mode::Failing(plan.failure)),
                2 if plan.phases == 3 => Some(Mode::Healthy),
                _ => None,
            };
            // Read before the switch: no request can fail because of it yet.
            let retries = self.retries().await?;
            let mut at_us = unix_micros();
            if let Some(mode) = mode {
                for endpoint in self.endpoints {
                    at_us = endpoint.set_mode(mode).1;
                }
            }
            boundaries.push(Boundary {
                at_us,
                retries,
                cpu: cpu.zip(previous).map(|(now, then)| now.since(&then)),
            });
        }
        Ok(boundaries)
    }

    fn cpu(&self) -> Option<cpu::Reading> {
        cpu::Reading::take(self.cluster.nodes().iter().map(Boson::cpu_secs))
            .inspect_err(|e| eprintln!("boson-load: CPU time unavailable: {e:#}"))
            .ok()
    }

    async fn retries(&self) -> Result<u64> {
        let counts = metrics::attempts(
            self.http,
            self.cluster.nodes(),
            self.connection_ids,
            "retry",
        )
        .await?;
        Ok(counts.iter().sum())
    }
}

/// What one phase showed.
#[derive(Debug, Serialize)]
struct PhaseReport {
    phase: &'static str,
    batches: u64,
    /// Batches not answered 202.
    errors: u64,
    /// Healthy connections: end-to-end latency of their events, in ms.
    healthy_e2e_ms: Spread,
    /// Time from due to 202 of the phase's batches, in ms.
    time_to_202_ms: Spread,
    /// How late the generator sent the phase's batches, in ms: a busy machine shows here.
    send_lag_ms: Spread,
    /// Cores Boson kept busy, and other programs, on average during the phase.
    cpu_cores: Option<cpu::Usage>,
    /// Events of the phase's batches that never reached a healthy endpoint.
    healthy_missing: u64,
    /// Requests the failing endpoints got during the phase.
    failing_requests: u64,
    /// Attempts Boson counted as retries for the failing connections during the phase.
    failing_retry_attempts: u64,
    /// Events of the phase's batches that reached the failing endpoints by the end of the run.
    failing_delivered: u64,
}

/// Percentile ratios of a phase to the baseline.
#[derive(Debug, Serialize)]
struct Ratios {
    phase: &'static str,
    e2e_p50: Option<f64>,
    e2e_p99: Option<f64>,
    time_to_202_p50: Option<f64>,
    time_to_202_p99: Option<f64>,
}

impl Ratios {
    fn of(phase: &PhaseReport, baseline: &PhaseReport) -> Self {
        Self {
            phase: phase.phase,
            e2e_p50: ratio(phase.healthy_e2e_ms.p50, baseline.healthy_e2e_ms.p50),
            e2e_p99: ratio(phase.healthy_e2e_ms.p99, baseline.healthy_e2e_ms.p99),
            time_to_202_p50: ratio(phase.time_to_202_ms.p50, baseline.time_to_202_ms.p50),
            time_to_202_p99: ratio(phase.time_to_202_ms.p99, baseline.time_to_202_ms.p99),
        }
    }
}

/// The scenario's one JSON line.
#[derive(Debug, Serialize)]
struct Report {
    scenario: &'static str,
    nodes: u64,
    connections: usize,
    failing: usize,
    failure: &'static str,
    phase_secs: u64,
    offered_events_per_s: f64,
    batches: u64,
    /// The furthest a batch was sent after it was due.
    max_lag_ms: f64,
    phases: Vec<PhaseReport>,
    ratios: Vec<Ratios>,
    /// From the recovery until every event accepted before it reached the failing endpoints;
    /// `null` without the recovery phase or if some never did.
    failing_drained_after_recovery_ms: Option<f64>,
    /// The recovery phase's healthy end-to-end latency, split at the end of that drain: batches
    /// due while the backlog was being delivered, and after. Tells whether the drain is what
    /// the recovery's p99 pays for.
    recovery_split: Option<RecoverySplit>,
    /// Repeat deliveries over all endpoints.
    duplicates: u64,
}

/// See [`Report::recovery_split`].
#[derive(Debug, Serialize)]
struct RecoverySplit {
    while_draining_e2e_ms: Spread,
    after_e2e_ms: Spread,
}

/// Everything a run recorded, to be read phase by phase.
#[derive(Debug)]
struct Run<'a> {
    plan: &'a Plan,
    start: Start,
    sent: &'a [Sent],
    failing: &'a [Record],
    healthy: &'a [Record],
    boundaries: &'a [Boundary],
}

impl Run<'_> {
    fn phase(&self, phase: usize) -> PhaseReport {
        let in_phase: Vec<(u64, &Sent)> = (0u64..)
            .zip(self.sent)
            .filter(|(_, s)| self.plan.phase_of(s, self.start) == Some(phase))
            .collect();
        let accepted = || in_phase.iter().filter(|(_, s)| s.accepted);
        let (healthy_e2e, healthy_missing) = latencies(&in_phase, self.healthy);
        let (_, failing_missing) = latencies(&in_phase, self.failing);
        let failing_events = (accepted().count() * EVENTS_PER_BATCH * self.failing.len()) as u64;
        let (from_us, until_us) = self.span_us(phase);
        PhaseReport {
            phase: PHASES[phase],
            batches: in_phase.len() as u64,
            errors: in_phase.iter().filter(|(_, s)| !s.accepted).count() as u64,
            healthy_e2e_ms: Spread::of(healthy_e2e),
            time_to_202_ms: Spread::of(accepted().map(|(_, s)| ms(s.time_to_answer())).collect()),
            send_lag_ms: Spread::of(
                in_phase
                    .iter()
                    .map(|(_, s)| ms(s.sent.saturating_duration_since(s.due)))
                    .collect(),
            ),
            cpu_cores: self.boundaries.get(phase).and_then(|b| b.cpu),
            healthy_missing,
            failing_requests: self
                .failing
                .iter()
                .map(|r| r.requests_between(from_us, until_us))
                .sum(),
            failing_retry_attempts: self.retries_in(phase),
            failing_delivered: failing_events.saturating_sub(failing_missing),
        }
    }

    /// The recovery phase's healthy latencies, split at `drained_us` (see [`RecoverySplit`]).
    fn recovery_split(&self, drained_us: u64) -> RecoverySplit {
        let recovery = PHASES.len() - 1;
        let (during, after): (Vec<Numbered<'_>>, Vec<Numbered<'_>>) = (0u64..)
            .zip(self.sent)
            .filter(|(_, s)| self.plan.phase_of(s, self.start) == Some(recovery))
            .partition(|(_, s)| s.due_us < drained_us);
        RecoverySplit {
            while_draining_e2e_ms: Spread::of(latencies(&during, self.healthy).0),
            after_e2e_ms: Spread::of(latencies(&after, self.healthy).0),
        }
    }

    /// When a phase began and ended (Unix µs); the last one lasts until the end of the run.
    fn span_us(&self, phase: usize) -> (u64, u64) {
        let from = phase
            .checked_sub(1)
            .map_or(self.start.unix_us_at(WARM_UP), |p| self.boundaries[p].at_us);
        let until = self
            .boundaries
            .get(phase)
            .filter(|_| phase + 1 < self.plan.phases)
            .map_or(u64::MAX, |b| b.at_us);
        (from, until)
    }

    /// Retry attempts Boson counted for the failing connections during a phase.
    fn retries_in(&self, phase: usize) -> u64 {
        let before = phase
            .checked_sub(1)
            .map_or(0, |p| self.boundaries[p].retries);
        let after = self.boundaries.get(phase).map_or(before, |b| b.retries);
        after.saturating_sub(before)
    }
}

impl Report {
    fn new(
        args: &Args,
        plan: &Plan,
        start: Start,
        sent: &[Sent],
        records: &[Record],
        boundaries: &[Boundary],
    ) -> Self {
        let (failing, healthy) = records.split_at(plan.failing);
        let run = Run {
            plan,
            start,
            sent,
            failing,
            healthy,
            boundaries,
        };
        let phases: Vec<PhaseReport> = (0..plan.phases).map(|phase| run.phase(phase)).collect();
        let ratios = phases[1..]
            .iter()
            .map(|phase| Ratios::of(phase, &phases[0]))
            .collect();
        let recovered_us = (plan.phases == 3).then(|| boundaries[1].at_us);
        let drained_ms = recovered_us.and_then(|at_us| drained_after(sent, failing, at_us));
        let recovery_split = recovered_us
            .zip(drained_ms)
            .map(|(at_us, after_ms)| run.recovery_split(at_us + (after_ms * 1000.0) as u64));
        Self {
            scenario: "isolation",
            nodes: args.node_count(),
            connections: plan.connections,
            failing: plan.failing,
            failure: plan.failure.name(),
            phase_secs: args.phase_secs,
            offered_events_per_s: (plan.offered_events_per_s() * 10.0).round() / 10.0,
            batches: plan.batches,
            max_lag_ms: (ms(openloop::max_lag(sent)) * 10.0).round() / 10.0,
            phases,
            ratios,
            failing_drained_after_recovery_ms: drained_ms,
            recovery_split,
            duplicates: records.iter().map(|r| r.duplicates).sum(),
        }
    }

    /// A few readable lines on stderr.
    fn summarize(&self) {
        for p in &self.phases {
            eprintln!(
                "boson-load: {:<8} healthy e2e p50 {:?} p99 {:?} ms, 202 p50 {:?} p99 {:?} ms; \
                 failing endpoints got {} requests, Boson counted {} retries; CPU {:?}",
                p.phase,
                p.healthy_e2e_ms.p50,
                p.healthy_e2e_ms.p99,
                p.time_to_202_ms.p50,
                p.time_to_202_ms.p99,
                p.failing_requests,
                p.failing_retry_attempts,
                p.cpu_cores,
            );
        }
        if let Some(split) = &self.recovery_split {
            eprintln!(
                "boson-load: recovery  healthy e2e while the backlog drained {:?}, after {:?} ms",
                split.while_draining_e2e_ms, split.after_e2e_ms
            );
        }
        for r in &self.ratios {
            eprintln!(
                "boson-load: {}/baseline: e2e p50 ×{:?} p99 ×{:?}, 202 p50 ×{:?} p99 ×{:?} \
                 (target ≤ 1.2)",
                r.phase, r.e2e_p50, r.e2e_p99, r.time_to_202_p50, r.time_to_202_p99
            );
        }
    }

    fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// End-to-end latencies (ms) of the accepted batches' events at `records`' endpoints, and how
/// many of those events never arrived.
/// A batch sent, with its number in the run (the generator's batch index).
type Numbered<'a> = (u64, &'a Sent);

fn latencies(batches: &[Numbered<'_>], records: &[Record]) -> (Vec<f64>, u64) {
    let mut values = Vec::new();
    let mut missing = 0;
    for record in records {
        for (k, sent) in batches.iter().filter(|(_, s)| s.accepted) {
            for arrived in events_of(*k).filter_map(|i| record.arrived_us.get(i)) {
                match arrived {
                    0 => missing += 1,
                    &at => values.push(at.saturating_sub(sent.due_us) as f64 / 1000.0),
                }
            }
        }
    }
    (values, missing)
}

/// From `recovered_us` until the last event accepted before it arrived at `records`' endpoints
/// (0 if all had arrived before), in ms; `None` if some never arrived.
fn drained_after(sent: &[Sent], records: &[Record], recovered_us: u64) -> Option<f64> {
    let mut last = recovered_us;
    for record in records {
        for (k, _) in (0u64..)
            .zip(sent)
            .filter(|(_, s)| s.accepted && s.due_us < recovered_us)
        {
            for i in events_of(k) {
                match record.arrived_us.get(i).copied() {
                    Some(0) | None => return None,
                    Some(at) => last = last.max(at),
                }
            }
        }
    }
    Some(((last - recovered_us) as f64 / 100.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent_at(start: Start, ms: u64, accepted: bool) -> Sent {
        let offset = Duration::from_millis(ms);
        Sent {
            node: 0,
            due: start.at + offset,
            due_us: start.unix_us_at(offset),
            sent: start.at + offset,
            answered: start.at + offset + Duration::from_millis(4),
            accepted,
        }
    }

    fn record_with(arrivals: &[(usize, u64)]) -> Record {
        let mut record = Record {
            arrived_us: vec![0; 3 * EVENTS_PER_BATCH],
            arrival_order: vec![0; 3 * EVENTS_PER_BATCH],
            delivered: 0,
            duplicates: 0,
            unrecognized: 0,
            requests_us: Vec::new(),
        };
        for &(i, at) in arrivals {
            record.arrived_us[i] = at;
        }
        record
    }

    #[test]
    fn latencies_count_from_the_stamp_and_missing_events_separately() {
        let start = Start {
            at: Instant::now(),
            unix_us: 1_000_000,
        };
        let sent = [sent_at(start, 0, true), sent_at(start, 10, false)];
        let arrivals: Vec<(usize, u64)> = (0..9).map(|i| (i, 1_003_000)).collect();
        let record = record_with(&arrivals);
        let batches: Vec<(u64, &Sent)> = (0u64..).zip(&sent).collect();
        let (values, missing) = latencies(&batches, &[record]);
        assert_eq!(values, [3.0; 9]);
        // Event 9 of the accepted batch; the refused batch owes nothing.
        assert_eq!(missing, 1);
    }

    #[test]
    fn the_backlog_drains_when_its_last_event_arrives() {
        let start = Start {
            at: Instant::now(),
            unix_us: 1_000_000,
        };
        let sent = [sent_at(start, 0, true), sent_at(start, 100, true)];
        let mut arrivals: Vec<(usize, u64)> = (0..10).map(|i| (i, 1_050_000)).collect();
        arrivals.push((10, 1_000_000));
        let record = record_with(&arrivals);
        // Recovered at 20 ms: only batch 0 was owed, and it arrived 30 ms later.
        assert_eq!(drained_after(&sent, &[record], 1_020_000), Some(30.0));
        let none = record_with(&[]);
        assert_eq!(drained_after(&sent, &[none], 1_020_000), None);
    }

    #[test]
    fn a_batch_belongs_to_the_phase_it_was_due_in() {
        let start = Start::now();
        let plan = Plan {
            interval: Duration::from_millis(10),
            phase: Duration::from_secs(1),
            phases: 2,
            batches: 200,
            failure: Failure::Hang,
            connections: 2,
            failing: 1,
        };
        let phase = |ms| plan.phase_of(&sent_at(start, ms, true), start);
        assert_eq!(
            (
                phase(1999),
                phase(2000),
                phase(2999),
                phase(3000),
                phase(9000)
            ),
            (None, Some(0), Some(0), Some(1), Some(1))
        );
    }

    #[test]
    fn the_recovery_is_split_where_the_backlog_was_in() {
        let start = Start {
            at: Instant::now(),
            unix_us: 1_000_000,
        };
        let plan = Plan {
            interval: Duration::from_millis(500),
            phase: Duration::from_secs(1),
            phases: 3,
            batches: 3,
            failure: Failure::Hang,
            connections: 2,
            failing: 1,
        };
        // One batch in the failure phase, two in the recovery (from 4 s): one due before the
        // backlog was in (4.2 s), one after.
        let sent = [
            sent_at(start, 3_500, true),
            sent_at(start, 4_000, true),
            sent_at(start, 4_500, true),
        ];
        let arrivals: Vec<(usize, u64)> = (0..30)
            .map(|i| {
                let due_us = sent[i / EVENTS_PER_BATCH].due_us;
                (i, due_us + if i < 20 { 3_000 } else { 5_000 })
            })
            .collect();
        let healthy = [record_with(&arrivals)];
        let run = Run {
            plan: &plan,
            start,
            sent: &sent,
            failing: &[],
            healthy: &healthy,
            boundaries: &[],
        };
        let split = run.recovery_split(start.unix_us_at(Duration::from_millis(4_200)));
        assert_eq!(split.while_draining_e2e_ms.max, Some(3.0));
        assert_eq!(split.after_e2e_ms.p50, Some(5.0));
        assert_eq!(split.after_e2e_ms.max, Some(5.0));
    }
}
