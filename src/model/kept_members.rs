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
//! kept or parsed by [`super::kept_events`], under the same rule.
//!
//! The body is walked by hand ([`super::json_walk`]) so that each kept member and each event is
//! read once, where it stands, and its text known from where the read ended: capturing each
//! first (as a `RawValue`, a pass of serde_json's over it and a copy) and reading the capture
//! after was a tenth of Boson's instructions at saturation (issue 16).

use serde_json::{Map, Value};

use super::json_walk::Cursor;
use super::kept_events::{Scanned, ScannedAt, StoredEvent};
use super::value_check::{CheckedAt, Numbers};

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
pub(crate) struct KeptMembers(Vec<(String, Box<str>)>, Option<Vec<SentEvent>>);

/// One event of a batch as it came, checked as a `Value` parse checks it.
#[derive(Debug, Clone)]
pub(crate) struct SentEvent {
    pub(crate) text: Box<str>,
    /// What it holds, if normalising would only add ids to it ([`ScannedAt`]).
    pub(crate) scanned: Option<Scanned>,
}

impl KeptMembers {
    /// The member `key`'s text, if it was kept.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let at = self.0.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some(&self.0[at].1)
    }

    /// Sets `key`; a later member of the same name replaces an earlier one, as in a `Value`.
    fn set(&mut self, key: String, value: Box<str>) {
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
        fn texts(events: &Option<Vec<SentEvent>>) -> Option<Vec<&str>> {
            events
                .as_ref()
                .map(|e| e.iter().map(|e| &*e.text).collect())
        }
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(&other.0)
                .all(|((a, x), (b, y))| a == b && x == y)
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
    let mut cursor = Cursor::new(std::str::from_utf8(body).ok()?);
    let split = batch(&mut cursor, 0)?;
    cursor.at_end().then_some(split)
}

/// A bulk request's body (an array of batches) split as [`split_batch`] splits one; `None` when
/// it is not an array of objects or would fail a `Value` parse.
pub(crate) fn split_bulk(body: &[u8]) -> Option<Vec<(Map<String, Value>, KeptMembers)>> {
    let mut cursor = Cursor::new(std::str::from_utf8(body).ok()?);
    let mut batches = Vec::new();
    cursor.array(|cursor| {
        batches.push(batch(cursor, 1)?);
        Some(())
    })?;
    cursor.at_end().then_some(batches)
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
            (None, Some(sent)) => Some(sent.iter().map(|e| &*e.text).collect()),
            (None, None) => None,
        };
        let mut entries: Vec<(&str, Stored<'_>)> = members
            .iter()
            .map(|(k, v)| (k.as_str(), Stored::Parsed(v)))
            .chain(
                self.kept
                    .0
                    .iter()
                    .map(|(k, t)| (k.as_str(), Stored::Text(t))),
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

/// The batch object that comes next, `enclosing` containers deep (0, or 1 in a bulk body).
/// A key given twice keeps its last value, as in a `Value`.
fn batch(cursor: &mut Cursor<'_>, enclosing: usize) -> Option<(Map<String, Value>, KeptMembers)> {
    let mut members = Map::new();
    let mut kept = KeptMembers::default();
    cursor.object(|key, cursor| {
        if KEPT_AS_SENT.contains(&key.as_str()) {
            // The member's own container is two levels below what encloses the batch.
            let (numbers, text) = checked(cursor, enclosing + 2)?;
            if numbers.as_sent_in(text) {
                members.remove(&key);
                kept.set(key, text.into());
            } else {
                let value = serde_json::from_str(text).ok()?;
                kept.remove(&key);
                members.insert(key, value);
            }
        } else if key == "events" && cursor.peek() == Some(b'[') {
            // An event is the body's third level (the fourth in a bulk body).
            let events = events(cursor, enclosing + 3)?;
            members.remove(&key);
            kept.1 = Some(events);
        } else {
            let (value, _) = cursor.nested_value(enclosing + 2)?;
            if key == "events" {
                kept.1 = None;
            }
            members.insert(key, value);
        }
        Some(())
    })?;
    Some((members, kept))
}

/// The value that comes next checked as a `Value` parse checks it, its container at `level`
/// of the body, with its text.
fn checked<'a>(cursor: &mut Cursor<'a>, level: usize) -> Option<(Numbers, &'a str)> {
    let read = match level {
        2 => cursor
            .value::<CheckedAt<2>>()
            .map(|(read, text)| (read.0, text)),
        3 => cursor
            .value::<CheckedAt<3>>()
            .map(|(read, text)| (read.0, text)),
        _ => None,
    };
    debug_assert!(matches!(level, 2 | 3), "a batch member at level {level}");
    read
}

/// The `events` array that comes next, each event as sent, its container at `level` of the
/// body.
fn events(cursor: &mut Cursor<'_>, level: usize) -> Option<Vec<SentEvent>> {
    debug_assert!(matches!(level, 3 | 4), "an event at level {level}");
    let mut events = Vec::new();
    cursor.array(|cursor| {
        events.push(match level {
            3 => sent_event::<3>(cursor)?,
            4 => sent_event::<4>(cursor)?,
            _ => return None,
        });
        Some(())
    })?;
    Some(events)
}

/// The event that comes next, at `LEVEL` of the body, checked as a `Value` parse checks it:
/// one read in the usual case. A read that goes through has checked every value in the event
/// (whether [`super::kept_events`] keeps it or not); one it breaks off is read again, only to
/// check the event and find its end.
fn sent_event<const LEVEL: usize>(cursor: &mut Cursor<'_>) -> Option<SentEvent> {
    let (scanned, text) = match cursor.value::<ScannedAt<'_, LEVEL>>() {
        Some((read, text)) => (read.scanned(text), text),
        None => (None, cursor.value::<CheckedAt<LEVEL>>()?.1),
    };
    Some(SentEvent {
        text: text.into(),
        scanned,
    })
}

#[cfg(test)]
#[path = "kept_members_tests.rs"]
mod tests;
