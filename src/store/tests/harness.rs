//! The store suite's harness: a fresh database per test (a SQLite file in a temporary directory,
//! or a new PostgreSQL database on `TEST_DATABASE_URL`'s server), group-commit writers on it
//! ("nodes"), a clock the tests move without sleeping, and plain reads of the queue's tables.
//!
//! Every use of the writer's constructor is in this file, so a change to how a writer is built
//! touches the suite in one place. A node's crowded connections are a plain set here: the store
//! only inserts the jobs it is given, leased or not, and which is delivery's choice.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use std::collections::HashSet;
use std::sync::Mutex;

use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{BatchId, ConnectionId, InputId, OutputId};
use crate::store::backend::{Sql, Tx, WriterConnection, args};
use crate::store::group::{Command, Done, Failure, commit};
use crate::store::queue::{
    AttemptRecord, DeadLetter, IngestOutcome, Job, JobKey, JobUpdate, NewBatch, NewJob,
};
use crate::store::writer::Writer;
use crate::store::{InputRow, OutputRow, Store};

pub(super) const MINUTE: i64 = 60_000;
pub(super) const HOUR: i64 = 60 * MINUTE;

/// Where a test store lives, so dropping it removes it.
enum Database {
    /// The file goes with its directory.
    Sqlite {
        dir: tempfile::TempDir,
    },
    Postgres {
        server: String,
        name: String,
    },
}

/// A node's ingest lanes on PostgreSQL, as `config.default.toml` has them (the tests of several
/// lanes ask for them with `node_with_lanes`).
const LANES: usize = 1;
/// Small groups held open as the default configuration holds them (`ingest.commit_gather_us`).
const GATHER: Duration = Duration::from_millis(1);

/// A fresh, migrated database for one test.
pub(crate) struct TestStore {
    pub(crate) store: Store,
    database: Database,
    /// The wall clock when the store was opened: time 0 of `stored`/`elapsed`.
    base: i64,
    /// How far `advance` has moved the clock on.
    advanced: i64,
}

