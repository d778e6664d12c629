//! The data catalog (issue 13): which events, event attributes, user attributes and identity
//! types each input's accepted batches carried, for the dashboard's Data Filter grid.
//!
//! [`Pipeline::accept`](super::Pipeline::accept) reads every batch's data points before its
//! commit ([`points_of`], no lock) and adds those of the stored batches to this node's tally
//! under one short lock per request. Nothing touches the database on the hot path: a background
//! task ([`flush_periodically`]) writes the tally every [`FLUSH_INTERVAL`] as merging upserts
//! (counts add, first seen is the least, last seen the greatest, types merge), so any number of
//! nodes share one catalog, and shutdown flushes what is left.
//!
//! Public keys are public, so what one input can add is capped ([`LIMITS`]); data points past a
//! cap are counted and dropped, and the first drop of an input is logged.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::hash_map::RawEntryMut;
use hashbrown::{DefaultHashBuilder, HashMap};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::rules::{event_name, event_type};
use crate::model::data_points::{Kind, PointKey, Seen, ValueType};
use crate::model::ids::InputId;
use crate::store::Store;

/// How often the tally is written to the database: a data point shows in the catalog within
/// about this long of being sent.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// The most one input can add to the catalog, per node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) events: usize,
    pub(crate) attributes_per_event: usize,
    pub(crate) event_attributes: usize,
    pub(crate) user_attributes: usize,
    /// Longer event names or attribute keys are not catalogued (event names are cut at 256
    /// characters on receipt, so this only drops odd attribute keys).
    pub(crate) name_bytes: usize,
}

pub(crate) const LIMITS: Limits = Limits {
    events: 10_000,
    attributes_per_event: 1_000,
    event_attributes: 100_000,
    user_attributes: 1_000,
    name_bytes: 1_024,
};

/// One batch's data points, each with how often the batch carried it and the merged type of
/// its values, sorted so an event comes before its attributes.
pub(crate) type BatchPoints = Vec<(PointKey, Option<ValueType>, i64)>;

/// The data points of a normalised batch. Events count once per event, an event attribute once
/// per event carrying it, user attributes and identity types once per batch. Events of a type
/// the schema does not know (which no filter rule can name) are left out.
pub(crate) fn points_of(document: &Value) -> BatchPoints {
    // Keyed by names borrowed from the document: a batch repeats its events' names, so an owned
    // key is made once per distinct data point, not per sighting. A hash map, not an ordered
    // one: a sighting costs one hash instead of several string comparisons (an SDK batch has a
    // few distinct points and many sightings), and only the distinct points are sorted.
    let mut points: HashMap<BorrowedKey<'_>, (Option<ValueType>, i64)> = HashMap::new();
    let mut add = |key, value: Option<&Value>| {
        let seen = points.entry(key).or_insert((None, 0));
        let value_type = value.map(ValueType::of);
        seen.0 = match (seen.0, value_type) {
            (Some(a), Some(b)) => Some(a.merge(b)),
            (a, b) => a.or(b),
        };
        seen.1 += 1;
    };
    for event in document
        .get("events")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(kind) = event_type(event) else {
            continue;
        };
        let name = event_name(kind, event).unwrap_or("");
        add((Kind::Event, kind.as_str(), name, ""), None);
        let attributes = event.get("data").and_then(|d| d.get("custom_attributes"));
        for (key, value) in attributes.and_then(Value::as_object).into_iter().flatten() {
            add(
                (Kind::EventAttribute, kind.as_str(), name, key),
                Some(value),
            );
        }
    }
    if let Some(Value::Object(attributes)) = document.get("user_attributes") {
        for (key, value) in attributes {
            add((Kind::UserAttribute, "", "", key), Some(value));
        }
    }
    for identity in document
        .get("user_identities")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(kind) = identity.get("identity_type").and_then(Value::as_str) {
            add((Kind::IdentityType, "", "", kind), None);
        }
    }
    // `PointKey`'s order (the same fields, compared the same way): an event before its
    // attributes, which `DataCatalog::record`'s caps rely on.
    let mut sorted: Vec<_> = points.into_iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    sorted
        .into_iter()
        .map(
            |((kind, event_type, event_name, name), (value_type, count))| {
                let key = PointKey::new(kind, event_type, event_name, name);
                (key, value_type, count)
            },
        )
        .collect()
}

