//! Test support: `spawn_app` starts the real server on port 0 with a fresh database (a SQLite
//! temp file, or a new PostgreSQL database when `TEST_DATABASE_URL` is set), and `Receiver` is a
//! real HTTP webhook receiver whose answers a test can script.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// Whether suites that need something absent must fail instead of skipping (set by CI).
pub fn require_all_suites() -> bool {
    std::env::var("BOSON_REQUIRE_ALL_SUITES").is_ok_and(|v| v == "1")
}

/// Says loudly that a suite cannot run here and how to enable it, records the skip for the
/// summary `scripts/test` prints (cargo hides a passing test's output), and fails when CI requires
/// every suite.
pub fn skip_or_fail(suite: &str, why: &str, enable: &str) {
    let message = format!("SKIPPED SUITE `{suite}`: {why}");
    record_suite(suite, "skipped", &format!("{why}\t{enable}"));
    if require_all_suites() {
        panic!("{message} (BOSON_REQUIRE_ALL_SUITES=1 turns this skip into a failure)");
    }
    eprintln!("\n!!!!!!!! {message}; to run it: {enable} !!!!!!!!\n");
}

/// Records that a suite which can be skipped did run here, for `scripts/test`'s summary.
pub fn suite_ran(suite: &str) {
    record_suite(suite, "ran", "");
}

/// Writes `target/test-suites/<suite>.<outcome>` (or under `BOSON_TEST_SUITES_DIR`), one line
/// per test of the suite. Best effort: a summary is not worth failing a test for.
fn record_suite(suite: &str, outcome: &str, line: &str) {
    use std::io::Write as _;
    let dir = std::env::var_os("BOSON_TEST_SUITES_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-suites"),
        std::path::PathBuf::from,
    );
    let _ = std::fs::create_dir_all(&dir);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{}.{outcome}", suite.replace(['/', ' '], "_"))));
    if let Ok(mut file) = file {
        let _ = writeln!(file, "{line}");
    }
}

/// The Python the SDK suites run: `BOSON_TEST_PYTHON` (`scripts/test` points it at the
/// virtualenv it keeps in `target/python-venv`), else `python3` on the PATH.
pub fn python() -> std::process::Command {
    std::process::Command::new(
        std::env::var_os("BOSON_TEST_PYTHON").unwrap_or_else(|| "python3".into()),
    )
}

/// How to get the Python packages of tests/sdk/requirements.txt: `scripts/test` installs them
/// into its virtualenv, which needs Debian's python3-venv.
pub const ENABLE_PYTHON: &str = "apt-get install python3-venv, then ./scripts/test (it installs tests/sdk/requirements.txt into target/python-venv)";

/// An HTTP client for tests. reqwest is built without a default TLS crypto provider (Boson picks
/// `ring`), so one is installed first.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A fresh database URL: a new PostgreSQL database on `TEST_DATABASE_URL`'s server, or a SQLite
/// file in `dir`.
pub async fn fresh_database_url(dir: &std::path::Path) -> String {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(server) if server.starts_with("postgres") => fresh_postgres_database(&server).await,
        _ => format!("sqlite://{}/boson.db", dir.display()),
    }
}

/// Creates a new, empty database on the PostgreSQL `server` and returns its URL.
pub async fn fresh_postgres_database(server: &str) -> String {
    use sqlx::Connection;
    let name = format!("boson_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(server)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {server} is unreachable: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create test database");
    let base = server.rsplit_once('/').map_or(server, |(base, _)| base);
    format!("{base}/{name}")
}

/// Drops a PostgreSQL test database made by `fresh_database_url`, so test runs leave no litter.
pub async fn drop_database(database_url: &str) {
    if let Some((base, _)) = database_url.rsplit_once('/') {
        drop_database_on(&format!("{base}/postgres"), database_url).await;
    }
}