/// The PostgreSQL server to test on, if `TEST_DATABASE_URL` names one. Anything else in that
/// variable is a mistake that must not quietly become a SQLite run.
fn postgres_server() -> Option<String> {
    match std::env::var("TEST_DATABASE_URL") {
        Err(std::env::VarError::NotPresent) => None,
        Ok(url) if url.is_empty() => None,
        Ok(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => Some(url),
        Ok(url) => panic!("TEST_DATABASE_URL must be a postgres:// URL, not {url:?}"),
        Err(error) => panic!("TEST_DATABASE_URL is unreadable: {error}"),
    }
}

/// Whether this run was asked to test on PostgreSQL.
pub(in crate::store) fn on_postgres() -> bool {
    postgres_server().is_some()
}

/// `server` with its database name replaced by `name` (any `?query` kept).
fn database_url(server: &str, name: &str) -> String {
    let (address, query) = server
        .split_once('?')
        .map_or((server, None), |(a, q)| (a, Some(q)));
    // The database name is the path after the host; a URL may have none (`postgres://host`).
    let host_start = address.find("://").map_or(0, |i| i + 3);
    let root = match address[host_start..].find('/') {
        Some(path) => &address[..host_start + path],
        None => address,
    };
    match query {
        Some(query) => format!("{root}/{name}?{query}"),
        None => format!("{root}/{name}"),
    }
}

const STAY_IDLE: Sql = Sql::postgres_only("SET LOCAL idle_in_transaction_session_timeout = 0");

impl TestStore {
    /// Commits `commands` as one group on a lane's `connection`, nothing queued behind it.
    pub(in crate::store) async fn commit_alone(
        &self,
        connection: &mut WriterConnection,
        commands: &mut [Command],
    ) -> Result<Vec<Done>, Failure> {
        self.commit_group(connection, commands, false).await
    }

    /// Commits `commands` as one group on a lane's `connection`; `queued`: with the lane's next
    /// group waiting behind it.
    pub(in crate::store) async fn commit_group(
        &self,
        connection: &mut WriterConnection,
        commands: &mut [Command],
        queued: bool,
    ) -> Result<Vec<Done>, Failure> {
        commit(&self.store, connection, commands, 60_000, "node", &|| {
            queued
        })
        .await
    }

    /// Opens a fresh store. Panics when `TEST_DATABASE_URL` is set but its server cannot be
    /// used: a PostgreSQL run that quietly tested nothing would be worse than a failure.
    pub(crate) async fn open() -> Self {
        let base = crate::model::now_ms();
        let (url, database) = match postgres_server() {
            Some(server) => {
                use sqlx::Connection;
                let name = format!("boson_store_test_{}", uuid::Uuid::new_v4().simple());
                let mut admin = sqlx::PgConnection::connect(&server)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("TEST_DATABASE_URL is set but PostgreSQL is unreachable: {e}")
                    });
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut admin)
                    .await
                    .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
                let url = database_url(&server, &name);
                (url, Database::Postgres { server, name })
            }
            None => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let url = format!("sqlite://{}/boson.db", dir.path().display());
                (url, Database::Sqlite { dir })
            }
        };
        let store = Store::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("cannot open the test store {url}: {e:#}"));
        Self {
            store,
            database,
            base,
            advanced: 0,
        }
    }

    /// The SQLite database file (none on PostgreSQL).
    pub(super) fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        match &self.database {
            Database::Sqlite { dir } => Some(dir.path().join("boson.db")),
            Database::Postgres { .. } => None,
        }
    }

    /// Starts a writer on this store: a node of its own, whose new jobs are leased for `lease`.
    pub(super) fn node(&self, lease: Duration) -> Node {
        self.node_with_lanes(lease, LANES)
    }

    /// [`Self::node`] with `lanes` ingest lanes on PostgreSQL (one: requests sent together are
    /// committed in one group, as on SQLite).
    pub(super) fn node_with_lanes(&self, lease: Duration, lanes: usize) -> Node {
        let (writer, handed_over) = self.writer_with_lanes(lease, lanes);
        Node {
            writer,
            handed_over,
            crowded: Mutex::default(),
        }
    }

    /// A writer on this store, as a node's delivery is given it, with the channel on which it
    /// hands over the new jobs it leases (for a suite outside the store's: delivery's).
    pub(crate) fn writer(&self, lease: Duration) -> (Writer, mpsc::UnboundedReceiver<Vec<Job>>) {
        self.writer_with_lanes(lease, LANES)
    }

    fn writer_with_lanes(
        &self,
        lease: Duration,
        lanes: usize,
    ) -> (Writer, mpsc::UnboundedReceiver<Vec<Job>>) {
        let (committed, handed_over) = mpsc::unbounded_channel();
        // The task ends when the writer's last handle is dropped.
        let (writer, _task) = Writer::spawn(self.store.clone(), lease, committed, lanes, GATHER);
        (writer, handed_over)
    }

    /// Moves the clock on by `by` ms. The writer reads the wall clock, so instead of waiting,
    /// every stored time moves back by `by`: to the queue that is the same thing.
    pub(super) async fn advance(&mut self, by: i64) {
        assert!(
            (0..24 * HOUR * 365).contains(&by),
            "advance by a sane amount"
        );
        for sql in ADVANCE {
            self.store
                .execute(Sql::shared(sql), args![by])
                .await
                .expect("move stored times back");
        }
        self.advanced += by;
    }

    /// The stored value of the moment `at` ms after the store was opened, on the moved clock.
    pub(super) fn stored(&self, at: i64) -> i64 {
        self.base + at - self.advanced
    }

    /// The moment a stored time stands for, in ms after the store was opened (the inverse of
    /// `stored`). Times the writer took from the wall clock come out a little late: by how long
    /// the test has run.
    pub(super) fn elapsed(&self, stored: i64) -> i64 {
        stored - self.base + self.advanced
    }

    /// A transaction of another session that may stay open, idle, for as long as the test
    /// needs (PostgreSQL: the store ends sessions idle in a transaction after a while), as
    /// another node's would while it holds the rows it locks.
    pub(super) async fn idle_transaction(&self) -> Tx<'static> {
        let mut tx = self.store.begin().await.expect("begin");
        tx.execute(STAY_IDLE, &[])
            .await
            .expect("keep the transaction open");
        tx
    }

    /// A connection with `{}` settings between a new input and a new webhook output to `url`.
    pub(crate) async fn connection(&self, url: &str) -> ConnectionId {
        let input = input_row();
        self.store.insert_input(&input).await.expect("insert input");
        let mut output = output_row();
        output.settings = serde_json::json!({ "url": url }).to_string();
        self.store
            .insert_output(&output)
            .await
            .expect("insert output");
        let id = ConnectionId::new();
        self.store
            .insert_connection(&id, &input.id, &output.id, "{}", 1)
            .await
            .expect("insert connection");
        id
    }

    pub(crate) async fn jobs(&self) -> Vec<JobRow> {
        self.store
            .fetch_all(Sql::shared(SELECT_JOBS), &[])
            .await
            .expect("read jobs")
    }

    pub(super) async fn job(&self, id: i64) -> Option<JobRow> {
        self.jobs().await.into_iter().find(|j| j.id == id)
    }

    pub(crate) async fn batches(&self) -> Vec<BatchRow> {
        self.store
            .fetch_all(Sql::shared(SELECT_BATCHES), &[])
            .await
            .expect("read batches")
    }

    pub(crate) async fn attempts(&self) -> Vec<AttemptLog> {
        self.store
            .fetch_all(Sql::shared(SELECT_ATTEMPTS), &[])
            .await
            .expect("read attempts")
    }

    pub(super) async fn dead_letters(&self) -> Vec<DeadLetterLog> {
        self.store
            .fetch_all(Sql::shared(SELECT_DEAD_LETTERS), &[])
            .await
            .expect("read dead letters")
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let Database::Postgres { server, name } = &self.database else {
            return;
        };
        let (server, name) = (server.clone(), name.clone());
        // Drop runs inside the test's runtime, which cannot block on a future; a thread with a
        // runtime of its own can. FORCE ends the connections the store's pool still holds.
        let dropped = std::thread::spawn(move || {
            use sqlx::Connection;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&server).await?;
                let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                sqlx::query(sqlx::AssertSqlSafe(drop))
                    .execute(&mut admin)
                    .await
                    .map(|_| ())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop a test database: {dropped:?}");
        }
    }
}

