//! A connection's Data Filter and forwarding rules applied to one batch (issue 13): which events
//! a rule drops (and why, in the Live Stream's words), which event attributes, user attributes
//! and identities it removes. Synchronous and free of I/O, like the filter that calls it.

use std::fmt;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::data_filter::{DataFilter, DataPointRef};
use crate::model::event_type::EventType;
use crate::model::forwarding_rules::{AttributeScope, ForwardingRules};
use crate::model::identity::types::IdentityType;
use crate::model::settings::SettingName;

/// The rule that dropped an event; its `Display` is what the Live Stream shows after `filtered`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rule {
    /// The Data Filter turned off this event type, or this event (type and name).
    DataFilter {
        event_type: EventType,
        event_name: Option<String>,
    },
    /// The attribute-value forwarding rule on this attribute.
    Attribute(String),
    /// `require_login_identity`, and the batch has no user identity.
    LoginIdentity,
    /// The user did not consent to this GDPR purpose.
    Gdpr(String),
    /// The user opted out of data sale (CCPA).
    Ccpa,
    /// The user is outside the sample (the percentage forwarded).
    Sampling(u8),
}

impl Rule {
    /// The setting holding the rule.
    pub(crate) fn setting(&self) -> SettingName {
        match self {
            Self::DataFilter { .. } => SettingName::DataFilter,
            _ => SettingName::ForwardingRules,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataFilter {
                event_type,
                event_name: None,
            } => write!(f, "data_filter: {}", event_type.as_str()),
            Self::DataFilter {
                event_type,
                event_name: Some(name),
            } => write!(f, "data_filter: {} {name:?}", event_type.as_str()),
            Self::Attribute(name) => write!(f, "forwarding_rule: {name}"),
            Self::LoginIdentity => f.write_str("forwarding_rule: login identity"),
            Self::Gdpr(purpose) => write!(f, "consent: gdpr {purpose}"),
            Self::Ccpa => f.write_str("consent: ccpa"),
            Self::Sampling(percent) => write!(f, "sampling {percent}%"),
        }
    }
}

/// The rule that drops all of this batch's data (its user's), if any: sampling, consent, login
/// identity, the user-scope attribute rule, checked in that order. `profile_consent` is the
/// user's consent as their profile keeps it (which includes this batch's); without it, the
/// batch's own `consent_state` decides.
pub(crate) fn user_rule(
    rules: &ForwardingRules,
    document: &Value,
    profile_consent: Option<&Value>,
) -> Option<Rule> {
    if rules.is_pass_through() {
        return None;
    }
    let mpid = document.get("mpid").and_then(Value::as_i64);
    if !sampled_in(mpid, rules.user_sample_percent) {
        return Some(Rule::Sampling(rules.user_sample_percent));
    }
    let consent = profile_consent.or_else(|| document.get("consent_state"));
    if rules.ccpa_respect_data_sale_opt_out
        && consented(consent, &["ccpa", "data_sale_opt_out"]) == Some(true)
    {
        return Some(Rule::Ccpa);
    }
    if let Some(purpose) = rules
        .gdpr_purposes
        .iter()
        .find(|p| consented(consent, &["gdpr", p.as_str()]) != Some(true))
    {
        return Some(Rule::Gdpr(purpose.clone()));
    }
    if rules.require_login_identity && !has_user_identity(document) {
        return Some(Rule::LoginIdentity);
    }
    match &rules.attribute {
        Some(rule) if rule.scope == AttributeScope::User => {
            let found = document
                .get("user_attributes")
                .and_then(|a| a.get(&rule.name));
            (!rule.forwards(found)).then(|| Rule::Attribute(rule.name.clone()))
        }
        _ => None,
    }
}

/// Whether the user with this MPID is in a sample of `percent`%. The bucket is a SHA-256 of the
/// MPID's digits, so every node and every restart put each user in the same bucket (std's
/// hasher is seeded per process and would not). A batch without an MPID samples as MPID 0.
pub(crate) fn sampled_in(mpid: Option<i64>, percent: u8) -> bool {
    if percent >= 100 {
        return true;
    }
    let digest = Sha256::digest(mpid.unwrap_or(0).to_string().as_bytes());
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) % 100 < u64::from(percent)
}

/// `<regulation>.<purpose>.consented` of a consent state, if stated.
fn consented(consent: Option<&Value>, path: &[&str]) -> Option<bool> {
    let purpose = path.iter().try_fold(consent?, |v, key| v.get(key))?;
    purpose.get("consented").and_then(Value::as_bool)
}

