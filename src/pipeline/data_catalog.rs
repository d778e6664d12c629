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
use hashbrown::{Equivalent, HashMap};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::model::data_points::{Kind, PointKey, Seen, ValueType};
use crate::model::ids::InputId;
use crate::model::kept_events::StoredEvent;
use crate::store::Store;
use crate::supervise::{self, Task};

/// How often the tally is written to the database: a data point shows in the catalog within
/// about this long of being sent.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_secs(2);

/// The flusher's name in the log and in a test's fault.
const TASK: Task = "data catalog flusher";

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

/// One batch's data points as it carries them: a sighting per event, per attribute of an
/// event, per user attribute and per identity type, in the batch's order (an event before its
/// attributes, which `DataCatalog::record`'s caps rely on). The names are copied into one
/// string, so a batch's points cost two growing buffers rather than three boxed strings per
/// point, and the tally looks them up by reference ([`PointRef`]): an owned [`PointKey`] is
/// made only for a data point new to the tally. They are not merged here: merging cost a hash
/// lookup per sighting too, and the tally's lookups under its lock, one per sighting (about 40
/// for the side-by-side batch), cost less than the allocations and the second map did (docs/
/// PERFORMANCE.md, "Item 1: the data catalog's tally").
#[derive(Debug, Default)]
pub(crate) struct BatchPoints {
    names: String,
    sightings: Vec<Sighting>,
}

/// A data point seen `count` times with `value_type`; its names are spans of `BatchPoints::names`.
#[derive(Debug, Clone, Copy)]
struct Sighting {
    kind: Kind,
    event_type: Span,
    event_name: Span,
    name: Span,
    value_type: Option<ValueType>,
    count: i64,
}

/// Where a name is in `BatchPoints::names` (start, end).
type Span = (u32, u32);

impl BatchPoints {
    /// Copies `text` into the names; `None` when they would outgrow a span (a batch that large
    /// is refused long before; its points are then not catalogued).
    fn name(&mut self, text: &str) -> Option<Span> {
        let start = u32::try_from(self.names.len()).ok()?;
        let end = u32::try_from(self.names.len() + text.len()).ok()?;
        self.names.push_str(text);
        Some((start, end))
    }

    fn push(&mut self, kind: Kind, spans: [Span; 3], value_type: Option<ValueType>, count: i64) {
        let [event_type, event_name, name] = spans;
        self.sightings.push(Sighting {
            kind,
            event_type,
            event_name,
            name,
            value_type,
            count,
        });
    }

    /// Copies a key's three names; `None` as [`Self::name`].
    fn names(&mut self, [event_type, event_name, name]: [&str; 3]) -> Option<[Span; 3]> {
        Some([
            self.name(event_type)?,
            self.name(event_name)?,
            self.name(name)?,
        ])
    }

    /// Adds a sighting of `key`, `count` times.
    fn add(&mut self, key: PointRef<'_>, value_type: Option<ValueType>, count: i64) {
        if let Some(spans) = self.names([key.event_type, key.event_name, key.name]) {
            self.push(key.kind, spans, value_type, count);
        }
    }

    fn is_empty(&self) -> bool {
        self.sightings.is_empty()
    }

    /// The sightings, in the batch's order.
    fn iter(&self) -> impl Iterator<Item = (PointRef<'_>, Option<ValueType>, i64)> {
        let text = |(start, end): Span| self.names.get(start as usize..end as usize).unwrap_or("");
        self.sightings.iter().map(move |s| {
            let key = PointRef {
                kind: s.kind,
                event_type: text(s.event_type),
                event_name: text(s.event_name),
                name: text(s.name),
            };
            (key, s.value_type, s.count)
        })
    }
}

/// A [`PointKey`] borrowed: what a batch's sighting names, looked up in the tally without an
/// allocation. It hashes as the `PointKey` it equals (the same fields, in the same order, as
/// `str`s: `Box<str>` hashes as its `str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PointRef<'a> {
    kind: Kind,
    event_type: &'a str,
    event_name: &'a str,
    name: &'a str,
}

impl PointRef<'_> {
    fn to_key(self) -> PointKey {
        PointKey::new(self.kind, self.event_type, self.event_name, self.name)
    }

    /// The event an event attribute belongs to.
    fn owning_event(self) -> Self {
        Self {
            kind: Kind::Event,
            name: "",
            ..self
        }
    }
}

