//! A webhook receiver that can be made to fail, for the isolation and recovery scenarios.
//!
//! Each [`Endpoint`] listens on its own loopback port, so the deliveries of different
//! connections are told apart and one can refuse connections while the others serve. Healthy,
//! it answers 200 and records when each event (by its run-wide index `i`) first arrived and in
//! which order; failing, it answers 500 or 503, never answers (the request hangs until Boson's
//! request timeout gives up on it), or refuses connections (its listener is closed and bound
//! again on the same port when it is healthy again). Every request is counted with the time it
//! arrived, whatever its answer, so a run can tell how hard Boson tried a failing endpoint.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::Failure;
use crate::clock::unix_micros;
use crate::receiver::read_stamps;

/// How long to keep trying to bind the port again after refusing connections.
const REBIND_WITHIN: Duration = Duration::from_secs(5);
/// How often to report drain progress on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// What an endpoint does with requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Healthy,
    Failing(Failure),
}

const REFUSING: Mode = Mode::Failing(Failure::Refuse);

/// What an endpoint saw.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    /// Per event index: when it first arrived (Unix µs), 0 if it has not.
    pub(crate) arrived_us: Vec<u64>,
    /// Per event index: its place among first arrivals (from 1), 0 if it has not arrived.
    pub(crate) arrival_order: Vec<u64>,
    /// Distinct events delivered (answered 200).
    pub(crate) delivered: u64,
    /// Repeat deliveries of an event already delivered.
    pub(crate) duplicates: u64,
    /// Events without our stamps, and bodies that were not JSON.
    pub(crate) unrecognized: u64,
    /// When each request arrived (Unix µs), whatever it was answered.
    pub(crate) requests_us: Vec<u64>,
}

impl Record {
    fn new(total_events: usize) -> Self {
        Self {
            arrived_us: vec![0; total_events],
            arrival_order: vec![0; total_events],
            delivered: 0,
            duplicates: 0,
            unrecognized: 0,
            requests_us: Vec::new(),
        }
    }

    /// Requests that arrived in `[from_us, until_us)`.
    pub(crate) fn requests_between(&self, from_us: u64, until_us: u64) -> u64 {
        self.requests_us
            .iter()
            .filter(|&&t| (from_us..until_us).contains(&t))
            .count() as u64
    }

    /// Records a body answered 200.
    fn delivered(&mut self, body: &[u8], now_us: u64) {
        let Some(stamps) = read_stamps(body) else {
            self.unrecognized += 1;
            return;
        };
        for stamp in stamps {
            let Some(i) = stamp
                .and_then(|s| s.index)
                .filter(|&i| i < self.arrived_us.len())
            else {
                self.unrecognized += 1;
                continue;
            };
            if self.arrived_us[i] != 0 {
                self.duplicates += 1;
                continue;
            }
            self.delivered += 1;
            self.arrived_us[i] = now_us.max(1);
            self.arrival_order[i] = self.delivered;
        }
    }
}

#[derive(Debug)]
struct Shared {
    record: Mutex<Record>,
    mode: watch::Receiver<Mode>,
}

impl Shared {
    fn record(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running endpoint; it stops when dropped.
#[derive(Debug)]
pub(crate) struct Endpoint {
    addr: SocketAddr,
    shared: Arc<Shared>,
    mode: watch::Sender<Mode>,
    server: JoinHandle<()>,
}

impl Endpoint {
    /// Binds an ephemeral loopback port and serves `POST /hook`, healthy, for a run of
    /// `total_events` events.
    pub(crate) async fn start(total_events: usize) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("binding an endpoint")?;
        let addr = listener.local_addr().context("reading endpoint address")?;
        let (mode, watched) = watch::channel(Mode::Healthy);
        let shared = Arc::new(Shared {
            record: Mutex::new(Record::new(total_events)),
            mode: watched.clone(),
        });
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(serve(listener, app, watched));
        Ok(Self {
            addr,
            shared,
            mode,
            server,
        })
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    /// Switches what the endpoint does from now on; answers when that was. Requests already
    /// hanging keep hanging.
    pub(crate) fn set_mode(&self, mode: Mode) -> (Instant, u64) {
        self.mode.send_replace(mode);
        (Instant::now(), unix_micros())
    }

    /// Distinct events delivered so far.
    pub(crate) fn delivered(&self) -> u64 {
        self.shared.record().delivered
    }

    /// A copy of everything seen so far.
    pub(crate) fn record(&self) -> Record {
        self.shared.record().clone()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Serves until the endpoint is dropped; while it refuses connections, with no listener at all.
async fn serve(first: TcpListener, app: Router, mut mode: watch::Receiver<Mode>) {
    let mut listener = first;
    loop {
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(e) => {
                eprintln!("boson-load: endpoint stopped: {e}");
                return;
            }
        };
        let mut refusing = mode.clone();
        let closed = async move {
            // Also ends when the endpoint is dropped.
            let _ = refusing.wait_for(|m| *m == REFUSING).await;
        };
        // Graceful: the listener closes at once, idle connections are closed, and requests in
        // flight finish.
        if let Err(e) = axum::serve(listener, app.clone())
            .with_graceful_shutdown(closed)
            .await
        {
            eprintln!("boson-load: endpoint at {addr} failed: {e}");
            return;
        }
        if mode.has_changed().is_err() || mode.wait_for(|m| *m != REFUSING).await.is_err() {
            return;
        }
        listener = match rebind(addr).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("boson-load: endpoint stopped: {e:#}");
                return;
            }
        };
    }
}

/// Binds `addr` again, retrying for a while if it is briefly unavailable.
async fn rebind(addr: SocketAddr) -> Result<TcpListener> {
    let deadline = Instant::now() + REBIND_WITHIN;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("binding {addr} again")),
        }
    }
}

