//! Configuration: documented defaults (`config.default.toml`), then an optional TOML file, then
//! `BOSON_` environment variables (`__` separates a section from its key). Validated at load time
//! so bad configuration is refused before any port is bound.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// The defaults, with a comment on every key.
pub const DEFAULT_CONFIG: &str = include_str!("../config.default.toml");

const ENV_PREFIX: &str = "BOSON_";
/// The shortest admin token accepted. The token grants everything (secrets, destinations), is
/// checked on every request without throttling over the admin API, and is chosen by a person;
/// 16 characters keep even a lowercase-and-digits token beyond guessing (36^16 ≈ 8·10^24).
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;
/// The most ingest lanes on PostgreSQL: each holds one of the store's 16 pooled connections
/// while it commits, and delivery, the catalog and the admin API need some of them.
pub const MAX_POSTGRES_LANES: usize = 8;
/// The most async worker threads (`worker_threads`): far more than any host has CPUs, and few
/// enough that starting them cannot fail for want of threads.
pub const MAX_WORKER_THREADS: usize = 1024;
/// Longest a writer lane may hold a group commit open (`ingest.commit_gather_us`).
pub const MAX_COMMIT_GATHER_US: u64 = 10_000;
/// Top-level keys the environment may set; anything else prefixed `BOSON_` is warned about.
const KNOWN_KEYS: &[&str] = &[
    "retention",
    "listen",
    "database_url",
    "admin_token",
    "allow_private_destinations",
    "tls_cert",
    "tls_key",
    "shutdown_deadline_secs",
    "worker_threads",
    "http",
    "ingest",
    "delivery",
    "identity",
    "operator_webhook_url",
    "operator_webhook_secret",
    "alerts",
];
/// Variables that are read by the CLI or tests, not configuration keys.
const NON_CONFIG_VARS: &[&str] = &[
    "config",
    "log_format",
    "test_database_url",
    "require_all_suites",
    "ci_postgres_url",
];

/// Boson's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address of the HTTP server.
    pub listen: SocketAddr,
    /// `sqlite://…` or `postgres://…`.
    pub database_url: DatabaseUrl,
    /// Admin API token; generated on first start when unset.
    #[serde(default)]
    pub admin_token: Option<SecretString>,
    /// Allow webhook destinations that are not globally routable unicast (loopback, private,
    /// link-local, …; see `model::destination`).
    pub allow_private_destinations: bool,
    /// PEM certificate chain; with `tls_key`, Boson serves HTTPS instead of HTTP.
    #[serde(default)]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of `tls_cert`.
    #[serde(default)]
    pub tls_key: Option<std::path::PathBuf>,
    /// Seconds requests and deliveries in flight get to finish once shutdown begins; then the
    /// connections left are dropped and the deliveries left are released.
    pub shutdown_deadline_secs: u64,
    /// The async runtime's worker threads; 0: tokio's default (see [`Self::worker_threads`]).
    pub worker_threads: usize,
    /// The HTTP server's connection cap and timeouts.
    pub http: HttpConfig,
    /// Events API limits.
    pub ingest: IngestConfig,
    /// Webhook delivery: retries, timeouts, concurrency.
    pub delivery: DeliveryConfig,
    /// How long the batch log, attempt log and dead letters are kept.
    pub retention: RetentionConfig,
    /// IDSync: device bindings and caps on the users public keys may create.
    pub identity: IdentityConfig,
    /// Where operator alerts (`connection.failing`, `dead_letter.created`, …) are posted;
    /// none are sent when unset.
    #[serde(default)]
    pub operator_webhook_url: Option<String>,
    /// The `whsec_…` secret operator alerts are signed with (Standard Webhooks).
    #[serde(default)]
    pub operator_webhook_secret: Option<SecretString>,
    /// When operator alerts fire and how often.
    pub alerts: AlertsConfig,
}