/// The PostgreSQL server for a test of several nodes sharing a database, which only PostgreSQL
/// allows: `TEST_DATABASE_URL` when it names one; else (the SQLite pass of CI, which also
/// requires every suite, or a developer's plain `cargo test`) `BOSON_CI_POSTGRES_URL` or the
/// default local server, if it answers. Without a server the suite is skipped loudly (a failure
/// when every suite is required).
pub async fn multi_node_postgres(suite: &str) -> Option<String> {
    use sqlx::Connection;
    if let Ok(url) = std::env::var("TEST_DATABASE_URL")
        && url.starts_with("postgres")
    {
        suite_ran(suite);
        return Some(url);
    }
    let url = std::env::var("BOSON_CI_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let connected =
        tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(&url)).await;
    match connected {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            suite_ran(suite);
            Some(url)
        }
        Ok(Err(error)) => {
            skip_or_fail(
                suite,
                &format!("needs PostgreSQL ({url}: {error})"),
                ENABLE_POSTGRES,
            );
            None
        }
        Err(_) => {
            skip_or_fail(
                suite,
                &format!("needs PostgreSQL ({url} did not answer)"),
                ENABLE_POSTGRES,
            );
            None
        }
    }
}

/// How to run the suites of several nodes: a PostgreSQL server they can reach.
const ENABLE_POSTGRES: &str = "TEST_DATABASE_URL=postgres://USER@HOST:5432/postgres ./scripts/test (or a PostgreSQL with trust auth on 127.0.0.1:5432)";

/// Drops a test database made by `fresh_postgres_database` on `server`.
pub async fn drop_database_on(server: &str, database_url: &str) {
    use sqlx::Connection;
    let Some((_, name)) = database_url.rsplit_once('/') else {
        return;
    };
    if !database_url.starts_with("postgres") || !name.starts_with("boson_test_") {
        return;
    }
    if let Ok(mut admin) = sqlx::PgConnection::connect(server).await {
        let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        let _ = sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&mut admin)
            .await;
    }
}

/// A running server.
pub struct TestApp {
    pub base: String,
    pub database_url: String,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// Whether `stop` drops the database (a second node on it leaves that to the first).
    owns_database: bool,
    _dir: tempfile::TempDir,
}

/// Starts a server with test defaults (private destinations allowed, fast retries).
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// Starts a server on a fresh database on the PostgreSQL `server`, whatever the test pass.
pub async fn spawn_app_on_postgres(server: &str) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let database_url = fresh_postgres_database(server).await;
    start(database_url, dir, true, |_| {}).await
}

/// Starts a server on a fresh database on the PostgreSQL `server` after `adjust` has changed
/// the configuration, whatever the test pass.
pub async fn spawn_app_on_postgres_with(
    server: &str,
    adjust: impl FnOnce(&mut boson::Config),
) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let database_url = fresh_postgres_database(server).await;
    start(database_url, dir, true, adjust).await
}

/// Starts a server after `adjust` has changed the configuration.
pub async fn spawn_app_with(adjust: impl FnOnce(&mut boson::Config)) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let database_url = fresh_database_url(dir.path()).await;
    start(database_url, dir, true, adjust).await
}

async fn start(
    database_url: String,
    dir: tempfile::TempDir,
    owns_database: bool,
    adjust: impl FnOnce(&mut boson::Config),
) -> TestApp {
    let mut config = boson::Config::defaults().expect("default config");
    config.database_url = boson::config::DatabaseUrl(database_url.clone());
    config.admin_token = Some(ADMIN_TOKEN.to_owned().into());
    config.allow_private_destinations = true;
    config.delivery.initial_backoff_ms = 50;
    config.delivery.max_backoff_secs = 1;
    config.delivery.poll_interval_ms = 50;
    adjust(&mut config);
    let (scheme, client) = match &config.tls_cert {
        // Trust the test's own certificate, and reach the server by the name it was issued for.
        Some(cert) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let pem = std::fs::read(cert).expect("test certificate");
            let client = reqwest::Client::builder()
                .tls_certs_merge([reqwest::Certificate::from_pem(&pem).expect("PEM certificate")])
                .build()
                .expect("TLS client");
            ("https", client)
        }
        None => ("http", http_client()),
    };
    if std::env::var("TEST_LOG").is_ok() {
        boson::telemetry::init_logging();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(boson::run(config, listener, async move {
        let _ = signal.await;
    }));
    let host = if scheme == "https" {
        format!("localhost:{}", address.port())
    } else {
        address.to_string()
    };
    let app = TestApp {
        base: format!("{scheme}://{host}"),
        database_url,
        client,
        shutdown: Some(shutdown),
        task: Some(task),
        owns_database,
        _dir: dir,
    };
    app.wait_ready().await;
    app
}

