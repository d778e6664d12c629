//! The recovery scenario: after an outage of the receiver, how soon is the backlog delivered,
//! how hard was the receiver tried while it was down, and is each user's order kept?
//!
//! Setup: `--nodes` Boson processes (default 1) with their default settings, one input, one
//! connection (one request per event, or per batch with `--send-as-batch`; ordered per user with
//! `--per-user`) to an [`Endpoint`].
//! Load: `--rate` events/s (default 500) in batches of 10, open loop, round-robin over the
//! nodes, from 100 users in turn (so each user has many batches). After 5 s the endpoint fails
//! for `--outage-secs` (default 30) as `--failure` says (default 503; `refuse` closes its port),
//! then is healthy again while the load goes on for 20 s more; then the run waits until every
//! accepted event has arrived (at most `--drain-timeout-secs`).
//!
//! Figures: from the recovery until every event accepted before it had arrived (`drained_ms`,
//! the target is 10 s); how long after the recovery the events accepted during the outage
//! arrived; the end-to-end latency of the events accepted before the outage and after the
//! recovery; the requests the endpoint got during the outage (not countable when it refuses
//! connections) and the attempts Boson counted as retries; and the events that arrived before
//! an event of the same user accepted earlier (order of acceptance: the order of the 202s).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::admin::{self, Admin};
use crate::boson::Boson;
use crate::cli::{Args, Failure};
use crate::cluster::Cluster;
use crate::cpu;
use crate::endpoint::{self, Endpoint, Mode, Record};
use crate::metrics;
use crate::openloop::{self, Load, Sent, Start, events_of};
use crate::payload::EVENTS_PER_BATCH;
use crate::report::{Spread, ms};

/// Offered load when `--rate` is not given.
const DEFAULT_RATE: f64 = 500.0;
/// Healthy load before the outage.
const BEFORE: Duration = Duration::from_secs(5);
/// Load after the recovery.
const AFTER: Duration = Duration::from_secs(20);
/// Batch `k` comes from user `k mod USERS`.
const USERS: u64 = 100;

/// Runs the scenario and prints one JSON line (and a summary on stderr).
pub(crate) async fn run(args: &Args, http: &reqwest::Client) -> Result<()> {
    let plan = Plan::new(args);
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
    batches: u64,
    outage: Duration,
    failure: Failure,
}

impl Plan {
    fn new(args: &Args) -> Self {
        let interval =
            Duration::from_secs_f64(EVENTS_PER_BATCH as f64 / args.rate_or(DEFAULT_RATE));
        let outage = Duration::from_secs(args.outage_secs);
        let span = BEFORE + outage + AFTER;
        Self {
            interval,
            batches: (span.as_secs_f64() / interval.as_secs_f64()).round() as u64,
            outage,
            failure: args.failure.unwrap_or(Failure::Status503),
        }
    }

    fn total_events(&self) -> usize {
        usize::try_from(self.batches).unwrap_or(usize::MAX) * EVENTS_PER_BATCH
    }

    fn offered_events_per_s(&self) -> f64 {
        EVENTS_PER_BATCH as f64 / self.interval.as_secs_f64()
    }
}

/// When the endpoint went down and came back (Unix µs), what Boson did meanwhile, and the CPU
/// used.
#[derive(Debug, Clone, Copy)]
struct Outage {
    down_us: u64,
    up_us: u64,
    /// Retry attempts Boson counted during the outage, over all nodes.
    retries: u64,
    cpu_during: Option<cpu::Usage>,
    cpu_at_up: Option<cpu::Reading>,
    /// From the recovery to the end of the load.
    cpu_after: Option<cpu::Usage>,
}

/// The endpoint, and what is needed to see what its outage cost Boson.
#[derive(Debug)]
struct Watch<'a> {
    http: &'a reqwest::Client,
    nodes: &'a [Boson],
    connection_ids: &'a [String],
    endpoint: &'a Endpoint,
}

