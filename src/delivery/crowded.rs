//! Which connections' new jobs this node leaves in the table instead of taking them at once:
//! those whose lanes are crowded, and those whose circuit breaker is open (their endpoint is
//! failing). Handing such jobs over would only mean releasing them again (a write per job,
//! competing with ingest for the writer); left in the table, the poller claims them once there
//! is room or the endpoint is back. Lanes keep the sets current; the pipeline asks, through
//! [`Handoff`], whether delivery takes a new job at once.
//!
//! A connection whose endpoint just came back is *draining* until its backlog is claimed (see
//! `super::drain`): its new jobs wait in the table too, behind the backlog, so each user's
//! events still go in the order they were accepted.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

use crate::model::ids::ConnectionId;
use crate::pipeline::Handoff;

/// Connections whose new jobs wait in the table on this node.
#[derive(Debug, Default)]
pub(crate) struct Crowded {
    /// Lanes with too few free places.
    lanes: ConnectionSet,
    /// Lanes whose circuit breaker is open.
    failing: ConnectionSet,
    /// Lanes whose backlog is being claimed after a recovery.
    draining: ConnectionSet,
}

impl Crowded {
    /// Whether a connection's lane is crowded.
    pub(crate) fn contains(&self, connection_id: &ConnectionId) -> bool {
        self.lanes.contains(connection_id)
    }

    /// Marks or unmarks a connection's lane as crowded.
    pub(crate) fn set(&self, connection_id: &ConnectionId, crowded: bool) {
        self.lanes.set(connection_id, crowded);
    }

    /// The crowded lanes' connections.
    pub(crate) fn snapshot(&self) -> HashSet<ConnectionId> {
        self.lanes.snapshot()
    }

    /// Marks or unmarks a connection as failing (its breaker open).
    pub(crate) fn set_failing(&self, connection_id: &ConnectionId, failing: bool) {
        self.failing.set(connection_id, failing);
    }

    /// The connections whose breaker is open.
    pub(crate) fn failing(&self) -> HashSet<ConnectionId> {
        self.failing.snapshot()
    }

    /// Whether a connection's breaker is open.
    pub(crate) fn is_failing(&self, connection_id: &ConnectionId) -> bool {
        self.failing.contains(connection_id)
    }

    /// Marks or unmarks a connection as draining its backlog.
    pub(crate) fn set_draining(&self, connection_id: &ConnectionId, draining: bool) {
        self.draining.set(connection_id, draining);
    }

    /// The connections draining their backlog.
    pub(crate) fn draining(&self) -> HashSet<ConnectionId> {
        self.draining.snapshot()
    }
}

impl Handoff for Crowded {
    fn takes_now(&self, connection_id: &ConnectionId) -> bool {
        !self.lanes.contains(connection_id)
            && !self.failing.contains(connection_id)
            && !self.draining.contains(connection_id)
    }
}

/// A set of connections read on every accepted batch: the common case (empty) takes no lock.
#[derive(Debug, Default)]
struct ConnectionSet {
    connections: RwLock<HashSet<ConnectionId>>,
    len: AtomicUsize,
}

impl ConnectionSet {
    fn contains(&self, connection_id: &ConnectionId) -> bool {
        self.len.load(Ordering::Acquire) > 0 && self.read().contains(connection_id)
    }

    fn set(&self, connection_id: &ConnectionId, member: bool) {
        let mut connections = self
            .connections
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if member {
            connections.insert(connection_id.clone());
        } else {
            connections.remove(connection_id);
        }
        self.len.store(connections.len(), Ordering::Release);
    }

    fn snapshot(&self) -> HashSet<ConnectionId> {
        if self.len.load(Ordering::Acquire) == 0 {
            return HashSet::new();
        }
        self.read().clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashSet<ConnectionId>> {
        self.connections
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