impl<'a> From<&'a PointKey> for PointRef<'a> {
    fn from(key: &'a PointKey) -> Self {
        Self {
            kind: key.kind,
            event_type: &key.event_type,
            event_name: &key.event_name,
            name: &key.name,
        }
    }
}

impl hashbrown::Equivalent<PointKey> for PointRef<'_> {
    fn equivalent(&self, key: &PointKey) -> bool {
        *self == PointRef::from(key)
    }
}

/// The data points of a normalised batch, as sightings (see [`BatchPoints`]): an event once
/// per event, an event attribute once per event carrying it, user attributes and identity
/// types once per batch. Events of a type the schema does not know (which no filter rule can
/// name) are left out.
pub(crate) fn points_of(document: &Value, events: &[StoredEvent]) -> BatchPoints {
    let mut points = BatchPoints::default();
    for event in events {
        let summary = &event.summary;
        let Some(kind) = summary.event_type else {
            continue;
        };
        let name = summary.name.as_deref().unwrap_or("");
        let Some(spans @ [event_type, event_name, _]) = points.names([kind.as_str(), name, ""])
        else {
            continue;
        };
        points.push(Kind::Event, spans, None, 1);
        for (key, value_type) in &summary.attributes {
            if let Some(name) = points.name(key) {
                points.push(
                    Kind::EventAttribute,
                    [event_type, event_name, name],
                    Some(*value_type),
                    1,
                );
            }
        }
    }
    if let Some(Value::Object(attributes)) = document.get("user_attributes") {
        for (key, value) in attributes {
            let key = PointRef {
                kind: Kind::UserAttribute,
                event_type: "",
                event_name: "",
                name: key,
            };
            points.add(key, Some(ValueType::of(value)), 1);
        }
    }
    let identities = document.get("user_identities").and_then(Value::as_array);
    for identity in identities.into_iter().flatten() {
        if let Some(name) = identity.get("identity_type").and_then(Value::as_str) {
            let key = PointRef {
                kind: Kind::IdentityType,
                event_type: "",
                event_name: "",
                name,
            };
            points.add(key, None, 1);
        }
    }
    points
}

/// A data point waiting for the next flush.
pub(crate) type Pending = (InputId, PointKey, Seen);

/// This node's tally of data points not yet flushed, and what it let in per input.
#[derive(Debug, Default)]
pub(crate) struct DataCatalog {
    tally: Mutex<HashMap<InputId, InputTally>>,
}

#[derive(Debug, Default)]
struct InputTally {
    /// Every data point this node let in for the input (never forgotten, so the caps hold),
    /// with its tally since the last flush, if seen since. One map for both, so a sighting is
    /// one lookup. foldhash (hashbrown's default) is fast on short keys and seeded at random:
    /// the keys come from clients, so a fixed-seed hash would let them aim for collisions.
    known: HashMap<PointKey, Option<Seen>>,
    /// The keys whose tally is pending, for the flush to take without walking `known`.
    pending: Vec<PointKey>,
    events: usize,
    event_attributes: usize,
    user_attributes: usize,
    attributes_per_event: HashMap<PointKey, usize>,
    /// Sightings refused by a cap.
    dropped: u64,
}

impl InputTally {
    /// Whether a data point not seen before fits under the caps; counts it in if so (the
    /// caller then adds it to `known`).
    fn admit(&mut self, key: PointRef<'_>, limits: &Limits) -> bool {
        if key.event_name.len() > limits.name_bytes || key.name.len() > limits.name_bytes {
            return false;
        }
        // PostgreSQL's text cannot hold a NUL: one such name would fail every flush.
        if key.event_name.contains('\0') || key.name.contains('\0') {
            return false;
        }
        match key.kind {
            Kind::Event => bump(&mut self.events, limits.events),
            Kind::EventAttribute => {
                // Borrowed: a refused attribute is refused again at each sighting, and an input
                // past its caps would otherwise allocate under the lock every time.
                let event = key.owning_event();
                // The batch carries an event before its attributes: it was just admitted or
                // refused.
                self.known.contains_key(&event)
                    && self.event_attributes < limits.event_attributes
                    && bump(self.attributes_of(event), limits.attributes_per_event)
                    && bump(&mut self.event_attributes, limits.event_attributes)
            }
            Kind::UserAttribute => bump(&mut self.user_attributes, limits.user_attributes),
            // Identity types are a closed list, already checked by the batch's validation.
            Kind::IdentityType => true,
        }
    }