impl Watch<'_> {
    /// Takes the endpoint down `BEFORE` after the start and brings it back after the outage.
    async fn outage(&self, plan: &Plan, start: Start) -> Result<Outage> {
        tokio::time::sleep_until((start.at + BEFORE).into()).await;
        // Read before each switch: no request can fail (or succeed) because of it yet.
        let retries_at_down = self.retries().await?;
        let cpu_at_down = self.cpu();
        let (_, down_us) = self.endpoint.set_mode(Mode::Failing(plan.failure));
        tokio::time::sleep_until((start.at + BEFORE + plan.outage).into()).await;
        let retries_at_up = self.retries().await?;
        let cpu_at_up = self.cpu();
        let (_, up_us) = self.endpoint.set_mode(Mode::Healthy);
        Ok(Outage {
            down_us,
            up_us,
            retries: retries_at_up.saturating_sub(retries_at_down),
            cpu_during: cpu_at_up.zip(cpu_at_down).map(|(up, down)| up.since(&down)),
            cpu_at_up,
            cpu_after: None,
        })
    }

    async fn retries(&self) -> Result<u64> {
        let counts = metrics::attempts(self.http, self.nodes, self.connection_ids, "retry").await?;
        Ok(counts.iter().sum())
    }

    fn cpu(&self) -> Option<cpu::Reading> {
        cpu::Reading::take(self.nodes.iter().map(Boson::cpu_secs))
            .inspect_err(|e| eprintln!("boson-load: CPU time unavailable: {e:#}"))
            .ok()
    }
}

async fn measure(
    args: &Args,
    http: &reqwest::Client,
    cluster: &Cluster,
    plan: &Plan,
) -> Result<Report> {
    let endpoint = Endpoint::start(plan.total_events()).await?;
    let nodes = cluster.nodes();
    let admin = Admin {
        http,
        base_url: nodes[0].base_url(),
        admin_token: nodes[0].admin_token(),
    };
    let (credentials, connection_ids) =
        admin::setup_fan_out(&admin, &[endpoint.url()], args.send_as_batch, args.per_user).await?;
    let targets = cluster.event_urls();
    openloop::wait_until_known(http, &targets, &credentials).await?;
    eprintln!(
        "boson-load: {} batches at {} events/s to {} node(s); the endpoint fails ({}) from {:?} \
         for {:?}",
        plan.batches,
        plan.offered_events_per_s(),
        targets.len(),
        plan.failure.name(),
        BEFORE,
        plan.outage,
    );
    let load = Load {
        http,
        targets: &targets,
        credentials: &credentials,
        interval: plan.interval,
        batches: plan.batches,
        users: Some(USERS),
    };
    let start = Start::now();
    let watch = Watch {
        http,
        nodes,
        connection_ids: &connection_ids,
        endpoint: &endpoint,
    };
    let (sent, outage) = tokio::join!(openloop::send(&load, start), watch.outage(plan, start));
    let (sent, mut outage) = (sent?, outage?);
    outage.cpu_after = watch
        .cpu()
        .zip(outage.cpu_at_up)
        .map(|(now, up)| now.since(&up));
    let accepted = sent.iter().filter(|s| s.accepted).count() as u64 * EVENTS_PER_BATCH as u64;
    endpoint::wait_for_all(&[&endpoint], accepted, args.drain_timeout()).await;
    if args.timeline {
        openloop::print_timeline(&sent, start);
    }
    Ok(Report::new(args, plan, &sent, &endpoint.record(), outage))
}

/// Whether each user's events arrived in the order they were accepted. Only batches of a user
/// accepted before another was sent are surely ahead of it: two batches of one user in flight
/// at once may be committed in either order, or in one group (whose 202s come back in any
/// order), so their order is not asked of Boson.
#[derive(Debug, Default, Serialize)]
struct Order {
    users: u64,
    users_out_of_order: u64,
    /// Events that arrived before an event of the same user whose batch was accepted before
    /// their own was sent.
    events_out_of_order: u64,
    /// Of those, the events accepted after the recovery: live events overtaking the backlog.
    accepted_after_recovery: u64,
}

