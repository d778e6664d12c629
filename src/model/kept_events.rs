//! A batch's events stored as the text they came in, with what normalising them adds spliced
//! in (issue 16). Parsing every event into a `Value` tree, checking it, writing it out again and
//! freeing it was about a third of the CPU of accepting an Events API batch: an allocation per
//! key and per string, for events of which acceptance reads a handful of members.
//!
//! [`ScannedAt`] reads one event as sent, once, in the walk of the body that finds its text
//! ([`super::kept_members`]): it checks every value as a `Value` parse would
//! ([`super::value_check`]) and reads what normalising reads. When normalising would only add
//! the event's `message_id` and, when the client gave none, its `timestamp_unixtime_ms`,
//! [`keep`] stores it with those two first in its `data` and the rest byte for byte as sent
//! (members in the client's order, whitespace included). That takes in commerce events whose
//! actions are names (not the Web SDK's numbered promotion action, which normalising renames),
//! and events holding floats that serde_json writes back spelt as they came (`89.5`, not
//! `1E2`, which comes back as `100.0`): receivers get the numbers the `Value` path would
//! send, and what is stored is never shorter than serde_json writes it back (see
//! [`super::kept_members`] on why that matters). Any other event (one to correct or to refuse,
//! one holding a float spelt otherwise) is normalised as a `Value` and written by serde_json,
//! as every event was before. Stored either way, an event reads back as the `Value`
//! normalising it gives, which the tests hold the two ways to.
//!
//! An event that repeats a key of its own, of its `data` or of its custom attributes is not
//! kept: the repeat would go out in its text, and receivers differ on which one counts. Deeper
//! (inside an attribute's value, say) a repeat stays in the text, as it does in the batch
//! members kept as sent; serde_json, which reads stored batches, keeps the last, as a `Value`
//! parse of the request did.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt::{self, Write as _};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::data_points::ValueType;
use super::event_type::EventType;
use super::nesting::RESERVED_KEY;
use super::value_check::{Checked, Numbers};

/// mParticle truncates server-to-server event names at this length (spec §6).
pub(crate) const MAX_EVENT_NAME_CHARS: usize = 256;

/// One normalised event as it is stored, and what the data catalog reads of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredEvent {
    /// The event's JSON text.
    pub(crate) text: String,
    pub(crate) summary: EventSummary,
}

/// What the data catalog records of an event: its type, its name (as the Data Filter names it)
/// and its custom attributes' names and types.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EventSummary {
    /// `None` for an event of no known type (which normalising refuses).
    pub(crate) event_type: Option<EventType>,
    pub(crate) name: Option<String>,
    pub(crate) attributes: Vec<(String, ValueType)>,
}

impl StoredEvent {
    /// A normalised event's `Value`, written by serde_json.
    pub(crate) fn written(event: &Value) -> serde_json::Result<Self> {
        Ok(Self {
            text: serde_json::to_string(event)?,
            summary: EventSummary::of(event),
        })
    }
}

impl EventSummary {
    /// The summary of a normalised event (whose type is known).
    fn of(event: &Value) -> Self {
        let event_type = event_type(event);
        let attributes = event
            .get("data")
            .and_then(|d| d.get("custom_attributes"))
            .and_then(Value::as_object)
            .map(|a| {
                a.iter()
                    .map(|(k, v)| (k.clone(), ValueType::of(v)))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            event_type,
            name: event_type
                .and_then(|t| event_name(t, event))
                .map(str::to_owned),
            attributes,
        }
    }
}

/// An event's type, if it has a known one.
pub(crate) fn event_type(event: &Value) -> Option<EventType> {
    event
        .get("event_type")
        .and_then(Value::as_str)
        .and_then(EventType::parse)
}

/// What the Data Filter calls an event's name: the custom event name, the screen name, or the
/// commerce action (product action, else promotion action). The data catalog names events
/// with it too, so the dashboard's filter grid names exactly what rules match.
pub(crate) fn event_name(event_type: EventType, event: &Value) -> Option<&str> {
    let data = event.get("data")?;
    let name = match event_type {
        EventType::CustomEvent => data.get("event_name"),
        EventType::ScreenView => data.get("screen_name"),
        EventType::CommerceEvent => data
            .pointer("/product_action/action")
            .or_else(|| data.pointer("/promotion_action/action")),
        _ => None,
    };
    name.and_then(Value::as_str)
}

/// What [`ScannedAt`] found in an event that normalising would only add ids to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scanned {
    summary: EventSummary,
    /// Where in the event's text its `data`'s first member starts (its opening quote).
    first_member: usize,
    has_message_id: bool,
    has_timestamp: bool,
}

