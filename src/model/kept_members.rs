//! The members of an inbound batch that Boson stores but never reads or changes (the device, the
//! app, ...), kept as the text they arrived in. Parsing them into a `Value` tree and writing the
//! tree out again was a large share of the work of accepting an SDK's batch (issue 16): one
//! allocation per key and per string, for members that only need to be stored.
//!
//! A member is kept as text only if a `Value` parse of the whole body would have accepted it:
//! delivery parses the stored batch into a `Value`, so a member it would refuse (a lone
//! surrogate escape, a number out of range, nesting past serde_json's depth limit) must never be
//! stored. Such a body makes [`split_batch`] answer `None`, and the caller parses it the old way,
//! which gives the request the same answer as before.
//!
//! A member holding a number serde_json writes back spelt otherwise is parsed after all (a
//! float: `1e15` comes back as `1000000000000000.0`, `1.50` as `1.5`;
//! [`super::value_check::Numbers::as_sent_in`] tells): receivers then get the numbers
//! they got before members were kept, and delivery, which cuts send-as-batch requests by
//! stored sizes on the rule that what goes out is never longer than what was stored, can rely
//! on it. Whitespace, escapes and repeated keys only make the text as sent longer than
//! serde_json's, and integers come back as they were written. The `events` array's events are
//! captured here and kept or parsed by [`super::kept_events`], under the same rule.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::kept_events::{self, Scanned, StoredEvent};
use super::value_check::check_as_value;

/// The members kept as text: objects that `normalize` only checks to be objects, and that no
/// step of the acceptance reads (identity, the profile update, the data catalog and the Live
/// Stream read other members; delivery reads the stored text). Sorted.
const KEPT_AS_SENT: [&str; 4] = [
    "application_info",
    "context",
    "device_info",
    "integration_attributes",
];

/// Members of one batch kept as the text they came in, each key once, sorted by key, and its
/// `events` array's events as sent, for [`super::kept_events`] to keep or to parse.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeptMembers(Vec<(String, Box<RawValue>)>, Option<Vec<SentEvent>>);

/// One event of a batch as it came, checked as a `Value` parse checks it.
#[derive(Debug, Clone)]
pub(crate) struct SentEvent {
    pub(crate) text: Box<RawValue>,
    /// What it holds, if normalising would only add ids to it ([`kept_events::scan`]).
    pub(crate) scanned: Option<Scanned>,
}

impl KeptMembers {
    /// The member `key`'s text, if it was kept.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let at = self.0.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some(self.0[at].1.get())
    }

    /// Sets `key`; a later member of the same name replaces an earlier one, as in a `Value`.
    fn set(&mut self, key: String, value: Box<RawValue>) {
        match self.0.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(at) => self.0[at].1 = value,
            Err(at) => self.0.insert(at, (key, value)),
        }
    }

    /// Forgets `key`, which a later member of the same name, parsed, replaces.
    fn remove(&mut self, key: &str) {
        if let Ok(at) = self.0.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
            self.0.remove(at);
        }
    }

    /// The `events` array's events as sent, if the batch's `events` is an array (then the
    /// split's members hold no `events`); taken by normalising.
    pub(crate) fn take_events(&mut self) -> Option<Vec<SentEvent>> {
        self.1.take()
    }

    /// How many events were kept as sent.
    pub(crate) fn event_count(&self) -> Option<usize> {
        self.1.as_ref().map(Vec::len)
    }
}

impl PartialEq for KeptMembers {
    fn eq(&self, other: &Self) -> bool {
        let texts = |events: &Option<Vec<SentEvent>>| {
            events.as_ref().map(|e| {
                e.iter()
                    .map(|e| e.text.get().to_owned())
                    .collect::<Vec<_>>()
            })
        };
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && x.get() == y.get())
            && texts(&self.1) == texts(&other.1)
    }
}

/// Whether a kept member's text is a JSON object or `null` (the text starts at the value: the
/// parser leaves out the whitespace around it).
pub(crate) fn is_object_or_null(text: &str) -> bool {
    text.starts_with('{') || text == "null"
}

/// A batch's body as its members other than [`KEPT_AS_SENT`] (as `Value`s) and those kept as
/// text; `None` when the body is not a JSON object, anything in it would fail a `Value` parse,
/// or a member kept as text or an event holds serde_json's reserved key (the caller then parses
/// the body whole, and normalising refuses that key by name).
pub(crate) fn split_batch(body: &[u8]) -> Option<(Map<String, Value>, KeptMembers)> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let split = Split { enclosing: 0 }.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    Some(split)
}

/// A bulk request's body (an array of batches) split as [`split_batch`] splits one; `None` when
/// it is not an array of objects or would fail a `Value` parse.
pub(crate) fn split_bulk(body: &[u8]) -> Option<Vec<(Map<String, Value>, KeptMembers)>> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let batches = (&mut deserializer).deserialize_seq(Batches).ok()?;
    deserializer.end().ok()?;
    Some(batches)
}

/// A batch as it is stored: the document's members, the kept ones and the events (the
/// normalised ones given, else those kept as sent), in key order, as serde_json writes a
/// `Value` object.
pub(crate) struct StoredForm<'a> {
    pub(crate) document: &'a Value,
    pub(crate) kept: &'a KeptMembers,
    /// The normalised events (the document then holds no `events`).
    pub(crate) events: Option<&'a [StoredEvent]>,
}