/// A [`PointKey`]'s fields borrowed from a batch: kind, event type, event name, name.
type BorrowedKey<'a> = (Kind, &'a str, &'a str, &'a str);

/// A data point waiting for the next flush.
pub(crate) type Pending = (InputId, PointKey, Seen);

/// This node's tally of data points not yet flushed, and what it let in per input.
#[derive(Debug, Default)]
pub(crate) struct DataCatalog {
    tally: Mutex<HashMap<InputId, InputTally>>,
}

#[derive(Debug)]
struct InputTally {
    /// Shared by `known` and `pending`, so a recorded key is hashed once for both lookups.
    /// foldhash (hashbrown's default) is fast on short keys and seeded at random per process:
    /// the keys come from clients, so a fixed-seed hash would let them aim for collisions.
    hasher: DefaultHashBuilder,
    /// Every data point this node let in for the input (never forgotten, so the caps hold).
    known: HashMap<PointKey, ()>,
    events: usize,
    event_attributes: usize,
    user_attributes: usize,
    attributes_per_event: HashMap<PointKey, usize>,
    pending: HashMap<PointKey, Seen>,
    /// Sightings refused by a cap.
    dropped: u64,
}

impl Default for InputTally {
    fn default() -> Self {
        let hasher = DefaultHashBuilder::default();
        Self {
            known: HashMap::with_hasher(hasher.clone()),
            pending: HashMap::with_hasher(hasher.clone()),
            hasher,
            events: 0,
            event_attributes: 0,
            user_attributes: 0,
            attributes_per_event: HashMap::default(),
            dropped: 0,
        }
    }
}

impl InputTally {
    /// Whether a data point not seen before fits under the caps; counts it in if so.
    fn admit(&mut self, key: &PointKey, limits: &Limits) -> bool {
        if key.event_name.len() > limits.name_bytes || key.name.len() > limits.name_bytes {
            return false;
        }
        // PostgreSQL's text cannot hold a NUL: one such name would fail every flush.
        if key.event_name.contains('\0') || key.name.contains('\0') {
            return false;
        }
        let admitted = match key.kind {
            Kind::Event => bump(&mut self.events, limits.events),
            Kind::EventAttribute => {
                let event = key.owning_event();
                // Sorted before its attributes, the event was just admitted or refused.
                self.known.contains_key(&event)
                    && self.event_attributes < limits.event_attributes
                    && bump(
                        self.attributes_per_event.entry(event).or_default(),
                        limits.attributes_per_event,
                    )
                    && bump(&mut self.event_attributes, limits.event_attributes)
            }
            Kind::UserAttribute => bump(&mut self.user_attributes, limits.user_attributes),
            // Identity types are a closed list, already checked by the batch's validation.
            Kind::IdentityType => true,
        };
        if admitted {
            self.known.insert(key.clone(), ());
        }
        admitted
    }

    /// Counts a data point the catalog already holds as let in, whatever the caps (they bound
    /// what is added; what is there keeps counting).
    fn remember(&mut self, key: PointKey) {
        match key.kind {
            Kind::Event => self.events += 1,
            Kind::EventAttribute => {
                *self
                    .attributes_per_event
                    .entry(key.owning_event())
                    .or_default() += 1;
                self.event_attributes += 1;
            }
            Kind::UserAttribute => self.user_attributes += 1,
            Kind::IdentityType => {}
        }
        self.known.insert(key, ());
    }
}

/// Adds one to `n` if it is below `cap`.
fn bump(n: &mut usize, cap: usize) -> bool {
    let fits = *n < cap;
    if fits {
        *n += 1;
    }
    fits
}

impl DataCatalog {
    fn lock(&self) -> MutexGuard<'_, HashMap<InputId, InputTally>> {
        // The tally stays consistent at every step, so a panic elsewhere leaves it usable.
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts the data points the database already holds toward their inputs' caps (at start:
    /// the tally starts empty, and without this a restarted node would let each input add
    /// another full set). Keys already known are skipped.
    pub(crate) fn seed(&self, stored: Vec<(InputId, PointKey)>) {
        let mut tally = self.lock();
        for (input, key) in stored {
            let input_tally = tally.entry(input).or_default();
            if !input_tally.known.contains_key(&key) {
                input_tally.remember(key);
            }
        }
    }