/// One read of an event, as it stands at nesting `LEVEL` of the body, from a stream
/// ([`super::json_walk::Cursor::value`], which takes types, not seeds, hence the level as a
/// constant): what it holds if normalising would only add its `message_id` and missing
/// timestamp to it, and it passes what a `Value` parse checks (see
/// `value_check::CheckedAt`). [`ScannedAt::scanned`] gives `None` for any other event:
/// one normalising corrects or refuses, one whose product or promotion action is neither
/// `null` nor an object whose `action` is a string or `null` (the Web SDK's numbered promotion
/// action is renamed; checked whatever the event's type), one with a location (its
/// coordinates are checked), a number serde_json writes back spelt otherwise
/// ([`Numbers::as_sent_in`]), an empty `data` or one whose first key is escaped (no
/// place to splice at), a member normalising reads given twice. The read itself fails for
/// some of those, and for one a `Value` parse would refuse, which the caller checks again to
/// tell; a read that goes through has checked every value in the event, kept or not.
pub(crate) struct ScannedAt<'de, const LEVEL: usize>(Read<'de>);

impl<'de, const LEVEL: usize> Deserialize<'de> for ScannedAt<'de, LEVEL> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let numbers = Cell::new(Numbers::WrittenBackAsSent);
        let scope = Scope {
            checked: Checked { level: LEVEL },
            numbers: &numbers,
        };
        let event = EventSeed(scope).deserialize(deserializer)?;
        Ok(Self(Read {
            event,
            numbers: numbers.get(),
        }))
    }
}

impl<'de, const LEVEL: usize> ScannedAt<'de, LEVEL> {
    /// What the read found, `text` being the event's text, which the read borrowed from (the
    /// text [`super::json_walk::Cursor::value`] gives with it).
    pub(crate) fn scanned(self, text: &'de str) -> Option<Scanned> {
        self.0.scanned(text)
    }
}

/// One read of an event: its members normalising reads, and how its numbers are written back.
struct Read<'de> {
    event: EventRead<'de>,
    numbers: Numbers,
}

impl<'de> Read<'de> {
    /// What the read found, `text` being the event's text, which the read borrowed from.
    fn scanned(self, text: &'de str) -> Option<Scanned> {
        if !self.numbers.as_sent_in(text) {
            return None;
        }
        let data = self.event.data?;
        let event_type = EventType::parse(&self.event.event_type?)?;
        let name = data.checked_name(event_type)?;
        let start = text.as_ptr() as usize;
        let first_member = data.first_member?.checked_sub(start)?;
        debug_assert!(first_member < text.len(), "`data` is read from `text`");
        Some(Scanned {
            summary: EventSummary {
                event_type: Some(event_type),
                name: name.map(Cow::into_owned),
                attributes: data.custom_attributes.unwrap_or_default(),
            },
            first_member,
            has_message_id: data.message_id,
            has_timestamp: data.timestamp,
        })
    }
}

