//! Three real `boson serve` processes share one PostgreSQL database and deliver to one webhook
//! while load goes to all three. One node is killed (SIGKILL) and another stopped (SIGSTOP) for
//! twice its lease and then resumed (SIGCONT): no acknowledged event may be lost, and the only
//! duplicates allowed are requests that were on the wire when a node died or stopped, each with
//! its original delivery id (issue 11, item 1: fencing).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{Receiver, multi_node_postgres};
use crate::process::{
    Boson, DELIVERY, Deliveries, Deployment, Load, POLL, assert_none_missing, tagged_batch,
};

/// Lease of a claimed job, and the request timeout (a lease must be at least twice as long).
const LEASE_SECS: u64 = 4;
const REQUEST_TIMEOUT_SECS: u64 = 2;
/// Requests in flight per connection on each node: small, so the bound below is tight.
const MAX_IN_FLIGHT: usize = 4;
/// Connections the load is delivered to.
const CONNECTIONS: usize = 1;
/// Nodes disrupted: one killed, one stopped past its lease.
const DISRUPTED: usize = 2;
/// Concurrent senders posting to each node.
const SENDERS_PER_NODE: usize = 2;
/// The receiver answers after this many milliseconds, so requests are in flight when a signal
/// lands.
const RECEIVER_LATENCY_MS: std::ops::RangeInclusive<u64> = 20..=50;
/// Silence on the webhook that counts as "delivery is over" once everything arrived.
const QUIET: Duration = Duration::from_secs(1);

#[tokio::test]
async fn killed_and_stalled_nodes_duplicate_only_requests_in_flight() {
    let Some(server) = multi_node_postgres("multinode").await else {
        return;
    };
    let started = Instant::now();
    let mut receiver = Receiver::with_latency(RECEIVER_LATENCY_MS).await;
    let mut deployment = Deployment::on_postgres(&server).await;
    deployment.set_env("BOSON_DELIVERY__LEASE_SECS", &LEASE_SECS.to_string());
    deployment.set_env(
        "BOSON_DELIVERY__REQUEST_TIMEOUT_SECS",
        &REQUEST_TIMEOUT_SECS.to_string(),
    );
    deployment.set_env(
        "BOSON_DELIVERY__MAX_IN_FLIGHT_PER_CONNECTION",
        &MAX_IN_FLIGHT.to_string(),
    );
    let killed = deployment.start().await;
    let stalled = deployment.start().await;
    let steady = deployment.start().await;
    // Sent as one request per batch: a job is then one request, and a job in flight is one
    // request on the wire (with one request per event, a job cut off after its first request
    // sends that one again too, since progress is recorded when the job ends).
    let input = killed
        .pipeline_with(
            &receiver.url("/hook"),
            json!({"status": "active", "send_as_batch": true}),
        )
        .await;
    // The other nodes learn of the new input from their catalog reload.
    let mut expected = HashSet::new();
    for (n, node) in [&killed, &stalled, &steady].into_iter().enumerate() {
        expected.extend(accepted_batch(node, &input, n).await);
    }

    let senders = Senders::watch(
        receiver.address.port(),
        [
            ("killed", killed.pid()),
            ("stalled", stalled.pid()),
            ("steady", steady.pid()),
        ],
    );
    let load = Load::start(&[&killed, &stalled, &steady], &input, SENDERS_PER_NODE);
    load.wait_for_acks(Duration::from_secs(15)).await;
    // Not waits for a condition: the load runs on between the signals, so each lands among
    // requests being accepted and deliveries in flight, and the stop outlasts the lease.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let kill_at = Instant::now();
    killed.sigkill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stop_at = Instant::now();
    stalled.signal("STOP");
    tokio::time::sleep(Duration::from_secs(2 * LEASE_SECS)).await;
    let cont_at = Instant::now();
    stalled.signal("CONT");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (acked, failed) = load.stop().await;
    expected.extend(acked);

    let mut deliveries = Deliveries::default();
    deliveries.collect(&mut receiver, &expected, DELIVERY).await;
    // Late copies (a resumed node's stale requests, jobs of batches accepted but never
    // acknowledged) still count: wait until the queue is empty and the webhook quiet.
    drain(&mut deliveries, &mut receiver, &deployment.database_url).await;

    // The bound. A request arrives twice only when the node that sent it could not record its
    // outcome before another node claimed the job: the sender died (its lease ran out), or it
    // stalled past its lease and its late, fenced update changed nothing. A node has at most
    // MAX_IN_FLIGHT requests per connection on the wire, so each disrupted node may cause at
    // most that many duplicated requests per connection, and the steady node none (issue 11:
    // "the only duplicates are requests that were already on the wire"). A request counts as
    // on the wire from its node's lease check until its outcome is committed; a request sent
    // after the stalled node resumed, for a job another node claimed meanwhile, breaks the
    // bound, and so does an outcome a node reported but had not committed when it died or
    // stalled, once its request's slot went to the next one.
    let bound = DISRUPTED * MAX_IN_FLIGHT * CONNECTIONS;
    let duplicates = deliveries.duplicate_requests();
    let lost = deliveries.missing(&expected).len();
    eprintln!(
        "multinode: {} events acknowledged, {} distinct delivered, {} requests received; \
         {duplicates} duplicated requests (bound {bound}), {lost} lost; elapsed {:.1} s; \
         unacknowledged requests: {failed:?}",
        expected.len(),
        deliveries.copies.len(),
        deliveries.requests.values().map(Vec::len).sum::<usize>(),
        started.elapsed().as_secs_f64(),
    );
    let signals = Signals {
        kill_at,
        stop_at,
        cont_at,
    };
    print_duplicates(&deliveries, &signals, &senders.stop());

    assert_none_missing(&deliveries, &expected);
    assert!(
        duplicates <= bound,
        "{duplicates} requests were delivered more than once; only the {bound} that can be on \
         the wire when {DISRUPTED} nodes die or stall ({MAX_IN_FLIGHT} in flight per connection) \
         may be"
    );
    deliveries.assert_redeliveries_keep_their_id();
}

