//! Sending event batches to `POST /v2/events`.
//!
//! `concurrency` worker tasks share one counter of batch indices, so batches go
//! out in index order and at most `concurrency` requests are in flight. With
//! several nodes, the batches are spread over them (see [`node_of`]).
//!
//! * Closed loop (no `--rate`): each worker sends its next batch as soon as
//!   the previous one is answered, measuring Boson's maximum intake.
//! * Open loop (`--rate R`): batch `k` is scheduled at `start + k · 10/R`
//!   seconds, independent of how fast Boson answers. If every worker is stuck
//!   waiting on Boson, sends fall behind schedule; the run then reports how far.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use base64::Engine as _;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinSet;

use crate::admin::InputCredentials;
use crate::clock::unix_micros;
use crate::payload::EVENTS_PER_BATCH;
use crate::payload::{Shape, this_run};

/// How many failed requests to describe on stderr before going quiet.
const MAX_LOGGED_ERRORS: u64 = 5;

/// What to send and how.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// `/v2/events` of every node; batch `k` goes to the one [`node_of`] picks.
    pub(crate) urls: Vec<String>,
    pub(crate) credentials: InputCredentials,
    pub(crate) batches: u64,
    pub(crate) concurrency: u64,
    /// Offered load in events/s; `None` for closed loop.
    pub(crate) rate: Option<f64>,
    /// What every batch looks like (its `run` is filled in by the sender).
    pub(crate) shape: Shape,
}

/// Result of the sending phase.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Events in batches answered 202.
    pub(crate) accepted_events: u64,
    /// Batches not answered 202, including transport failures.
    pub(crate) errors: u64,
    /// When the first batch was (scheduled to be) sent.
    pub(crate) started: Instant,
    /// When the last response arrived.
    pub(crate) finished: Instant,
    /// Open loop only: the furthest any send fell behind its schedule.
    pub(crate) max_lag: Duration,
}

#[derive(Debug, Default)]
struct WorkerTally {
    accepted_events: u64,
    errors: u64,
    last_response: Option<Instant>,
    max_lag: Duration,
}

/// The sending side's HTTP client: hyper's pooled client without reqwest's layers, because the
/// generator shares the machine's two cores with Boson and every microsecond it spends per
/// request is taken from the server being measured.
#[derive(Debug, Clone)]
struct Sender {
    client: Client<HttpConnector, Full<Bytes>>,
    uris: Arc<[Uri]>,
    authorization: HeaderValue,
    shape: Shape,
}

impl Sender {
    fn new(plan: &Plan) -> Result<Self> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::try_from(plan.concurrency).unwrap_or(usize::MAX))
            .build(connector);
        let credentials = format!(
            "{}:{}",
            plan.credentials.api_key, plan.credentials.api_secret
        );
        let authorization = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        );
        let uris = plan
            .urls
            .iter()
            .map(|url| url.parse().context("parsing the events URL"))
            .collect::<Result<Arc<[Uri]>>>()?;
        anyhow::ensure!(!uris.is_empty(), "no node to send to");
        Ok(Self {
            client,
            uris,
            authorization: HeaderValue::try_from(authorization)?,
            shape: Shape {
                run: this_run(),
                ..plan.shape
            },
        })
    }

    /// Sends batch `k`; `Ok` only for a 202.
    async fn send(&self, k: u64, sent_at_us: u64) -> Result<()> {
        let node = usize::try_from(node_of(k, self.uris.len() as u64)).unwrap_or(0);
        let request = Request::post(self.uris[node].clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(self.shape.batch(k, sent_at_us))))?;
        let answer = tokio::time::timeout(crate::REQUEST_TIMEOUT, async {
            let response = self.client.request(request).await.context("sending")?;
            let status = response.status();
            // Read the body even on success so the connection goes back to the pool.
            let body = response
                .into_body()
                .collect()
                .await
                .context("reading response")?;
            anyhow::Ok((status, body.to_bytes()))
        })
        .await
        .context("no answer in time")??;
        let (status, body) = answer;
        anyhow::ensure!(
            status == StatusCode::ACCEPTED,
            "answered {status}: {}",
            String::from_utf8_lossy(&body)
        );
        Ok(())
    }
}

