//! The data catalog's vocabulary (issue 13): a data point (an event, an event attribute, a user
//! attribute, an identity type) named the way Data Filter rules name it, the JSON type its
//! values were seen with, and how two tallies of one data point merge. Pure data; the merge is
//! commutative and associative, so tallies from any number of nodes, flushed in any order, end
//! the same.

use serde_json::Value;

/// What kind of data point a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// An event type and name (the name empty for types whose events have none).
    Event,
    /// A `custom_attributes` key of an event (type and name).
    EventAttribute,
    /// A key of the batch's `user_attributes`.
    UserAttribute,
    /// An `identity_type` of the batch's `user_identities`.
    IdentityType,
}

impl Kind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Event => "event",
            Self::EventAttribute => "event_attribute",
            Self::UserAttribute => "user_attribute",
            Self::IdentityType => "identity_type",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [
            Self::Event,
            Self::EventAttribute,
            Self::UserAttribute,
            Self::IdentityType,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == name)
    }
}

/// One data point of an input. Fields that do not apply to the kind are empty strings, which
/// keeps the stored key a plain composite primary key on both backends.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PointKey {
    pub(crate) kind: Kind,
    /// The event type's wire name; empty for user attributes and identity types.
    pub(crate) event_type: Box<str>,
    /// The Data Filter's event name (custom event name, screen name, commerce action); empty
    /// when the event has none, and for user attributes and identity types.
    pub(crate) event_name: Box<str>,
    /// The attribute key or identity type; empty for an event.
    pub(crate) name: Box<str>,
}

impl PointKey {
    #[cfg(test)]
    pub(crate) fn event(event_type: &str, event_name: &str) -> Self {
        Self::new(Kind::Event, event_type, event_name, "")
    }

    pub(crate) fn new(kind: Kind, event_type: &str, event_name: &str, name: &str) -> Self {
        Self {
            kind,
            event_type: event_type.into(),
            event_name: event_name.into(),
            name: name.into(),
        }
    }
}

/// The JSON type of a value as the catalog reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ValueType {
    Null,
    String,
    Number,
    Boolean,
    Array,
    Object,
    /// Seen with two different types other than null.
    Mixed,
}

impl ValueType {
    pub(crate) fn of(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::String(_) => Self::String,
            Value::Number(_) => Self::Number,
            Value::Bool(_) => Self::Boolean,
            Value::Array(_) => Self::Array,
            Value::Object(_) => Self::Object,
        }
    }

    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Array => "array",
            Self::Object => "object",
            Self::Mixed => "mixed",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [
            Self::Null,
            Self::String,
            Self::Number,
            Self::Boolean,
            Self::Array,
            Self::Object,
            Self::Mixed,
        ]
        .into_iter()
        .find(|t| t.as_str() == name)
    }

    /// A null says nothing about an attribute's type (a cleared value), so any other type
    /// replaces it; two different other types are `mixed`, for good. The store's upsert
    /// computes the same in SQL.
    pub(crate) fn merge(self, other: Self) -> Self {
        match (self, other) {
            (a, b) if a == b => a,
            (Self::Null, b) => b,
            (a, Self::Null) => a,
            _ => Self::Mixed,
        }
    }
}

/// How often, when, and with which type a data point was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) count: i64,
    /// Unix ms, the server's receive time.
    pub(crate) first_seen_ms: i64,
    pub(crate) last_seen_ms: i64,
    /// None for events and identity types, which have no value.
    pub(crate) value_type: Option<ValueType>,
}

impl Seen {
    pub(crate) fn merge(&mut self, other: &Seen) {
        self.count = self.count.saturating_add(other.count);
        self.first_seen_ms = self.first_seen_ms.min(other.first_seen_ms);
        self.last_seen_ms = self.last_seen_ms.max(other.last_seen_ms);
        self.value_type = match (self.value_type, other.value_type) {
            (Some(a), Some(b)) => Some(a.merge(b)),
            (a, b) => a.or(b),
        };
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn value_types_map_from_json_and_round_trip() {
        let cases = [
            (json!(null), "null"),
            (json!("x"), "string"),
            (json!(1.5), "number"),
            (json!(-3), "number"),
            (json!(false), "boolean"),
            (json!([1]), "array"),
            (json!({"a": 1}), "object"),
        ];
        for (value, name) in cases {
            let value_type = ValueType::of(&value);
            assert_eq!(value_type.as_str(), name);
            assert_eq!(ValueType::parse(name), Some(value_type));
        }
        assert_eq!(ValueType::parse("mixed"), Some(ValueType::Mixed));
        assert_eq!(ValueType::parse("String"), None);
        for kind in [
            Kind::Event,
            Kind::EventAttribute,
            Kind::UserAttribute,
            Kind::IdentityType,
        ] {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn merging_types_ignores_null_and_is_order_free() {
        use ValueType::{Mixed, Null, Number, String};
        assert_eq!(Null.merge(String), String);
        assert_eq!(String.merge(Null), String);
        assert_eq!(String.merge(String), String);
        assert_eq!(String.merge(Number), Mixed);
        assert_eq!(Mixed.merge(Null), Mixed);
        assert_eq!(Mixed.merge(String), Mixed);
        let all = [Null, String, Number, Mixed, ValueType::Array];
        for a in all {
            for b in all {
                assert_eq!(a.merge(b), b.merge(a), "{a:?} {b:?}");
                for c in all {
                    assert_eq!(a.merge(b).merge(c), a.merge(b.merge(c)));
                }
            }
        }
    }

    #[test]
    fn seen_merges_counts_bounds_and_types() {
        let mut seen = Seen {
            count: 2,
            first_seen_ms: 10,
            last_seen_ms: 20,
            value_type: Some(ValueType::Null),
        };
        seen.merge(&Seen {
            count: 3,
            first_seen_ms: 5,
            last_seen_ms: 15,
            value_type: Some(ValueType::Number),
        });
        assert_eq!(
            seen,
            Seen {
                count: 5,
                first_seen_ms: 5,
                last_seen_ms: 20,
                value_type: Some(ValueType::Number)
            }
        );
    }
}
