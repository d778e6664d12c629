//! Running the Boson server under test as a child process.
//!
//! Each run gets a fresh temporary directory holding a new SQLite database, or
//! a fresh PostgreSQL database (see `database.rs`), so results never depend on
//! what an earlier run left behind. The child is configured purely through
//! `BOSON_*` environment variables.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use base64::Engine as _;
use tempfile::TempDir;
use tokio::process::{Child, Command};

/// How long Boson may take to answer `/readyz` with 200 (migrations included).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long Boson may take to shut down gracefully after SIGTERM.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);

/// A running Boson server with its own database.
#[derive(Debug)]
pub(crate) struct Boson {
    child: Child,
    pid: u32,
    base_url: String,
    admin_token: String,
    // Held so the database directory lives exactly as long as the server.
    _data_dir: TempDir,
}

impl Boson {
    /// Starts `boson serve` on a free loopback port and waits until it is ready: on
    /// `database_url`, or on a new SQLite file when there is none; `log` is its `RUST_LOG`.
    pub(crate) async fn start(
        bin: &Path,
        http: &reqwest::Client,
        database_url: Option<&str>,
        log: &str,
    ) -> Result<Self> {
        ensure!(
            bin.is_file(),
            "Boson binary not found at {} (build it with `cargo build --release -p boson`, \
             or pass --boson-bin)",
            bin.display()
        );
        let data_dir = tempfile::Builder::new()
            .prefix("boson-load-")
            .tempdir()
            .context("creating temporary data directory")?;
        let database_url = database_url.map_or_else(
            || format!("sqlite://{}", data_dir.path().join("boson.db").display()),
            str::to_owned,
        );
        let addr = free_loopback_addr()?;
        let admin_token = random_token()?;

        let child = Command::new(bin)
            .arg("serve")
            .env("BOSON_LISTEN", addr.to_string())
            .env("BOSON_DATABASE_URL", database_url)
            .env("BOSON_ADMIN_TOKEN", &admin_token)
            .env("BOSON_ALLOW_PRIVATE_DESTINATIONS", "true")
            .env("RUST_LOG", log)
            .stdin(Stdio::null())
            // Our stdout carries only the JSON result line, so anything Boson
            // prints goes to stderr alongside our own logs.
            .stdout(std::io::stderr())
            .stderr(std::io::stderr())
            // If we bail out early (setup error, panic), don't leak a server.
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning {}", bin.display()))?;
        let pid = child.id().context("Boson exited immediately after spawn")?;

        let mut boson = Self {
            child,
            pid,
            base_url: format!("http://{addr}"),
            admin_token,
            _data_dir: data_dir,
        };
        boson.wait_ready(http).await?;
        Ok(boson)
    }

    pub(crate) fn base_url(&self) -> &str {
        &self.base_url
    }

    pub(crate) fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Polls `GET /readyz` until it answers 200, failing fast if the child dies.
    async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<()> {
        let url = format!("{}/readyz", self.base_url);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().context("checking Boson process")? {
                bail!("Boson exited before becoming ready: {status}");
            }
            // Connection refused is expected until the listener is bound.
            if let Ok(resp) = http.get(&url).send().await
                && resp.status() == reqwest::StatusCode::OK
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("Boson did not become ready at {url} within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Peak resident set size of the server so far, in MiB.
    ///
    /// The kernel tracks the high-water mark (`VmHWM`) for us, so reading it
    /// once just before shutdown gives the peak over the whole run without
    /// having to sample.
    pub(crate) fn peak_rss_mb(&self) -> Result<f64> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .context("no VmHWM line in /proc status")?
            .trim()
            .parse()
            .context("parsing VmHWM")?;
        Ok(kib as f64 / 1024.0)
    }

    /// CPU time the server has used so far (user + system, all threads), in seconds.
    ///
    /// Unlike throughput, this barely moves when something else on the machine takes CPU, so
    /// it is the figure to compare two builds by.
    pub(crate) fn cpu_secs(&self) -> Result<f64> {
        crate::cpu::process_secs(&format!("/proc/{}/stat", self.pid))
    }

    /// Sends SIGTERM and waits for a graceful exit, escalating to SIGKILL.
    pub(crate) async fn shutdown(mut self) -> Result<()> {
        // std/tokio can only send SIGKILL, and the workspace forbids `unsafe`
        // (so no direct libc::kill); kill(1) is always present on Linux.
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await
            .is_ok_and(|s| s.success());
        if sent {
            match tokio::time::timeout(SHUTDOWN_TIMEOUT, self.child.wait()).await {
                Ok(status) => {
                    let status = status.context("waiting for Boson to exit")?;
                    if !status.success() {
                        eprintln!("boson-load: Boson exited with {status}");
                    }
                    return Ok(());
                }
                Err(_) => eprintln!(
                    "boson-load: Boson still running {SHUTDOWN_TIMEOUT:?} after SIGTERM; killing"
                ),
            }
        } else {
            eprintln!("boson-load: could not send SIGTERM to Boson; killing");
        }
        self.child.kill().await.context("killing Boson")
    }
}

/// Finds a free port by binding port 0 and releasing it.
///
/// There is a small window in which something else could take the port before
/// Boson binds it; on a benchmark machine that is an acceptable trade for not
/// needing Boson to report its own address.
fn free_loopback_addr() -> Result<SocketAddr> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    listener.local_addr().context("reading bound address")
}

/// A fresh admin token, so nothing but this run can use the admin API.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 24];
    let mut urandom = std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?;
    std::io::Read::read_exact(&mut urandom, &mut bytes).context("reading /dev/urandom")?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}