    /// Adds the data points of an input's stored batches, seen at `now` (Unix ms).
    pub(crate) fn record(&self, input: &InputId, batches: Vec<BatchPoints>, now: i64) {
        self.record_with(input, batches, now, &LIMITS);
    }

    fn record_with(&self, input: &InputId, batches: Vec<BatchPoints>, now: i64, limits: &Limits) {
        if batches.iter().all(Vec::is_empty) {
            return;
        }
        let mut tally = self.lock();
        // Looked up by reference: the input's id is cloned only the first time it is seen.
        let input_tally = match tally.raw_entry_mut().from_key(input) {
            RawEntryMut::Occupied(entry) => entry.into_mut(),
            RawEntryMut::Vacant(entry) => entry.insert(input.clone(), InputTally::default()).1,
        };
        let dropped_before = input_tally.dropped;
        for (key, value_type, count) in batches.into_iter().flatten() {
            let hash = input_tally.hasher.hash_one(&key);
            let known = input_tally
                .known
                .raw_entry()
                .from_key_hashed_nocheck(hash, &key)
                .is_some();
            if !known && !input_tally.admit(&key, limits) {
                input_tally.dropped += u64::try_from(count).unwrap_or(u64::MAX);
                continue;
            }
            let seen = Seen {
                count,
                first_seen_ms: now,
                last_seen_ms: now,
                value_type,
            };
            let pending = input_tally.pending.raw_entry_mut();
            match pending.from_key_hashed_nocheck(hash, &key) {
                RawEntryMut::Occupied(mut entry) => entry.get_mut().merge(&seen),
                RawEntryMut::Vacant(entry) => {
                    entry.insert_hashed_nocheck(hash, key, seen);
                }
            }
        }
        if dropped_before == 0 && input_tally.dropped > 0 {
            tracing::warn!(
                input = %input,
                "The input sends more distinct data points than the data catalog keeps; the \
                 rest are not catalogued (logged once per input)."
            );
        }
    }

    /// Sightings an input lost to the caps on this node.
    #[cfg(test)]
    fn dropped(&self, input: &InputId) -> u64 {
        self.lock().get(input).map_or(0, |t| t.dropped)
    }

    /// Takes every pending data point, leaving the tally empty (but its caps in place).
    pub(crate) fn take(&self) -> Vec<Pending> {
        let mut tally = self.lock();
        let mut taken = Vec::new();
        for (input, input_tally) in tally.iter_mut() {
            for (key, seen) in input_tally.pending.drain() {
                taken.push((input.clone(), key, seen));
            }
        }
        taken
    }

    /// Puts back data points a flush could not write, to go with the next one.
    pub(crate) fn restore(&self, pending: Vec<Pending>) {
        let mut tally = self.lock();
        for (input, key, seen) in pending {
            let input_tally = tally.entry(input).or_default();
            match input_tally.pending.get_mut(&key) {
                Some(newer) => newer.merge(&seen),
                None => {
                    input_tally.pending.insert(key, seen);
                }
            }
        }
    }

    /// Writes what is pending; on failure keeps it for the next flush and says so.
    pub(crate) async fn flush(&self, store: &Store) -> bool {
        let pending = self.take();
        if pending.is_empty() {
            return true;
        }
        match store.merge_data_points(&pending).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "Writing the data catalog failed; it is retried.");
                self.restore(pending);
                false
            }
        }
    }
}

/// Flushes the tally every [`FLUSH_INTERVAL`] until `cancel`; the last flush is the caller's
/// (after the HTTP server stopped, so no request adds to the tally behind it).
pub(crate) async fn flush_periodically(
    catalog: Arc<DataCatalog>,
    store: Store,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(FLUSH_INTERVAL) => {}
        }
        catalog.flush(&store).await;
    }
}

#[cfg(test)]
#[path = "data_catalog_tests.rs"]
mod tests;
