//! What a stored batch may hold so that serde_json reads it back as it was written. serde_json
//! reads every stored batch back (delivery, coalescing, the replay dry run, the preview), so a
//! batch it would refuse or misread is never stored:
//! - nesting past its recursion limit: an SDK's upload can be within the limit and still make a
//!   batch past it, as translation puts its attributes deeper than they were sent;
//! - its reserved key ([`RESERVED_KEY`]).

use serde_json::Value;

/// The deepest level serde_json reads in a body, the body's own value being level 1 (it
/// refuses the 128th).
pub(crate) const MAX_LEVEL: usize = 127;

/// The object key serde_json (built with `raw_value`, as Boson is) gives a meaning: an object
/// whose first key it is reads as the JSON text held under it, not as an object. A stored batch
/// is written with its keys sorted and `$` sorts first, so an object holding this key anywhere
/// would be stored as one that reads back as something else, or not at all.
pub(crate) const RESERVED_KEY: &str = "$serde_json::private::RawValue";

/// Why a value cannot be stored as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// It nests deeper than [`MAX_LEVEL`].
    TooDeep,
    /// An object in it holds [`RESERVED_KEY`].
    ReservedKey,
}

/// Why `value`, standing at `level` of a body, would not read back as written, if it would not
/// (the first reason found). One walk for both checks: it runs over every batch accepted.
pub(crate) fn unreadable_at(value: &Value, level: usize) -> Option<Unreadable> {
    unreadable(value, (MAX_LEVEL + 1).saturating_sub(level))
}

/// Whether containers nest more than `levels` deep in `value` (`1` nests none, `[1]` one),
/// or an object in it holds the reserved key. (A value read from a text on its own is checked
/// on its text instead, `json_walk::too_deep`: what a `Value` drops can nest too.)
fn unreadable(value: &Value, levels: usize) -> Option<Unreadable> {
    match value {
        Value::Array(_) | Value::Object(_) if levels == 0 => Some(Unreadable::TooDeep),
        Value::Array(items) => items.iter().find_map(|v| unreadable(v, levels - 1)),
        Value::Object(map) if map.contains_key(RESERVED_KEY) => Some(Unreadable::ReservedKey),
        Value::Object(map) => map.values().find_map(|v| unreadable(v, levels - 1)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn too_deep_at(value: &Value, level: usize) -> bool {
        unreadable_at(value, level) == Some(Unreadable::TooDeep)
    }

    #[test]
    fn a_value_is_too_deep_where_serde_json_would_refuse_its_body() {
        let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!([inner]));
        for levels in [0, 1, 126, 127, 128] {
            let body = serde_json::to_string(&nested(levels)).expect("serialisable");
            let refused = serde_json::from_str::<Value>(&body).is_err();
            assert_eq!(too_deep_at(&nested(levels), 1), refused, "{levels} levels");
            let why = unreadable_at(&nested(levels), 1);
            assert_eq!(
                why,
                refused.then_some(Unreadable::TooDeep),
                "{levels} levels"
            );
            // One level further in, one level fewer fits.
            assert_eq!(too_deep_at(&nested(levels), 2), levels > 126, "{levels}");
        }
        assert!(!too_deep_at(&json!({"a": [{}]}), 125));
        assert!(too_deep_at(&json!({"a": [{}]}), 126));
        assert!(!too_deep_at(&json!("scalar"), 127));
    }

    #[test]
    fn the_reserved_key_is_found_at_any_depth_and_only_as_a_key() {
        let held = json!({"a": [1, {"b": {RESERVED_KEY: "2", "c": 3}}]});
        assert_eq!(unreadable_at(&held, 1), Some(Unreadable::ReservedKey));
        let as_text = json!({"a": RESERVED_KEY, "b": [RESERVED_KEY], "x$serde_json": 1});
        assert_eq!(unreadable_at(&as_text, 1), None);
        // Written with sorted keys, it comes first and the object does not read back.
        let body = serde_json::to_string(&held["a"][1]["b"]).expect("serialisable");
        let read = serde_json::from_str::<Value>(&body);
        assert!(read.is_err(), "{body} read as {read:?}");
    }
}
