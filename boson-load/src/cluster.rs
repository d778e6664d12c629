//! The Boson processes of a scenario: `--nodes` of them on a fresh PostgreSQL database when
//! `--database-url` is given (dropped again at the end), or a single one on a fresh SQLite file.

use anyhow::{Result, ensure};

use crate::boson::Boson;
use crate::cli::Args;
use crate::database::FreshDatabase;

/// Running nodes sharing one database.
#[derive(Debug)]
pub(crate) struct Cluster {
    nodes: Vec<Boson>,
    database: Option<FreshDatabase>,
}

impl Cluster {
    /// Starts `args.node_count()` nodes and waits until each is ready. On an error, whatever
    /// was started is stopped again.
    pub(crate) async fn start(args: &Args, http: &reqwest::Client) -> Result<Self> {
        let count = args.node_count();
        ensure!(
            count == 1 || args.database_url.is_some(),
            "{count} nodes need a shared database: pass --database-url postgres://…"
        );
        let database = match &args.database_url {
            Some(server) => Some(FreshDatabase::create(server).await?),
            None => None,
        };
        let mut cluster = Self {
            nodes: Vec::new(),
            database,
        };
        for _ in 0..count {
            let url = cluster.database.as_ref().map(FreshDatabase::url);
            match Boson::start(&args.boson_bin(), http, url, &args.boson_log).await {
                Ok(node) => cluster.nodes.push(node),
                Err(e) => {
                    cluster.stop().await;
                    return Err(e);
                }
            }
        }
        eprintln!("boson-load: {count} node(s) ready");
        Ok(cluster)
    }

    pub(crate) fn nodes(&self) -> &[Boson] {
        &self.nodes
    }

    /// `/v2/events` of every node.
    pub(crate) fn event_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|node| format!("{}/v2/events", node.base_url()))
            .collect()
    }

    /// The largest peak RSS of any node, in MB.
    pub(crate) fn peak_rss_mb(&self) -> Result<f64> {
        self.nodes
            .iter()
            .map(Boson::peak_rss_mb)
            .try_fold(0.0, |peak, node| Ok(f64::max(peak, node?)))
    }

    /// CPU seconds (user + system) of every node together.
    pub(crate) fn cpu_secs(&self) -> Result<f64> {
        self.nodes.iter().map(Boson::cpu_secs).sum()
    }

    /// Stops every node gracefully and drops the database; problems are only reported.
    pub(crate) async fn stop(self) {
        if let Err(e) = self.shutdown().await {
            eprintln!("boson-load: {e:#}");
        }
    }

    /// Stops every node gracefully, all of them whatever fails, and drops the database. The
    /// first node that failed to stop is the error; other problems are only reported.
    pub(crate) async fn shutdown(self) -> Result<()> {
        let mut first = None;
        for node in self.nodes {
            match (node.shutdown().await, &first) {
                (Ok(()), _) => {}
                (Err(e), None) => first = Some(e),
                (Err(e), Some(_)) => eprintln!("boson-load: {e:#}"),
            }
        }
        if let Some(database) = self.database
            && let Err(e) = database.drop_now().await
        {
            eprintln!("boson-load: {e:#}");
        }
        first.map_or(Ok(()), Err)
    }
}