/// Operator alerts: thresholds and how often they may repeat.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// Jobs waiting for one connection beyond which `backlog.over_threshold` is sent.
    pub backlog_threshold: u64,
    /// Seconds between two backlog checks.
    pub backlog_check_secs: u64,
    /// At most one `dead_letter.created` and one `backlog.over_threshold` per connection per
    /// this many seconds, across all nodes.
    pub window_secs: u64,
}

/// IDSync's limits on callers who hold only a public key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityConfig {
    /// Seconds a device binding (the `context` IDSync answers) lets its device modify its user.
    pub binding_max_age_secs: u64,
    /// Length of the windows the two caps below count in, in seconds.
    pub new_user_window_secs: u64,
    /// Users IDSync may create per input and window on one node (0: no cap).
    pub max_new_users_per_input: u32,
    /// Users IDSync may create per client address and window on one node (0: no cap).
    pub max_new_users_per_client: u32,
}

/// Pruning of the batch log, attempt log and dead letters, and of what public keys write
/// outside batches (kit forwarding statistics, alias requests).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Hours rows are kept.
    pub hours: u64,
    /// Seconds between two pruning passes.
    pub interval_secs: u64,
    /// Days a kit's forwarding statistics are kept after its last report.
    pub forwarding_stats_days: u64,
    /// Days an alias request is kept after it arrived.
    pub aliases_days: u64,
    /// Days the per-minute figures behind the dashboard's charts are kept.
    pub metrics_days: u64,
}

impl RetentionConfig {
    /// Milliseconds forwarding statistics are kept after their last report.
    pub fn forwarding_stats_ms(&self) -> i64 {
        days_ms(self.forwarding_stats_days)
    }

    /// Milliseconds alias requests are kept.
    pub fn aliases_ms(&self) -> i64 {
        days_ms(self.aliases_days)
    }

    /// Milliseconds the per-minute figures are kept.
    pub fn metrics_ms(&self) -> i64 {
        days_ms(self.metrics_days)
    }
}

fn days_ms(days: u64) -> i64 {
    i64::try_from(days.saturating_mul(86_400_000)).unwrap_or(i64::MAX)
}

/// The HTTP server's guards against clients that hold connections: a cap on open connections
/// and deadlines for request heads, request bodies and idle connections.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Most connections open at once; beyond it new ones wait in the listen backlog.
    pub max_connections: usize,
    /// Seconds a connection (new, or kept alive after a response) gets to send a complete
    /// request head.
    pub header_read_timeout_secs: u64,
    /// Seconds a request's body gets to arrive, counted from its head.
    pub body_read_timeout_secs: u64,
    /// Seconds a connection may move no byte in either direction before it is closed.
    pub idle_timeout_secs: u64,
}

/// Limits of the ingest routes (Events API and SDK endpoints).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    /// Largest accepted request body in bytes.
    pub max_body_bytes: usize,
    /// Most batches per bulk request.
    pub max_bulk_batches: usize,
    /// Most seconds a signed mobile upload's `Date` may be from the server's clock, either way.
    pub mobile_max_clock_skew_secs: u64,
    /// Most events in one batch, on every ingest route.
    pub max_events_per_batch: usize,
    /// Most distinct client-side kits whose forwarding statistics an input keeps; reports of
    /// further kits are counted together in one overflow bucket.
    pub max_forwarding_kits_per_input: usize,
    /// Ingest lanes of the group-commit writer on PostgreSQL: each commits its own groups on a
    /// connection of its own, so this many commits can be in flight at once. SQLite has one.
    pub postgres_lanes: usize,
    /// SQLite only: microseconds the writer may hold a small group commit open for more
    /// requests, when they arrive at a moderate rate (`store::gather`); 0 never.
    pub commit_gather_us: u64,
}

impl IngestConfig {
    /// `commit_gather_us` as a duration.
    pub fn commit_gather(&self) -> Duration {
        Duration::from_micros(self.commit_gather_us)
    }
}