/// Posts batch `1_000_000 + n` (apart from the load's numbers) to `node` until it is accepted,
/// which it is once the node's catalog knows the input; returns its event ids.
async fn accepted_batch(node: &Boson, input: &Value, n: usize) -> Vec<String> {
    let (batch, ids) = tagged_batch(1_000_000 + n);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = node.post_batch(input, &batch).await.expect("post a batch");
        if status == 202 {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "a node still answers {status} to the new input after 15 s"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Records what the webhook receives until no job is left in the queue and it has been quiet
/// for a moment (or `DELIVERY` has passed).
async fn drain(deliveries: &mut Deliveries, receiver: &mut Receiver, database_url: &str) {
    let pool = sqlx::PgPool::connect(database_url)
        .await
        .expect("connect to the test database");
    let deadline = Instant::now() + DELIVERY;
    while Instant::now() < deadline {
        match receiver.next_within(QUIET).await {
            Some(request) => deliveries.record(&request),
            None => {
                let jobs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
                    .fetch_one(&pool)
                    .await
                    .expect("count jobs");
                if jobs == 0 {
                    break;
                }
            }
        }
    }
    pool.close().await;
}

/// When the test sent its signals.
struct Signals {
    kill_at: Instant,
    stop_at: Instant,
    cont_at: Instant,
}

/// Prints when, and from which node, each copy of every duplicated request arrived.
fn print_duplicates(deliveries: &Deliveries, signals: &Signals, senders: &HashMap<u16, &str>) {
    let ms_after_stop = |at: Instant| {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        ms(at.saturating_duration_since(signals.stop_at))
            - ms(signals.stop_at.saturating_duration_since(at))
    };
    let mut duplicated: Vec<_> = deliveries
        .requests
        .iter()
        .filter(|(_, copies)| copies.len() > 1)
        .collect();
    duplicated.sort_by_key(|(_, copies)| copies[0].0);
    let mut by_first_sender: HashMap<&str, usize> = HashMap::new();
    for (_, copies) in &duplicated {
        let first = senders.get(&copies[0].1).copied().unwrap_or("?");
        *by_first_sender.entry(first).or_default() += copies.len() - 1;
    }
    eprintln!(
        "multinode: duplicated requests by the node that sent the first copy: \
         {by_first_sender:?} (at most {MAX_IN_FLIGHT} per disrupted node and connection)"
    );
    eprintln!(
        "multinode: copies of duplicated requests as (ms after SIGSTOP, sending node); SIGKILL \
         at {} ms, SIGCONT at {} ms:",
        ms_after_stop(signals.kill_at),
        ms_after_stop(signals.cont_at)
    );
    for (id, copies) in duplicated.iter().take(40) {
        let copies: Vec<(i64, &str)> = copies
            .iter()
            .map(|(at, port)| {
                (
                    ms_after_stop(*at),
                    senders.get(port).copied().unwrap_or("?"),
                )
            })
            .collect();
        eprintln!("  {id}: {copies:?}");
    }
    if duplicated.len() > 40 {
        eprintln!("  … and {} more", duplicated.len() - 40);
    }
}

/// Which node each connection to the receiver comes from, by its local port, sampled with `ss`
/// while the test runs. For the diagnostics only: a connection that opened and closed between
/// two samples, or a machine without `ss`, leaves a sender unknown.
struct Senders {
    ports: Arc<Mutex<HashMap<u16, &'static str>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Senders {
    fn watch(receiver_port: u16, nodes: [(&'static str, u32); 3]) -> Self {
        let ports = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let ports = Arc::clone(&ports);
            let stop = Arc::clone(&stop);
            move || {
                while !stop.load(Ordering::SeqCst) {
                    sample_senders(receiver_port, &nodes, &ports);
                    std::thread::sleep(POLL);
                }
            }
        });
        Self {
            ports,
            stop,
            thread,
        }
    }

    fn stop(self) -> HashMap<u16, &'static str> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        std::mem::take(&mut *self.ports.lock().unwrap())
    }
}

/// One `ss` sample: `ESTAB 0 0 127.0.0.1:<local> 127.0.0.1:<receiver> users:(("boson",pid=<pid>,…))`.
fn sample_senders(
    receiver_port: u16,
    nodes: &[(&'static str, u32)],
    ports: &Mutex<HashMap<u16, &'static str>>,
) {
    let Ok(output) = std::process::Command::new("ss")
        .args(["-tnpH", "dst", &format!("127.0.0.1:{receiver_port}")])
        .output()
    else {
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let mut ports = ports.lock().unwrap();
    for line in text.lines() {
        let local = line
            .split_whitespace()
            .nth(3)
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, port)| port.parse::<u16>().ok());
        let node = nodes
            .iter()
            .find(|(_, pid)| line.contains(&format!("pid={pid},")));
        if let (Some(local), Some((name, _))) = (local, node) {
            ports.insert(local, *name);
        }
    }
}
