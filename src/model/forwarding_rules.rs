//! A connection's forwarding rules (issue 13): an attribute-value rule, the login-identity rule,
//! consent rules (GDPR purposes, CCPA data sale opt-out) and user sampling. Pure data; parsing
//! names the field at fault. The defaults forward everything, as before these rules existed.

use serde::{Deserialize, Deserializer, Serialize, de::Error as _};

/// The forwarding rules of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ForwardingRules {
    pub(crate) attribute: Option<AttributeRule>,
    /// Forward only batches whose user has a user identity (device ids do not count).
    pub(crate) require_login_identity: bool,
    /// Forward only users who consented to every one of these GDPR purposes.
    pub(crate) gdpr_purposes: Vec<String>,
    /// Forward nothing of users whose CCPA `data_sale_opt_out` is consented (opted out).
    pub(crate) ccpa_respect_data_sale_opt_out: bool,
    /// The share of users (by MPID) forwarded, 1–100.
    pub(crate) user_sample_percent: u8,
}

impl Default for ForwardingRules {
    fn default() -> Self {
        Self {
            attribute: None,
            require_login_identity: false,
            gdpr_purposes: Vec::new(),
            ccpa_respect_data_sale_opt_out: false,
            user_sample_percent: 100,
        }
    }
}

/// Forward by an attribute's value: exact and case-sensitive; a missing attribute does not match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AttributeRule {
    pub(crate) scope: AttributeScope,
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) mode: AttributeMode,
}

/// Where the rule's attribute is looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AttributeScope {
    /// The event's `data.custom_attributes`: decided per event.
    Event,
    /// The batch's `user_attributes`: decided for the whole batch.
    User,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AttributeMode {
    OnlyForward,
    DontForward,
}

impl AttributeRule {
    /// Whether data carrying `found` (the attribute's value, if present) is forwarded.
    pub(crate) fn forwards(&self, found: Option<&serde_json::Value>) -> bool {
        let matches = found.is_some_and(|v| value_text(v).is_some_and(|t| t == self.value));
        match self.mode {
            AttributeMode::OnlyForward => matches,
            AttributeMode::DontForward => !matches,
        }
    }
}

/// An attribute value as text: strings as they are, numbers and booleans as JSON writes them,
/// so `"value": "3"` matches both `"3"` and `3`.
fn value_text(value: &serde_json::Value) -> Option<std::borrow::Cow<'_, str>> {
    match value {
        serde_json::Value::String(s) => Some(s.as_str().into()),
        serde_json::Value::Number(n) => Some(n.to_string().into()),
        serde_json::Value::Bool(b) => Some(b.to_string().into()),
        _ => None,
    }
}

/// Parses `forwarding_rules` (the settings field's deserializer), naming the field at fault.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ForwardingRules, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    let rules: ForwardingRules = serde_json::from_value(value)
        .map_err(|e| D::Error::custom(format!("`forwarding_rules`: {e}")))?;
    rules.check().map_err(D::Error::custom)?;
    Ok(rules)
}

impl ForwardingRules {
    fn check(&self) -> Result<(), String> {
        if !(1..=100).contains(&self.user_sample_percent) {
            return Err("`forwarding_rules.user_sample_percent` must be from 1 to 100".into());
        }
        if let Some(rule) = &self.attribute
            && rule.name.is_empty()
        {
            return Err("`forwarding_rules.attribute.name` must not be empty".into());
        }
        for (i, purpose) in self.gdpr_purposes.iter().enumerate() {
            // mParticle's purposes are lower-case names; another spelling could never match.
            if purpose.is_empty() || purpose.chars().any(char::is_uppercase) {
                return Err(format!(
                    "`forwarding_rules.gdpr_purposes[{i}]` must be a lower-case purpose name, not {purpose:?}"
                ));
            }
        }
        Ok(())
    }

    /// Whether any rule can drop something (the common case is no).
    pub(crate) fn is_pass_through(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the rules depend on the user's consent (GDPR purposes or the CCPA opt-out), so
    /// delivery must read it from the user's profile; other connections pay nothing for it.
    pub(crate) fn reads_consent(&self) -> bool {
        !self.gdpr_purposes.is_empty() || self.ccpa_respect_data_sale_opt_out
    }
}
