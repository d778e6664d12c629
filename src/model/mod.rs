//! Pure domain types: ids, inputs, connection and output settings, and the batch model.
//! Nothing here does I/O, so every rule about data can be unit- and property-tested.

pub(crate) mod alias_request;
pub(crate) mod attempt;
pub(crate) mod batch;
pub(crate) mod consent;
pub(crate) mod custom_headers;
pub(crate) mod data_filter;
pub(crate) mod data_points;
pub(crate) mod destination;
pub(crate) mod event_type;
mod field_path;
pub(crate) mod forwarding;
pub(crate) mod forwarding_rules;
pub(crate) mod identity;
pub(crate) mod ids;
pub(crate) mod json_walk;
pub(crate) mod kept_events;
pub(crate) mod kept_members;
pub(crate) mod legacy_web;
mod metadata_paths;
pub(crate) mod metrics;
pub(crate) mod mobile;
pub(crate) mod nesting;
pub(crate) mod operator_event;
pub(crate) mod settings;
pub(crate) mod signed_date;
pub(crate) mod signing;
pub(crate) mod value_check;

use serde::{Deserialize, Serialize};

/// The platform an input receives data from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Platform {
    Ios,
    Android,
    Web,
    CustomFeed,
}

impl Platform {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Platform::Ios => "ios",
            Platform::Android => "android",
            Platform::Web => "web",
            Platform::CustomFeed => "custom_feed",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
    }
}

/// Current wall-clock time in Unix milliseconds, the one time unit Boson stores.
pub(crate) fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
