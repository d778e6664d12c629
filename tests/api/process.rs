//! The real `boson serve` binary, configured only through the environment, killed and restarted:
//! an event the Events API acknowledged (202) must reach the webhook even if the process dies
//! right after (SIGKILL). The deployment, process, load and delivery-accounting helpers here are
//! shared with the shutdown, starvation and multi-node tests.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{
    ADMIN_TOKEN, Receiver, batch_of, drop_database_on, event, fresh_database_url,
    fresh_postgres_database,
};

/// Loopback polling interval while waiting for the process or the webhook.
pub const POLL: Duration = Duration::from_millis(50);
/// A debug build migrating a fresh database on a busy machine can be slow to come up.
const STARTUP: Duration = Duration::from_secs(30);
/// How long every acknowledged event has to reach the webhook after a restart.
pub const DELIVERY: Duration = Duration::from_secs(30);

/// One deployment: a database and the environment every start of it shares. Keeps the logs of
/// all the processes it started and prints them if the test fails.
pub struct Deployment {
    dir: tempfile::TempDir,
    pub database_url: String,
    /// The PostgreSQL server the database was made on, when not `TEST_DATABASE_URL`'s.
    server: Option<String>,
    /// Extra environment of every process started.
    env: Vec<(String, String)>,
    /// The open-files limit (`ulimit -n`) of every process started, when set.
    open_files: Option<u32>,
    logs: Vec<PathBuf>,
}

impl Deployment {
    /// A deployment on the test database (`TEST_DATABASE_URL`'s server, or SQLite).
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let database_url = fresh_database_url(dir.path()).await;
        Self {
            dir,
            database_url,
            server: None,
            env: Vec::new(),
            open_files: None,
            logs: Vec::new(),
        }
    }

    /// A deployment on a new database on the PostgreSQL `server`.
    pub async fn on_postgres(server: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let database_url = fresh_postgres_database(server).await;
        Self {
            dir,
            database_url,
            server: Some(server.to_owned()),
            env: Vec::new(),
            open_files: None,
            logs: Vec::new(),
        }
    }

    /// Sets an environment variable (e.g. a `BOSON_…` setting) for every process started later.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// Starts every later process with at most `limit` open files (sockets included), as a
    /// service manager would; `ulimit` in a shell, since the workspace forbids `unsafe`.
    pub fn limit_open_files(&mut self, limit: u32) {
        self.open_files = Some(limit);
    }

    /// Starts `boson serve` on a free port and waits until it is ready.
    pub async fn start(&mut self) -> Boson {
        self.start_with(&[]).await
    }

    /// Starts `boson serve` with `env` set on top of the deployment's environment.
    pub async fn start_with(&mut self, env: &[(&str, &str)]) -> Boson {
        let port = free_port();
        let log_path = self
            .dir
            .path()
            .join(format!("boson-{}.log", self.logs.len() + 1));
        let log = std::fs::File::create(&log_path).expect("log file");
        self.logs.push(log_path);
        let mut command = match self.open_files {
            None => Command::new(env!("CARGO_BIN_EXE_boson")),
            Some(limit) => {
                let mut shell = Command::new("sh");
                shell.args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\"")]);
                shell.arg(env!("CARGO_BIN_EXE_boson"));
                shell
            }
        };
        command
            .arg("serve")
            .current_dir(self.dir.path())
            .env_remove("BOSON_CONFIG")
            .env("BOSON_LISTEN", format!("127.0.0.1:{port}"))
            .env("BOSON_DATABASE_URL", &self.database_url)
            .env("BOSON_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("BOSON_ALLOW_PRIVATE_DESTINATIONS", "true")
            .env("BOSON_DELIVERY__INITIAL_BACKOFF_MS", "50")
            .env("BOSON_DELIVERY__MAX_BACKOFF_SECS", "1")
            .env("BOSON_DELIVERY__POLL_INTERVAL_MS", "50")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        if self.database_url.starts_with("postgres") {
            // PostgreSQL may be shared by several nodes, so a crashed node's leases are only
            // freed when they expire (the embedded database frees them at start). A short lease
            // lets the restarted node resume within the test's wait (the lease must be at least
            // twice the request timeout); on SQLite the default 60 s lease stays, so a failure
            // to free stale leases there cannot hide.
            command.env("BOSON_DELIVERY__LEASE_SECS", "4");
            command.env("BOSON_DELIVERY__REQUEST_TIMEOUT_SECS", "2");
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command.envs(env.iter().copied());
        let child = command.spawn().expect("start the boson binary");
        let mut boson = Boson {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: http_client(),
        };
        boson.wait_ready().await;
        boson
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        // Drop a PostgreSQL test database on a thread of its own: this runs inside the test's
        // runtime, which must not be blocked.
        let url = self.database_url.clone();
        let server = self.server.clone();
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(runtime) = runtime {
                runtime.block_on(async {
                    match server {
                        Some(server) => drop_database_on(&server, &url).await,
                        None => crate::helpers::drop_database(&url).await,
                    }
                });
            }
        })
        .join();
        if std::thread::panicking() {
            for log in &self.logs {
                let text =
                    std::fs::read_to_string(log).unwrap_or_else(|e| format!("(unreadable: {e})"));
                eprintln!("----- {} -----\n{text}----- end -----", log.display());
            }
        }
    }
}