/// Moves every stored time back (see `TestStore::advance`). A lease of 0 means "not leased" and
/// stays 0.
const ADVANCE: [&str; 4] = [
    "UPDATE jobs SET created_at = created_at - $1, next_attempt_at = next_attempt_at - $1, \
     lease_until = CASE WHEN lease_until > 0 THEN lease_until - $1 ELSE 0 END",
    "UPDATE batches SET received_at = received_at - $1",
    "UPDATE attempts SET attempted_at = attempted_at - $1",
    "UPDATE dead_letters SET created_at = created_at - $1",
];
const SELECT_JOBS: &str = "SELECT id, batch_id, connection_id, revision_id, progress, attempts, \
     created_at, next_attempt_at, lease_until, leased_by, last_error FROM jobs ORDER BY id";
const SELECT_BATCHES: &str = "SELECT id, input_id, source_request_id, received_at, event_count, \
     body FROM batches ORDER BY id";
const SELECT_ATTEMPTS: &str = "SELECT id, job_id, connection_id, attempted_at, outcome, status, \
     error, requests, latency_ms, events FROM attempts ORDER BY id";
const SELECT_DEAD_LETTERS: &str = "SELECT id, job_id, batch_id, connection_id, payload_index, \
     body, status, error, created_at FROM dead_letters ORDER BY id";