/// Webhook delivery settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// Seconds a delivery is retried before it is dead-lettered.
    pub retry_window_secs: u64,
    /// First retry delay in milliseconds.
    pub initial_backoff_ms: u64,
    /// Longest delay between two attempts.
    pub max_backoff_secs: u64,
    /// Timeout of one webhook request.
    pub request_timeout_secs: u64,
    /// Requests in flight per connection.
    pub max_in_flight_per_connection: usize,
    /// Jobs queued in memory per connection beyond those in flight; the rest wait in the
    /// database until there is room.
    pub lane_capacity: usize,
    /// Lease of a claimed job.
    pub lease_secs: u64,
    /// Interval of the retry poller.
    pub poll_interval_ms: u64,
    /// Consecutive failed requests that open a connection's circuit breaker.
    pub circuit_breaker_failures: u32,
    /// Longest time an open breaker waits before its next probe request.
    pub circuit_breaker_max_open_secs: u64,
}

/// A database URL whose `Debug` output hides any password.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match url::Url::parse(&self.0) {
            Ok(mut url) if url.password().is_some() => {
                let _ = url.set_password(Some("***"));
                write!(f, "{url}")
            }
            _ => write!(f, "{}", self.0),
        }
    }
}

impl Config {
    /// Loads the layered configuration; `file` is an optional TOML file.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Self> {
        let mut figment = Figment::new().merge(Toml::string(DEFAULT_CONFIG));
        if let Some(file) = file {
            if !file.exists() {
                bail!("config file {} does not exist", file.display());
            }
            figment = figment.merge(Toml::file(file));
        }
        warn_unknown_env();
        figment = figment.merge(Env::prefixed(ENV_PREFIX).split("__").filter(|key| {
            let key = key.as_str().to_ascii_lowercase();
            KNOWN_KEYS.iter().any(|k| key.starts_with(k))
        }));
        let config: Config = figment.extract().context("invalid configuration")?;
        config.validate()?;
        Ok(config)
    }

    /// The async runtime's worker threads, if set; `None` (0 in the configuration) leaves
    /// tokio's default: one per CPU, or `TOKIO_WORKER_THREADS`.
    pub fn worker_threads(&self) -> Option<usize> {
        (self.worker_threads > 0).then_some(self.worker_threads)
    }

    /// The defaults alone, for tests and tools that then adjust fields.
    pub fn defaults() -> anyhow::Result<Self> {
        let config: Config = Figment::new()
            .merge(Toml::string(DEFAULT_CONFIG))
            .extract()
            .context("invalid default configuration")?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        let url = &self.database_url.0;
        if !(url.starts_with("sqlite:")
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://"))
        {
            bail!(
                "database_url must start with sqlite:// or postgres:// (got {:?})",
                self.database_url
            );
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                for file in [cert, key] {
                    if !file.exists() {
                        bail!("TLS file {} does not exist", file.display());
                    }
                }
            }
            (None, None) => {}
            _ => bail!("tls_cert and tls_key (BOSON_TLS_CERT, BOSON_TLS_KEY) must be set together"),
        }
        if let Some(token) = &self.admin_token {
            check_admin_token(token.expose_secret())?;
        }
        let d = &self.delivery;
        if d.initial_backoff_ms < 10 || d.poll_interval_ms < 10 {
            bail!("delivery.initial_backoff_ms and delivery.poll_interval_ms must be at least 10");
        }
        // A lease shorter than a request could expire mid-delivery and let the job run twice.
        if d.lease_secs < d.request_timeout_secs.saturating_mul(2) || d.request_timeout_secs == 0 {
            bail!(
                "delivery.lease_secs must be at least twice delivery.request_timeout_secs (and the timeout positive)"
            );
        }
        // A batch must outlive its retries, or a late retry would find nothing to send.
        if self.retention.hours.saturating_mul(3600) < d.retry_window_secs {
            bail!("retention.hours must cover delivery.retry_window_secs");
        }
        if self.retention.interval_secs == 0 {
            bail!("retention.interval_secs must be positive");
        }
        if self.delivery.max_in_flight_per_connection == 0 {
            bail!("delivery.max_in_flight_per_connection must be at least 1");
        }
        if self.delivery.circuit_breaker_failures == 0 {
            bail!("delivery.circuit_breaker_failures must be at least 1");
        }
        if self.delivery.lane_capacity < 4 {
            bail!("delivery.lane_capacity must be at least 4");
        }
        self.http.validate()?;
        self.check_operator_webhook()?;
        let i = &self.ingest;
        if i.max_bulk_batches == 0
            || i.max_body_bytes == 0
            || i.max_events_per_batch == 0
            || i.max_forwarding_kits_per_input == 0
        {
            bail!(
                "ingest.max_bulk_batches, ingest.max_body_bytes, ingest.max_events_per_batch and \
                 ingest.max_forwarding_kits_per_input must be positive"
            );
        }
        if !(1..=MAX_POSTGRES_LANES).contains(&i.postgres_lanes) {
            bail!("ingest.postgres_lanes must be from 1 to {MAX_POSTGRES_LANES}");
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            bail!("worker_threads must be at most {MAX_WORKER_THREADS} (0: one per CPU)");
        }
        if i.commit_gather_us > MAX_COMMIT_GATHER_US {
            bail!("ingest.commit_gather_us must be at most {MAX_COMMIT_GATHER_US} (10 ms)");
        }
        if self.retention.forwarding_stats_days == 0
            || self.retention.aliases_days == 0
            || self.retention.metrics_days == 0
        {
            bail!(
                "retention.forwarding_stats_days, retention.aliases_days and \
                 retention.metrics_days must be positive"
            );
        }
        self.check_replay_window()?;
        Ok(())
    }
}

