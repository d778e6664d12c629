//! A connection's Data Filter (issue 13): which event types, event names, event attributes, user
//! attributes and identity types may leave through the connection, after mParticle's Data Filter.
//! Pure data; parsing refuses a rule that names no data point, or an unknown type, naming the
//! field at fault (`data_filter.rules[2].identity_type`).

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize, de::Error as _};
use serde_json::Value;

use super::event_type::EventType;
use super::identity::types::IdentityType;

/// The Data Filter of one connection. The default (no rules, new data points sent) forwards
/// everything, as a connection without a filter always has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DataFilter {
    /// Whether a data point no rule names is forwarded. When false, only data points with a
    /// `send: true` rule leave (mParticle's "send new data points by default" switch).
    pub(crate) send_new_data_points: bool,
    rules: Vec<DataFilterRule>,
    /// The rules by data point, built once when the settings are parsed: delivery looks up
    /// every event's type, name and attributes, and scanning the list for each lookup was most
    /// of what a 50-rule filter cost (callgrind, see docs/PERFORMANCE.md "What the connection
    /// rules cost").
    #[serde(skip)]
    index: RuleIndex,
}

impl Default for DataFilter {
    fn default() -> Self {
        Self::new(true, Vec::new())
    }
}

/// The rules of a [`DataFilter`] by what they name. Parsing refuses two rules on one data point;
/// where a filter is built with some (a replay's rules put first), the first one counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RuleIndex {
    event_types: HashMap<EventType, TypeRules>,
    user_attributes: HashMap<String, bool>,
    identity_types: HashMap<IdentityType, bool>,
}

/// The rules on one event type: on the type itself, on attributes of all its events, and on
/// its named events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TypeRules {
    send: Option<bool>,
    attributes: HashMap<String, bool>,
    names: HashMap<String, NameRules>,
}

/// The rules on one named event and its attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct NameRules {
    send: Option<bool>,
    attributes: HashMap<String, bool>,
}

impl RuleIndex {
    fn of(rules: &[DataFilterRule]) -> Self {
        let mut index = Self::default();
        for rule in rules {
            match &rule.point {
                DataPoint::EventType(t) => {
                    index
                        .event_types
                        .entry(*t)
                        .or_default()
                        .send
                        .get_or_insert(rule.send);
                }
                DataPoint::Event(t, name) => {
                    index.names(*t, name).send.get_or_insert(rule.send);
                }
                DataPoint::EventAttribute {
                    event_type,
                    event_name: Some(name),
                    attribute,
                } => {
                    let rules = index.names(*event_type, name);
                    rules
                        .attributes
                        .entry(attribute.clone())
                        .or_insert(rule.send);
                }
                DataPoint::EventAttribute {
                    event_type,
                    event_name: None,
                    attribute,
                } => {
                    let rules = index.event_types.entry(*event_type).or_default();
                    rules
                        .attributes
                        .entry(attribute.clone())
                        .or_insert(rule.send);
                }
                DataPoint::UserAttribute(name) => {
                    index
                        .user_attributes
                        .entry(name.clone())
                        .or_insert(rule.send);
                }
                DataPoint::IdentityType(t) => {
                    index.identity_types.entry(*t).or_insert(rule.send);
                }
            }
        }
        index
    }

    fn names(&mut self, event_type: EventType, name: &str) -> &mut NameRules {
        self.event_types
            .entry(event_type)
            .or_default()
            .names
            .entry(name.to_owned())
            .or_default()
    }
}

/// The thing a rule turns on or off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DataPoint {
    /// Every event of a type.
    EventType(EventType),
    /// One event: a type and its name (custom event name, screen name or commerce action).
    Event(EventType, String),
    /// One attribute (`custom_attributes` key) of an event, or of every event of a type.
    EventAttribute {
        event_type: EventType,
        event_name: Option<String>,
        attribute: String,
    },
    /// A key of the batch's `user_attributes`.
    UserAttribute(String),
    /// An identity type of the batch's `user_identities`.
    IdentityType(IdentityType),
}

/// One row of the filter: a data point and whether it is sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "WireRule")]
pub(crate) struct DataFilterRule {
    pub(crate) point: DataPoint,
    pub(crate) send: bool,
}

/// A rule as written in the settings document: which keys are present decides what it names.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attribute: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user_attribute: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    send: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFilter {
    #[serde(default = "yes")]
    send_new_data_points: bool,
    #[serde(default)]
    rules: Vec<Value>,
}