/// A row of `jobs`, every column.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct JobRow {
    pub(crate) id: i64,
    pub(super) batch_id: BatchId,
    pub(super) connection_id: ConnectionId,
    pub(super) revision_id: i64,
    pub(super) progress: i64,
    pub(super) attempts: i64,
    pub(super) created_at: i64,
    pub(super) next_attempt_at: i64,
    pub(crate) lease_until: i64,
    pub(super) leased_by: Option<String>,
    pub(super) last_error: Option<String>,
}

impl JobRow {
    pub(super) fn key(&self) -> JobKey {
        JobKey {
            id: self.id,
            batch_id: self.batch_id,
            connection_id: self.connection_id.clone(),
            mates: Vec::new(),
        }
    }
}

/// A row of `batches`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct BatchRow {
    pub(super) id: BatchId,
    pub(super) input_id: InputId,
    pub(super) source_request_id: Option<String>,
    pub(super) received_at: i64,
    pub(super) event_count: i64,
    pub(super) body: Vec<u8>,
}

/// A row of `attempts`, every column (the admin listing leaves some out).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct AttemptLog {
    pub(crate) id: i64,
    pub(crate) job_id: i64,
    pub(crate) connection_id: ConnectionId,
    pub(crate) attempted_at: i64,
    pub(crate) outcome: String,
    pub(crate) status: Option<i64>,
    pub(crate) error: Option<String>,
    pub(crate) requests: i64,
    pub(crate) latency_ms: i64,
    pub(crate) events: i64,
}

/// A row of `dead_letters`, with its connection.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(super) struct DeadLetterLog {
    pub(super) id: i64,
    pub(super) job_id: i64,
    pub(super) batch_id: BatchId,
    pub(super) connection_id: ConnectionId,
    pub(super) payload_index: i64,
    pub(super) body: Vec<u8>,
    pub(super) status: Option<i64>,
    pub(super) error: String,
    pub(super) created_at: i64,
}

/// One writer on the test store, as a node's delivery uses it.
pub(super) struct Node {
    writer: Writer,
    /// Jobs the writer handed over after committing their batches.
    handed_over: mpsc::UnboundedReceiver<Vec<Job>>,
    /// Connections whose new jobs this node leaves in the table.
    crowded: Mutex<HashSet<String>>,
}

impl Node {
    /// The node's writer itself, for what the suite sends it directly.
    pub(super) fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Stores batches; their jobs are leased to this node unless their connection is crowded
    /// here (as the pipeline's fan-out decides).
    pub(super) async fn ingest(&self, mut batches: Vec<NewBatch>) -> Vec<IngestOutcome> {
        {
            let crowded = self.crowded.lock().expect("crowded set");
            for job in batches.iter_mut().flat_map(|b| b.jobs.iter_mut()) {
                job.leased = !crowded.contains(job.connection_id.as_str());
            }
        }
        self.writer.ingest(batches).await.expect("ingest")
    }

    /// The jobs handed over since the last call (the writer sends them before it answers the
    /// ingest, so they are here once `ingest` returned).
    pub(super) fn handed_over(&mut self) -> Vec<Job> {
        let mut jobs = Vec::new();
        while let Ok(more) = self.handed_over.try_recv() {
            jobs.extend(more);
        }
        jobs
    }

    /// Claims up to `limit` jobs, skipping the `skip` connections. A claimed job comes without
    /// its body (delivery reads bodies separately).
    pub(super) async fn claim(&self, limit: i64, skip: &[&str]) -> Vec<Job> {
        let skip = skip.iter().map(|&c| ConnectionId::trusted(c)).collect();
        let claimed = self.writer.claim(limit, skip).await.expect("claim");
        claimed
            .into_iter()
            .map(|job| job.into_job(Arc::from(Vec::new())))
            .collect()
    }

    /// Sends an update and waits until it is committed (as delivery records outcomes).
    pub(super) async fn update(&self, update: JobUpdate) {
        self.writer.update(update).await.expect("update");
    }

    /// Sends an update without waiting for its commit (as delivery releases jobs).
    pub(super) async fn send_update(&self, update: JobUpdate) {
        self.writer.update_later(update).await.expect("send update");
    }

