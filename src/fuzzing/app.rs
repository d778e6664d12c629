//! A whole Boson in one process, without a socket: the real router over a fresh database (a
//! SQLite file, or a new PostgreSQL database when `TEST_DATABASE_URL` names a server, as in the
//! store suite), with an input of each platform. Every input is connected to one webhook output whose jobs stay in the
//! table (nothing is delivered), so a check can count what a request stored.
//!
//! Each route method sends one request as a client would (credentials, signature, gzip), checks
//! the answer against the protocol (the status codes and bodies the SDKs expect, never a 5xx for
//! a bad body, nothing stored by a refused request) and returns its status.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::access::{AdminAccess, NewUserCaps, NewUserLimits, hash_token};
use crate::config::{Config, DatabaseUrl};
use crate::delivery::webhook::WebhookClient;
use crate::live::LiveStream;
use crate::model::ids::ConnectionId;
use crate::pipeline::catalog::Catalog;
use crate::pipeline::{Handoff, Pipeline};
use crate::state::AppState;
use crate::store::queue::Job;
use crate::store::writer::Writer;
use crate::store::{Store, scratch};
use crate::telemetry::Metrics;

const ADMIN_TOKEN: &str = "fuzzing-admin-token";

/// A running in-process Boson. Requests are served on its own single-threaded runtime, so the
/// fuzz targets and property tests call it synchronously.
#[derive(Debug)]
pub struct App {
    router: Router,
    state: AppState,
    inputs: Inputs,
    /// A user IDSync knows, and the device's binding to it (the `context` IDSync answered),
    /// which `modify` needs.
    known_mpid: String,
    known_context: Value,
    /// Stays open so the writer can always hand over (it never has to: see `LeaveInTable`).
    _committed: mpsc::UnboundedReceiver<Vec<Job>>,
    runtime: Runtime,
    database: Database,
}

/// Where the app's database lives, so dropping the app removes it.
#[derive(Debug)]
enum Database {
    /// The file goes with its directory.
    Sqlite {
        _dir: tempfile::TempDir,
    },
    Postgres {
        server: String,
        name: String,
    },
}

#[derive(Debug)]
struct Inputs {
    web: Credentials,
    ios: Credentials,
    android: Credentials,
    feed: Credentials,
}

#[derive(Debug)]
struct Credentials {
    key: String,
    secret: String,
}

/// The answer to one request: its status, and its body when that is JSON.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    body: Option<Value>,
}

/// New jobs stay in the table unleased, where `queue_stats` counts them.
#[derive(Debug)]
struct LeaveInTable;

impl Handoff for LeaveInTable {
    fn takes_now(&self, _: &ConnectionId) -> bool {
        false
    }
}

/// The IDSync calls `App::idsync` chooses from.
const IDSYNC_CALLS: [&str; 5] = ["identify", "login", "logout", "modify", "alias"];

