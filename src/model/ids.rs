//! Typed ids: inputs, outputs, connections, batches and users (MPIDs). Each is its own type, so
//! a connection id cannot be passed where an input id is meant, and an id that came from outside
//! (an admin API path, a request body) is parsed once, at the edge.
//!
//! The string ids hold an `Arc<str>`: a connection id is cloned per job, per Live Stream item
//! and per metric update, and a reference count is cheaper there than copying the text. In JSON
//! they are the same strings as ever (`conn_0192…`); batch ids and MPIDs are the same numbers.
//! Where an MPID is a decimal string on the wire (IDSync answers, the Live Stream), the code
//! that writes that wire format says so with [`Mpid`]'s `Display`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An id from outside that is not one Boson could have made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid {kind} id")]
pub(crate) struct MalformedId {
    kind: &'static str,
}

/// Whether `text` is `{prefix}_` and the 32 lowercase hex digits of a UUID, the shape
/// [`new_text`] gives every id.
fn well_formed(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|hex| {
            hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// A fresh id's text: time-ordered (UUIDv7), with a readable prefix, e.g. `conn_0190…`.
fn new_text(prefix: &str) -> Arc<str> {
    Arc::from(format!("{prefix}_{}", uuid::Uuid::now_v7().simple()))
}

/// The string ids share everything but their name, prefix and documentation.
macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub(crate) struct $name(Arc<str>);

        impl $name {
            /// A fresh id.
            pub(crate) fn new() -> Self {
                Self(new_text($prefix))
            }

            /// An id from outside (an API path or body): only the shape Boson gives ids is one.
            pub(crate) fn parse(text: &str) -> Result<Self, MalformedId> {
                if well_formed(text, $prefix) {
                    Ok(Self(Arc::from(text)))
                } else {
                    Err(MalformedId { kind: $kind })
                }
            }

            /// An id read back from where only Boson writes ids (the store), taken as written:
            /// checking it again would only turn a row nobody can fix into an error.
            pub(crate) fn trusted(text: impl Into<Arc<str>>) -> Self {
                Self(text.into())
            }

            pub(crate) fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = MalformedId;

            fn from_str(text: &str) -> Result<Self, MalformedId> {
                Self::parse(text)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        /// Deserialising is parsing: JSON is where ids come from outside.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }

        /// Tests compare ids with the literals they stored.
        #[cfg(test)]
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        #[cfg(test)]
        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }
    };
}

string_id!(
    /// An input: where data arrives (`inp_…`).
    InputId,
    "inp",
    "input"
);

string_id!(
    /// An output: a webhook destination (`out_…`).
    OutputId,
    "out",
    "output"
);

string_id!(
    /// A connection of an input to an output (`conn_…`).
    ConnectionId,
    "conn",
    "connection"
);

/// The integer ids share everything but their name and documentation.
macro_rules! integer_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub(crate) struct $name(i64);

        impl $name {
            pub(crate) const fn new(id: i64) -> Self {
                Self(id)
            }

            pub(crate) const fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        /// Tests compare ids with the numbers they expect.
        #[cfg(test)]
        impl PartialEq<i64> for $name {
            fn eq(&self, other: &i64) -> bool {
                self.0 == *other
            }
        }
    };
}

integer_id!(
    /// A stored batch, numbered by the store in the order batches are stored.
    BatchId
);

integer_id!(
    /// A user (mParticle's MPID): a JSON number in batch documents, a decimal string where the
    /// SDKs keep it as one (JavaScript cannot hold every 64-bit integer exactly).
    Mpid
);

/// A decimal MPID, as the SDKs send it in strings and paths.
impl FromStr for Mpid {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse().map(Self)
    }
}