/// The event `text`, read by [`ScannedAt`], stored as sent with its `message_id` (made by
/// `message_id`) and, when it has none, its timestamp added first in its `data`.
pub(crate) fn keep(
    text: &str,
    scanned: Scanned,
    now_ms: i64,
    message_id: impl FnOnce() -> String,
) -> StoredEvent {
    let at = scanned.first_member;
    let mut out = String::with_capacity(text.len() + 90);
    out.push_str(&text[..at]);
    if !scanned.has_message_id {
        out.push_str("\"message_id\":\"");
        out.push_str(&message_id());
        out.push_str("\",");
    }
    if !scanned.has_timestamp {
        // Writing to a `String` cannot fail.
        let _ = write!(out, "\"timestamp_unixtime_ms\":{now_ms},");
    }
    out.push_str(&text[at..]);
    StoredEvent {
        text: out,
        summary: scanned.summary,
    }
}

/// An event's members that normalising reads.
#[derive(Default)]
struct EventRead<'de> {
    event_type: Option<Cow<'de, str>>,
    data: Option<DataRead<'de>>,
    /// Its other members' keys, to refuse one given twice.
    others: Vec<Cow<'de, str>>,
}

/// A `data`'s members that normalising reads, each checked to need no change.
#[derive(Default)]
struct DataRead<'de> {
    /// The address of its first key's opening quote.
    first_member: Option<usize>,
    message_id: bool,
    timestamp: bool,
    event_name: Option<Cow<'de, str>>,
    /// Whether `custom_event_type` is a non-empty string.
    custom_event_type: bool,
    screen_name: Option<Cow<'de, str>>,
    custom_attributes: Option<Vec<(String, ValueType)>>,
    /// What a commerce event's name is read from: its product action, else its promotion
    /// action.
    product_action: Action<'de>,
    promotion_action: Action<'de>,
    /// Whether a commerce event's `shopping_cart` or `product_impressions` has a type
    /// normalising refuses.
    commerce_refused: bool,
    /// The members read (bits by their place in `READ`), to refuse one given twice.
    seen: u32,
    /// The other members' keys, to refuse one given twice.
    others: Vec<Cow<'de, str>>,
}

/// A commerce event's `product_action` or `promotion_action` (an object or `null`), as far
/// as its name is read from it.
#[derive(Default)]
enum Action<'de> {
    /// Absent, `null`, or an object without an `action`: the name is looked for elsewhere.
    #[default]
    Unnamed,
    /// An object whose `action` is `null`: no name, and none looked for elsewhere.
    Null,
    Named(Cow<'de, str>),
}

impl<'de> DataRead<'de> {
    /// The event's name if its type's members need no change, else `None` (the outer
    /// `Option`).
    #[allow(clippy::option_option)]
    fn checked_name(&self, event_type: EventType) -> Option<Option<Cow<'de, str>>> {
        match event_type {
            EventType::CustomEvent => {
                let name = self.event_name.clone().filter(|n| !n.is_empty())?;
                if name.chars().nth(MAX_EVENT_NAME_CHARS).is_some() || !self.custom_event_type {
                    return None;
                }
                Some(Some(name))
            }
            EventType::ScreenView => Some(self.screen_name.clone()),
            EventType::CommerceEvent if self.commerce_refused => None,
            // The product action names the event, else the promotion action (see
            // `event_name`).
            EventType::CommerceEvent => {
                Some(match (&self.product_action, &self.promotion_action) {
                    (Action::Named(name), _) | (Action::Unnamed, Action::Named(name)) => {
                        Some(name.clone())
                    }
                    _ => None,
                })
            }
            _ => Some(None),
        }
    }
}

/// Not an event to keep (the message is never shown: the event is then read as a `Value`).
fn not_kept<E: de::Error>() -> E {
    E::custom("normalised as a Value")
}

/// Where a value stands and where the numbers read are noted: as a seed, any value, checked
/// as `value_check::Checked` checks it (this `Checked`'s level is the one a container here
/// has), giving its type.
#[derive(Clone, Copy)]
struct Scope<'a> {
    checked: Checked,
    /// How the event's numbers read so far are written back.
    numbers: &'a Cell<Numbers>,
}

