//! What a `Value` parse checks in a JSON value, checked without building the `Value` (issue 16):
//! escapes that make characters, numbers in range, serde_json's depth limit and its reserved
//! key; and whether serde_json writes the value's numbers back as they came. The split keeps
//! batch members and events as the text they came in ([`super::kept_members`],
//! [`super::kept_events`]) only when this passes, so that delivery, which parses every stored
//! batch, never meets text it would refuse or read differently.

use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::data_points::ValueType;
use super::json_walk::past_string;
use super::nesting::{MAX_LEVEL, RESERVED_KEY};

/// Whether serde_json writes a value's numbers back as they came (ordered: a value holding both
/// kinds is `Rewritten`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Numbers {
    /// Integers only (or no numbers): each is written back as it was sent.
    WrittenBackAsSent,
    /// A fraction, an exponent, `-0` or an integer past 64 bits: written back as a float, in
    /// serde_json's spelling, which may not be the one it came in.
    Rewritten,
}

impl Numbers {
    /// Whether serde_json writes every number of `text`, the value these were read from, back
    /// exactly as it is spelt there: integers always; floats only when each is already in
    /// serde_json's spelling ([`numbers_written_back_as_sent`], a second look at the text,
    /// taken only then).
    pub(super) fn as_sent_in(self, text: &str) -> bool {
        self == Self::WrittenBackAsSent || numbers_written_back_as_sent(text)
    }
}

/// What [`Checked`] read of a value: its type, and how its numbers are written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Read {
    pub(super) kind: ValueType,
    pub(super) numbers: Numbers,
}

impl Read {
    const fn of(kind: ValueType, numbers: Numbers) -> Self {
        Self { kind, numbers }
    }
}

/// One JSON value, read from a stream ([`super::json_walk::Cursor::value`], which takes types,
/// not seeds), checked for what a `Value` parse checks that skipping it does not: escapes that
/// make characters, numbers in range, the depth limit (its container sits at nesting level
/// `LEVEL` of the whole body). Gives how its numbers are written back. Allocates nothing.
pub(super) struct CheckedAt<const LEVEL: usize>(pub(super) Numbers);

impl<'de, const LEVEL: usize> Deserialize<'de> for CheckedAt<LEVEL> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = Checked { level: LEVEL }.deserialize(deserializer)?;
        Ok(Self(read.numbers))
    }
}

/// A value read the way `Value` reads it (every string unescaped, every number converted) and
/// dropped; `level` is the nesting level a container here would have in the whole body.
#[derive(Clone, Copy)]
pub(super) struct Checked {
    pub(super) level: usize,
}

impl<'de> DeserializeSeed<'de> for Checked {
    type Value = Read;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Read, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Read, E> {
        Ok(Read::of(ValueType::Boolean, Numbers::WrittenBackAsSent))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Read, E> {
        Ok(Read::of(ValueType::Number, Numbers::WrittenBackAsSent))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Read, E> {
        Ok(Read::of(ValueType::Number, Numbers::WrittenBackAsSent))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Read, E> {
        Ok(Read::of(ValueType::Number, Numbers::Rewritten))
    }

    fn visit_str<E>(self, _: &str) -> Result<Read, E> {
        Ok(Read::of(ValueType::String, Numbers::WrittenBackAsSent))
    }

    fn visit_unit<E>(self) -> Result<Read, E> {
        Ok(Read::of(ValueType::Null, Numbers::WrittenBackAsSent))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Read, A::Error> {
        let inner = self.enter::<A::Error>()?;
        let mut numbers = Numbers::WrittenBackAsSent;
        while let Some(item) = seq.next_element_seed(inner)? {
            numbers = numbers.max(item.numbers);
        }
        Ok(Read::of(ValueType::Array, numbers))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let inner = self.enter::<A::Error>()?;
        let mut numbers = Numbers::WrittenBackAsSent;
        // Keys are checked too: an ignored key would not have its escapes checked, and the
        // stored batch is written back with sorted keys, where serde_json's reserved key would
        // change what the object reads as (see `nesting::RESERVED_KEY`).
        while map.next_key_seed(CheckedKey)?.is_some() {
            numbers = numbers.max(map.next_value_seed(inner)?.numbers);
        }
        Ok(Read::of(ValueType::Object, numbers))
    }
}

/// An object's key, read as `Value` reads it (unescaped), refused if it is serde_json's
/// reserved key.
struct CheckedKey;

impl<'de> DeserializeSeed<'de> for CheckedKey {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for CheckedKey {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<(), E> {
        if key == RESERVED_KEY {
            return Err(E::custom("serde_json's reserved key"));
        }
        Ok(())
    }
}

/// Whether serde_json writes every number in `text` (one JSON value a [`Checked`] read passed)
/// back exactly as it is spelt there. A float comes back in serde_json's own spelling: `89.5`
/// as sent, but `1E2` as `100.0`, `1.50` as `1.5`, `-0` as `-0.0`, an integer past 64 bits or
/// a fraction past a float's precision rounded. Text kept as sent goes out as it is, so a
/// receiver gets the very numbers the `Value` path would send, and it is never shorter than
/// what serde_json writes of it (see [`super::kept_members`]). Called through
/// [`Numbers::as_sent_in`], only when the read found [`Numbers::Rewritten`].
fn numbers_written_back_as_sent(text: &str) -> bool {
    let mut written = Vec::new();
    number_tokens(text).all(|at| {
        let token = &text[at];
        written.clear();
        serde_json::from_str::<serde_json::Number>(token)
            .and_then(|number| serde_json::to_writer(&mut written, &number))
            .is_ok_and(|()| written == token.as_bytes())
    })
}

/// The byte ranges of the numbers in `text`, one JSON value (what is outside its strings,
/// from a `-` or a digit to the next byte no number holds).
pub(crate) fn number_tokens(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(&byte) = bytes.get(at) {
            match byte {
                b'"' => at = past_string(bytes, at + 1),
                b'-' | b'0'..=b'9' => {
                    let start = at;
                    at += bytes[at..]
                        .iter()
                        .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .unwrap_or(bytes.len() - at);
                    return Some(start..at);
                }
                _ => at += 1,
            }
        }
        None
    })
}

impl Checked {
    /// The seed for what this container holds, or the error serde_json gives past its limit.
    pub(super) fn enter<E: de::Error>(self) -> Result<Self, E> {
        if self.level > MAX_LEVEL {
            return Err(E::custom("recursion limit exceeded"));
        }
        Ok(Self {
            level: self.level + 1,
        })
    }
}
