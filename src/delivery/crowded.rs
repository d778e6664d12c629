//! Which connections' lanes are crowded on this node. Their new jobs are stored unleased, for
//! the poller to claim once there is room, instead of being handed over only to be released
//! again (a write per job, competing with ingest for the writer). Lanes keep the set current;
//! the pipeline asks it, through [`Handoff`], whether delivery takes a new job at once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

use crate::model::ids::ConnectionId;
use crate::pipeline::Handoff;

/// Connections whose delivery queues on this node are crowded.
#[derive(Debug, Default)]
pub(crate) struct Crowded {
    connections: RwLock<HashSet<ConnectionId>>,
    /// The set's size, so the common case (nothing crowded) takes no lock.
    len: AtomicUsize,
}

impl Crowded {
    pub(crate) fn contains(&self, connection_id: &ConnectionId) -> bool {
        self.len.load(Ordering::Acquire) > 0 && self.read().contains(connection_id)
    }

    /// Marks or unmarks a connection as crowded.
    pub(crate) fn set(&self, connection_id: &ConnectionId, crowded: bool) {
        let mut connections = self
            .connections
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if crowded {
            connections.insert(connection_id.clone());
        } else {
            connections.remove(connection_id);
        }
        self.len.store(connections.len(), Ordering::Release);
    }

    pub(crate) fn snapshot(&self) -> HashSet<ConnectionId> {
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

impl Handoff for Crowded {
    fn takes_now(&self, connection_id: &ConnectionId) -> bool {
        !self.contains(connection_id)
    }
}
