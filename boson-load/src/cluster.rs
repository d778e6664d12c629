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

    /// Stops every node gracefully and drops the database; problems are only reported.
    pub(crate) async fn stop(self) {
        for node in self.nodes {
            if let Err(e) = node.shutdown().await {
                eprintln!("boson-load: {e:#}");
            }
        }
        if let Some(database) = self.database
            && let Err(e) = database.drop_now().await
        {
            eprintln!("boson-load: {e:#}");
        }
    }
}
