//! The one way from an accepted batch to delivery jobs. Every protocol that takes in data (the
//! Events API, the Web and mobile SDK uploads, IDSync's profile events) hands its documents to
//! [`Pipeline::accept`], which answers once they are durable or says why not; each protocol
//! turns that answer into its own status codes.
//!
//! Reading top to bottom, a batch goes through:
//! 1. [`accept`]: validate and normalise every document of the request (`model::batch`); nothing
//!    is stored unless all are valid.
//! 2. [`identity`]: a batch without an MPID gets the one its identities resolve to.
//! 3. [`catalog`]: the input's routes, i.e. its active connections with their settings revision
//!    (in memory; every admin change reloads it, so activation is immediate, and on PostgreSQL
//!    the other nodes re-read what changed as soon as its commit is announced).
//! 4. [`fanout`]: the rows the batch becomes, as a pure function: the batch, one job per route
//!    (leased to this node when delivery takes it at once, see [`Handoff`]), its profile update.
//! 5. `store::writer`: one group-commit transaction with other requests' rows; the answer waits
//!    for the commit, and leased jobs go straight to delivery.
//! 6. [`inbound`]: metrics, and the Live Stream's inbound items; [`data_catalog`]: the stored
//!    batches' data points, tallied in memory and flushed to the store every 2 s.
//!
//! Delivery then applies each connection's settings with [`filter`] (pure) and posts the result
//! to the connection's [`output`] (its settings, custom headers and signing keys, prepared when
//! the catalog loads it). [`preview`] compares what two settings do to the same events (the
//! admin API's dry run of a settings change).

mod accept;
pub(crate) mod catalog;
pub(crate) mod data_catalog;
mod event_outline;
pub(crate) mod events_body;
pub(crate) mod fanout;
pub(crate) mod filter;
pub(crate) mod identity;
mod inbound;
pub(crate) mod output;
pub(crate) mod preview;
mod request_body;
mod rules;
pub(crate) mod stored_batch;

pub(crate) use accept::{AcceptError, Document, Pipeline};

use crate::model::ids::ConnectionId;

/// Whether delivery takes a new job of a connection at once (leased to this node, handed over
/// after the commit) or leaves it in the table for its poller. Delivery implements it; the
/// pipeline only asks, so it needs no knowledge of lanes.
pub(crate) trait Handoff: std::fmt::Debug + Send + Sync {
    fn takes_now(&self, connection_id: &ConnectionId) -> bool;
}