fn yes() -> bool {
    true
}

impl From<DataFilterRule> for WireRule {
    fn from(rule: DataFilterRule) -> Self {
        let send = Some(rule.send);
        match rule.point {
            DataPoint::EventType(t) => Self {
                event_type: Some(t.as_str().into()),
                send,
                ..Self::default()
            },
            DataPoint::Event(t, name) => Self {
                event_type: Some(t.as_str().into()),
                event_name: Some(name),
                send,
                ..Self::default()
            },
            DataPoint::EventAttribute {
                event_type,
                event_name,
                attribute,
            } => Self {
                event_type: Some(event_type.as_str().into()),
                event_name,
                attribute: Some(attribute),
                send,
                ..Self::default()
            },
            DataPoint::UserAttribute(name) => Self {
                user_attribute: Some(name),
                send,
                ..Self::default()
            },
            DataPoint::IdentityType(t) => Self {
                identity_type: Some(t.as_str().into()),
                send,
                ..Self::default()
            },
        }
    }
}

impl<'de> Deserialize<'de> for DataFilter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::parse(Value::deserialize(deserializer)?).map_err(D::Error::custom)
    }
}

impl DataFilter {
    /// Parses the `data_filter` setting; the error names the field at fault.
    pub(crate) fn parse(value: Value) -> Result<Self, String> {
        let wire: WireFilter =
            serde_json::from_value(value).map_err(|e| format!("`data_filter`: {e}"))?;
        let rules = wire
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, rule)| parse_rule(rule, &format!("data_filter.rules[{i}]")))
            .collect::<Result<Vec<DataFilterRule>, _>>()?;
        refuse_duplicates(&rules)?;
        Ok(Self::new(wire.send_new_data_points, rules))
    }

    /// A filter of these rules; where two name one data point, the first counts.
    pub(crate) fn new(send_new_data_points: bool, rules: Vec<DataFilterRule>) -> Self {
        let index = RuleIndex::of(&rules);
        Self {
            send_new_data_points,
            rules,
            index,
        }
    }

    pub(crate) fn rules(&self) -> &[DataFilterRule] {
        &self.rules
    }

    /// Whether the filter changes anything at all (the common case is no).
    pub(crate) fn is_pass_through(&self) -> bool {
        self.send_new_data_points && self.rules.is_empty()
    }

    /// The `send` of the rule naming exactly this data point, if any.
    pub(crate) fn rule_for(&self, point: &DataPointRef<'_>) -> Option<bool> {
        let index = &self.index;
        match *point {
            DataPointRef::EventType(t) => index.event_types.get(&t)?.send,
            DataPointRef::Event(t, name) => index.event_types.get(&t)?.names.get(name)?.send,
            DataPointRef::EventAttribute(t, None, attribute) => index
                .event_types
                .get(&t)?
                .attributes
                .get(attribute)
                .copied(),
            DataPointRef::EventAttribute(t, Some(name), attribute) => {
                let rules = index.event_types.get(&t)?.names.get(name)?;
                rules.attributes.get(attribute).copied()
            }
            DataPointRef::UserAttribute(name) => index.user_attributes.get(name).copied(),
            DataPointRef::IdentityType(t) => index.identity_types.get(&t).copied(),
        }
    }

    /// Whether any rule names an attribute of this event (by its name) or of its type: without
    /// one, every attribute gets the default for new data points and none needs a lookup.
    pub(crate) fn has_attribute_rules(&self, event_type: EventType, name: Option<&str>) -> bool {
        let Some(rules) = self.index.event_types.get(&event_type) else {
            return false;
        };
        !rules.attributes.is_empty()
            || name
                .and_then(|n| rules.names.get(n))
                .is_some_and(|n| !n.attributes.is_empty())
    }

    /// Whether a data point goes: its rule if it has one, else the default for new data points.
    pub(crate) fn sends(&self, point: &DataPointRef<'_>) -> bool {
        self.rule_for(point).unwrap_or(self.send_new_data_points)
    }
}

