//! What a replay's batches become as requests, for the dry run, where the connection gathers a
//! user's batches (Send as Batch with `batch_window_secs`).
//!
//! A replayed batch's job is queued like a live batch accepted at that moment (see
//! `plan::job_shape`): due at the end of its window, and the claim that takes it gathers every
//! job of its user waiting by then (at most `MOST_IN_GROUP`). The replay enqueues at its rate,
//! so which batches meet in a group depends on when each is enqueued: the dry run plays the
//! driver's pacing on a clock of its own (no live traffic, every claim on time) and cuts each
//! group into requests with the worker's own rule (`delivery::coalesce::cut`).

use std::collections::{BTreeMap, HashMap};

use super::plan::{Sends, spacing};
use crate::delivery::coalesce::cut;
use crate::delivery::merge::Part;
use crate::model::ids::Mpid;
use crate::model::settings::ConnectionSettings;
use crate::store::coalesce_sql::MOST_IN_GROUP;

/// One user's batches gathered so far: each one's stored size and filtered bodies.
#[derive(Default)]
struct Group {
    sizes: Vec<usize>,
    parts: Vec<(usize, Vec<Part>)>,
}

/// The replay's requests, in the order they go, as batches are added in replay order.
pub(crate) struct Gathering {
    cap: usize,
    rate: i64,
    /// When the next batch is enqueued (ms from the replay's start), as the driver paces it.
    clock: i64,
    /// Groups waiting for their window to end, by (due, order opened).
    open: BTreeMap<(i64, usize), Group>,
    /// Each user's newest open group.
    newest: HashMap<Mpid, (i64, usize)>,
    opened: usize,
}

impl Gathering {
    /// Under the replay's settings (their rate is the replay's).
    pub(crate) fn new(settings: &ConnectionSettings) -> Self {
        Self {
            cap: usize::try_from(settings.max_batch_bytes).unwrap_or(usize::MAX),
            rate: settings.rate_limit_per_second.map_or(1, i64::from),
            clock: 0,
            open: BTreeMap::new(),
            newest: HashMap::new(),
            opened: 0,
        }
    }

    /// The next batch: its job's user and window (`plan::job_shape`), its stored size and what
    /// it sends. Returns the requests that go out by the time it is enqueued (its own, when it
    /// is not gathered), in order.
    pub(crate) fn add(
        &mut self,
        (user, window_ms): (Option<Mpid>, i64),
        stored: usize,
        sends: Sends,
    ) -> Vec<Vec<u8>> {
        if sends.bodies.is_empty() {
            // No job: only the cursor moves, at once.
            return Vec::new();
        }
        let at = self.clock;
        let paced = spacing(
            i64::try_from(sends.bodies.len()).unwrap_or(i64::MAX),
            self.rate,
        );
        self.clock = at.saturating_add(i64::try_from(paced.as_millis()).unwrap_or(i64::MAX));
        let mut out = self.due_by(at);
        match user.filter(|_| window_ms > 0) {
            Some(user) => self.gather(user, at.saturating_add(window_ms), stored, sends),
            None => out.extend(sends.bodies),
        }
        out
    }

    /// The requests of the groups still open, once the range is read.
    pub(crate) fn finish(&mut self) -> Vec<Vec<u8>> {
        self.due_by(i64::MAX)
    }

    /// Closes the groups due by `at` (a job enqueued at its group's due time comes too late
    /// for it), earliest first.
    fn due_by(&mut self, at: i64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(entry) = self.open.first_entry() {
            if entry.key().0 > at {
                break;
            }
            let group = entry.remove();
            out.extend(
                cut(&group.sizes, self.cap, 0, group.parts)
                    .into_iter()
                    .map(|m| m.body),
            );
        }
        out
    }

    /// Adds a batch to its user's open group, or opens one due at `due`.
    fn gather(&mut self, user: Mpid, due: i64, stored: usize, sends: Sends) {
        let most = usize::try_from(MOST_IN_GROUP).unwrap_or(usize::MAX);
        let key = match self.newest.get(&user) {
            Some(key) if self.open.get(key).is_some_and(|g| g.sizes.len() < most) => *key,
            _ => {
                let key = (due, self.opened);
                self.opened += 1;
                self.open.insert(key, Group::default());
                self.newest.insert(user, key);
                key
            }
        };
        let group = self.open.entry(key).or_default();
        let member = group.sizes.len();
        group.sizes.push(stored);
        let parts = sends
            .bodies
            .into_iter()
            .zip(sends.event_indexes)
            .map(|(body, events)| Part {
                member,
                body,
                events,
            });
        group.parts.push((member, parts.collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(rate: u32) -> ConnectionSettings {
        let json = serde_json::json!({"send_as_batch": true, "batch_window_secs": 1,
                                      "rate_limit_per_second": rate});
        ConnectionSettings::from_json(json).expect("settings")
    }

    fn one_event(seq: usize) -> Sends {
        let body = serde_json::json!({"mpid": 7, "events": [{"seq": seq}]});
        Sends {
            events: 1,
            bodies: vec![serde_json::to_vec(&body).unwrap()],
            event_indexes: vec![vec![0]],
            user: Some(Mpid::new(7)),
        }
    }

    fn seqs(body: &[u8]) -> Vec<u64> {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap();
        value["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect()
    }

    #[test]
    fn batches_enqueued_within_the_window_go_as_one_request_and_later_ones_as_the_next() {
        // At 2 per second the batches are enqueued at 0, 500, 1000 and 1500 ms: the first two
        // meet in the group due at 1000 ms, the last two in the next one.
        let mut gathering = Gathering::new(&settings(2));
        let shape = (Some(Mpid::new(7)), 1000);
        let mut out = Vec::new();
        for seq in 0..4 {
            out.extend(gathering.add(shape, 100, one_event(seq)));
        }
        out.extend(gathering.finish());
        let got: Vec<Vec<u64>> = out.iter().map(|body| seqs(body)).collect();
        assert_eq!(got, [vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn an_ungathered_batch_goes_at_once_after_the_groups_due_before_it() {
        let mut gathering = Gathering::new(&settings(2));
        let mut out = gathering.add((Some(Mpid::new(7)), 1000), 100, one_event(0));
        assert!(out.is_empty());
        out.extend(gathering.add((None, 0), 100, one_event(1)));
        out.extend(gathering.add((None, 0), 100, one_event(2)));
        let got: Vec<Vec<u64>> = out.iter().map(|body| seqs(body)).collect();
        assert_eq!(got, [vec![1], vec![0], vec![2]]);
    }
}
