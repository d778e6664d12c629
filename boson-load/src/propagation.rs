//! The propagation scenario: how soon a connection setting saved on node 1 applies on the other
//! nodes sharing one PostgreSQL database, under load.
//!
//! Setup: `--nodes` Boson processes on one fresh database; through node 1, one input connected
//! to two receivers (both send as batch): `steady`, always active, and `toggled`. Load: batches
//! of 10 events at `--rate` (default 100 batches/s), open loop, round-robin over nodes 2..N
//! (node 1 takes the admin writes). Changes: every `--change-every-ms`, node 1 saves `toggled`
//! inactive, then active again, `--changes` times.
//!
//! What is observed is what each node does. A node routes a batch to `toggled` only while its
//! in-memory catalog holds the connection active, and it routes when it accepts the batch; so
//! once everything is delivered, each batch tells the status its node applied when accepting
//! it: it reached the toggled receiver, or it did not. For change `i` and node `k`, among the
//! batches sent to `k` after the change (and before the next one), the change was applied
//! no later than the 202 of the first batch from which on every batch shows the new status
//! ("applied within", the figure quoted), and after the last batch that still showed the old
//! one was sent ("applied after"). Time zero is the moment the change is sent to node 1, so the
//! figure includes saving it; it also includes up to one gap between two batches to a node
//! (20 ms at 100 batches/s over two nodes) and that batch's time to its 202.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde::Serialize;
use serde_json::Value;

use crate::admin::{self, Admin};
use crate::cli::Args;
use crate::cluster::Cluster;
use crate::openloop::{self, Load, Sent, Start};
use crate::payload::EVENTS_PER_BATCH;
use crate::receiver::Receiver;
use crate::report::{Spread, ms};

/// Load before the first change, so the nodes have settled and the load runs steadily.
const WARM_UP: Duration = Duration::from_secs(2);
/// Load after the last change, so the last change is observed too.
const COOL_DOWN: Duration = Duration::from_secs(1);
/// Offered load when `--rate` is not given: 100 batches/s.
const DEFAULT_RATE: f64 = 1000.0;
/// How long the toggled receiver must get nothing new before its record is complete.
const SETTLED_AFTER: Duration = Duration::from_secs(2);

/// Runs the scenario on a fresh database on `--database-url`'s server and prints one JSON line.
pub(crate) async fn run(args: &Args, http: &reqwest::Client) -> Result<()> {
    ensure!(
        args.database_url.is_some(),
        "the propagation scenario runs on PostgreSQL: pass --database-url"
    );
    let cluster = Cluster::start(args, http).await?;
    let measured = measure(args, http, &cluster).await;
    cluster.stop().await;
    println!("{}", measured?.to_json_line());
    Ok(())
}

/// The run's schedule.
#[derive(Debug)]
struct Plan {
    /// Time between two batches.
    interval: Duration,
    batches: u64,
    changes: u64,
    every: Duration,
}

impl Plan {
    fn new(args: &Args) -> Self {
        let rate = args.rate.unwrap_or(DEFAULT_RATE);
        let changes = args.changes + args.changes % 2;
        let every = Duration::from_millis(args.change_every_ms);
        let span = WARM_UP + every.mul_f64(changes as f64) + COOL_DOWN;
        let interval = Duration::from_secs_f64(EVENTS_PER_BATCH as f64 / rate);
        let batches = (span.as_secs_f64() / interval.as_secs_f64()).ceil() as u64;
        Self {
            interval,
            batches,
            changes,
            every,
        }
    }

    fn total_events(&self) -> usize {
        usize::try_from(self.batches).unwrap_or(usize::MAX) * EVENTS_PER_BATCH
    }

    fn offered_events_per_s(&self) -> f64 {
        EVENTS_PER_BATCH as f64 / self.interval.as_secs_f64()
    }
}

/// One status change saved on node 1.
#[derive(Debug, Clone, Copy)]
struct Change {
    /// When it was sent to node 1.
    at: Instant,
    active: bool,
}

async fn measure(args: &Args, http: &reqwest::Client, cluster: &Cluster) -> Result<Report> {
    let nodes = cluster.nodes();
    ensure!(
        nodes.len() >= 2,
        "the propagation scenario needs --nodes 2 or more"
    );
    let plan = Plan::new(args);
    let steady = Receiver::start(plan.total_events()).await?;
    let toggled = Receiver::start(plan.total_events()).await?;
    let admin = Admin {
        http,
        base_url: nodes[0].base_url(),
        admin_token: nodes[0].admin_token(),
    };
    let (credentials, connection) =
        admin::setup_toggled_pipeline(&admin, &steady.url(), &toggled.url()).await?;
    let targets = cluster.event_urls().split_off(1);
    openloop::wait_until_known(http, &targets, &credentials).await?;
    eprintln!(
        "boson-load: {} batches at {} events/s to {} nodes, {} changes every {:?}",
        plan.batches,
        plan.offered_events_per_s(),
        targets.len(),
        plan.changes,
        plan.every
    );

    let load = Load {
        http,
        targets: &targets,
        credentials: &credentials,
        interval: plan.interval,
        batches: plan.batches,
        users: None,
    };
    let start = Start::now();
    let (sent, changes) = tokio::join!(
        openloop::send(&load, start),
        make_changes(&admin, &connection, &plan, start.at),
    );
    let (sent, changes) = (sent?, changes?);
    let accepted = sent.iter().filter(|s| s.accepted).count() as u64;
    crate::wait_for_deliveries(
        &steady,
        accepted * EVENTS_PER_BATCH as u64,
        args.drain_timeout(),
    )
    .await;
    wait_until_settled(&toggled).await;
    let routed = routed(&toggled.seen(), sent.len());
    let observation = observe(&sent, &routed, &changes, targets.len());
    let delivered = steady.stop().delivered;
    toggled.stop();
    Ok(Report::new(args, &plan, &sent, delivered, observation))
}