/// A running `boson serve` process, killed when dropped so a failing test leaves none behind.
pub struct Boson {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    http: reqwest::Client,
}

impl Drop for Boson {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Boson {
    /// `host:port` of the HTTP server, for raw TCP clients.
    pub fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + STARTUP;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("child status") {
                panic!("boson exited during startup with {status}");
            }
            if let Ok(r) = self.http.get(format!("{}/readyz", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("boson was not ready within {STARTUP:?}");
    }

    /// SIGKILL: no shutdown code runs, whatever was in memory is lost.
    pub fn sigkill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap the killed process");
    }

    /// Sends a signal by name (`TERM`, `STOP`, `CONT`). The workspace forbids `unsafe`, so no
    /// `libc::kill`: the `kill` command sends it.
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} failed: {sent}");
    }

    /// SIGTERM, then the exit status; fails the test if the process outlives `within`.
    pub async fn sigterm(mut self, within: Duration) -> ExitStatus {
        self.signal("TERM");
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("child status") {
                return status;
            }
            tokio::time::sleep(POLL).await;
        }
        panic!("boson did not exit within {within:?} of SIGTERM");
    }

    /// POSTs to the admin API and expects `201`.
    async fn create(&self, path: &str, body: Value) -> Value {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .expect("admin request");
        let status = response.status();
        let json: Value = response.json().await.expect("admin answer is JSON");
        assert_eq!(status, 201, "POST {path} {body} answered {json}");
        json
    }

    /// A custom-feed input connected to a webhook at `url`; returns the input (with credentials).
    pub async fn pipeline(&self, url: &str) -> Value {
        self.pipeline_with(url, json!({"status": "active"})).await
    }

    /// Like `pipeline`, with the connection's `settings`.
    pub async fn pipeline_with(&self, url: &str, settings: Value) -> Value {
        let input = self
            .create(
                "/api/v1/inputs",
                json!({"name": "process test", "platform": "custom_feed"}),
            )
            .await;
        let output = self
            .create(
                "/api/v1/outputs",
                json!({"name": "hook", "kind": "webhook", "settings": {"url": url}}),
            )
            .await;
        let connection =
            json!({"input_id": input["id"], "output_id": output["id"], "settings": settings});
        self.create("/api/v1/connections", connection).await;
        input
    }

    pub async fn post_batch(
        &self,
        input: &Value,
        batch: &Value,
    ) -> reqwest::Result<reqwest::StatusCode> {
        post_batch(&self.http, &self.base, input, batch).await
    }

    async fn metrics(&self) -> String {
        let response = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics");
        response.text().await.expect("metrics text")
    }
}

fn http_client() -> reqwest::Client {
    // Installs the TLS crypto provider reqwest needs before any client is built.
    drop(crate::helpers::http_client());
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("http client")
}

pub async fn post_batch(
    http: &reqwest::Client,
    base: &str,
    input: &Value,
    batch: &Value,
) -> reqwest::Result<reqwest::StatusCode> {
    let response = http
        .post(format!("{base}/v2/events"))
        .basic_auth(
            input["api_key"].as_str().expect("api_key"),
            input["api_secret"].as_str(),
        )
        .json(batch)
        .send()
        .await?;
    Ok(response.status())
}

/// A port nothing listens on right now (bound, then released).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("address").port()
}

/// Batch `n`: two custom events whose custom attributes carry the ids `b<n>-e0` and `b<n>-e1`,
/// of a user of its own (MPID `n + 1`), so that concurrent batches never wait for one another on
/// a user's profile row.
pub fn tagged_batch(n: usize) -> (Value, Vec<String>) {
    let ids: Vec<String> = (0..2).map(|k| format!("b{n}-e{k}")).collect();
    let events: Vec<Value> = ids
        .iter()
        .map(|id| {
            let mut custom = event("custom_event");
            custom["data"]["custom_attributes"]["id"] = json!(id);
            custom
        })
        .collect();
    let mut batch = batch_of(&[]);
    batch["events"] = json!(events);
    batch["mpid"] = json!(n + 1);
    (batch, ids)
}