    /// Renews leases (committed when it answers); returns the jobs this node still held.
    pub(super) async fn renew(&self, job_ids: Vec<i64>) -> Vec<i64> {
        self.writer.renew(job_ids).await.expect("renew").job_ids
    }

    /// Marks a connection's lanes on this node as crowded (or not).
    pub(super) fn crowd(&self, connection_id: &str, crowded: bool) {
        let mut set = self.crowded.lock().expect("crowded set");
        if crowded {
            set.insert(connection_id.to_owned());
        } else {
            set.remove(connection_id);
        }
    }
}

/// A new input's row.
pub(super) fn input_row() -> InputRow {
    let id = InputId::new();
    InputRow {
        name: "in".to_owned(),
        platform: "custom_feed".to_owned(),
        api_key: format!("key-{id}"),
        api_secret: "secret".to_owned(),
        created_at: 1,
        settings: "{}".to_owned(),
        id,
    }
}

/// A new webhook output's row, to a port nothing listens on.
pub(super) fn output_row() -> OutputRow {
    OutputRow {
        id: OutputId::new(),
        name: "out".to_owned(),
        kind: "webhook".to_owned(),
        settings: r#"{"url":"http://127.0.0.1:9/hook"}"#.to_owned(),
        created_at: 1,
        updated_at: 1,
        signing_secret: None,
        previous_signing_secret: None,
        signing_rotated_at: None,
    }
}

/// A batch of `input` received at `received_at`, routed to `connections` (revision 10 + their
/// index, so routes are told apart).
pub(crate) fn batch(
    input: &str,
    source_request_id: Option<&str>,
    received_at: i64,
    connections: &[&str],
) -> NewBatch {
    let body =
        format!("{{\"input\":{input:?},\"request\":{source_request_id:?},\"at\":{received_at}}}");
    NewBatch {
        input_id: InputId::trusted(input),
        source_request_id: source_request_id.map(str::to_owned),
        received_at,
        event_count: 3,
        body: Arc::from(body.into_bytes()),
        jobs: connections
            .iter()
            .zip(10..)
            .map(|(&connection_id, revision_id)| NewJob {
                connection_id: ConnectionId::trusted(connection_id),
                revision_id,
                leased: true,
                reads_consent: false,
                mpid: None,
                window_ms: 0,
            })
            .collect(),
        profile: None,
        unresolved: None,
    }
}

/// A delivery attempt at `at`.
pub(super) fn attempt(at: i64, outcome: AttemptOutcome, error: Option<&str>) -> AttemptRecord {
    AttemptRecord {
        attempted_at: at,
        outcome,
        status: Some(if error.is_some() { 503 } else { 200 }),
        error: error.map(str::to_owned),
        requests: 2,
        latency_ms: 17,
        events: 3,
    }
}

/// A dead letter for the batch's `index`th request.
pub(super) fn dead_letter(index: i64) -> DeadLetter {
    DeadLetter {
        payload_index: index,
        body: format!("request {index}").into_bytes(),
        status: Some(400),
        error: format!("rejected request {index}"),
    }
}

/// The key of a job handed over or claimed.
pub(super) fn key(job: &Job) -> JobKey {
    JobKey {
        id: job.id,
        batch_id: job.batch_id,
        connection_id: job.connection_id.clone(),
        mates: Vec::new(),
    }
}

#[test]
fn test_database_urls_keep_the_server_and_its_options() {
    let name = "boson_store_test_x";
    assert_eq!(
        database_url("postgres://postgres@127.0.0.1:5432/postgres", name),
        "postgres://postgres@127.0.0.1:5432/boson_store_test_x"
    );
    assert_eq!(
        database_url("postgres://u@host:5432", name),
        "postgres://u@host:5432/boson_store_test_x"
    );
    assert_eq!(
        database_url("postgresql://u@host/db?sslmode=disable", name),
        "postgresql://u@host/boson_store_test_x?sslmode=disable"
    );
}