/// Saves the toggled connection inactive, active, … on node 1, one change every `every` from
/// the end of the warm-up.
async fn make_changes(
    admin: &Admin<'_>,
    connection: &Value,
    plan: &Plan,
    started: Instant,
) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    for i in 0..plan.changes {
        let due = started + WARM_UP + plan.every.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let active = i % 2 == 1;
        let at = Instant::now();
        admin.set_status(connection, active).await?;
        changes.push(Change { at, active });
    }
    Ok(changes)
}

/// Waits until the toggled receiver has got nothing new for `SETTLED_AFTER`.
async fn wait_until_settled(receiver: &Receiver) {
    let mut count = receiver.delivered();
    loop {
        tokio::time::sleep(SETTLED_AFTER).await;
        let now = receiver.delivered();
        if now == count {
            return;
        }
        count = now;
    }
}

/// Whether each of `batches` batches reached the receiver whose record of events is `seen`.
fn routed(seen: &[bool], batches: usize) -> Vec<bool> {
    (0..batches)
        .map(|k| {
            let events = k * EVENTS_PER_BATCH..(k + 1) * EVENTS_PER_BATCH;
            seen.get(events)
                .is_some_and(|events| events.iter().any(|e| *e))
        })
        .collect()
}

/// What the batches say about each change on each node.
#[derive(Debug, Default)]
struct Observation {
    /// Per (change, node): ms from the change to the 202 of the first batch from which on all
    /// show the new status.
    applied_within_ms: Vec<f64>,
    /// Per (change, node): ms from the change to the send of the last batch that showed the old
    /// status (0 if none did).
    applied_after_ms: Vec<f64>,
    /// (change, node) pairs where the new status was not settled before the next change, or
    /// cannot be told apart from the status before the previous change.
    missing: u64,
    /// Batches that showed the old status again after one had shown the new: a node going
    /// back to an older catalog, or two batches accepted in the other order than sent.
    flips_back: u64,
}

/// Reads every change on every node of `nodes` from the batches (`routed[k]`: batch `k` reached
/// the toggled receiver).
fn observe(sent: &[Sent], routed: &[bool], changes: &[Change], nodes: usize) -> Observation {
    let mut observation = Observation::default();
    for node in 0..nodes {
        // Before the first change every node routes to the active connection (the warm-up).
        let mut previous_settled = true;
        for (i, change) in changes.iter().enumerate() {
            let until = changes.get(i + 1).map(|next| next.at);
            let mut window: Vec<(Sent, bool)> = sent
                .iter()
                .zip(routed)
                .filter(|(s, _)| s.node == node && s.accepted && s.sent >= change.at)
                .filter(|(s, _)| until.is_none_or(|until| s.sent < until))
                .map(|(s, routed)| (*s, *routed == change.active))
                .collect();
            window.sort_by_key(|(s, _)| s.sent);
            previous_settled = observation.add(change.at, &window, previous_settled);
        }
    }
    observation
}

impl Observation {
    /// Adds one node's reading of one change made at `at`: the batches sent to it after the
    /// change, in order of sending, each with whether it shows the new status. Answers whether
    /// the new status settled.
    ///
    /// A reading counts only when the node is known to have been in the old status when the
    /// change was made: the previous change settled on it, or a batch after this change still
    /// showed the old status. A node that never applied the previous change shows this one's
    /// status (the one before the previous) all along, which is no sign of applying it.
    fn add(&mut self, at: Instant, window: &[(Sent, bool)], previous_settled: bool) -> bool {
        // From `settled` on, every batch shows the new status.
        let settled = window
            .iter()
            .rposition(|(_, new)| !new)
            .map_or(0, |last_old| last_old + 1);
        let Some((first_settled, _)) = window.get(settled) else {
            self.missing += 1;
            return false;
        };
        if settled == 0 && !previous_settled {
            self.missing += 1;
            return true;
        }
        let first_new = window.iter().position(|(_, new)| *new).unwrap_or(settled);
        self.flips_back += window[first_new..settled]
            .iter()
            .filter(|(_, new)| !new)
            .count() as u64;
        self.applied_within_ms
            .push(ms(first_settled.answered.saturating_duration_since(at)));
        let after = settled.checked_sub(1).map_or(Duration::ZERO, |j| {
            window[j].0.sent.saturating_duration_since(at)
        });
        self.applied_after_ms.push(ms(after));
        true
    }
}

