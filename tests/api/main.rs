//! Integration tests: the real server over HTTP, a real webhook receiver, a real database
//! (SQLite by default; PostgreSQL when `TEST_DATABASE_URL` is set).

// Test helpers are shared across this binary's modules; `pub` reads better than `pub(crate)` here.
#![allow(unreachable_pub)]
mod admin;
mod alerts;
mod alias;
mod alias_forwarding;
mod breaker;
mod coalesce;
mod connection_preview;
mod consent;
mod custom_headers;
mod dashboard;
mod dashboard_controls;
mod dashboard_inputs;
mod dashboard_live;
mod dashboard_look;
mod data_catalog;
mod delivery;
mod events_per_batch;
mod filters;
mod first_run;
mod forwarding;
mod helpers;
mod identity;
mod idsync_guard;
mod ingest;
mod legacy_web;
mod live;
mod metrics;
mod mobile;
mod multinode;
mod nompid;
mod ordering;
mod process;
mod propagation;
mod python_sdk;
mod rate_limit;
mod replay;
mod replay_order;
mod settings;
mod shutdown;
mod signing;
mod starvation;
mod tls;
mod web_sdk;