impl Order {
    /// Reads the order from the arrivals of the accepted batches' events, batches in the order
    /// of their 202s (batch `k` is from user `k mod users`); the recovery was at `up_us`.
    fn of(sent: &[Sent], record: &Record, users: u64, up_us: u64) -> Self {
        let mut accepted: Vec<(Instant, Instant, u64, bool)> = (0u64..)
            .zip(sent)
            .filter(|(_, s)| s.accepted)
            .map(|(k, s)| (s.answered, s.sent, k, s.due_us >= up_us))
            .collect();
        accepted.sort_unstable();
        let slots = usize::try_from(users).unwrap_or(0);
        // Per user, in the order of the 202s: when each batch was answered, and the latest
        // arrival of its events and those of the batches answered before it.
        let mut answered: Vec<Vec<(Instant, u64)>> = vec![Vec::new(); slots];
        let mut out_of_order = vec![false; slots];
        let mut order = Self {
            users,
            ..Self::default()
        };
        for (answered_at, sent_at, k, after_recovery) in accepted {
            let user = usize::try_from(k % users.max(1)).unwrap_or(0);
            let history = &mut answered[user];
            let ahead = history.partition_point(|(at, _)| *at < sent_at);
            let mut latest = ahead.checked_sub(1).map_or(0, |last| history[last].1);
            let mut own = 0;
            for i in events_of(k) {
                let arrived = record.arrival_order.get(i).copied().unwrap_or(0);
                if arrived == 0 {
                    continue;
                }
                own = own.max(arrived);
                if arrived < latest {
                    order.events_out_of_order += 1;
                    order.accepted_after_recovery += u64::from(after_recovery);
                    out_of_order[user] = true;
                } else {
                    latest = arrived;
                }
            }
            let seen = history.last().map_or(0, |(_, seen)| *seen).max(own);
            history.push((answered_at, seen));
        }
        order.users_out_of_order = out_of_order.iter().filter(|o| **o).count() as u64;
        order
    }
}

/// The scenario's one JSON line.
#[derive(Debug, Serialize)]
struct Report {
    scenario: &'static str,
    nodes: u64,
    failure: &'static str,
    outage_secs: u64,
    offered_events_per_s: f64,
    send_as_batch: bool,
    /// Whether the connection keeps each user's batches in order (`--per-user`).
    per_user: bool,
    batches: u64,
    /// Batches not answered 202.
    errors: u64,
    accepted_events: u64,
    /// Distinct events that reached the endpoint.
    delivered: u64,
    duplicates: u64,
    /// The furthest a batch was sent after it was due.
    max_lag_ms: f64,
    /// Accepted events not yet delivered when the endpoint came back.
    backlog_events: u64,
    /// From the recovery until every event accepted before it had arrived; `null` if some
    /// never did.
    drained_ms: Option<f64>,
    /// From the recovery until the first event arrived: when Boson noticed.
    first_delivery_ms: Option<f64>,
    /// Events that first arrived in each second from the recovery on (the drain's shape: how
    /// soon it reached its pace, and what that pace was).
    arrived_per_s_after_recovery: Vec<u64>,
    /// Events accepted during the outage: from the recovery to their arrival.
    outage_events_after_recovery_ms: Spread,
    /// End-to-end latency of the events accepted before the outage and after the recovery.
    before_outage_e2e_ms: Spread,
    after_recovery_e2e_ms: Spread,
    /// Requests the endpoint got while it was down (`null` when it refused connections).
    requests_during_outage: Option<u64>,
    /// Attempts Boson counted as retries while the endpoint was down, over all nodes.
    retry_attempts_during_outage: u64,
    /// Cores Boson kept busy, and other programs, during the outage and from the recovery to
    /// the end of the load.
    cpu_cores_during_outage: Option<cpu::Usage>,
    cpu_cores_after_recovery: Option<cpu::Usage>,
    order: Order,
}

/// The arrivals of the accepted events, sorted by when they were accepted relative to the
/// outage.
#[derive(Debug)]
struct Arrivals {
    /// Accepted before the recovery and not delivered by then.
    backlog_events: u64,
    /// See [`Report::drained_ms`].
    drained_ms: Option<f64>,
    /// See [`Report::first_delivery_ms`].
    first_delivery_ms: Option<f64>,
    /// Accepted during the outage: from the recovery to their arrival, in ms.
    outage_delays: Vec<f64>,
    /// End-to-end latencies (ms) of events accepted before the outage and after the recovery.
    before: Vec<f64>,
    after: Vec<f64>,
}