/// What the webhook received, by event id and by request.
#[derive(Debug, Default)]
pub struct Deliveries {
    /// How many times each event arrived.
    pub copies: HashMap<String, usize>,
    /// The `x-boson-delivery-id`s each event arrived with.
    delivery_ids: HashMap<String, HashSet<String>>,
    /// When each request (by `x-boson-delivery-id`) arrived, every time it did.
    pub requests: HashMap<String, Vec<(Instant, u16)>>,
}

impl Deliveries {
    pub fn record(&mut self, request: &crate::helpers::Received) {
        let delivery_id = request
            .headers
            .get("x-boson-delivery-id")
            .and_then(|v| v.to_str().ok())
            .expect("webhook request without x-boson-delivery-id")
            .to_owned();
        self.requests
            .entry(delivery_id.clone())
            .or_default()
            .push((request.at, request.peer.port()));
        for event in request.events() {
            let id = event["data"]["custom_attributes"]["id"]
                .as_str()
                .expect("event without an id")
                .to_owned();
            *self.copies.entry(id.clone()).or_default() += 1;
            self.delivery_ids
                .entry(id)
                .or_default()
                .insert(delivery_id.clone());
        }
    }

    /// Records requests until every `expected` event has arrived or `within` has passed.
    pub async fn collect(
        &mut self,
        receiver: &mut Receiver,
        expected: &HashSet<String>,
        within: Duration,
    ) {
        let deadline = Instant::now() + within;
        while !expected.iter().all(|id| self.copies.contains_key(id)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match receiver.next_within(left).await {
                Some(request) => self.record(&request),
                None => break,
            }
        }
    }

    pub fn missing<'a>(&self, expected: &'a HashSet<String>) -> Vec<&'a String> {
        let mut missing: Vec<&String> = expected
            .iter()
            .filter(|id| !self.copies.contains_key(*id))
            .collect();
        missing.sort();
        missing
    }

    fn duplicates(&self) -> usize {
        self.copies.values().map(|n| n - 1).sum()
    }

    /// Requests that arrived more than once, counted once per extra copy.
    pub fn duplicate_requests(&self) -> usize {
        self.requests.values().map(|at| at.len() - 1).sum()
    }

    /// A re-delivered request must keep its delivery id, or receivers cannot de-duplicate it.
    pub fn assert_redeliveries_keep_their_id(&self) {
        let changed: Vec<_> = self
            .delivery_ids
            .iter()
            .filter(|(_, ids)| ids.len() > 1)
            .take(5)
            .collect();
        assert!(
            changed.is_empty(),
            "events re-delivered under a different x-boson-delivery-id: {changed:?}"
        );
    }
}

/// Drains the receiver until every `expected` event has arrived or `within` has passed.
pub async fn collect(
    receiver: &mut Receiver,
    expected: &HashSet<String>,
    within: Duration,
) -> Deliveries {
    let mut deliveries = Deliveries::default();
    deliveries.collect(receiver, expected, within).await;
    deliveries
}

pub fn assert_none_missing(deliveries: &Deliveries, expected: &HashSet<String>) {
    let missing = deliveries.missing(expected);
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events never reached the webhook, e.g. {:?}",
        missing.len(),
        expected.len(),
        &missing[..missing.len().min(10)]
    );
}

/// Concurrent senders posting tagged batches until stopped, recording which were acknowledged.
pub struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    senders: Vec<tokio::task::JoinHandle<HashMap<String, usize>>>,
}

impl Load {
    /// `senders` concurrent senders per node, each posting to its node only; batch numbers are
    /// shared, so every event id is unique across the nodes.
    pub fn start(nodes: &[&Boson], input: &Value, senders: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let next = Arc::new(AtomicUsize::new(0));
        let senders = nodes
            .iter()
            .flat_map(|boson| std::iter::repeat_n(*boson, senders))
            .map(|boson| {
                let sender = Sender {
                    http: boson.http.clone(),
                    base: boson.base.clone(),
                    input: input.clone(),
                    stop: Arc::clone(&stop),
                    acked: Arc::clone(&acked),
                    next: Arc::clone(&next),
                };
                tokio::spawn(sender.run())
            })
            .collect();
        Self {
            stop,
            acked,
            senders,
        }
    }

