//! The store suite: the delivery queue, the dashboard sessions and kit forwarding statistics
//! tested on a real database, SQLite by default and PostgreSQL when `TEST_DATABASE_URL` names a
//! server. Deterministic tests of each operation, and a model-based test of random operation
//! sequences of the queue.

mod catalog;
mod checkpoint;
mod claims;
mod commit;
mod consent;
mod data_catalog;
mod drain;
#[cfg(unix)]
mod files;
mod forwarding;
pub(crate) mod harness;
mod health;
mod kept_connection;
mod lanes;
mod metrics;
mod model;
mod new_users;
mod queue;
mod retention;
mod round_trips;
mod sessions;
mod sqlite_lane;