/// The scenario's one JSON line.
#[derive(Debug, Serialize)]
struct Report {
    scenario: &'static str,
    nodes: u64,
    changes: u64,
    change_every_ms: u64,
    offered_events_per_s: f64,
    batches: u64,
    /// Batches not answered 202.
    errors: u64,
    /// Distinct events that reached the steady receiver.
    delivered: u64,
    /// (change, node) pairs measured.
    observed: usize,
    missing: u64,
    flips_back: u64,
    applied_within_ms: Spread,
    applied_after_ms: Spread,
}

impl Report {
    fn new(
        args: &Args,
        plan: &Plan,
        sent: &[Sent],
        delivered: u64,
        observation: Observation,
    ) -> Self {
        Self {
            scenario: "propagation",
            nodes: args.node_count(),
            changes: plan.changes,
            change_every_ms: args.change_every_ms,
            offered_events_per_s: (plan.offered_events_per_s() * 10.0).round() / 10.0,
            batches: plan.batches,
            errors: sent.iter().filter(|s| !s.accepted).count() as u64,
            delivered,
            observed: observation.applied_within_ms.len(),
            missing: observation.missing,
            flips_back: observation.flips_back,
            applied_within_ms: Spread::of(observation.applied_within_ms),
            applied_after_ms: Spread::of(observation.applied_after_ms),
        }
    }

    fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch to node 0 sent `sent` ms after `zero` and answered 5 ms later.
    fn batch_at(zero: Instant, sent: u64) -> Sent {
        let sent = zero + Duration::from_millis(sent);
        Sent {
            node: 0,
            due: sent,
            due_us: 0,
            sent,
            answered: sent + Duration::from_millis(5),
            accepted: true,
        }
    }

    #[test]
    fn a_change_is_applied_between_the_last_old_batch_and_the_first_of_the_new_run() {
        let zero = Instant::now();
        let window: Vec<(Sent, bool)> =
            [(10, false), (30, true), (50, false), (70, true), (90, true)]
                .into_iter()
                .map(|(ms, new)| (batch_at(zero, ms), new))
                .collect();
        let mut observation = Observation::default();
        assert!(observation.add(zero, &window, true));
        assert_eq!(observation.applied_within_ms, [75.0]);
        assert_eq!(observation.applied_after_ms, [50.0]);
        assert_eq!(observation.flips_back, 1);
        assert_eq!(observation.missing, 0);
    }

    #[test]
    fn a_change_not_settled_before_the_next_one_is_missing() {
        let zero = Instant::now();
        let mut observation = Observation::default();
        let unsettled = [(batch_at(zero, 10), true), (batch_at(zero, 30), false)];
        assert!(!observation.add(zero, &unsettled, true));
        assert!(!observation.add(zero, &[], true));
        assert_eq!(observation.missing, 2);
        assert!(observation.applied_within_ms.is_empty());
    }

    #[test]
    fn after_a_missed_change_only_a_visible_switch_counts() {
        let zero = Instant::now();
        let mut observation = Observation::default();
        // All new from the start, but the node never left the status before the previous
        // change: no reading.
        let all_new = [(batch_at(zero, 10), true), (batch_at(zero, 30), true)];
        assert!(observation.add(zero, &all_new, false));
        assert_eq!(observation.missing, 1);
        // Old, then new: the switch is seen, whatever came before.
        let switch = [(batch_at(zero, 10), false), (batch_at(zero, 30), true)];
        assert!(observation.add(zero, &switch, false));
        assert_eq!(observation.applied_within_ms, [35.0]);
    }

    #[test]
    fn each_change_is_read_per_node_from_the_batches_sent_after_it() {
        let zero = Instant::now();
        let changes = [
            Change {
                at: zero + Duration::from_millis(100),
                active: false,
            },
            Change {
                at: zero + Duration::from_millis(300),
                active: true,
            },
        ];
        // Node 0 applies each change by its second batch, node 1 at once.
        let sends = [
            (0, 50, true),
            (1, 60, true),
            (0, 120, true),
            (1, 130, false),
            (0, 160, false),
            (1, 170, false),
            (0, 320, false),
            (1, 330, true),
            (0, 360, true),
        ];
        let sent: Vec<Sent> = sends
            .iter()
            .map(|&(node, ms, _)| Sent {
                node,
                ..batch_at(zero, ms)
            })
            .collect();
        let routed: Vec<bool> = sends.iter().map(|&(_, _, routed)| routed).collect();
        let observation = observe(&sent, &routed, &changes, 2);
        assert_eq!(observation.missing, 0);
        assert_eq!(observation.applied_within_ms, [65.0, 65.0, 35.0, 35.0]);
        assert_eq!(observation.applied_after_ms, [20.0, 20.0, 0.0, 0.0]);
    }

    #[test]
    fn a_batch_counts_as_routed_when_its_events_arrived() {
        let mut seen = vec![false; 3 * EVENTS_PER_BATCH];
        seen[EVENTS_PER_BATCH + 3] = true;
        assert_eq!(routed(&seen, 3), [false, true, false]);
    }
}