impl Arrivals {
    fn read(sent: &[Sent], record: &Record, outage: Outage) -> Self {
        let up_us = outage.up_us;
        let mut arrivals = Self {
            backlog_events: 0,
            drained_ms: Some(0.0),
            first_delivery_ms: None,
            outage_delays: Vec::new(),
            before: Vec::new(),
            after: Vec::new(),
        };
        for (k, s) in (0u64..).zip(sent).filter(|(_, s)| s.accepted) {
            for i in events_of(k) {
                let arrived = record.arrived_us.get(i).copied().unwrap_or(0);
                if s.due_us < up_us && (arrived == 0 || arrived >= up_us) {
                    arrivals.backlog_events += 1;
                    arrivals.drained_ms = arrivals
                        .drained_ms
                        .filter(|_| arrived != 0)
                        .map(|d| d.max(since_ms(up_us, arrived)));
                }
                if arrived == 0 {
                    continue;
                }
                if arrived >= up_us {
                    let after = since_ms(up_us, arrived);
                    arrivals.first_delivery_ms = Some(
                        arrivals
                            .first_delivery_ms
                            .map_or(after, |d: f64| d.min(after)),
                    );
                }
                if s.due_us >= up_us {
                    arrivals.after.push(since_ms(s.due_us, arrived));
                } else if s.due_us >= outage.down_us {
                    arrivals.outage_delays.push(since_ms(up_us, arrived));
                } else {
                    arrivals.before.push(since_ms(s.due_us, arrived));
                }
            }
        }
        arrivals
    }
}

impl Report {
    fn new(args: &Args, plan: &Plan, sent: &[Sent], record: &Record, outage: Outage) -> Self {
        let arrivals = Arrivals::read(sent, record, outage);
        let accepted = sent.iter().filter(|s| s.accepted).count() as u64;
        Self {
            scenario: "recovery",
            nodes: args.node_count(),
            failure: plan.failure.name(),
            outage_secs: args.outage_secs,
            offered_events_per_s: (plan.offered_events_per_s() * 10.0).round() / 10.0,
            send_as_batch: args.send_as_batch,
            per_user: args.per_user,
            batches: plan.batches,
            errors: sent.len() as u64 - accepted,
            accepted_events: accepted * EVENTS_PER_BATCH as u64,
            delivered: record.delivered,
            duplicates: record.duplicates,
            max_lag_ms: (ms(openloop::max_lag(sent)) * 10.0).round() / 10.0,
            backlog_events: arrivals.backlog_events,
            drained_ms: arrivals.drained_ms.map(|d| (d * 10.0).round() / 10.0),
            first_delivery_ms: arrivals
                .first_delivery_ms
                .map(|d| (d * 10.0).round() / 10.0),
            arrived_per_s_after_recovery: per_second_from(&record.arrived_us, outage.up_us),
            outage_events_after_recovery_ms: Spread::of(arrivals.outage_delays),
            before_outage_e2e_ms: Spread::of(arrivals.before),
            after_recovery_e2e_ms: Spread::of(arrivals.after),
            requests_during_outage: (plan.failure != Failure::Refuse)
                .then(|| record.requests_between(outage.down_us, outage.up_us)),
            retry_attempts_during_outage: outage.retries,
            cpu_cores_during_outage: outage.cpu_during,
            cpu_cores_after_recovery: outage.cpu_after,
            order: Order::of(sent, record, USERS, outage.up_us),
        }
    }

    /// A few readable lines on stderr.
    fn summarize(&self) {
        eprintln!(
            "boson-load: drained {:?} ms after recovery (target ≤ 10000); outage events arrived \
             p50 {:?} / max {:?} ms after it; {:?} requests reached the endpoint during the \
             outage, Boson counted {} retries; {} of {} users saw events out of order",
            self.drained_ms,
            self.outage_events_after_recovery_ms.p50,
            self.outage_events_after_recovery_ms.max,
            self.requests_during_outage,
            self.retry_attempts_during_outage,
            self.order.users_out_of_order,
            self.order.users,
        );
    }

    fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// How many of `arrived_us` (Unix µs, 0 for not arrived) fall in each whole second from
/// `from_us`, up to the last one's second.
fn per_second_from(arrived_us: &[u64], from_us: u64) -> Vec<u64> {
    let mut counts = Vec::new();
    for &at in arrived_us.iter().filter(|&&at| at != 0 && at >= from_us) {
        let second = usize::try_from((at - from_us) / 1_000_000).unwrap_or(usize::MAX);
        if second >= counts.len() {
            counts.resize(second + 1, 0);
        }
        counts[second] += 1;
    }
    counts
}

/// Milliseconds from `from_us` to `to_us` (0 if `to_us` is earlier).
fn since_ms(from_us: u64, to_us: u64) -> f64 {
    to_us.saturating_sub(from_us) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch sent at `sent_ms` and accepted at `answered_ms`.
    fn accepted_between(sent_ms: u64, answered_ms: u64) -> Sent {
        let zero = *ZERO;
        Sent {
            node: 0,
            due: zero,
            due_us: 0,
            sent: zero + Duration::from_millis(sent_ms),
            answered: zero + Duration::from_millis(answered_ms),
            accepted: true,
        }
    }

    /// A batch answered 1 ms after it was sent, at `answered_ms`.
    fn accepted(answered_ms: u64) -> Sent {
        accepted_between(answered_ms - 1, answered_ms)
    }

    static ZERO: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

    /// Arrivals in batch order: batch 0's events first, then batch 1's, and so on.
    fn arrived_in_batch_order(batches: usize) -> Record {
        let mut record = Record {
            arrived_us: vec![1; batches * EVENTS_PER_BATCH],
            arrival_order: vec![0; batches * EVENTS_PER_BATCH],
            delivered: 0,
            duplicates: 0,
            unrecognized: 0,
            requests_us: Vec::new(),
        };
        for (place, slot) in record.arrival_order.iter_mut().enumerate() {
            *slot = place as u64 + 1;
        }
        record
    }

    #[test]
    fn arrivals_are_counted_by_whole_seconds_from_the_recovery() {
        // Not arrived (0), before the recovery, in its first second twice, none in the
        // second and third, one in the fourth.
        let arrived = [0, 500, 1_000, 1_000_999, 3_001_000];
        assert_eq!(per_second_from(&arrived, 1_000), vec![2, 0, 0, 1]);
        assert!(per_second_from(&[0, 10], 1_000).is_empty());
    }

    #[test]
    fn an_event_overtaking_an_earlier_accepted_one_of_its_user_is_out_of_order() {
        // Batches 0 and 2 are user 0's, batch 1 user 1's; batch 2 was accepted before batch 0.
        let sent = [accepted(30), accepted(10), accepted(20)];
        // Arrival: batch 0, then batch 1, then batch 2.
        let record = arrived_in_batch_order(3);
        let order = Order::of(&sent, &record, 2, 1);
        // User 0: batch 2 accepted first but arrived after batch 0, so batch 0's ten events
        // are out of order; user 1 is fine.
        assert_eq!(order.users_out_of_order, 1);
        assert_eq!(order.events_out_of_order, 10);
        assert_eq!(order.accepted_after_recovery, 0);
    }

    #[test]
    fn batches_of_a_user_in_flight_at_once_may_arrive_in_either_order() {
        // User 0's batch 2 was answered before batch 0, but batch 0 was sent before that
        // answer: both were in flight at once, and Boson may have committed batch 0 first.
        let sent = [
            accepted_between(5, 30),
            accepted(10),
            accepted_between(15, 20),
        ];
        let record = arrived_in_batch_order(3);
        let order = Order::of(&sent, &record, 2, 1);
        assert_eq!(order.users_out_of_order, 0);
        assert_eq!(order.events_out_of_order, 0);
    }
}