impl TestApp {
    /// Starts another server on this one's database: a second node. Stop it first.
    pub async fn second_node(&self, adjust: impl FnOnce(&mut boson::Config)) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        start(self.database_url.clone(), dir, false, adjust).await
    }

    async fn wait_ready(&self) {
        for _ in 0..200 {
            if let Ok(r) = self
                .client
                .get(format!("{}/readyz", self.base))
                .send()
                .await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("server did not become ready");
    }

    /// Stops the server gracefully and returns what `run` returned.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let result = self
            .task
            .take()
            .expect("running")
            .await
            .expect("server task panicked");
        if self.owns_database {
            drop_database(&self.database_url).await;
        }
        result
    }

    /// Stops the server gracefully but keeps its database, to read it (`query_i64`) and to
    /// `restart` on it.
    pub async fn shut_down(&mut self) -> anyhow::Result<()> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let task = self.task.take().expect("running");
        task.await.expect("server task panicked")
    }

    /// A new server on the database of one `shut_down`: the same node restarted.
    pub async fn restart(self, adjust: impl FnOnce(&mut boson::Config)) -> TestApp {
        start(self.database_url, self._dir, self.owns_database, adjust).await
    }

    pub fn admin(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(ADMIN_TOKEN)
    }

    /// GETs from the admin API and expects `200`, returning the JSON.
    pub async fn read(&self, path: &str) -> Value {
        let response = self
            .admin(reqwest::Method::GET, path)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let json: Value = response.json().await.expect("json");
        assert_eq!(status, 200, "GET {path} answered {json}");
        json
    }

    /// POSTs to the admin API and expects `201`, returning the JSON.
    pub async fn create(&self, path: &str, body: Value) -> Value {
        let response = self
            .admin(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = response.status();
        let json: Value = response.json().await.expect("json");
        assert_eq!(status, 201, "POST {path} {body} answered {json}");
        json
    }

    pub async fn create_input(&self, platform: &str) -> Value {
        self.create(
            "/api/v1/inputs",
            json!({"name": format!("{platform} input"), "platform": platform}),
        )
        .await
    }

    pub async fn create_webhook(&self, url: &str) -> Value {
        self.create(
            "/api/v1/outputs",
            json!({"name": "hook", "kind": "webhook", "settings": {"url": url}}),
        )
        .await
    }

    pub async fn connect(&self, input: &Value, output: &Value, settings: Value) -> Value {
        self.create(
            "/api/v1/connections",
            json!({"input_id": input["id"], "output_id": output["id"], "settings": settings}),
        )
        .await
    }

    /// An input connected to a webhook at `url` with `settings`.
    pub async fn pipeline(&self, url: &str, settings: Value) -> (Value, Value) {
        self.pipeline_for("custom_feed", url, settings).await
    }

    /// An input of `platform` connected to a webhook at `url` with `settings`.
    pub async fn pipeline_for(&self, platform: &str, url: &str, settings: Value) -> (Value, Value) {
        let input = self.create_input(platform).await;
        let output = self.create_webhook(url).await;
        let connection = self.connect(&input, &output, settings).await;
        (input, connection)
    }

    /// POSTs raw bytes to an Events API path with the input's credentials.
    pub async fn post_raw(
        &self,
        input: &Value,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .basic_auth(
                input["api_key"].as_str().unwrap(),
                input["api_secret"].as_str(),
            )
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request")
    }

    pub async fn post_events(&self, input: &Value, batch: Value) -> reqwest::Response {
        self.post_raw(input, "/v2/events", batch.to_string()).await
    }

    /// Rows in a table, read straight from the database.
    pub async fn count(&self, table: &str) -> i64 {
        self.query_i64(&format!("SELECT COUNT(*) FROM {table}"))
            .await
    }

    /// The one integer a query answers, read straight from the database.
    pub async fn query_i64(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        if self.database_url.starts_with("sqlite") {
            let pool = sqlx::SqlitePool::connect(&self.database_url)
                .await
                .expect("sqlite");
            let n: i64 = sqlx::query_scalar(sql)
                .fetch_one(&pool)
                .await
                .expect("query");
            pool.close().await;
            n
        } else {
            let pool = sqlx::PgPool::connect(&self.database_url)
                .await
                .expect("postgres");
            let n: i64 = sqlx::query_scalar(sql)
                .fetch_one(&pool)
                .await
                .expect("query");
            pool.close().await;
            n
        }
    }

    /// Runs a statement straight on the database (to stage what another node would do).
    pub async fn execute(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        if self.database_url.starts_with("sqlite") {
            let pool = sqlx::SqlitePool::connect(&self.database_url)
                .await
                .expect("sqlite");
            sqlx::query(sql).execute(&pool).await.expect("statement");
            pool.close().await;
        } else {
            let pool = sqlx::PgPool::connect(&self.database_url)
                .await
                .expect("postgres");
            sqlx::query(sql).execute(&pool).await.expect("statement");
            pool.close().await;
        }
    }

    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body's bytes exactly as they arrived (what a signature covers).
    pub raw: Bytes,
    pub at: std::time::Instant,
    /// The status the receiver answered with.
    pub answered: u16,
    pub peer: SocketAddr,
}