impl App {
    /// Starts Boson on a new database: on the PostgreSQL server `TEST_DATABASE_URL` names, else
    /// on a SQLite file in a new temporary directory.
    pub fn start() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (url, database) = match std::env::var("TEST_DATABASE_URL") {
            Ok(server) if server.starts_with("postgres") => {
                let (name, url) = runtime.block_on(scratch::create_database(&server))?;
                (url, Database::Postgres { server, name })
            }
            _ => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite://{}/boson.db", dir.path().display());
                (url, Database::Sqlite { _dir: dir })
            }
        };
        let (state, committed) = runtime.block_on(state(&url))?;
        let router = crate::server::router(state.clone());
        let mut app = Self {
            router,
            state,
            inputs: Inputs {
                web: Credentials::none(),
                ios: Credentials::none(),
                android: Credentials::none(),
                feed: Credentials::none(),
            },
            known_mpid: String::new(),
            known_context: Value::Null,
            _committed: committed,
            runtime,
            database,
        };
        app.seed()?;
        Ok(app)
    }

    /// `POST /v2/bulkevents` (or `/v2/events` when not `bulk`) with the custom feed's Basic
    /// credentials.
    pub fn events_api(&self, bulk: bool, body: &[u8]) -> StatusCode {
        let path = if bulk { "/v2/bulkevents" } else { "/v2/events" };
        let basic = format!("{}:{}", self.inputs.feed.key, self.inputs.feed.secret);
        let request = Request::post(path)
            .header(
                "authorization",
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(basic)
                ),
            )
            .header("content-type", "application/json");
        let documents = if bulk {
            serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.as_array().map(Vec::len))
                .unwrap_or(0)
        } else {
            1
        };
        self.ingest(
            path,
            request.body(Body::from(body.to_vec())),
            documents,
            false,
        )
    }

    /// The Web SDK's upload: v3 (`/v3/JS/{key}/events`), or one legacy event when `legacy`.
    pub fn web_upload(&self, legacy: bool, body: &[u8]) -> StatusCode {
        let key = &self.inputs.web.key;
        let path = if legacy {
            format!("/v2/JS/{key}/Events")
        } else {
            format!("/v3/JS/{key}/events")
        };
        let request = Request::post(&path).header("content-type", "text/plain;charset=UTF-8");
        self.ingest(&path, request.body(Body::from(body.to_vec())), 1, false)
    }

    /// A signed mobile upload; `selector` picks the OS (bit 0) and gzip (bit 1).
    pub fn mobile_upload(&self, selector: u8, body: &[u8]) -> StatusCode {
        let input = if selector & 1 == 0 {
            &self.inputs.android
        } else {
            &self.inputs.ios
        };
        let path = format!("/v2/{}/events", input.key);
        // Signed now: a Date far from the server's clock is refused.
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let request = Request::post(&path)
            .header("date", date.as_str())
            .header("x-mp-signature", sign(&input.secret, &date, &path, body));
        let request = if selector & 2 == 0 {
            request.body(Body::from(body.to_vec()))
        } else {
            request
                .header("content-encoding", "gzip")
                .body(Body::from(gzipped(body)))
        };
        // An upload whose device info names the other OS is refused: its data would be
        // mislabelled.
        let other_os = if selector & 1 == 0 {
            ["ios", "tvos"]
        } else {
            ["android", "firetv"]
        };
        let claimed = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|e| e["di"]["dp"].as_str().map(str::to_ascii_lowercase));
        let mislabelled = claimed.is_some_and(|os| other_os.contains(&os.as_str()));
        self.ingest(&path, request, 1, mislabelled)
    }

    /// An IDSync call with the web input's key: identify, login, logout, modify (of a known
    /// user) or alias, chosen by `selector`, which also says whether the body is gzipped.
    pub fn idsync(&self, selector: u8, body: &[u8]) -> StatusCode {
        let call = IDSYNC_CALLS[usize::from(selector) % IDSYNC_CALLS.len()];
        let key = &self.inputs.web.key;
        let path = match call {
            "modify" => format!("/v1/{}/modify", self.known_mpid),
            "alias" => format!("/v1/identity/{key}/Alias"),
            other => format!("/v1/{other}"),
        };
        let request = Request::post(&path)
            .header("x-mp-key", key.as_str())
            .header("content-type", "application/json");
        let bound;
        let body = match call {
            "modify" => {
                bound = self.bind(body);
                &bound
            }
            _ => body,
        };
        let gzip = (usize::from(selector) / IDSYNC_CALLS.len()) % 2 == 1;
        let request = if gzip {
            request
                .header("content-encoding", "gzip")
                .body(Body::from(gzipped(body)))
        } else {
            request.body(Body::from(body.to_vec()))
        };
        let answer = self.send(request);
        match (call, answer.status) {
            ("alias", StatusCode::ACCEPTED) => {}
            ("alias", StatusCode::BAD_REQUEST) => check_alias_error(&answer),
            ("modify", StatusCode::OK) => check_modified(&answer, &self.known_mpid),
            // The body brought a `context` of its own, which binds to no one.
            ("modify", StatusCode::FORBIDDEN) => check_idsync_error(&answer),
            (_, StatusCode::OK) => check_identified(&answer),
            (_, StatusCode::BAD_REQUEST) => check_idsync_error(&answer),
            _ => panic!("{path} answered {answer:?}"),
        }
        answer.status
    }

    /// A modify body with the device's binding to the known user, unless it has a `context`
    /// of its own (or is no JSON object): otherwise every modify would stop at the binding.
    fn bind(&self, body: &[u8]) -> Vec<u8> {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(mut request)) if !request.contains_key("context") => {
                request.insert("context".into(), self.known_context.clone());
                Value::Object(request).to_string().into_bytes()
            }
            _ => body.to_vec(),
        }
    }

    /// Kit forwarding statistics, v1 (one report) or v2 (`{"data": [reports]}`): an accepted
    /// request counts each of its reports once, a refused one counts nothing.
    pub fn forwarding(&self, v2: bool, body: &[u8]) -> StatusCode {
        let key = &self.inputs.web.key;
        let path = if v2 {
            format!("/v2/JS/{key}/Forwarding")
        } else {
            format!("/v1/JS/{key}/Forwarding")
        };
        let before = self.forwarded();
        let answer = self.send(Request::post(&path).body(Body::from(body.to_vec())));
        let counted = self.forwarded() - before;
        match answer.status {
            StatusCode::ACCEPTED => {
                let reports =
                    serde_json::from_slice::<Value>(body).map_or(0, |report| {
                        match report.get("data") {
                            Some(Value::Array(reports)) => reports.len(),
                            _ => 1,
                        }
                    });
                assert_eq!(counted, reports as i64, "{path} counted wrongly");
            }
            StatusCode::BAD_REQUEST => {
                assert_eq!(counted, 0, "a refused report was counted");
                check_mparticle_error(&answer);
            }
            _ => panic!("{path} answered {answer:?}"),
        }
        answer.status
    }

    /// Sends an ingest request that holds at most `documents` batches, and checks the answer
    /// and what was stored: all of an accepted request (less duplicates), nothing of a refused.
    /// A 403 is right only for an upload `mislabelled` with the other OS.
    fn ingest(
        &self,
        path: &str,
        request: Result<Request<Body>, axum::http::Error>,
        documents: usize,
        mislabelled: bool,
    ) -> StatusCode {
        let before = self.jobs();
        let answer = self.send(request);
        let stored = self.jobs() - before;
        match answer.status {
            StatusCode::ACCEPTED => {
                assert!(
                    (0..=documents as i64).contains(&stored),
                    "{path} stored {stored} batches of {documents}"
                );
            }
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => {
                assert_eq!(stored, 0, "{path} refused a request but stored a batch");
                check_mparticle_error(&answer);
            }
            StatusCode::FORBIDDEN if mislabelled => {
                assert_eq!(stored, 0, "{path} refused an upload but stored it");
                check_mparticle_error(&answer);
            }
            _ => panic!("{path} answered {answer:?}"),
        }
        answer.status
    }

    fn send(&self, request: Result<Request<Body>, axum::http::Error>) -> Answer {
        let request = request.expect("a well-formed request");
        self.runtime.block_on(async {
            let response = self
                .router
                .clone()
                .oneshot(request)
                .await
                .expect("the router is infallible");
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .expect("the body is in memory");
            let body = serde_json::from_slice(&bytes).ok();
            Answer { status, body }
        })
    }

    /// Delivery jobs in the table: one per stored batch, since every input has one connection.
    fn jobs(&self) -> i64 {
        let stats = self.runtime.block_on(self.state.store.queue_stats());
        stats.expect("queue statistics").0
    }

    /// Forwarding reports counted for the web input, over all kits.
    fn forwarded(&self) -> i64 {
        let input = self
            .state
            .catalog()
            .input_by_key(&self.inputs.web.key)
            .expect("the web input");
        let stats = self
            .runtime
            .block_on(
                self.state
                    .store
                    .forwarding_stats(&input.id, None, usize::MAX),
            )
            .expect("forwarding statistics");
        // Kits past the input's cap are counted in a bucket, which is in the sum too.
        stats.items.iter().map(|kit| kit.events).sum()
    }

    /// Creates the inputs, the output and the connections through the admin API, and one user.
    fn seed(&mut self) -> anyhow::Result<()> {
        let output = self.admin(
            "/api/v1/outputs",
            &json!({"name": "hook", "kind": "webhook", "settings": {"url": "http://127.0.0.1:9/"}}),
        )?;
        let mut inputs = Vec::new();
        for platform in ["web", "ios", "android", "custom_feed"] {
            let input = self.admin(
                "/api/v1/inputs",
                &json!({"name": platform, "platform": platform}),
            )?;
            self.admin(
                "/api/v1/connections",
                &json!({"input_id": input["id"], "output_id": output["id"], "settings": {}}),
            )?;
            inputs.push(Credentials {
                key: text(&input, "api_key")?,
                secret: text(&input, "api_secret")?,
            });
        }
        let [web, ios, android, feed] = <[Credentials; 4]>::try_from(inputs)
            .map_err(|_| anyhow::anyhow!("four inputs were created"))?;
        self.inputs = Inputs {
            web,
            ios,
            android,
            feed,
        };
        let request = Request::post("/v1/identify")
            .header("x-mp-key", self.inputs.web.key.as_str())
            .body(Body::from(
                r#"{"known_identities": {"email": "known@example.com"}}"#,
            ));
        let answer = self.send(request);
        let body = answer
            .body
            .filter(|b| b["mpid"].is_string() && b["context"].is_string())
            .ok_or_else(|| anyhow::anyhow!("identify answered {}", answer.status))?;
        self.known_mpid = text(&body, "mpid")?;
        self.known_context = body["context"].clone();
        Ok(())
    }

    fn admin(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let request = Request::post(path)
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()));
        let answer = self.send(request);
        match (answer.status, answer.body) {
            (StatusCode::CREATED, Some(created)) => Ok(created),
            (status, body) => anyhow::bail!("POST {path} answered {status}: {body:?}"),
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.runtime.block_on(self.state.store.close());
        if let Database::Postgres { server, name } = &self.database
            && let Err(error) = self.runtime.block_on(scratch::drop_database(server, name))
        {
            eprintln!("could not drop the database {name}: {error:#}");
        }
    }
}