/// A data point as found in a batch, borrowed, to compare with the rules without allocating.
#[derive(Debug, Clone, Copy)]
pub(crate) enum DataPointRef<'a> {
    EventType(EventType),
    Event(EventType, &'a str),
    EventAttribute(EventType, Option<&'a str>, &'a str),
    UserAttribute(&'a str),
    IdentityType(IdentityType),
}

/// Two rules on one data point could disagree; which one wins would be a guess.
fn refuse_duplicates(rules: &[DataFilterRule]) -> Result<(), String> {
    for (i, rule) in rules.iter().enumerate() {
        if let Some(first) = rules[..i].iter().position(|r| r.point == rule.point) {
            return Err(format!(
                "`data_filter.rules[{i}]` names the same data point as `data_filter.rules[{first}]`"
            ));
        }
    }
    Ok(())
}

fn parse_rule(value: Value, at: &str) -> Result<DataFilterRule, String> {
    let wire: WireRule = serde_json::from_value(value).map_err(|e| format!("`{at}`: {e}"))?;
    let send = wire
        .send
        .ok_or_else(|| format!("`{at}.send` is required: true or false"))?;
    let point = match (wire.event_type, wire.user_attribute, wire.identity_type) {
        (Some(t), None, None) => event_point(&t, wire.event_name, wire.attribute, at)?,
        (None, Some(name), None) if wire.event_name.is_none() && wire.attribute.is_none() => {
            DataPoint::UserAttribute(non_empty(name, &format!("{at}.user_attribute"))?)
        }
        (None, None, Some(t)) if wire.event_name.is_none() && wire.attribute.is_none() => {
            let kind = IdentityType::parse(&t)
                .ok_or_else(|| format!("`{at}.identity_type`: unknown identity type {t:?}"))?;
            DataPoint::IdentityType(kind)
        }
        _ => {
            return Err(format!(
                "`{at}` must name one data point: `event_type` (with optional `event_name` and \
                 `attribute`), or `user_attribute`, or `identity_type`"
            ));
        }
    };
    Ok(DataFilterRule { point, send })
}

fn event_point(
    event_type: &str,
    event_name: Option<String>,
    attribute: Option<String>,
    at: &str,
) -> Result<DataPoint, String> {
    let event_type = EventType::parse(event_type)
        .ok_or_else(|| format!("`{at}.event_type`: unknown event type {event_type:?}"))?;
    let event_name = event_name
        .map(|name| non_empty(name, &format!("{at}.event_name")))
        .transpose()?;
    Ok(match (event_name, attribute) {
        (None, None) => DataPoint::EventType(event_type),
        (Some(name), None) => DataPoint::Event(event_type, name),
        (event_name, Some(attribute)) => DataPoint::EventAttribute {
            event_type,
            event_name,
            attribute: non_empty(attribute, &format!("{at}.attribute"))?,
        },
    })
}

fn non_empty(text: String, at: &str) -> Result<String, String> {
    if text.is_empty() {
        Err(format!("`{at}` must not be empty"))
    } else {
        Ok(text)
    }
}

/// The `data_filter` and `forwarding_rules` keys as connection settings parse them.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::model::settings::{ConnectionSettings, default_settings_json};

    #[test]
    fn data_filter_and_forwarding_rules_parse_and_default_to_today() {
        let s = ConnectionSettings::from_json(json!({
            "data_filter": {
                "send_new_data_points": false,
                "rules": [
                    {"event_type": "custom_event", "event_name": "Coupon Viewed", "send": false},
                    {"event_type": "commerce_event", "event_name": "purchase", "attribute": "coupon_code", "send": false},
                    {"user_attribute": "$Age", "send": false},
                    {"identity_type": "email", "send": false}
                ]
            },
            "forwarding_rules": {
                "attribute": {"scope": "event", "name": "plan", "value": "pro", "mode": "only_forward"},
                "require_login_identity": true,
                "gdpr_purposes": ["marketing"],
                "ccpa_respect_data_sale_opt_out": true,
                "user_sample_percent": 50
            }
        }))
        .unwrap();
        let round_trip = ConnectionSettings::from_json(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(round_trip, s);
        let defaults = default_settings_json();
        assert_eq!(
            defaults["data_filter"],
            json!({"send_new_data_points": true, "rules": []})
        );
        assert_eq!(
            defaults["forwarding_rules"],
            json!({"attribute": null, "require_login_identity": false, "gdpr_purposes": [],
                   "ccpa_respect_data_sale_opt_out": false, "user_sample_percent": 100})
        );
    }

    /// The index answers what the first rule naming a data point says, for every kind of data
    /// point, and nothing for a data point no rule names.
    #[test]
    fn lookups_answer_the_first_rule_naming_the_data_point() {
        use super::{DataFilter, DataFilterRule, DataPoint, DataPointRef};
        use crate::model::event_type::EventType::{CustomEvent, ScreenView};
        use crate::model::identity::types::IdentityType;
        let rule = |point, send| DataFilterRule { point, send };
        let attribute = |event_name: Option<&str>, name: &str| DataPoint::EventAttribute {
            event_type: CustomEvent,
            event_name: event_name.map(str::to_owned),
            attribute: name.to_owned(),
        };
        let filter = DataFilter::new(
            false,
            vec![
                rule(DataPoint::EventType(ScreenView), false),
                rule(DataPoint::EventType(ScreenView), true),
                rule(DataPoint::Event(CustomEvent, "A".into()), true),
                rule(attribute(Some("A"), "x"), false),
                rule(attribute(None, "y"), true),
                rule(DataPoint::UserAttribute("$Age".into()), false),
                rule(DataPoint::IdentityType(IdentityType::Email), true),
            ],
        );
        let cases = [
            (DataPointRef::EventType(ScreenView), Some(false)),
            (DataPointRef::EventType(CustomEvent), None),
            (DataPointRef::Event(CustomEvent, "A"), Some(true)),
            (DataPointRef::Event(CustomEvent, "B"), None),
            (
                DataPointRef::EventAttribute(CustomEvent, Some("A"), "x"),
                Some(false),
            ),
            (
                DataPointRef::EventAttribute(CustomEvent, Some("A"), "y"),
                None,
            ),
            (
                DataPointRef::EventAttribute(CustomEvent, None, "y"),
                Some(true),
            ),
            (DataPointRef::UserAttribute("$Age"), Some(false)),
            (DataPointRef::IdentityType(IdentityType::Email), Some(true)),
            (DataPointRef::IdentityType(IdentityType::CustomerId), None),
        ];
        for (point, expected) in cases {
            assert_eq!(filter.rule_for(&point), expected, "{point:?}");
        }
        assert!(filter.has_attribute_rules(CustomEvent, None));
        assert!(!filter.has_attribute_rules(ScreenView, Some("Home")));
        assert!(!filter.sends(&DataPointRef::UserAttribute("plan")));
    }

    #[test]
    fn invalid_rules_name_the_field() {
        let refused = [
            (
                json!({"data_filter": {"rules": [{"send": false}]}}),
                "data_filter.rules[0]",
            ),
            (
                json!({"data_filter": {"rules": [{"event_type": "nope", "send": false}]}}),
                "data_filter.rules[0].event_type",
            ),
            (
                json!({"data_filter": {"rules": [{"event_type": "custom_event", "send": true}, {"identity_type": "fax", "send": false}]}}),
                "data_filter.rules[1].identity_type",
            ),
            (
                json!({"data_filter": {"rules": [{"event_name": "x", "send": false}]}}),
                "data_filter.rules[0]",
            ),
            (
                json!({"data_filter": {"rules": [{"user_attribute": "a", "identity_type": "email", "send": false}]}}),
                "data_filter.rules[0]",
            ),
            (
                json!({"data_filter": {"rules": [{"user_attribute": "a"}]}}),
                "data_filter",
            ),
            (
                json!({"forwarding_rules": {"user_sample_percent": 0}}),
                "forwarding_rules.user_sample_percent",
            ),
            (
                json!({"forwarding_rules": {"user_sample_percent": 101}}),
                "forwarding_rules.user_sample_percent",
            ),
            (
                json!({"forwarding_rules": {"attribute": {"scope": "device", "name": "a", "value": "b", "mode": "only_forward"}}}),
                "forwarding_rules",
            ),
            (
                json!({"forwarding_rules": {"attribute": {"scope": "event", "name": "", "value": "b", "mode": "only_forward"}}}),
                "forwarding_rules.attribute.name",
            ),
            (
                json!({"forwarding_rules": {"gdpr_purposes": ["Marketing"]}}),
                "forwarding_rules.gdpr_purposes[0]",
            ),
            (
                json!({"data_filter": {"rules": [
                    {"user_attribute": "a", "send": false},
                    {"identity_type": "email", "send": false},
                    {"user_attribute": "a", "send": true}
                ]}}),
                "data_filter.rules[2]",
            ),
        ];
        for (settings, field) in refused {
            let error = ConnectionSettings::from_json(settings.clone())
                .expect_err("refused")
                .to_string();
            assert!(error.contains(field), "{settings}: {error}");
        }
    }
}