impl Config {
    /// Replays of a signed mobile upload are recognised by the batch it stored, so the batch log
    /// must outlive the time a replay's `Date` still passes.
    fn check_operator_webhook(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.operator_webhook_url {
            let parsed = url::Url::parse(url)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
            if parsed.is_none() {
                bail!(
                    "operator_webhook_url (BOSON_OPERATOR_WEBHOOK_URL) must be an http:// or https:// URL"
                );
            }
        }
        if let Some(secret) = &self.operator_webhook_secret
            && crate::model::signing::SigningKey::from_secret(secret.expose_secret()).is_err()
        {
            bail!(
                "operator_webhook_secret (BOSON_OPERATOR_WEBHOOK_SECRET) must be a whsec_… secret (base64 after the prefix)"
            );
        }
        if self.alerts.backlog_check_secs == 0 || self.alerts.window_secs == 0 {
            bail!("alerts.backlog_check_secs and alerts.window_secs must be positive");
        }
        Ok(())
    }

    fn check_replay_window(&self) -> anyhow::Result<()> {
        let skew = self.ingest.mobile_max_clock_skew_secs;
        if skew == 0 {
            bail!("ingest.mobile_max_clock_skew_secs must be positive");
        }
        let window = crate::model::signed_date::replay_window_secs(skew);
        if self.retention.hours.saturating_mul(3600) < window {
            bail!(
                "retention.hours must cover the mobile replay window: {} hours for \
                 ingest.mobile_max_clock_skew_secs = {skew} (twice the skew, plus 26 hours for \
                 dates in a named time zone)",
                window.div_ceil(3600)
            );
        }
        Ok(())
    }
}

impl HttpConfig {
    /// A zero would close every connection at once (or, for the cap, accept none).
    fn validate(&self) -> anyhow::Result<()> {
        if self.max_connections == 0
            || self.header_read_timeout_secs == 0
            || self.body_read_timeout_secs == 0
            || self.idle_timeout_secs == 0
        {
            bail!(
                "http.max_connections, http.header_read_timeout_secs, http.body_read_timeout_secs \
                 and http.idle_timeout_secs must be positive"
            );
        }
        Ok(())
    }
}