async fn hook(State(shared): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    let now_us = unix_micros();
    let mode = *shared.mode.borrow();
    shared.record().requests_us.push(now_us);
    match mode {
        Mode::Healthy | Mode::Failing(Failure::None) => {}
        Mode::Failing(Failure::Status500) => return StatusCode::INTERNAL_SERVER_ERROR,
        // Refusing: a request on a connection opened just before the listener closed.
        Mode::Failing(Failure::Status503 | Failure::Refuse) => {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        // Until Boson gives up and closes the connection, which drops this future.
        Mode::Failing(Failure::Hang) => return std::future::pending().await,
    }
    // Parsed under the lock: the record is per endpoint, and the load is light.
    shared.record().delivered(&body, now_us);
    StatusCode::OK
}

/// Waits until each of `endpoints` has seen `expected` distinct events or `timeout` passes,
/// reporting progress on stderr; answers whether they all did.
pub(crate) async fn wait_for_all(
    endpoints: &[&Endpoint],
    expected: u64,
    timeout: Duration,
) -> bool {
    let begun = Instant::now();
    let mut next_progress = begun + PROGRESS_EVERY;
    loop {
        let fewest = endpoints
            .iter()
            .map(|e| e.delivered())
            .min()
            .unwrap_or(expected);
        if fewest >= expected {
            return true;
        }
        let now = Instant::now();
        if now >= begun + timeout {
            eprintln!(
                "boson-load: gave up after {timeout:?}: an endpoint has {fewest} of {expected} events"
            );
            return false;
        }
        if now >= next_progress {
            eprintln!(
                "boson-load: waiting for deliveries: {fewest} of {expected} at the slowest endpoint"
            );
            next_progress += PROGRESS_EVERY;
        }
        // Endpoints time arrivals themselves: this interval does not affect the figures.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::batch;

    #[test]
    fn first_arrivals_are_recorded_in_order_and_repeats_counted() {
        let mut record = Record::new(30);
        record.delivered(batch(1, 5).as_bytes(), 100);
        record.delivered(batch(0, 5).as_bytes(), 200);
        record.delivered(batch(1, 5).as_bytes(), 300);
        record.delivered(b"not json", 400);
        assert_eq!(record.delivered, 20);
        assert_eq!(record.duplicates, 10);
        assert_eq!(record.unrecognized, 1);
        assert_eq!(record.arrived_us[10], 100);
        assert_eq!(record.arrived_us[0], 200);
        assert_eq!(record.arrived_us[20], 0);
        assert_eq!(
            (record.arrival_order[10], record.arrival_order[19]),
            (1, 10)
        );
        assert_eq!(record.arrival_order[0], 11);
    }

    #[tokio::test]
    async fn a_refusing_endpoint_closes_its_port_and_opens_it_again() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let endpoint = Endpoint::start(10).await.expect("endpoint");
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let send = || http.post(endpoint.url()).body(batch(0, 1)).send();
        assert_eq!(send().await.expect("healthy").status(), 200);
        endpoint.set_mode(Mode::Failing(Failure::Status503));
        assert_eq!(send().await.expect("503").status(), 503);
        endpoint.set_mode(REFUSING);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(send().await.is_err(), "refused");
        endpoint.set_mode(Mode::Healthy);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(send().await.expect("back").status(), 200);
        let record = endpoint.record();
        assert_eq!((record.delivered, record.duplicates), (10, 10));
        assert_eq!(record.requests_us.len(), 3);
    }
}
