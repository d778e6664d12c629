//! This node's per-minute figures not yet written: the ingest and delivery paths add to them
//! under one short lock per call, and a background task takes them every few seconds to merge
//! into the database (`Store::merge_minutes`), so the hot path never waits on a write.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::model::metrics::{Figures, Subject, minute_of};

/// Figures waiting for the next flush, per subject and minute.
pub(crate) type PendingMinute = (Subject, i64, Figures);

#[derive(Debug, Default)]
pub(crate) struct MinuteTally {
    pending: Mutex<HashMap<(Subject, i64), Figures>>,
}

impl MinuteTally {
    fn lock(&self) -> MutexGuard<'_, HashMap<(Subject, i64), Figures>> {
        // Every change is one field update, so a panic elsewhere leaves the tally usable.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the figures of `subject` for the minute holding `at_ms`.
    pub(crate) fn update(&self, subject: Subject, at_ms: i64, change: impl FnOnce(&mut Figures)) {
        change(self.lock().entry((subject, minute_of(at_ms))).or_default());
    }

    /// Takes every pending minute, leaving the tally empty.
    pub(crate) fn take(&self) -> Vec<PendingMinute> {
        self.lock()
            .drain()
            .map(|((subject, minute), figures)| (subject, minute, figures))
            .collect()
    }

    /// Puts back minutes a flush could not write, merged with what arrived meanwhile.
    pub(crate) fn restore(&self, minutes: Vec<PendingMinute>) {
        let mut pending = self.lock();
        for (subject, minute, figures) in minutes {
            pending
                .entry((subject, minute))
                .or_default()
                .merge(&figures);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::InputId;
    use crate::model::metrics::MINUTE_MS;

    #[test]
    fn updates_gather_per_minute_and_restore_merges() {
        let tally = MinuteTally::default();
        let input = Subject::Input(InputId::new());
        tally.update(input.clone(), 5 * MINUTE_MS + 1, |f| f.received += 2);
        tally.update(input.clone(), 5 * MINUTE_MS + 59_999, |f| f.received += 3);
        tally.update(input.clone(), 6 * MINUTE_MS, |f| f.received += 1);
        let mut taken = tally.take();
        taken.sort_by_key(|m| m.1);
        assert_eq!(taken.len(), 2);
        assert_eq!((taken[0].1, taken[0].2.received), (5 * MINUTE_MS, 5));
        assert!(tally.take().is_empty());

        tally.update(input, 5 * MINUTE_MS, |f| f.received += 10);
        tally.restore(taken);
        let mut again = tally.take();
        again.sort_by_key(|m| m.1);
        assert_eq!(again[0].2.received, 15);
        assert_eq!(again[1].2.received, 1);
    }
}