/// Refuses an admin token that is empty, short, or would not arrive intact: a blank
/// `BOSON_ADMIN_TOKEN=` must not start a server anyone can administer, and surrounding
/// whitespace or control characters cannot be sent reliably in a header (HTTP strips them), so
/// such a token could never be presented, and trimming it on comparison would weaken it.
fn check_admin_token(token: &str) -> anyhow::Result<()> {
    if token.chars().count() < MIN_ADMIN_TOKEN_CHARS {
        bail!(
            "admin_token (BOSON_ADMIN_TOKEN) must be at least {MIN_ADMIN_TOKEN_CHARS} characters: \
             it grants full admin access, so an empty or short one could be guessed; \
             leave it unset to have a random one generated on first start"
        );
    }
    if token.trim() != token || token.chars().any(char::is_control) {
        bail!(
            "admin_token (BOSON_ADMIN_TOKEN) must not start or end with whitespace or contain \
             control characters: it is compared exactly as sent in a header, which cannot carry them"
        );
    }
    Ok(())
}

fn warn_unknown_env() {
    for (name, _) in std::env::vars() {
        let Some(key) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let key = key.to_ascii_lowercase();
        let known = KNOWN_KEYS.iter().any(|k| key.starts_with(k))
            || NON_CONFIG_VARS.contains(&key.as_str());
        if !known {
            tracing::warn!(variable = %name, "Unknown BOSON_ environment variable ignored.");
        }
    }
}