impl<'a> Scope<'a> {
    /// The scope of what a container here holds.
    fn enter<E: de::Error>(self) -> Result<Scope<'a>, E> {
        Ok(Scope {
            checked: self.checked.enter()?,
            numbers: self.numbers,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Scope<'_> {
    type Value = ValueType;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ValueType, D::Error> {
        let read = self.checked.deserialize(deserializer)?;
        self.numbers.set(self.numbers.get().max(read.numbers));
        Ok(read.kind)
    }
}

/// Reads one event object.
struct EventSeed<'a>(Scope<'a>);

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = EventRead<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = EventRead<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let inner = self.0.enter::<A::Error>()?;
        let mut event = EventRead::default();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match key.as_ref() {
                "event_type" if event.event_type.is_none() => {
                    event.event_type = Some(map.next_value::<Text<'de>>()?.0);
                }
                "data" if event.data.is_none() => {
                    event.data = Some(map.next_value_seed(DataSeed(inner))?);
                }
                "event_type" | "data" => return Err(not_kept()),
                other => {
                    checked_key(other)?;
                    once(&mut event.others, key.clone())?;
                    map.next_value_seed(inner)?;
                }
            }
        }
        Ok(event)
    }
}

/// Notes `key` among `seen`, refusing it if it is there already: a key given twice would go out
/// twice in the event's text, and receivers differ on which one counts (serde_json, which reads
/// stored batches, keeps the last; a request written anew has only that one).
fn once<'de, E: de::Error>(seen: &mut Vec<Cow<'de, str>>, key: Cow<'de, str>) -> Result<(), E> {
    if seen.contains(&key) {
        return Err(not_kept());
    }
    seen.push(key);
    Ok(())
}

/// Refuses serde_json's reserved key (see `value_check::CheckedKey`).
fn checked_key<E: de::Error>(key: &str) -> Result<(), E> {
    if key == RESERVED_KEY {
        return Err(not_kept());
    }
    Ok(())
}

/// Reads an event's `data` object.
struct DataSeed<'a>(Scope<'a>);

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = DataRead<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = DataRead<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let inner = self.0.enter::<A::Error>()?;
        let mut data = DataRead::default();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if data.first_member.is_none() {
                let Cow::Borrowed(first) = &key else {
                    return Err(not_kept());
                };
                // A borrowed key starts just past its opening quote.
                data.first_member = Some(first.as_ptr() as usize - 1);
            }
            read_member(&mut data, key, &mut map, inner)?;
        }
        Ok(data)
    }
}

