//! How deep a stored batch may nest. serde_json reads every stored batch back (delivery,
//! coalescing, the replay dry run, the preview) and refuses a body nested past its recursion
//! limit, so nothing deeper may be stored: an SDK's upload can be within the limit and still
//! make a batch past it, as translation puts its attributes deeper than they were sent.

use serde_json::Value;

/// The deepest level serde_json reads in a body, the body's own value being level 1 (it
/// refuses the 128th).
pub(crate) const MAX_LEVEL: usize = 127;

/// Whether `value`, standing at `level` of a body, reaches deeper than [`MAX_LEVEL`].
pub(crate) fn too_deep_at(value: &Value, level: usize) -> bool {
    nests_deeper(value, (MAX_LEVEL + 1).saturating_sub(level))
}

/// Whether containers nest more than `levels` deep in `value` (`1` nests none, `[1]` one).
fn nests_deeper(value: &Value, levels: usize) -> bool {
    match value {
        Value::Array(items) => levels == 0 || items.iter().any(|v| nests_deeper(v, levels - 1)),
        Value::Object(map) => levels == 0 || map.values().any(|v| nests_deeper(v, levels - 1)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_value_is_too_deep_where_serde_json_would_refuse_its_body() {
        let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!([inner]));
        for levels in [0, 1, 126, 127, 128] {
            let body = serde_json::to_string(&nested(levels)).expect("serialisable");
            let refused = serde_json::from_str::<Value>(&body).is_err();
            assert_eq!(too_deep_at(&nested(levels), 1), refused, "{levels} levels");
            // One level further in, one level fewer fits.
            assert_eq!(too_deep_at(&nested(levels), 2), levels > 126, "{levels}");
        }
        assert!(!too_deep_at(&json!({"a": [{}]}), 125));
        assert!(too_deep_at(&json!({"a": [{}]}), 126));
        assert!(!too_deep_at(&json!("scalar"), 127));
    }
}