    /// How many attributes of `event` were let in (an owned key made the first time only).
    fn attributes_of(&mut self, event: PointRef<'_>) -> &mut usize {
        let entry = self.attributes_per_event.raw_entry_mut().from_key(&event);
        entry.or_insert_with(|| (event.to_key(), 0)).1
    }

    /// Counts a data point the catalog already holds as let in, whatever the caps (they bound
    /// what is added; what is there keeps counting).
    fn remember(&mut self, key: PointKey) {
        match key.kind {
            Kind::Event => self.events += 1,
            Kind::EventAttribute => {
                *self.attributes_of(PointRef::from(&key).owning_event()) += 1;
                self.event_attributes += 1;
            }
            Kind::UserAttribute => self.user_attributes += 1,
            Kind::IdentityType => {}
        }
        self.known.insert(key, None);
    }

    /// Adds `seen` to the tally of `key`, a data point let in; returns false if the caps keep
    /// it out.
    fn count(&mut self, key: PointRef<'_>, seen: &Seen, limits: &Limits) -> bool {
        let hash = self.known.hasher().hash_one(key);
        let entry = self
            .known
            .raw_entry_mut()
            .from_hash(hash, |k| key.equivalent(k));
        let slot = match entry {
            RawEntryMut::Occupied(entry) => entry.into_mut(),
            RawEntryMut::Vacant(_) => {
                if !self.admit(key, limits) {
                    return false;
                }
                // Looked up again (the vacant entry borrows `known`, which `admit` reads), only
                // for a data point new to the node.
                let (_, slot) = self
                    .known
                    .raw_entry_mut()
                    .from_hash(hash, |k| key.equivalent(k))
                    .or_insert_with(|| (key.to_key(), None));
                slot
            }
        };
        match slot {
            Some(tally) => tally.merge(seen),
            None => {
                *slot = Some(*seen);
                self.pending.push(key.to_key());
            }
        }
        true
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
    pub(crate) fn record(&self, input: &InputId, batches: &[BatchPoints], now: i64) {
        self.record_with(input, batches, now, &LIMITS);
    }

    fn record_with(&self, input: &InputId, batches: &[BatchPoints], now: i64, limits: &Limits) {
        if batches.iter().all(BatchPoints::is_empty) {
            return;
        }
        let mut tally = self.lock();
        // Looked up by reference: the input's id is cloned only the first time it is seen.
        let input_tally = match tally.raw_entry_mut().from_key(input) {
            RawEntryMut::Occupied(entry) => entry.into_mut(),
            RawEntryMut::Vacant(entry) => entry.insert(input.clone(), InputTally::default()).1,
        };
        let dropped_before = input_tally.dropped;
        for (key, value_type, count) in batches.iter().flat_map(BatchPoints::iter) {
            let seen = Seen {
                count,
                first_seen_ms: now,
                last_seen_ms: now,
                value_type,
            };
            if !input_tally.count(key, &seen, limits) {
                input_tally.dropped += u64::try_from(count).unwrap_or(u64::MAX);
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
            for key in std::mem::take(&mut input_tally.pending) {
                if let Some(seen) = input_tally.known.get_mut(&key).and_then(Option::take) {
                    taken.push((input.clone(), key, seen));
                }
            }
        }
        taken
    }

    /// Puts back data points a flush could not write, to go with the next one.
    pub(crate) fn restore(&self, pending: Vec<Pending>) {
        let mut tally = self.lock();
        for (input, key, seen) in pending {
            let input_tally = tally.entry(input).or_default();
            // Taken from `known`, so still there: what it holds now is newer.
            let slot = input_tally.known.entry(key.clone()).or_default();
            match slot {
                Some(newer) => newer.merge(&seen),
                None => {
                    *slot = Some(seen);
                    input_tally.pending.push(key);
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
/// (after the HTTP server stopped, so no request adds to the tally behind it). A round that
/// panics (a bug) does not stop the flushes: they start again (see [`crate::supervise`]).
pub(crate) async fn flush_periodically(
    catalog: Arc<DataCatalog>,
    store: Store,
    cancel: CancellationToken,
) {
    supervise::restarting(TASK, cancel.clone(), || {
        flush_rounds(&catalog, &store, &cancel)
    })
    .await;
}

/// [`flush_periodically`]'s loop, until `cancel` or a panic.
async fn flush_rounds(catalog: &DataCatalog, store: &Store, cancel: &CancellationToken) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(FLUSH_INTERVAL) => {}
        }
        supervise::round(TASK);
        catalog.flush(store).await;
    }
}

#[cfg(test)]
#[path = "data_catalog_tests.rs"]
mod tests;