impl Credentials {
    fn none() -> Self {
        Self {
            key: String::new(),
            secret: String::new(),
        }
    }
}

/// The state `server::run` builds, less delivery: no worker ever takes a job.
async fn state(
    database_url: &str,
) -> anyhow::Result<(AppState, mpsc::UnboundedReceiver<Vec<Job>>)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = Config::defaults()?;
    config.database_url = DatabaseUrl(database_url.to_owned());
    config.allow_private_destinations = true;
    // No cap on new users: a fuzzer creates them by the thousand, from one address.
    config.identity.max_new_users_per_input = 0;
    config.identity.max_new_users_per_client = 0;
    let store = Store::connect(database_url).await?;
    let catalog = Arc::new(Catalog::load(store.clone()).await?);
    let metrics = Arc::new(Metrics::new());
    let live = Arc::new(LiveStream::default());
    let (committed, handed_over) = mpsc::unbounded_channel();
    let lease = Duration::from_secs(config.delivery.lease_secs);
    let (writer, _task) = Writer::spawn(
        store.clone(),
        lease,
        committed,
        config.ingest.postgres_lanes,
        config.ingest.commit_gather(),
    );
    let pipeline = Pipeline::new(
        catalog,
        writer,
        Arc::clone(&live),
        Arc::clone(&metrics),
        Arc::new(LeaveInTable),
        config.ingest.max_events_per_batch,
    );
    let webhooks = WebhookClient::new(true, Duration::from_secs(1))?;
    let state = AppState {
        config: Arc::new(config),
        store: store.clone(),
        pipeline,
        metrics,
        access: Arc::new(AdminAccess::new(hash_token(ADMIN_TOKEN), store)),
        new_users: Arc::new(NewUserLimits::new(NewUserCaps {
            per_input: 0,
            per_client: 0,
            window: Duration::from_secs(1),
        })),
        live,
        stopping: CancellationToken::new(),
        webhooks,
        // No replay driver runs here: a ring is kept, unanswered.
        replay_wake: crate::replay::Wake::default(),
    };
    Ok((state, handed_over))
}