/// A user identity (customer id, email, …) in the batch. Device ids live in `device_info` and
/// identify a device, not a logged-in user.
fn has_user_identity(document: &Value) -> bool {
    document
        .get("user_identities")
        .and_then(Value::as_array)
        .is_some_and(|ids| !ids.is_empty())
}

/// The rule that drops this one event, if any: the Data Filter on its type and name, then the
/// event-scope attribute rule.
pub(crate) fn event_rule(
    filter: &DataFilter,
    rules: &ForwardingRules,
    event: &Value,
) -> Option<Rule> {
    if let Some(event_type) = event_type(event)
        && !filter.is_pass_through()
    {
        let name = event_name(event_type, event);
        if let Some(rule) = data_filter_rule(filter, event_type, name) {
            return Some(rule);
        }
    }
    match &rules.attribute {
        Some(rule) if rule.scope == AttributeScope::Event => {
            let found = event
                .get("data")
                .and_then(|d| d.get("custom_attributes"))
                .and_then(|a| a.get(&rule.name));
            (!rule.forwards(found)).then(|| Rule::Attribute(rule.name.clone()))
        }
        _ => None,
    }
}

/// A type turned off drops every event of it; otherwise the event's own rule, else its type's
/// `send: true`, else the default for new data points.
fn data_filter_rule(
    filter: &DataFilter,
    event_type: EventType,
    name: Option<&str>,
) -> Option<Rule> {
    let type_send = filter.rule_for(&DataPointRef::EventType(event_type));
    let dropped = |event_name: Option<&str>| {
        Some(Rule::DataFilter {
            event_type,
            event_name: event_name.map(str::to_owned),
        })
    };
    if type_send == Some(false) {
        return dropped(None);
    }
    let name_send = name.and_then(|n| filter.rule_for(&DataPointRef::Event(event_type, n)));
    if name_send
        .or(type_send)
        .unwrap_or(filter.send_new_data_points)
    {
        None
    } else {
        dropped(name)
    }
}

pub(super) use crate::model::kept_events::{event_name, event_type};

/// The `custom_attributes` keys of a forwarded event that the Data Filter removes.
pub(crate) fn removed_attributes(filter: &DataFilter, event: &Value) -> Vec<String> {
    let (Some(event_type), false) = (event_type(event), filter.is_pass_through()) else {
        return Vec::new();
    };
    let Some(Value::Object(attributes)) =
        event.get("data").and_then(|d| d.get("custom_attributes"))
    else {
        return Vec::new();
    };
    let name = event_name(event_type, event);
    if !filter.has_attribute_rules(event_type, name) {
        // No rule names one of these attributes: the default decides for all of them.
        return if filter.send_new_data_points {
            Vec::new()
        } else {
            attributes.keys().cloned().collect()
        };
    }
    attributes
        .keys()
        .filter(|key| {
            let own = name.and_then(|n| {
                filter.rule_for(&DataPointRef::EventAttribute(event_type, Some(n), key))
            });
            let of_type = filter.rule_for(&DataPointRef::EventAttribute(event_type, None, key));
            !own.or(of_type).unwrap_or(filter.send_new_data_points)
        })
        .cloned()
        .collect()
}

/// The user data the Data Filter removed from a batch's outbound fields, named as its rules
/// name it (what the dry run reports; delivery ignores it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct StrippedUserData {
    /// Removed `user_attributes` keys.
    pub(crate) user_attributes: Vec<String>,
    /// The `identity_type` of each removed `user_identities` entry.
    pub(crate) identity_types: Vec<String>,
}

impl StrippedUserData {
    pub(crate) fn is_empty(&self) -> bool {
        self.user_attributes.is_empty() && self.identity_types.is_empty()
    }
}

/// Removes from a batch's outbound `user_attributes` those the Data Filter does not send, and
/// names them.
pub(crate) fn strip_user_attributes(filter: &DataFilter, attributes: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    if let Value::Object(attributes) = attributes {
        attributes.retain(|key, _| {
            let sends = filter.sends(&DataPointRef::UserAttribute(key));
            if !sends {
                removed.push(key.clone());
            }
            sends
        });
    }
    removed
}

/// Removes from a batch's outbound `user_identities` the entries the Data Filter does not
/// send, and names the `identity_type` of each.
pub(crate) fn strip_identities(filter: &DataFilter, identities: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    if let Value::Array(identities) = identities {
        identities.retain(|identity| {
            let kind = identity.get("identity_type").and_then(Value::as_str);
            let sends = match kind.and_then(IdentityType::parse) {
                Some(kind) => filter.sends(&DataPointRef::IdentityType(kind)),
                None => filter.send_new_data_points,
            };
            if !sends {
                removed.push(kind.unwrap_or("unknown").to_owned());
            }
            sends
        });
    }
    removed
}
