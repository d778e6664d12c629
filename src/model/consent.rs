//! A user's consent in mParticle's `consent_state` shape: `{"gdpr": {<purpose>: {...}},
//! "ccpa": {"data_sale_opt_out": {...}}}`, each purpose an object with `consented` and
//! `timestamp_unixtime_ms`. Batches state some purposes; the user's profile keeps the latest
//! statement of each (merged per purpose: a purpose stated again is replaced whole, the others
//! stay). Pure data; the store does the merge in SQL, [`merge`] does the same for the batches of
//! one group commit.

use serde_json::{Map, Value};

/// The regulations a consent state holds, one level of purposes each.
pub(crate) const REGULATIONS: [&str; 2] = ["gdpr", "ccpa"];

/// The purposes a batch's `consent_state` states, per regulation; regulations and purposes that
/// are not objects are left out (nothing a filter could read).
pub(crate) fn stated(document: &Value) -> Map<String, Value> {
    let Some(consent) = document.get("consent_state") else {
        return Map::new();
    };
    REGULATIONS
        .iter()
        .filter_map(|regulation| {
            let purposes: Map<String, Value> = consent
                .get(regulation)?
                .as_object()?
                .iter()
                .filter(|(_, purpose)| purpose.is_object())
                .map(|(name, purpose)| (name.clone(), purpose.clone()))
                .collect();
            Some(((*regulation).to_owned(), Value::Object(purposes)))
        })
        .collect()
}

/// Merges a later statement over an earlier one, one level down: each purpose `later` states
/// replaces the earlier one, the other purposes stay.
pub(crate) fn merge(earlier: &mut Map<String, Value>, later: &Map<String, Value>) {
    for (regulation, purposes) in later {
        let Some(purposes) = purposes.as_object() else {
            continue;
        };
        let into = earlier
            .entry(regulation.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(into) = into {
            into.extend(purposes.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
}

/// A stored consent as the API shows it and the filter reads it: every regulation present, as
/// an object (a user who never stated one has `{}`).
pub(crate) fn state(stored: &str) -> Value {
    let stored: Map<String, Value> = serde_json::from_str(stored).unwrap_or_default();
    let regulations: Map<String, Value> = REGULATIONS
        .iter()
        .map(|regulation| {
            let purposes = stored
                .get(*regulation)
                .filter(|p| p.is_object())
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new()));
            ((*regulation).to_owned(), purposes)
        })
        .collect();
    Value::Object(regulations)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_batch_states_only_object_purposes_of_known_regulations() {
        let document = json!({"consent_state": {
            "gdpr": {"marketing": {"consented": true}, "junk": 3},
            "ccpa": "no",
            "lgpd": {"x": {"consented": true}},
        }});
        assert_eq!(
            Value::Object(stated(&document)),
            json!({"gdpr": {"marketing": {"consented": true}}})
        );
        assert!(stated(&json!({"mpid": 1})).is_empty());
    }

    #[test]
    fn merging_replaces_stated_purposes_whole_and_keeps_the_rest() {
        let mut earlier = stated(&json!({"consent_state": {
            "gdpr": {"a": {"consented": true, "document": "v1"}, "b": {"consented": true}}}}));
        let later = stated(&json!({"consent_state": {
            "gdpr": {"a": {"consented": false}},
            "ccpa": {"data_sale_opt_out": {"consented": true}}}}));
        merge(&mut earlier, &later);
        assert_eq!(
            Value::Object(earlier),
            json!({"gdpr": {"a": {"consented": false}, "b": {"consented": true}},
                   "ccpa": {"data_sale_opt_out": {"consented": true}}})
        );
    }

    #[test]
    fn a_stored_state_always_has_both_regulations() {
        assert_eq!(state("{}"), json!({"gdpr": {}, "ccpa": {}}));
        assert_eq!(
            state(r#"{"gdpr":{"m":{"consented":true}}}"#),
            json!({"gdpr": {"m": {"consented": true}}, "ccpa": {}})
        );
    }
}