#[cfg(test)]
// figment's Jail API returns its large error type by value; that is its design, not ours.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_validate() {
        let c = Config::defaults().unwrap();
        c.validate().unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert!(!c.allow_private_destinations);
        assert_eq!(c.delivery.retry_window_secs, 86_400);
        assert_eq!(c.shutdown_deadline_secs, 30);
        assert_eq!(c.http.max_connections, 512);
        assert_eq!(c.ingest.max_events_per_batch, 1000);
        assert_eq!(c.ingest.max_forwarding_kits_per_input, 100);
        assert_eq!(c.ingest.postgres_lanes, 1);
        assert_eq!(c.ingest.commit_gather(), Duration::from_millis(1));
        assert_eq!(c.retention.forwarding_stats_ms(), 30 * 86_400_000);
        assert_eq!(c.retention.aliases_ms(), 30 * 86_400_000);
    }

    #[test]
    fn http_limits_come_from_the_environment_and_zero_is_refused() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("BOSON_HTTP__MAX_CONNECTIONS", "20");
            jail.set_env("BOSON_HTTP__IDLE_TIMEOUT_SECS", "3");
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!((c.http.max_connections, c.http.idle_timeout_secs), (20, 3));
            jail.set_env("BOSON_HTTP__BODY_READ_TIMEOUT_SECS", "0");
            let error = format!("{:#}", Config::load(None).expect_err("zero"));
            assert!(error.contains("http.body_read_timeout_secs"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn the_operator_webhook_comes_from_the_environment_and_is_checked() {
        figment::Jail::expect_with(|jail| {
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert!(c.operator_webhook_url.is_none(), "no alerts by default");
            assert_eq!(c.alerts.window_secs, 60);
            jail.set_env("BOSON_OPERATOR_WEBHOOK_URL", "https://ops.example/boson");
            jail.set_env("BOSON_OPERATOR_WEBHOOK_SECRET", "whsec_c2VjcmV0");
            jail.set_env("BOSON_ALERTS__BACKLOG_THRESHOLD", "50");
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(
                c.operator_webhook_url.as_deref(),
                Some("https://ops.example/boson")
            );
            assert_eq!(c.alerts.backlog_threshold, 50);
            jail.set_env("BOSON_OPERATOR_WEBHOOK_SECRET", "secret");
            let error = format!("{:#}", Config::load(None).expect_err("not whsec_"));
            assert!(error.contains("operator_webhook_secret"), "{error}");
            jail.set_env("BOSON_OPERATOR_WEBHOOK_SECRET", "whsec_c2VjcmV0");
            jail.set_env("BOSON_OPERATOR_WEBHOOK_URL", "ops.example");
            let error = format!("{:#}", Config::load(None).expect_err("not a URL"));
            assert!(error.contains("operator_webhook_url"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn the_mobile_clock_skew_is_a_setting_and_retention_must_cover_its_replays() {
        figment::Jail::expect_with(|jail| {
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(c.ingest.mobile_max_clock_skew_secs, 600);
            jail.set_env("BOSON_INGEST__MOBILE_MAX_CLOCK_SKEW_SECS", "60");
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(c.ingest.mobile_max_clock_skew_secs, 60);
            // 24 hours cover the retries but not a replay of a date in a named zone.
            jail.set_env("BOSON_RETENTION__HOURS", "24");
            let error = format!("{:#}", Config::load(None).expect_err("24 hours"));
            assert!(error.contains("27 hours"), "{error}");
            jail.set_env("BOSON_RETENTION__HOURS", "27");
            jail.set_env("BOSON_INGEST__MOBILE_MAX_CLOCK_SKEW_SECS", "0");
            let error = format!("{:#}", Config::load(None).expect_err("zero"));
            assert!(error.contains("mobile_max_clock_skew_secs"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn env_overrides_and_nests() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("BOSON_LISTEN", "127.0.0.1:9999");
            jail.set_env("BOSON_ALLOW_PRIVATE_DESTINATIONS", "true");
            jail.set_env("BOSON_DELIVERY__RETRY_WINDOW_SECS", "60");
            jail.set_env("BOSON_SHUTDOWN_DEADLINE_SECS", "2");
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(c.shutdown_deadline_secs, 2);
            assert_eq!(c.listen.port(), 9999);
            assert!(c.allow_private_destinations);
            assert_eq!(c.delivery.retry_window_secs, 60);
            Ok(())
        });
    }

    /// By default tokio chooses (one thread per CPU); a number set, in the file or the
    /// environment, is taken as it is, up to a bound.
    #[test]
    fn worker_threads_are_tokios_choice_unless_set() {
        let mut c = Config::defaults().unwrap();
        assert_eq!(c.worker_threads(), None);
        c.worker_threads = 4;
        assert_eq!(c.worker_threads(), Some(4));
        figment::Jail::expect_with(|jail| {
            jail.set_env("BOSON_WORKER_THREADS", "1");
            let c = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(c.worker_threads(), Some(1));
            jail.set_env("BOSON_WORKER_THREADS", "10000");
            let error = format!("{:#}", Config::load(None).expect_err("too many"));
            assert!(error.contains("worker_threads must be at most"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn a_bad_database_url_is_refused() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("BOSON_DATABASE_URL", "mysql://x");
            assert!(Config::load(None).is_err());
            Ok(())
        });
    }

    #[test]
    fn an_empty_or_short_admin_token_is_refused_with_the_reason() {
        for token in ["", "   ", "change-me", "fifteen-chars!!"] {
            figment::Jail::expect_with(|jail| {
                jail.set_env("BOSON_ADMIN_TOKEN", token);
                let error = format!("{:#}", Config::load(None).expect_err(token));
                assert!(error.contains("at least 16"), "{token:?}: {error}");
                Ok(())
            });
        }
    }

    #[test]
    fn an_admin_token_with_surrounding_whitespace_is_refused() {
        figment::Jail::expect_with(|jail| {
            // A file, since figment trims environment values.
            jail.create_file(
                "boson.toml",
                "admin_token = \" a-long-enough-admin-token \"",
            )?;
            let loaded = Config::load(Some(Path::new("boson.toml")));
            let error = format!("{:#}", loaded.expect_err("whitespace"));
            assert!(error.contains("whitespace"), "{error}");
            Ok(())
        });
    }

    #[test]
    fn a_long_admin_token_is_accepted() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("BOSON_ADMIN_TOKEN", "sixteen-chars-ok");
            Config::load(None).map_err(|e| e.to_string())?;
            Ok(())
        });
    }

    #[test]
    fn passwords_do_not_reach_debug_output() {
        let url = DatabaseUrl("postgres://u:secret@localhost/db".into());
        assert!(!format!("{url:?}").contains("secret"));
    }
}