/// Reads one member of `data`, each whose value normalising checks or reads as its own type.
fn read_member<'de, A: MapAccess<'de>>(
    data: &mut DataRead<'de>,
    key: Cow<'de, str>,
    map: &mut A,
    inner: Scope<'_>,
) -> Result<(), A::Error> {
    const READ: [&str; 19] = [
        "timestamp_unixtime_ms",
        "message_id",
        "event_num",
        "session_start_unixtime_ms",
        "event_start_unixtime_ms",
        "custom_attributes",
        "custom_flags",
        "device_current_state",
        "location",
        "source_message_id",
        "session_uuid",
        "event_name",
        "custom_event_type",
        "screen_name",
        "session_duration_ms",
        "product_action",
        "promotion_action",
        "shopping_cart",
        "product_impressions",
    ];
    let Some(place) = READ.iter().position(|k| *k == key) else {
        checked_key(&key)?;
        once(&mut data.others, key)?;
        return map.next_value_seed(inner).map(drop);
    };
    if data.seen & (1 << place) != 0 {
        return Err(not_kept());
    }
    data.seen |= 1 << place;
    let read = READ[place];
    match read {
        // Given (not null): kept as they are; absent: added.
        "timestamp_unixtime_ms" => {
            map.next_value::<i64>()?;
            data.timestamp = true;
        }
        "message_id" => {
            data.message_id = true;
            if map.next_value_seed(inner)? == ValueType::Null {
                return Err(not_kept());
            }
        }
        // An int64 or null stays as it is; a string of digits would become a number.
        "event_num"
        | "session_start_unixtime_ms"
        | "event_start_unixtime_ms"
        | "session_duration_ms" => {
            map.next_value::<Option<i64>>()?;
        }
        "custom_attributes" => {
            data.custom_attributes = map.next_value_seed(AttributesSeed(inner))?;
        }
        "custom_flags" | "device_current_state" => {
            let kind = map.next_value_seed(inner)?;
            if !matches!(kind, ValueType::Object | ValueType::Null) {
                return Err(not_kept());
            }
        }
        "source_message_id" | "session_uuid" | "custom_event_type" => {
            let text = map.next_value::<Option<Text<'de>>>()?;
            data.custom_event_type |=
                read == "custom_event_type" && text.is_some_and(|t| !t.0.is_empty());
        }
        "event_name" => data.event_name = Some(map.next_value::<Text<'de>>()?.0),
        "screen_name" => data.screen_name = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0),
        "product_action" => data.product_action = map.next_value_seed(ActionSeed(inner))?,
        "promotion_action" => data.promotion_action = map.next_value_seed(ActionSeed(inner))?,
        "shopping_cart" | "product_impressions" => {
            let kind = map.next_value_seed(inner)?;
            let allowed = if read == "shopping_cart" {
                ValueType::Object
            } else {
                ValueType::Array
            };
            data.commerce_refused |= kind != allowed && kind != ValueType::Null;
        }
        // "location": its coordinates are checked by the `Value` path.
        _ => return Err(not_kept()),
    }
    Ok(())
}

/// A string, borrowed from the text when it holds no escape.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Borrowed(text)))
    }
    fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(text.to_owned())))
    }
}

/// `custom_attributes`: `null`, or an object whose keys (each once) and value types are read.
struct AttributesSeed<'a>(Scope<'a>);

impl<'de> DeserializeSeed<'de> for AttributesSeed<'_> {
    type Value = Option<Vec<(String, ValueType)>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AttributesSeed<'_> {
    type Value = Option<Vec<(String, ValueType)>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object or null")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let inner = self.0.enter::<A::Error>()?;
        let mut attributes: Vec<(String, ValueType)> = Vec::new();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            checked_key(&key)?;
            if attributes.iter().any(|(k, _)| *k == key) {
                return Err(not_kept());
            }
            let value_type = map.next_value_seed(inner)?;
            attributes.push((key.into_owned(), value_type));
        }
        // A `Value` map's order, as the data catalog reads it.
        attributes.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        Ok(Some(attributes))
    }
}

/// A commerce event's `product_action` or `promotion_action`: `null`, or an object whose
/// `action` is a string or `null` (a number, which normalising may rename, or any other type
/// leaves the event to the `Value` path) and whose keys are each given once.
struct ActionSeed<'a>(Scope<'a>);

impl<'de> DeserializeSeed<'de> for ActionSeed<'_> {
    type Value = Action<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ActionSeed<'_> {
    type Value = Action<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object or null")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Action::Unnamed)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let inner = self.0.enter::<A::Error>()?;
        let mut keys = Vec::new();
        let mut action = Action::Unnamed;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            checked_key(&key)?;
            once(&mut keys, key.clone())?;
            if key == "action" {
                action = match map.next_value::<Option<Text<'de>>>()? {
                    Some(Text(name)) => Action::Named(name),
                    None => Action::Null,
                };
            } else {
                map.next_value_seed(inner)?;
            }
        }
        Ok(action)
    }
}

#[cfg(test)]
#[path = "kept_events_tests.rs"]
mod tests;
