//! An event's outline: the members of a stored event that the filter and the Live Stream read
//! when a connection's settings change no event, parsed; every other member skipped unparsed.
//!
//! Delivery parses each stored batch it sends, and building every event's `Value` (a string
//! and a map entry per member, freed again once the requests are cut) was most of that; yet
//! when the settings change no event, every event goes out as its stored bytes
//! ([`super::request_body`]) and only its type and name are read. [`super::filter::outlines_suffice`]
//! says when that is; [`super::stored_batch::StoredBatch::read_outlines`] reads a batch so.
//!
//! An outline is the event's `Value` with only `event_type` and `data` kept, and of `data` only
//! [`DATA_MEMBERS`], each whole. An event or `data` that is not an object is kept whole.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Number, Value};

/// The members of an event's `data` an outline keeps: the location (which a setting may
/// strip) and whatever names the event (`rules::event_name`, `live::name_of`).
const DATA_MEMBERS: [&str; 9] = [
    "location",
    "event_name",
    "screen_name",
    "product_action",
    "promotion_action",
    "product_impressions",
    "user_attribute_name",
    "new",
    "old",
];

/// One event, read as its outline.
#[derive(Debug)]
pub(super) struct OutlinedEvent(pub(super) Value);

impl<'de> Deserialize<'de> for OutlinedEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Outline::Event).map(Self)
    }
}

/// Which object an outline is reading.
#[derive(Debug, Clone, Copy)]
enum Outline {
    Event,
    Data,
}

/// What an outline does with one member of an object.
enum Member {
    Whole,
    Outlined(Outline),
    Skipped,
}

impl Outline {
    fn member(self, key: &str) -> Member {
        match self {
            Self::Event if key == "event_type" => Member::Whole,
            Self::Event if key == "data" => Member::Outlined(Self::Data),
            Self::Data if DATA_MEMBERS.contains(&key) => Member::Whole,
            _ => Member::Skipped,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Outline {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Anything but an object is read as serde_json reads a `Value`.
impl<'de> Visitor<'de> for Outline {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut values = Vec::new();
        while let Some(value) = seq.next_element::<Value>()? {
            values.push(value);
        }
        Ok(Value::Array(values))
    }

    /// Kept members are inserted as `Map` inserts them (a key given twice keeps its last value).
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut kept = Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match self.member(&key) {
                Member::Whole => {
                    let value = map.next_value::<Value>()?;
                    kept.insert(key.into_owned(), value);
                }
                Member::Outlined(outline) => {
                    let value = map.next_value_seed(outline)?;
                    kept.insert(key.into_owned(), value);
                }
                Member::Skipped => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(kept))
    }
}

/// A member's name, borrowed from the body unless it holds escapes: a skipped member costs no
/// allocation.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn outline(text: &str) -> Value {
        serde_json::from_str::<OutlinedEvent>(text)
            .expect("an event")
            .0
    }

    #[test]
    fn an_outline_keeps_the_type_and_what_names_the_event() {
        let event = json!({"event_type": "commerce_event", "custom_event_type": "other",
            "data": {"event_name": "e", "custom_attributes": {"a": [1, {"b": 2}]},
                     "product_action": {"action": "purchase", "products": [{"id": "p"}]},
                     "location": {"latitude": 1.5}, "timestamp_unixtime_ms": 7,
                     "new": {"identity_type": "email"}}});
        let expected = json!({"event_type": "commerce_event",
            "data": {"event_name": "e",
                     "product_action": {"action": "purchase", "products": [{"id": "p"}]},
                     "location": {"latitude": 1.5}, "new": {"identity_type": "email"}}});
        assert_eq!(outline(&event.to_string()), expected);
    }

    #[test]
    fn what_is_not_an_object_is_kept_whole() {
        for text in [
            r#"[1,{"a":2.5}]"#,
            r#""text""#,
            "null",
            "-3",
            "18446744073709551615",
            "1e5",
            r#"{"event_type":"x","data":[1,2]}"#,
            r#"{"data":"d\u00e9\n"}"#,
        ] {
            let whole: Value = serde_json::from_str(text).expect("json");
            assert_eq!(outline(text), whole, "{text}");
        }
    }

    #[test]
    fn escaped_and_repeated_names_read_as_serde_json_reads_them() {
        let text =
            r#"{"event\u005ftype":"a","event_type":"b","d\"x":1,"data":{"screen_name":"s"}}"#;
        assert_eq!(
            outline(text),
            json!({"event_type": "b", "data": {"screen_name": "s"}})
        );
    }
}
