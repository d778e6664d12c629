//! Open-loop load over several nodes, as the multi-node scenarios send it: batch `k` is due at
//! `started + k · interval` and goes to node `k mod n` at that moment, however long the answers
//! to earlier batches take, so a slow Boson cannot slow the load down (no coordinated
//! omission). Each batch is stamped with the time it was due.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use reqwest::header::CONTENT_TYPE;
use tokio::task::JoinSet;

use crate::admin::InputCredentials;
use crate::payload::EVENTS_PER_BATCH;
use crate::report::{Spread, ms};
use crate::sender::batch_from;

/// How many failed batches to describe on stderr.
const MAX_LOGGED_ERRORS: u64 = 5;
/// How long a node may take to know the input after it was created.
const KNOWN_WITHIN: Duration = Duration::from_secs(10);

/// What to send.
#[derive(Debug)]
pub(crate) struct Load<'a> {
    pub(crate) http: &'a reqwest::Client,
    /// `/v2/events` of each node.
    pub(crate) targets: &'a [String],
    pub(crate) credentials: &'a InputCredentials,
    /// Time between two batches.
    pub(crate) interval: Duration,
    pub(crate) batches: u64,
    /// Batch `k` comes from user `k mod users`; `None`: from user `k`.
    pub(crate) users: Option<u64>,
}

/// The moment the load starts, in both clocks: `Instant` for scheduling, Unix microseconds for
/// the stamps a receiver compares its own clock against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    pub(crate) at: Instant,
    pub(crate) unix_us: u64,
}

impl Start {
    pub(crate) fn now() -> Self {
        Self {
            at: Instant::now(),
            unix_us: crate::clock::unix_micros(),
        }
    }

    /// `offset` after the start, in Unix microseconds.
    pub(crate) fn unix_us_at(&self, offset: Duration) -> u64 {
        self.unix_us + u64::try_from(offset.as_micros()).unwrap_or(u64::MAX)
    }
}

/// One batch of the load.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    /// Index of the node it went to.
    pub(crate) node: usize,
    /// When it was due, which is also its stamp (Unix µs in `due_us`).
    pub(crate) due: Instant,
    pub(crate) due_us: u64,
    pub(crate) sent: Instant,
    pub(crate) answered: Instant,
    /// Answered 202.
    pub(crate) accepted: bool,
}

impl Sent {
    /// From when it was due until its answer.
    pub(crate) fn time_to_answer(&self) -> Duration {
        self.answered.saturating_duration_since(self.due)
    }
}

/// Sends the whole load and answers what happened to each batch, in batch order.
pub(crate) async fn send(load: &Load<'_>, start: Start) -> Result<Vec<Sent>> {
    ensure!(!load.targets.is_empty(), "no node to send to");
    let logged_errors = Arc::new(AtomicU64::new(0));
    let mut requests = JoinSet::new();
    for k in 0..load.batches {
        let offset = load.interval.mul_f64(k as f64);
        let due = start.at + offset;
        let due_us = start.unix_us_at(offset);
        tokio::time::sleep_until(due.into()).await;
        let node = usize::try_from(k % load.targets.len() as u64).unwrap_or(0);
        let user = load.users.map_or(k, |users| k % users.max(1));
        let request = post(
            load.http,
            &load.targets[node],
            load.credentials,
            batch_from(k, user, due_us),
        );
        let logged_errors = Arc::clone(&logged_errors);
        requests.spawn(async move {
            let sent = Instant::now();
            let answer = request.send().await;
            let answered = Instant::now();
            let accepted = matches!(&answer, Ok(r) if r.status() == reqwest::StatusCode::ACCEPTED);
            if !accepted && logged_errors.fetch_add(1, Ordering::Relaxed) < MAX_LOGGED_ERRORS {
                eprintln!("boson-load: batch {k} was not accepted: {answer:?}");
            }
            let record = Sent {
                node,
                due,
                due_us,
                sent,
                answered,
                accepted,
            };
            (k, record)
        });
    }
    let mut records = vec![None; requests.len()];
    while let Some(joined) = requests.join_next().await {
        let (k, record) = joined.context("a sending task panicked")?;
        records[usize::try_from(k)?] = Some(record);
    }
    let failed = logged_errors.load(Ordering::Relaxed);
    if failed > MAX_LOGGED_ERRORS {
        eprintln!("boson-load: {failed} batches were not accepted in total");
    }
    records
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .context("a batch went unrecorded")
}

/// The run-wide indexes of batch `k`'s events (their `i` attribute).
pub(crate) fn events_of(k: u64) -> std::ops::Range<usize> {
    let first = usize::try_from(k).unwrap_or(usize::MAX / 2) * EVENTS_PER_BATCH;
    first..first + EVENTS_PER_BATCH
}

/// Prints on stderr, for each second of the load, the batches' time to their answer (p50, p99
/// and max, ms) and how late the latest was sent: to see when a run was slow, and whether the
/// generator itself was held up (a busy machine).
pub(crate) fn print_timeline(sent: &[Sent], start: Start) {
    let mut second = 0;
    let mut rest = sent;
    while !rest.is_empty() {
        let until = start.at + Duration::from_secs(second + 1);
        let split = rest.partition_point(|s| s.due < until);
        let (this, next) = rest.split_at(split);
        if !this.is_empty() {
            let answers = Spread::of(this.iter().map(|s| ms(s.time_to_answer())).collect());
            eprintln!(
                "boson-load: second {second}: {} batches, answered p50 {:?} p99 {:?} max {:?} ms; \
                 sent up to {:.1} ms late",
                this.len(),
                answers.p50,
                answers.p99,
                answers.max,
                ms(max_lag(this)),
            );
        }
        rest = next;
        second += 1;
    }
}

/// The furthest a batch was sent after it was due.
pub(crate) fn max_lag(sent: &[Sent]) -> Duration {
    sent.iter()
        .map(|s| s.sent.saturating_duration_since(s.due))
        .max()
        .unwrap_or_default()
}

/// Waits until every node accepts the input's credentials (a body that is not JSON is answered
/// 400 by a node that knows the input and 403 by one that does not, and stores nothing), then a
/// little longer, so that every node also has the connections created after the input.
pub(crate) async fn wait_until_known(
    http: &reqwest::Client,
    targets: &[String],
    credentials: &InputCredentials,
) -> Result<()> {
    let deadline = Instant::now() + KNOWN_WITHIN;
    for target in targets {
        loop {
            let status = post(http, target, credentials, "not json".to_owned())
                .send()
                .await
                .with_context(|| format!("POST {target}"))?
                .status();
            if status == reqwest::StatusCode::BAD_REQUEST {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{target} did not know the new input within {KNOWN_WITHIN:?} (answered {status})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // On a build without change notices the connections arrive with the next reload.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

/// `POST /v2/events` with the input's credentials.
pub(crate) fn post(
    http: &reqwest::Client,
    target: &str,
    credentials: &InputCredentials,
    body: String,
) -> reqwest::RequestBuilder {
    http.post(target)
        .basic_auth(&credentials.api_key, Some(&credentials.api_secret))
        .header(CONTENT_TYPE, "application/json")
        .body(body)
}
