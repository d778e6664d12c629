//! Boson: a self-hosted customer data platform that speaks mParticle's protocols.
//!
//! Data flows `ingest` → `store` (group commit) → `delivery` (which applies `pipeline` filters)
//! → webhooks. `admin` manages inputs, outputs and connections; `catalog` keeps them in memory
//! for the hot path. See `../shared/DESIGN.md` for the architecture.

mod admin;
mod catalog;
pub mod config;
mod dashboard;
mod delivery;
mod error;
mod identity;
mod ingest;
mod live;
mod model;
mod pipeline;
mod server;
mod store;
pub mod telemetry;

pub use config::Config;
pub use server::run;

/// Runs the database migrations for `config` and exits (the `migrate` subcommand).
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let store = store::Store::connect(&config.database_url.0).await?;
    store.close().await;
    Ok(())
}