impl Mpid {
    /// An MPID in a JSON request: a number (mobile SDKs, the Events API) or a decimal string
    /// (the Web SDK).
    pub(crate) fn from_json(value: &serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::Number(n) => n.as_i64().map(Self),
            serde_json::Value::String(s) => s.parse().ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn new_ids_have_their_prefix_and_parse_back() {
        let input = InputId::new();
        let output = OutputId::new();
        let connection = ConnectionId::new();
        assert!(input.as_str().starts_with("inp_"), "{input}");
        assert!(output.as_str().starts_with("out_"), "{output}");
        assert!(connection.as_str().starts_with("conn_"), "{connection}");
        assert_eq!(connection.as_str().len(), "conn_".len() + 32);
        assert_eq!(InputId::parse(input.as_str()), Ok(input.clone()));
        assert_eq!(OutputId::parse(output.as_str()), Ok(output));
        assert_eq!(connection.as_str().parse::<ConnectionId>(), Ok(connection));
        assert_ne!(InputId::new(), input, "every new id is fresh");
    }

    #[test]
    fn parse_accepts_only_the_shape_boson_gives_ids() {
        let hex = "0192d3b4c5e67f8091a2b3c4d5e6f708";
        assert!(ConnectionId::parse(&format!("conn_{hex}")).is_ok());
        for malformed in [
            String::new(),
            "conn_".to_owned(),
            "conn_x".to_owned(),
            "inp_x".to_owned(),
            hex.to_owned(),
            format!("inp_{hex}"),
            format!("conn{hex}"),
            format!("conn_{}", hex.to_uppercase()),
            format!("conn_{hex}0"),
            format!("conn_{}", &hex[1..]),
            format!("conn_{hex}/attempts"),
            format!(" conn_{hex}"),
        ] {
            assert_eq!(
                ConnectionId::parse(&malformed),
                Err(MalformedId { kind: "connection" }),
                "{malformed:?}"
            );
        }
        assert!(InputId::parse(&format!("inp_{hex}")).is_ok());
        assert!(OutputId::parse(&format!("out_{hex}")).is_ok());
        assert!(OutputId::parse(&format!("inp_{hex}")).is_err());
        assert_eq!(
            InputId::parse("inp_x").map_err(|e| e.to_string()),
            Err("not a valid input id".to_owned())
        );
    }

    #[test]
    fn string_ids_are_plain_strings_in_json_and_display() {
        let text = "conn_0192d3b4c5e67f8091a2b3c4d5e6f708";
        let id = ConnectionId::parse(text).expect("well formed");
        assert_eq!(id.to_string(), text);
        assert_eq!(format!("{id:?}"), format!("{text:?}"));
        let json = serde_json::to_string(&json!({"connection_id": id})).expect("serialise");
        assert_eq!(json, format!(r#"{{"connection_id":"{text}"}}"#));
        assert_eq!(
            serde_json::to_string(&id).expect("serialise"),
            format!("\"{text}\"")
        );
        let back: ConnectionId = serde_json::from_str(&format!("\"{text}\"")).expect("parse");
        assert_eq!(back, id);
        assert_eq!(
            serde_json::to_string(&back).expect("again"),
            format!("\"{text}\"")
        );
    }

    #[test]
    fn json_ids_from_outside_are_parsed() {
        assert!(serde_json::from_str::<InputId>("\"inp_x\"").is_err());
        assert!(serde_json::from_str::<InputId>("42").is_err());
        // Escaped text is unescaped before it is parsed.
        let escaped = "\"inp_0192d3b4c5e67f8091a2b3c4d5e6f70\\u0038\"";
        let id: InputId = serde_json::from_str(escaped).expect("escaped but well formed");
        assert_eq!(id.as_str(), "inp_0192d3b4c5e67f8091a2b3c4d5e6f708");
    }

    #[test]
    fn trusted_ids_are_taken_as_written() {
        assert_eq!(ConnectionId::trusted("c1").as_str(), "c1");
        assert_eq!(InputId::trusted(String::from("in")), "in");
        let id = ConnectionId::trusted("conn_a");
        let copy = id.clone();
        assert!(
            std::ptr::eq(id.as_str(), copy.as_str()),
            "a clone shares the text"
        );
    }

    #[test]
    fn integer_ids_are_numbers_in_json_and_display() {
        let batch = BatchId::new(7);
        assert_eq!(batch.get(), 7);
        assert_eq!(batch.to_string(), "7");
        assert_eq!(serde_json::to_string(&batch).expect("serialise"), "7");
        assert_eq!(serde_json::from_str::<BatchId>("7").expect("parse"), batch);

        // Beyond JavaScript's exact range, negative (mParticle's often are), and 0 (what SDKs
        // send before they have one).
        for raw in [i64::MAX, -8_070_325_987_212_391_441, 0] {
            let mpid = Mpid::new(raw);
            let json = serde_json::to_string(&json!({"mpid": mpid})).expect("serialise");
            assert_eq!(json, format!(r#"{{"mpid":{raw}}}"#));
            let back: Mpid = serde_json::from_str(&raw.to_string()).expect("parse");
            assert_eq!(back, mpid);
            assert_eq!(mpid.to_string(), raw.to_string());
        }
        assert!(
            serde_json::from_str::<Mpid>("\"42\"").is_err(),
            "a number in JSON"
        );
    }

    #[test]
    fn mpids_parse_from_decimal_text_as_i64_does() {
        assert_eq!("42".parse::<Mpid>(), Ok(Mpid::new(42)));
        assert_eq!("-5".parse::<Mpid>(), Ok(Mpid::new(-5)));
        assert_eq!(
            "9223372036854775807".parse::<Mpid>(),
            Ok(Mpid::new(i64::MAX))
        );
        for bad in ["", "abc", "4.2", "9223372036854775808", " 42"] {
            assert!(bad.parse::<Mpid>().is_err(), "{bad:?}");
        }
    }
}