/// One member of a stored batch.
enum Stored<'a> {
    Parsed(&'a Value),
    Text(&'a str),
    /// The `events` array, written from its events' texts.
    Events(Vec<&'a str>),
}

impl StoredForm<'_> {
    /// The batch's stored text. Written here rather than by a `Serialize` impl: serde_json
    /// writes text as it is only from a `RawValue`, which checks the text once more.
    pub(crate) fn to_vec(&self) -> serde_json::Result<Vec<u8>> {
        let Value::Object(members) = self.document else {
            return serde_json::to_vec(self.document);
        };
        let events = match (self.events, &self.kept.1) {
            (Some(events), _) => Some(events.iter().map(|e| e.text.as_str()).collect()),
            (None, Some(sent)) => Some(sent.iter().map(|e| e.text.get()).collect()),
            (None, None) => None,
        };
        let mut entries: Vec<(&str, Stored<'_>)> = members
            .iter()
            .map(|(k, v)| (k.as_str(), Stored::Parsed(v)))
            .chain(
                self.kept
                    .0
                    .iter()
                    .map(|(k, t)| (k.as_str(), Stored::Text(t.get()))),
            )
            .chain(events.map(|e| ("events", Stored::Events(e))))
            .collect();
        entries.sort_unstable_by_key(|(key, _)| *key);
        let mut out = Vec::with_capacity(4096);
        out.push(b'{');
        for (i, (key, value)) in entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, key)?;
            out.push(b':');
            match value {
                Stored::Parsed(value) => serde_json::to_writer(&mut out, value)?,
                Stored::Text(text) => out.extend_from_slice(text.as_bytes()),
                Stored::Events(events) => {
                    out.push(b'[');
                    for (n, event) in events.iter().enumerate() {
                        if n > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(event.as_bytes());
                    }
                    out.push(b']');
                }
            }
        }
        out.push(b'}');
        Ok(out)
    }
}

/// One batch object `enclosing` containers deep.
struct Split {
    enclosing: usize,
}

impl<'de> DeserializeSeed<'de> for Split {
    type Value = (Map<String, Value>, KeptMembers);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Split {
    type Value = (Map<String, Value>, KeptMembers);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a batch object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Map::new();
        let mut kept = KeptMembers::default();
        while let Some(key) = map.next_key::<String>()? {
            if KEPT_AS_SENT.contains(&key.as_str()) {
                let text: Box<RawValue> = map.next_value()?;
                // The member's own container is two levels below what encloses the batch.
                let read = check_as_value(text.get(), self.enclosing + 2);
                if read.map_err(de::Error::custom)?.as_sent_in(text.get()) {
                    members.remove(&key);
                    kept.set(key, text);
                } else {
                    let value = serde_json::from_str(text.get()).map_err(de::Error::custom)?;
                    kept.remove(&key);
                    members.insert(key, value);
                }
            } else if key == "events" {
                // An event is the body's third level (the fourth in a bulk body).
                let seed = EventsSeed {
                    level: self.enclosing + 3,
                };
                match map.next_value_seed(seed)? {
                    EventsMember::Sent(events) => {
                        members.remove(&key);
                        kept.1 = Some(events);
                    }
                    EventsMember::Other(value) => {
                        kept.1 = None;
                        members.insert(key, value);
                    }
                }
            } else {
                members.insert(key, map.next_value()?);
            }
        }
        Ok((members, kept))
    }
}

/// A batch's `events`: an array's events as sent (each checked as a `Value` parse checks it,
/// its container at `level` of the body), anything else parsed.
enum EventsMember {
    Sent(Vec<SentEvent>),
    Other(Value),
}

#[derive(Clone, Copy)]
struct EventsSeed {
    level: usize,
}

impl<'de> DeserializeSeed<'de> for EventsSeed {
    type Value = EventsMember;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<EventsMember, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed {
    type Value = EventsMember;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EventsMember, A::Error> {
        let mut events = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(text) = seq.next_element::<Box<RawValue>>()? {
            // One read of the event in the usual case; a second to check one not to keep.
            let scanned = kept_events::scan(text.get(), self.level);
            if scanned.is_none() {
                check_as_value(text.get(), self.level).map_err(de::Error::custom)?;
            }
            events.push(SentEvent { text, scanned });
        }
        Ok(EventsMember::Sent(events))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<EventsMember, A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(EventsMember::Other(value))
    }

    fn visit_bool<E>(self, v: bool) -> Result<EventsMember, E> {
        Ok(EventsMember::Other(Value::from(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<EventsMember, E> {
        Ok(EventsMember::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<EventsMember, E> {
        Ok(EventsMember::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<EventsMember, E> {
        Ok(EventsMember::Other(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<EventsMember, E> {
        Ok(EventsMember::Other(Value::from(v)))
    }

    fn visit_unit<E>(self) -> Result<EventsMember, E> {
        Ok(EventsMember::Other(Value::Null))
    }
}

/// The batches of a bulk request (the array is the one enclosing container).
struct Batches;

impl<'de> Visitor<'de> for Batches {
    type Value = Vec<(Map<String, Value>, KeptMembers)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of batch objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut batches = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(batch) = seq.next_element_seed(Split { enclosing: 1 })? {
            batches.push(batch);
        }
        Ok(batches)
    }
}

#[cfg(test)]
#[path = "kept_members_tests.rs"]
mod tests;