    pub fn acked_events(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until some batch has been acknowledged, so the kill happens under real load.
    pub async fn wait_for_acks(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.acked_events() == 0 && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops the senders; returns the acknowledged event ids and a count of every other outcome.
    pub async fn stop(self) -> (HashSet<String>, HashMap<String, usize>) {
        self.stop.store(true, Ordering::SeqCst);
        let mut outcomes = HashMap::new();
        for sender in self.senders {
            for (outcome, n) in sender.await.expect("sender task") {
                *outcomes.entry(outcome).or_default() += n;
            }
        }
        let acked = self.acked.lock().unwrap().iter().cloned().collect();
        (acked, outcomes)
    }
}

struct Sender {
    http: reqwest::Client,
    base: String,
    input: Value,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicUsize>,
}

impl Sender {
    /// Posts batches until stopped; returns how many requests ended how (other than 202).
    async fn run(self) -> HashMap<String, usize> {
        let mut outcomes: HashMap<String, usize> = HashMap::new();
        while !self.stop.load(Ordering::SeqCst) {
            let (batch, ids) = tagged_batch(self.next.fetch_add(1, Ordering::SeqCst));
            let outcome = match post_batch(&self.http, &self.base, &self.input, &batch).await {
                Ok(status) if status == 202 => {
                    self.acked.lock().unwrap().extend(ids);
                    continue;
                }
                Ok(status) => format!("HTTP {status}"),
                Err(error) if error.is_connect() => "connection refused".to_owned(),
                Err(_) => "request failed".to_owned(),
            };
            *outcomes.entry(outcome).or_default() += 1;
            // A node that is down refuses at once: do not spin on it.
            tokio::time::sleep(POLL).await;
        }
        outcomes
    }
}

#[tokio::test]
async fn sigkill_loses_no_accepted_event() {
    let mut receiver = Receiver::start().await;
    let mut deployment = Deployment::new().await;
    let boson = deployment.start().await;
    let input = boson.pipeline(&receiver.url("/hook")).await;

    let load = Load::start(&[&boson], &input, 8);
    load.wait_for_acks(Duration::from_secs(15)).await;
    // Not a wait for a condition: the load runs on for a while so that the kill lands among
    // requests being committed and deliveries in flight.
    tokio::time::sleep(Duration::from_millis(400)).await;
    boson.sigkill();
    let (acked, failed) = load.stop().await;
    assert!(
        !acked.is_empty(),
        "no batch was acknowledged before the kill (other outcomes: {failed:?})"
    );

    // What arrived before the kill; the rest is the restarted process's to deliver.
    let mut deliveries = Deliveries::default();
    deliveries
        .collect(&mut receiver, &acked, Duration::ZERO)
        .await;
    let undelivered_at_kill = deliveries.missing(&acked).len();

    let _restarted = deployment.start().await;
    deliveries.collect(&mut receiver, &acked, DELIVERY).await;
    println!(
        "acknowledged {} events ({undelivered_at_kill} not yet delivered at the kill), {} distinct delivered \
         ({} duplicates); unacknowledged requests: {failed:?}",
        acked.len(),
        deliveries.copies.len(),
        deliveries.duplicates(),
    );
    assert_none_missing(&deliveries, &acked);
    deliveries.assert_redeliveries_keep_their_id();
}

/// Sums a counter's samples that carry `label` (e.g. `outcome="retry"`).
fn counter_sum(metrics: &str, name: &str, label: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn pending_deliveries_survive_a_crash() {
    const BATCHES: usize = 10;
    // Nothing listens on the webhook's port yet, so every attempt fails to connect and the
    // deliveries stay pending; the receiver comes up on that port after the crash. The port is
    // held (bound, not listening) meanwhile, so that no other test's outgoing connection can
    // take it as its local port.
    let hook = tokio::net::TcpSocket::new_v4().expect("a socket");
    hook.bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind the webhook port");
    let hook_port = hook.local_addr().expect("address").port();
    let mut deployment = Deployment::new().await;
    let boson = deployment.start().await;
    let input = boson
        .pipeline(&format!("http://127.0.0.1:{hook_port}/hook"))
        .await;

    let mut expected = HashSet::new();
    for n in 0..BATCHES {
        let (batch, ids) = tagged_batch(n);
        assert_eq!(boson.post_batch(&input, &batch).await.expect("post"), 202);
        expected.extend(ids);
    }
    wait_for_failed_attempts(&boson, BATCHES as f64).await;
    boson.sigkill();

    let mut receiver = Receiver::on(hook.listen(1024).expect("listen on the webhook port"));
    let _restarted = deployment.start().await;
    let deliveries = collect(&mut receiver, &expected, DELIVERY).await;
    println!(
        "{} events pending at the crash, {} delivered after restart",
        expected.len(),
        deliveries.copies.len()
    );
    assert_none_missing(&deliveries, &expected);
}

/// Waits until the server has failed (and scheduled a retry) at least `n` times, so the kill
/// hits deliveries that are pending, not ones that were never tried.
async fn wait_for_failed_attempts(boson: &Boson, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let retries = counter_sum(
            &boson.metrics().await,
            "boson_deliveries_total",
            "outcome=\"retry\"",
        );
        if retries >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {retries} failed delivery attempts within 15 s, expected {n}"
        );
        tokio::time::sleep(POLL).await;
    }
}