/// The node batch `k` goes to: spread evenly but not in step with `k`, because the batch's user
/// is `k mod users` (see `payload.rs`) and a plain `k mod nodes` would send all of one user's
/// batches to one node whenever the node count divides the user count, so two nodes would
/// never meet over one user's row, identities or locks.
fn node_of(k: u64, nodes: u64) -> u64 {
    // A multiplicative hash (Fibonacci hashing): consecutive `k` land on scattered nodes.
    (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % nodes.max(1)
}

/// Sends every batch of the plan and waits for all responses.
pub(crate) async fn run(plan: Plan) -> Result<Outcome> {
    let sender = Sender::new(&plan)?;
    let plan = Arc::new(plan);
    let next_batch = Arc::new(AtomicU64::new(0));
    let logged_errors = Arc::new(AtomicU64::new(0));
    // Seconds between batches in open loop.
    let interval = plan.rate.map(|rate| EVENTS_PER_BATCH as f64 / rate);
    // One reference point in both clocks: `Instant` for scheduling (monotonic),
    // Unix micros for the stamps the receiver compares against.
    let started = Instant::now();
    let started_us = unix_micros();

    let mut workers = JoinSet::new();
    for _ in 0..plan.concurrency {
        let (sender, plan) = (sender.clone(), Arc::clone(&plan));
        let (next_batch, logged_errors) = (Arc::clone(&next_batch), Arc::clone(&logged_errors));
        workers.spawn(async move {
            let mut tally = WorkerTally::default();
            loop {
                let k = next_batch.fetch_add(1, Ordering::Relaxed);
                if k >= plan.batches {
                    break;
                }
                // Open loop stamps the *intended* send time, not the actual
                // one: if Boson is slow to answer and sends fall behind, that
                // wait is part of what a real client would experience, and
                // stamping the actual time would hide it (coordinated omission).
                // Closed loop has no schedule, so it stamps the actual time.
                let sent_at_us = match interval {
                    Some(interval) => {
                        let offset = Duration::from_secs_f64(k as f64 * interval);
                        let due = started + offset;
                        tokio::time::sleep_until(due.into()).await;
                        tally.max_lag = tally.max_lag.max(due.elapsed());
                        started_us + u64::try_from(offset.as_micros()).unwrap_or(u64::MAX)
                    }
                    None => unix_micros(),
                };
                match sender.send(k, sent_at_us).await {
                    Ok(()) => tally.accepted_events += EVENTS_PER_BATCH as u64,
                    Err(e) => {
                        tally.errors += 1;
                        if logged_errors.fetch_add(1, Ordering::Relaxed) < MAX_LOGGED_ERRORS {
                            eprintln!("boson-load: batch {k} failed: {e:#}");
                        }
                    }
                }
                tally.last_response = Some(Instant::now());
            }
            tally
        });
    }

    let mut outcome = Outcome {
        accepted_events: 0,
        errors: 0,
        started,
        finished: started,
        max_lag: Duration::ZERO,
    };
    while let Some(tally) = workers.join_next().await {
        let tally = tally.context("sender task panicked")?;
        outcome.accepted_events += tally.accepted_events;
        outcome.errors += tally.errors;
        outcome.max_lag = outcome.max_lag.max(tally.max_lag);
        if let Some(t) = tally.last_response {
            outcome.finished = outcome.finished.max(t);
        }
    }
    let errors = outcome.errors;
    if errors > MAX_LOGGED_ERRORS {
        eprintln!("boson-load: {errors} batches failed in total");
    }
    Ok(outcome)
}

/// Batch `k` of the default shape (small, with an MPID) from user `k`.
#[cfg(test)]
pub(crate) fn batch(k: u64, sent_at_us: u64) -> String {
    batch_from(k, k, sent_at_us)
}

/// Batch `k` of the default shape from user `user` (`customer_id` `user-<user>`, MPID
/// `user + 1`), so that several batches can come from one user.
pub(crate) fn batch_from(k: u64, user: u64, sent_at_us: u64) -> String {
    let shape = Shape {
        run: this_run(),
        ..Shape::default()
    };
    shape.batch_of(k, user, sent_at_us)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicU64;

    use axum::extract::State;
    use axum::routing::post;

    use super::*;
    use crate::admin::InputCredentials;

    /// A node that answers 202 to every batch and counts them.
    async fn counting_node() -> (String, Arc<AtomicU64>) {
        let count = Arc::new(AtomicU64::new(0));
        let app = axum::Router::new()
            .route(
                "/v2/events",
                post(|State(count): State<Arc<AtomicU64>>| async move {
                    count.fetch_add(1, Ordering::Relaxed);
                    StatusCode::ACCEPTED
                }),
            )
            .with_state(Arc::clone(&count));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/v2/events", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, count)
    }

    #[test]
    fn every_users_batches_reach_every_node() {
        // 64 users (the default of `--identities returning`) over 2 and 4 nodes: each user's
        // batches k = u, u + 64, u + 128, … must not all go to one node.
        for nodes in [2, 4] {
            for user in 0..64 {
                let reached: HashSet<u64> =
                    (0..32).map(|i| node_of(user + 64 * i, nodes)).collect();
                assert_eq!(
                    reached.len() as u64,
                    nodes,
                    "user {user} over {nodes} nodes"
                );
            }
        }
    }

    #[tokio::test]
    async fn batches_are_spread_over_the_nodes() {
        let (first, first_count) = counting_node().await;
        let (second, second_count) = counting_node().await;
        let plan = Plan {
            urls: vec![first, second],
            credentials: InputCredentials {
                api_key: "key".to_owned(),
                api_secret: "secret".to_owned(),
            },
            batches: 40,
            concurrency: 4,
            rate: None,
            shape: Shape::default(),
        };
        let outcome = run(plan).await.expect("run");
        assert_eq!((outcome.accepted_events, outcome.errors), (400, 0));
        let counts = (
            first_count.load(Ordering::Relaxed),
            second_count.load(Ordering::Relaxed),
        );
        let expected = (0..40).fold((0, 0), |(a, b), k| match node_of(k, 2) {
            0 => (a + 1, b),
            _ => (a, b + 1),
        });
        assert_eq!(counts, expected);
        assert!(counts.0 >= 10 && counts.1 >= 10, "uneven: {counts:?}");
    }
}