fn text(value: &Value, key: &str) -> anyhow::Result<String> {
    value[key]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no {key} in {value}"))
}

/// `x-mp-signature` as the mobile SDKs compute it, over the uncompressed body.
fn sign(secret: &str, date: &str, path: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(format!("POST\n{date}\n{path}").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

pub(super) fn gzipped(body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(body)
        .and_then(|()| encoder.finish())
        .expect("gzip into memory")
}

/// mParticle's error body: `{"errors": [{"code", "message"}]}`.
fn check_mparticle_error(answer: &Answer) {
    let error = answer.body.as_ref().map(|b| &b["errors"][0]);
    assert!(
        error.is_some_and(|e| e["code"].is_string() && e["message"].is_string()),
        "not mParticle's error body: {answer:?}"
    );
}

/// IDSync's error body, with the status repeated in it.
fn check_idsync_error(answer: &Answer) {
    let body = answer.body.as_ref().expect("a JSON error body");
    assert!(body["Errors"][0]["message"].is_string(), "{answer:?}");
    assert_eq!(body["StatusCode"], answer.status.as_u16(), "{answer:?}");
}

/// The Web SDK reads an alias refusal as `{code, message}`.
fn check_alias_error(answer: &Answer) {
    let body = answer.body.as_ref().expect("a JSON error body");
    assert_eq!(body["code"], 400, "{answer:?}");
    assert!(body["message"].is_string(), "{answer:?}");
}

/// An identify, login or logout answer: the MPID as a decimal string (the Web SDK keeps MPIDs
/// as strings), and what the SDKs read.
fn check_identified(answer: &Answer) {
    let body = answer.body.as_ref().expect("a JSON answer");
    let mpid = body["mpid"].as_str().expect("mpid is a string");
    assert!(mpid.parse::<i64>().is_ok(), "{answer:?}");
    assert!(body["is_logged_in"].is_boolean(), "{answer:?}");
    assert!(body["matched_identities"].is_object(), "{answer:?}");
}

fn check_modified(answer: &Answer, mpid: &str) {
    let body = answer.body.as_ref().expect("a JSON answer");
    assert_eq!(body["mpid"], mpid, "{answer:?}");
    assert!(body["change_results"].is_array(), "{answer:?}");
}