impl Received {
    pub fn events(&self) -> &Vec<Value> {
        self.body["events"].as_array().expect("events array")
    }

    pub fn event_types(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e["event_type"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A scripted "status" that never answers: the request hangs until the client gives up.
pub const HANG: u16 = 0;

/// Scripted answers (status, optional `Retry-After`), used in order; when empty, 200.
type Script = Arc<Mutex<VecDeque<(u16, Option<&'static str>)>>>;

#[derive(Clone)]
struct ReceiverState {
    sent: mpsc::UnboundedSender<Received>,
    /// Scripted answers, used in order; when empty, 200.
    script: Script,
    /// Milliseconds each answer waits (drawn from the range), so requests stay in flight.
    latency_ms: Option<std::ops::RangeInclusive<u64>>,
    /// MPIDs whose requests are answered 500 (a body whose `mpid` is one of them).
    failing: Failing,
}

/// MPIDs the receiver fails, shared with the test.
type Failing = Arc<Mutex<std::collections::HashSet<i64>>>;

/// A real webhook receiver on loopback.
pub struct Receiver {
    pub address: SocketAddr,
    received: mpsc::UnboundedReceiver<Received>,
    script: Script,
    failing: Failing,
    _task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        Self::on(listener)
    }

    /// A receiver that answers each request after a delay drawn from `latency_ms`; a request
    /// is recorded when it arrives, before the wait.
    pub async fn with_latency(latency_ms: std::ops::RangeInclusive<u64>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        Self::serve(listener, Some(latency_ms))
    }

    /// Serves on an already bound listener (to come up on a known port later).
    pub fn on(listener: tokio::net::TcpListener) -> Self {
        Self::serve(listener, None)
    }

    fn serve(
        listener: tokio::net::TcpListener,
        latency_ms: Option<std::ops::RangeInclusive<u64>>,
    ) -> Self {
        let address = listener.local_addr().expect("address");
        let (sent, received) = mpsc::unbounded_channel();
        let script = Arc::new(Mutex::new(VecDeque::new()));
        let failing = Failing::default();
        let state = ReceiverState {
            sent,
            script: Arc::clone(&script),
            latency_ms,
            failing: Arc::clone(&failing),
        };
        let app = axum::Router::new().fallback(receive).with_state(state);
        let task = tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        Self {
            address,
            received,
            script,
            failing,
            _task: task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// The next answers to give: status and optional `Retry-After`.
    pub fn script(&self, answers: &[(u16, Option<&'static str>)]) {
        self.script.lock().unwrap().extend(answers.iter().copied());
    }

    /// From now on answers 500 to every request whose body's `mpid` is `mpid` (`false`: stops).
    pub fn fail_user(&self, mpid: i64, failing: bool) {
        let mut set = self.failing.lock().unwrap();
        if failing {
            set.insert(mpid);
        } else {
            set.remove(&mpid);
        }
    }

    /// Drops the scripted answers not given yet: from now on, 200.
    pub fn clear_script(&self) {
        self.script.lock().unwrap().clear();
    }

    /// The next request, or `None` after `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Received> {
        tokio::time::timeout(wait, self.received.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next request; fails the test if none arrives within 10 s.
    pub async fn next(&mut self) -> Received {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("the webhook received nothing within 10 s")
    }

    /// Exactly `n` requests, then asserts nothing more arrives for a moment.
    pub async fn take(&mut self, n: usize) -> Vec<Received> {
        let mut got = Vec::with_capacity(n);
        for _ in 0..n {
            got.push(self.next().await);
        }
        self.expect_silence().await;
        got
    }

    /// Asserts no request arrives for 300 ms.
    pub async fn expect_silence(&mut self) {
        if let Some(extra) = self.next_within(Duration::from_millis(300)).await {
            panic!("unexpected webhook request: {}", extra.body);
        }
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let raw = body;
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let user_fails = body["mpid"]
        .as_i64()
        .is_some_and(|mpid| state.failing.lock().unwrap().contains(&mpid));
    let answer = if user_fails {
        Some((500, None))
    } else {
        state.script.lock().unwrap().pop_front()
    };
    let (status, retry_after) = answer.unwrap_or((200, None));
    let _ = state.sent.send(Received {
        path: uri.path().to_owned(),
        headers,
        body,
        raw,
        at: std::time::Instant::now(),
        answered: status,
        peer,
    });
    if status == HANG {
        // Until Boson's request timeout closes the connection, which drops this future.
        return std::future::pending::<axum::response::Response>().await;
    }
    if let Some(range) = state.latency_ms {
        tokio::time::sleep(Duration::from_millis(rand::random_range(range))).await;
    }
    let mut response = StatusCode::from_u16(status).unwrap().into_response();
    if let Some(value) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", value.parse().unwrap());
    }
    response
}

/// A batch with one event of each given type, every one valid.
pub fn batch_of(types: &[&str]) -> Value {
    let events: Vec<Value> = types.iter().map(|t| event(t)).collect();
    json!({
        "environment": "development",
        "mpid": 42,
        "ip": "203.0.113.9",
        "mp_deviceid": "5a6e7f2c-1111-4d2b-9c1e-0d3a4f5b6c7d",
        "user_identities": {"customer_id": "c-1", "email": "a@example.com"},
        "user_attributes": {"$firstname": "Ada", "tier": ["gold"]},
        "device_info": {"device": "Ada's phone", "platform": "iOS", "os_version": "17.1"},
        "application_info": {"application_name": "Shop", "package": "com.example.shop"},
        "context": {"location": {"latitude": 52.5, "longitude": 13.4}},
        "events": events,
    })
}

/// A valid event of `event_type` carrying a location and a marker attribute.
pub fn event(event_type: &str) -> Value {
    let mut data = json!({
        "timestamp_unixtime_ms": 1_700_000_000_000i64,
        "custom_attributes": {"marker": event_type},
        "location": {"latitude": 1.5, "longitude": 2.5},
    });
    let extra = match event_type {
        "custom_event" => json!({"event_name": "Clicked", "custom_event_type": "navigation"}),
        "screen_view" => json!({"screen_name": "Home"}),
        "commerce_event" => {
            json!({"product_action": {"action": "purchase", "transaction_id": "t1", "total_amount": 9.5,
                                   "products": [{"id": "sku", "name": "Thing", "price": 9.5, "quantity": 1}]},
                                   "currency_code": "EUR"})
        }
        "session_end" => json!({"session_duration_ms": 1000}),
        "application_state_transition" => {
            json!({"application_transition_type": "application_initialized"})
        }
        "crash_report" => json!({"message": "boom", "severity": "fatal"}),
        "breadcrumb" => json!({"label": "tapped"}),
        "opt_out" => json!({"is_opted_out": true}),
        "push_registration" => json!({"register": true, "registration_token": "tok"}),
        "push_message" => {
            json!({"push_message_type": "received", "push_message_token": "t", "push_notification_payload": "{}"})
        }
        "network_performance" => {
            json!({"url": "https://example.com", "response_code": 200, "http_verb": "GET"})
        }
        "profile" => json!({"previous_mpid": 1, "current_mpid": 42, "profile_event_type": "login"}),
        "user_attribute_change" => {
            json!({"user_attribute_name": "tier", "new": "gold", "old": "silver"})
        }
        "user_identity_change" => {
            json!({"new": {"identity_type": "email", "identity": "a@example.com", "timestamp_unixtime_ms": 1}, "old": null})
        }
        _ => json!({}),
    };
    for (key, value) in extra.as_object().unwrap() {
        data[key] = value.clone();
    }
    json!({"event_type": event_type, "data": data})
}

/// Every event type of the Events API schema.
pub const ALL_EVENT_TYPES: &[&str] = &[
    "session_start",
    "session_end",
    "screen_view",
    "custom_event",
    "crash_report",
    "opt_out",
    "first_run",
    "pre_attribution",
    "push_registration",
    "application_state_transition",
    "push_message",
    "network_performance",
    "breadcrumb",
    "profile",
    "push_reaction",
    "commerce_event",
    "user_attribute_change",
    "user_identity_change",
    "uninstall",
];

/// Polls `condition` for up to 10 s.
pub async fn wait_for<F, Fut>(condition: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("condition not met within 10 s");
}
