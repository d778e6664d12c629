//! Boson: a self-hosted customer data platform that speaks mParticle's protocols.
//!
//! Data flows `ingest` (and `identity`, IDSync) → `pipeline` (normalise, route, fan out) →
//! `store` (group commit) → `delivery` (which applies the `pipeline` filter) → webhooks. `admin`
//! manages inputs, outputs and connections; the pipeline's catalog keeps them in memory for the
//! hot path. `docs/ARCHITECTURE.md` follows one batch through the code.

mod access;
mod admin;
pub mod config;
mod dashboard;
mod delivery;
mod error;
// Test support for the fuzz targets in `fuzz/` and the property tests; not part of the server.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod identity;
mod ingest;
#[cfg(test)]
mod layering;
mod live;
mod model;
mod pipeline;
pub mod receive;
mod replay;
mod server;
mod state;
mod store;
mod supervise;
pub mod telemetry;

pub use config::Config;
pub use server::run;

/// Runs the database migrations for `config` and exits (the `migrate` subcommand).
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let store = store::Store::connect(&config.database_url.0).await?;
    store.close().await;
    Ok(())
}
