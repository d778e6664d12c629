//! Connection settings and webhook output settings: the knobs a user sets, with mParticle's
//! defaults (spec §2 and §3.1). Pure data; parsing rejects unknown keys and unknown metadata paths.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::custom_headers::{
    check_custom_headers, check_custom_headers_shape, header_value_problem,
};
use super::data_filter::DataFilter;
use super::forwarding_rules::{self, ForwardingRules};
pub(crate) use super::metadata_paths::metadata_paths;
use super::metadata_paths::{is_metadata_path, valid_metadata_paths};

/// Whether a connection forwards anything at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ConnectionStatus {
    Active,
    Inactive,
    /// Set by Boson when the connection failed for `auto_pause_after_hours`: its jobs are still
    /// queued but wait, unsent, until an operator sets it `active` again.
    Paused,
}

impl ConnectionStatus {
    /// Whether accepted batches still get jobs on this connection (`paused` ones wait; an
    /// `inactive` connection forwards nothing).
    pub(crate) fn takes_jobs(self) -> bool {
        self != Self::Inactive
    }
}

/// A positive, finite number of hours (fractions allowed: tests pause after seconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Hours(f64);

// Only positive finite values are ever constructed (see `ConnectionSettings::validate`), and
// those compare as a total order.
impl Eq for Hours {}

impl Hours {
    /// The duration in milliseconds, saturating.
    pub(crate) fn as_ms(self) -> i64 {
        // `as` saturates for floats beyond the integer's range, which is what is wanted here.
        #[allow(clippy::cast_possible_truncation)]
        let ms = (self.0 * 3_600_000.0).round() as i64;
        ms.max(1)
    }
}

/// Whether a connection keeps each user's batches in order (see [`ConnectionSettings::ordering`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ordering {
    /// Batches go out as they come, side by side: the fastest.
    #[default]
    None,
    /// A user's (MPID's) batches go out one at a time, in the order they were accepted.
    PerUser,
}

impl<'de> Deserialize<'de> for Ordering {
    /// Refuses anything else naming the setting (serde's own message names neither it nor
    /// the accepted values in a way a user can act on).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(value) if value == "none" => Ok(Self::None),
            serde_json::Value::String(value) if value == "per_user" => Ok(Self::PerUser),
            other => Err(serde::de::Error::custom(format!(
                "`ordering` must be \"none\" or \"per_user\", not {other}"
            ))),
        }
    }
}

/// The settings of one connection (input × output). Every key is optional on the wire and takes
/// mParticle's Webhook default when omitted; unknown keys are refused so typos do not pass silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ConnectionSettings {
    pub(crate) status: ConnectionStatus,
    pub(crate) send_as_batch: bool,
    pub(crate) metadata_field_exclusions: Vec<String>,
    pub(crate) send_custom_events: bool,
    pub(crate) send_lifecycle_events: bool,
    pub(crate) send_profile_change_events: bool,
    pub(crate) send_screen_views: bool,
    pub(crate) send_commerce_events: bool,
    pub(crate) include_metadata: bool,
    pub(crate) include_user_identity_change_events: bool,
    pub(crate) include_user_attribute_change_events: bool,
    pub(crate) send_crash_events: bool,
    pub(crate) send_network_performance_events: bool,
    pub(crate) send_push_registrations_and_receipts: bool,
    pub(crate) include_location_information: bool,
    /// Forward the batch's `context.location` (mParticle's "Include Event Batch Location").
    pub(crate) include_event_batch_location: bool,
    pub(crate) send_batches_without_events: bool,
    /// Forward the input's alias requests (mParticle's "Send Alias Requests").
    pub(crate) send_alias_requests: bool,
    pub(crate) unique_id: Option<String>,
    /// Most webhook requests per second this connection sends from one node (`None`: no limit).
    pub(crate) rate_limit_per_second: Option<u32>,
    /// Hours of continuous failure after which Boson pauses the connection (`None`: never).
    pub(crate) auto_pause_after_hours: Option<Hours>,
    /// `PerUser`: one user's batches are delivered one at a time, in acceptance order.
    pub(crate) ordering: Ordering,
    /// With Send as Batch: seconds during which one user's (MPID's) batches are gathered into
    /// one request (0: one request per inbound batch). Ignored without Send as Batch.
    pub(crate) batch_window_secs: u32,
    /// Largest body a coalesced request may have; more goes in further requests.
    pub(crate) max_batch_bytes: u32,
    /// Which event types, names and attributes, user attributes and identity types go out.
    pub(crate) data_filter: DataFilter,
    /// Attribute-value, login-identity, consent and sampling rules.
    #[serde(deserialize_with = "forwarding_rules::deserialize")]
    pub(crate) forwarding_rules: ForwardingRules,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            status: ConnectionStatus::Active,
            send_as_batch: false,
            metadata_field_exclusions: Vec::new(),
            send_custom_events: true,
            send_lifecycle_events: true,
            send_profile_change_events: true,
            send_screen_views: true,
            send_commerce_events: true,
            include_metadata: true,
            include_user_identity_change_events: false,
            include_user_attribute_change_events: false,
            send_crash_events: true,
            send_network_performance_events: true,
            send_push_registrations_and_receipts: true,
            include_location_information: true,
            include_event_batch_location: false,
            send_batches_without_events: true,
            send_alias_requests: false,
            unique_id: None,
            rate_limit_per_second: None,
            auto_pause_after_hours: None,
            ordering: Ordering::None,
            batch_window_secs: 0,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            data_filter: DataFilter::default(),
            forwarding_rules: ForwardingRules::default(),
        }
    }
}

/// The name of one connection setting: one variant per [`ConnectionSettings`] field, so code that
/// talks about a setting (the dashboard's form, the admin API) cannot misspell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettingName {
    Status,
    SendAsBatch,
    MetadataFieldExclusions,
    SendCustomEvents,
    SendLifecycleEvents,
    SendProfileChangeEvents,
    SendScreenViews,
    SendCommerceEvents,
    IncludeMetadata,
    IncludeUserIdentityChangeEvents,
    IncludeUserAttributeChangeEvents,
    SendCrashEvents,
    SendNetworkPerformanceEvents,
    SendPushRegistrationsAndReceipts,
    IncludeLocationInformation,
    IncludeEventBatchLocation,
    SendBatchesWithoutEvents,
    SendAliasRequests,
    UniqueId,
    RateLimitPerSecond,
    AutoPauseAfterHours,
    Ordering,
    BatchWindowSecs,
    MaxBatchBytes,
    DataFilter,
    ForwardingRules,
}

impl SettingName {
    /// The setting's key in the JSON settings document.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::SendAsBatch => "send_as_batch",
            Self::MetadataFieldExclusions => "metadata_field_exclusions",
            Self::SendCustomEvents => "send_custom_events",
            Self::SendLifecycleEvents => "send_lifecycle_events",
            Self::SendProfileChangeEvents => "send_profile_change_events",
            Self::SendScreenViews => "send_screen_views",
            Self::SendCommerceEvents => "send_commerce_events",
            Self::IncludeMetadata => "include_metadata",
            Self::IncludeUserIdentityChangeEvents => "include_user_identity_change_events",
            Self::IncludeUserAttributeChangeEvents => "include_user_attribute_change_events",
            Self::SendCrashEvents => "send_crash_events",
            Self::SendNetworkPerformanceEvents => "send_network_performance_events",
            Self::SendPushRegistrationsAndReceipts => "send_push_registrations_and_receipts",
            Self::IncludeLocationInformation => "include_location_information",
            Self::IncludeEventBatchLocation => "include_event_batch_location",
            Self::SendBatchesWithoutEvents => "send_batches_without_events",
            Self::SendAliasRequests => "send_alias_requests",
            Self::UniqueId => "unique_id",
            Self::RateLimitPerSecond => "rate_limit_per_second",
            Self::AutoPauseAfterHours => "auto_pause_after_hours",
            Self::Ordering => "ordering",
            Self::BatchWindowSecs => "batch_window_secs",
            Self::MaxBatchBytes => "max_batch_bytes",
            Self::DataFilter => "data_filter",
            Self::ForwardingRules => "forwarding_rules",
        }
    }
}

/// What kind of control a setting needs; the dashboard picks its form control from this alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SettingKind {
    /// `true` or `false`.
    Boolean,
    /// [`ConnectionStatus`]: `active`, `inactive`, or `paused` (set by Boson).
    Status,
    /// A list of metadata paths, each one of [`metadata_paths`].
    MetadataExclusions,
    /// A string, or `null` when unset.
    OptionalText,
    /// A positive whole number, or `null` when unset.
    OptionalCount,
    /// A positive number of hours (fractions allowed), or `null` when unset.
    OptionalHours,
    /// [`Ordering`]: `none` or `per_user`.
    Ordering,
    /// A whole number, 0 or more (the descriptor's help states its bounds).
    Count,
    /// A [`DataFilter`] document: `send_new_data_points` and a list of rules.
    DataFilter,
    /// A [`ForwardingRules`] document.
    ForwardingRules,
}

/// How a setting is presented: everything about it except its default, which is read from
/// [`ConnectionSettings::default`] so it is stated in one place only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SettingDescriptor {
    pub(crate) name: SettingName,
    /// The setting's name as mParticle's UI shows it.
    pub(crate) label: &'static str,
    /// One sentence on what the setting does here.
    pub(crate) help: &'static str,
    pub(crate) kind: SettingKind,
}

const fn describe(
    name: SettingName,
    label: &'static str,
    kind: SettingKind,
    help: &'static str,
) -> SettingDescriptor {
    SettingDescriptor {
        name,
        label,
        help,
        kind,
    }
}

/// Every connection setting, in the order forms show them (the order of [`ConnectionSettings`]).
pub(crate) const SETTING_DESCRIPTORS: &[SettingDescriptor] = {
    use SettingKind::Ordering as Order;
    use SettingKind::{
        Boolean, Count, MetadataExclusions, OptionalCount, OptionalHours, OptionalText, Status,
    };
    use SettingKind::{DataFilter as Filter, ForwardingRules as Rules};
    use SettingName as N;
    &[
        describe(
            N::Status,
            "Connection Status",
            Status,
            "An inactive connection forwards nothing; its events show as filtered in the Live Stream. A paused one (paused by Boson after failing; see Auto-pause) keeps its deliveries waiting until it is set active again.",
        ),
        describe(
            N::SendAsBatch,
            "Send as Batch",
            Boolean,
            "Post the events of a batch together in one request instead of one request per event.",
        ),
        describe(
            N::MetadataFieldExclusions,
            "Metadata Field Exclusion",
            MetadataExclusions,
            "Device, application and batch fields removed from every request this connection sends.",
        ),
        describe(
            N::SendCustomEvents,
            "Send Custom Events",
            Boolean,
            "Forward custom events.",
        ),
        describe(
            N::SendLifecycleEvents,
            "Send Lifecycle Events",
            Boolean,
            "Forward session starts and ends, application state transitions, first runs, uninstalls and opt-outs.",
        ),
        describe(
            N::SendProfileChangeEvents,
            "Send Profile Change Events",
            Boolean,
            "Forward profile events such as logins and logouts.",
        ),
        describe(
            N::SendScreenViews,
            "Send Screen Views",
            Boolean,
            "Forward screen and page views.",
        ),
        describe(
            N::SendCommerceEvents,
            "Send Commerce Events",
            Boolean,
            "Forward commerce events: product actions, promotions and impressions.",
        ),
        describe(
            N::IncludeMetadata,
            "Include Metadata",
            Boolean,
            "Keep the batch's device, application and source information; off removes all three.",
        ),
        describe(
            N::IncludeUserIdentityChangeEvents,
            "Include User Identity Change Events",
            Boolean,
            "Forward an event whenever one of a user's identities is added, changed or removed.",
        ),
        describe(
            N::IncludeUserAttributeChangeEvents,
            "Include User Attribute Change Events",
            Boolean,
            "Forward an event whenever a user attribute is set, changed or removed.",
        ),
        describe(
            N::SendCrashEvents,
            "Send Crash Events",
            Boolean,
            "Forward crash reports and the breadcrumbs that explain them.",
        ),
        describe(
            N::SendNetworkPerformanceEvents,
            "Send Network Performance Events",
            Boolean,
            "Forward timings of the network requests apps report.",
        ),
        describe(
            N::SendPushRegistrationsAndReceipts,
            "Send Push Registrations and Receipts",
            Boolean,
            "Forward push token registrations, received push messages and reactions to them.",
        ),
        describe(
            N::IncludeLocationInformation,
            "Include Location Information",
            Boolean,
            "Keep each event's location; off removes it from the events.",
        ),
        describe(
            N::IncludeEventBatchLocation,
            "Include Event Batch Location",
            Boolean,
            "Keep the batch's own location (context.location) as well as the events' locations.",
        ),
        describe(
            N::SendBatchesWithoutEvents,
            "Send Batches without Events",
            Boolean,
            "Post batches that carry no events, so identities and user attributes still arrive.",
        ),
        describe(
            N::SendAliasRequests,
            "Send Alias Requests",
            Boolean,
            "Forward the input's alias requests (one user's data now belongs to another), each as its own request.",
        ),
        describe(
            N::UniqueId,
            "Unique ID",
            OptionalText,
            "A value of your choosing added to every request as unique_id, to tell connections apart.",
        ),
        describe(
            N::RateLimitPerSecond,
            "Rate Limit (requests per second)",
            OptionalCount,
            "Most webhook requests per second, per Boson node; requests beyond it wait their turn. Empty: no limit.",
        ),
        describe(
            N::AutoPauseAfterHours,
            "Auto-pause after (hours)",
            OptionalHours,
            "Pause the connection once its endpoint has failed continuously this long (fractions allowed); its deliveries wait until you set it active. Empty: never.",
        ),
        describe(
            N::Ordering,
            "Ordering",
            Order,
            "Per user: each user's batches arrive one at a time, in the order they were accepted, and while one fails that user's later ones wait (other users' keep flowing). None: fastest, no order.",
        ),
        describe(
            N::BatchWindowSecs,
            "Batch Window (seconds)",
            Count,
            "Only with Send as Batch: one user's (MPID's) batches accepted within this many seconds of the first go out as one request, with the newest batch's user and device fields (0 to 3600; 0: one request per batch). Batches without an MPID go alone. Ignored without Send as Batch.",
        ),
        describe(
            N::MaxBatchBytes,
            "Max Batch Size (bytes)",
            Count,
            "Largest body of a coalesced request (1024 to 10485760); more batches go in further requests, and one batch larger than this goes alone.",
        ),
        describe(
            N::DataFilter,
            "Data Filter",
            Filter,
            "Turn forwarding off per event type, event name, event attribute, user attribute and identity type; new data points follow the default.",
        ),
        describe(
            N::ForwardingRules,
            "Forwarding Rules",
            Rules,
            "Forward by an attribute's value, only users with a login identity, only with GDPR consent or without a CCPA opt-out, and a sample of users.",
        ),
    ]
};

impl SettingDescriptor {
    /// This setting's default: its value in [`ConnectionSettings::default`] serialised, so the
    /// defaults are never typed twice.
    pub(crate) fn default_value(&self) -> serde_json::Value {
        default_settings_json()
            .remove(self.name.as_str())
            .unwrap_or(serde_json::Value::Null)
    }
}

/// [`ConnectionSettings::default`] as a JSON object, key by key.
pub(crate) fn default_settings_json() -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(ConnectionSettings::default()) {
        Ok(serde_json::Value::Object(map)) => map,
        // A struct of plain fields always serialises to an object; nothing else can come back.
        _ => serde_json::Map::new(),
    }
}

/// Why a settings document was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SettingsError {
    #[error("{0}")]
    Malformed(String),
    #[error("unknown metadata field `{field}`; valid fields are: {}", valid_metadata_paths().join(", "))]
    UnknownMetadataField { field: String },
}

impl ConnectionSettings {
    /// Parses settings from JSON, applying defaults for omitted keys.
    pub(crate) fn from_json(value: serde_json::Value) -> Result<Self, SettingsError> {
        // Named even when its type is wrong (serde's message would not name it).
        if value
            .get(SettingName::AutoPauseAfterHours.as_str())
            .is_some_and(|hours| !(hours.is_null() || hours.is_number()))
        {
            return Err(auto_pause_error());
        }
        // The same for the two whole numbers of coalescing (serde's message would not name them).
        for (name, error) in [
            (
                SettingName::BatchWindowSecs,
                batch_window_error as fn() -> SettingsError,
            ),
            (SettingName::MaxBatchBytes, max_batch_bytes_error),
        ] {
            if value
                .get(name.as_str())
                .is_some_and(|v| v.as_u64().is_none_or(|n| u32::try_from(n).is_err()))
            {
                return Err(error());
            }
        }
        let settings: Self =
            serde_json::from_value(value).map_err(|e| SettingsError::Malformed(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Parses settings stored as JSON text.
    pub(crate) fn from_json_str(text: &str) -> Result<Self, SettingsError> {
        let value =
            serde_json::from_str(text).map_err(|e| SettingsError::Malformed(e.to_string()))?;
        Self::from_json(value)
    }

    /// Applies a partial update (a JSON object of keys to change) on top of these settings.
    pub(crate) fn merged(&self, patch: serde_json::Value) -> Result<Self, SettingsError> {
        let serde_json::Value::Object(patch) = patch else {
            return Err(SettingsError::Malformed(
                "settings must be a JSON object".into(),
            ));
        };
        let Ok(serde_json::Value::Object(mut current)) = serde_json::to_value(self) else {
            return Err(SettingsError::Malformed(
                "settings are not an object".into(),
            ));
        };
        current.extend(patch);
        Self::from_json(serde_json::Value::Object(current))
    }

    fn validate(&self) -> Result<(), SettingsError> {
        if self.batch_window_secs > MAX_BATCH_WINDOW_SECS {
            return Err(batch_window_error());
        }
        if !(MIN_MAX_BATCH_BYTES..=MAX_MAX_BATCH_BYTES).contains(&self.max_batch_bytes) {
            return Err(max_batch_bytes_error());
        }
        if self
            .auto_pause_after_hours
            .is_some_and(|Hours(hours)| !(hours.is_finite() && hours > 0.0))
        {
            return Err(auto_pause_error());
        }
        if self.rate_limit_per_second == Some(0) {
            return Err(SettingsError::Malformed(
                "`rate_limit_per_second` must be at least 1, or null for no limit".into(),
            ));
        }
        for field in &self.metadata_field_exclusions {
            if !is_metadata_path(field) {
                return Err(SettingsError::UnknownMetadataField {
                    field: field.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The default `max_batch_bytes`: 256 KiB.
pub(crate) const DEFAULT_MAX_BATCH_BYTES: u32 = 262_144;
const MIN_MAX_BATCH_BYTES: u32 = 1024;
const MAX_MAX_BATCH_BYTES: u32 = 10 * 1024 * 1024;
/// Longest batch window: an hour.
const MAX_BATCH_WINDOW_SECS: u32 = 3600;

fn batch_window_error() -> SettingsError {
    SettingsError::Malformed(format!(
        "`batch_window_secs` must be a whole number of seconds from 0 to {MAX_BATCH_WINDOW_SECS}"
    ))
}

fn max_batch_bytes_error() -> SettingsError {
    SettingsError::Malformed(format!(
        "`max_batch_bytes` must be a whole number of bytes from {MIN_MAX_BATCH_BYTES} to {MAX_MAX_BATCH_BYTES}"
    ))
}

impl ConnectionSettings {
    /// How long a user's batches are gathered before they go (ms); 0 when not coalescing.
    pub(crate) fn batch_window_ms(&self) -> i64 {
        if self.send_as_batch {
            i64::from(self.batch_window_secs) * 1000
        } else {
            0
        }
    }
}

fn auto_pause_error() -> SettingsError {
    SettingsError::Malformed(
        "`auto_pause_after_hours` must be a positive number of hours, or null for never".into(),
    )
}

/// Settings of an input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct InputSettings {
    /// Origins (`https://shop.example`) browsers may send this input's data from; empty: any.
    pub(crate) allowed_origins: Vec<String>,
    /// Web SDK feature flags the config answer carries (`eventsV3`, `eventBatchingIntervalMillis`, …),
    /// so an operator can steer deployed web apps without touching them.
    pub(crate) web_flags: serde_json::Map<String, serde_json::Value>,
    /// Web SDK host overrides the config answer carries (`v3SecureServiceUrl`, `identityUrl`, …):
    /// `host[:port]/path/`, no scheme.
    pub(crate) web_hosts: std::collections::BTreeMap<String, String>,
}

/// The Web SDK's host options a config answer may override.
pub(crate) const WEB_HOST_KEYS: &[&str] = &[
    "v1SecureServiceUrl",
    "v2SecureServiceUrl",
    "v3SecureServiceUrl",
    "configUrl",
    "identityUrl",
    "aliasUrl",
    "userAudienceUrl",
];

impl InputSettings {
    pub(crate) fn from_json(value: serde_json::Value) -> Result<Self, SettingsError> {
        let settings: Self =
            serde_json::from_value(value).map_err(|e| SettingsError::Malformed(e.to_string()))?;
        for (key, host) in &settings.web_hosts {
            if !WEB_HOST_KEYS.contains(&key.as_str()) {
                return Err(SettingsError::Malformed(format!(
                    "web_hosts: unknown key {key:?}; valid keys are {}",
                    WEB_HOST_KEYS.join(", ")
                )));
            }
            if host.contains("://") || !host.ends_with('/') {
                return Err(SettingsError::Malformed(format!(
                    "web_hosts.{key}: {host:?} must be host[:port]/path/ without a scheme and with a trailing slash"
                )));
            }
        }
        for origin in &settings.allowed_origins {
            if !is_origin(origin) {
                return Err(SettingsError::Malformed(format!(
                    "allowed_origins: {origin:?} is not an origin like https://shop.example or http://localhost:3000"
                )));
            }
        }
        Ok(settings)
    }

    /// Whether a browser request from `origin` may use this input.
    pub(crate) fn allows(&self, origin: &str) -> bool {
        self.allowed_origins.is_empty()
            || self
                .allowed_origins
                .iter()
                .any(|o| o.eq_ignore_ascii_case(origin))
    }
}

/// `scheme://host[:port]`, nothing more (what browsers send in `Origin`).
fn is_origin(origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    matches!(scheme, "http" | "https") && !rest.is_empty() && !rest.contains(['/', '?', '#', ' '])
}

/// Settings of a webhook output configuration (spec §3.1), and Boson's own additions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebhookSettings {
    pub(crate) url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) authorization_header: Option<String>,
    #[serde(default)]
    pub(crate) include_mp_deviceid: bool,
    /// Headers sent with every request, by name (`model::custom_headers` checks them).
    #[serde(default)]
    pub(crate) custom_headers: BTreeMap<String, String>,
    /// After a signing secret is rotated, how long the previous secret keeps signing too.
    #[serde(default = "default_rotation_overlap_secs")]
    pub(crate) signing_rotation_overlap_secs: i64,
}

/// A day: time for every receiver to be given the new secret.
pub(crate) const DEFAULT_ROTATION_OVERLAP_SECS: i64 = 86_400;
/// Longest rotation overlap accepted (30 days): a replaced secret must stop signing some day.
pub(crate) const MAX_ROTATION_OVERLAP_SECS: i64 = 30 * 86_400;

fn default_rotation_overlap_secs() -> i64 {
    DEFAULT_ROTATION_OVERLAP_SECS
}

#[cfg(test)]
impl WebhookSettings {
    /// Settings with just a URL, everything else at its default.
    pub(crate) fn with_url(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            authorization_header: None,
            include_mp_deviceid: false,
            custom_headers: BTreeMap::new(),
            signing_rotation_overlap_secs: DEFAULT_ROTATION_OVERLAP_SECS,
        }
    }
}

/// Longest webhook URL accepted; far beyond any real endpoint, short of what servers refuse.
pub(crate) const MAX_WEBHOOK_URL_BYTES: usize = 2048;
/// Longest `authorization_header` accepted; common servers refuse header fields past 8 KiB.
pub(crate) const MAX_AUTHORIZATION_HEADER_BYTES: usize = 4096;

/// Why webhook settings were refused, naming the field at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum WebhookSettingsError {
    /// Not the settings' shape (a missing `url`, an unknown key, a wrong type).
    #[error("invalid webhook settings: {0}")]
    Malformed(String),
    #[error("`url` {0}")]
    Url(String),
    #[error("`authorization_header` {0}")]
    AuthorizationHeader(&'static str),
    /// The message names the header at fault.
    #[error("{0}")]
    CustomHeaders(String),
    #[error(
        "`signing_rotation_overlap_secs` must be between 0 and {MAX_ROTATION_OVERLAP_SECS} (30 days)"
    )]
    RotationOverlap,
}

impl WebhookSettings {
    /// Parses and checks webhook settings as saved through the admin API, so a value that could
    /// never be sent is refused when it is saved, not found out by dead-lettering every event.
    /// (Whether the URL's address may be reached is checked by delivery, after resolution.)
    pub(crate) fn parse(value: serde_json::Value) -> Result<Self, WebhookSettingsError> {
        // Boson's own settings name their field even when their type is wrong.
        if let Some(headers) = value.get("custom_headers") {
            check_custom_headers_shape(headers).map_err(WebhookSettingsError::CustomHeaders)?;
        }
        if value
            .get("signing_rotation_overlap_secs")
            .is_some_and(|overlap| !overlap.is_i64())
        {
            return Err(WebhookSettingsError::RotationOverlap);
        }
        let settings: Self = serde_json::from_value(value)
            .map_err(|e| WebhookSettingsError::Malformed(e.to_string()))?;
        check_webhook_url(&settings.url).map_err(WebhookSettingsError::Url)?;
        if let Some(header) = &settings.authorization_header {
            check_header_value(header).map_err(WebhookSettingsError::AuthorizationHeader)?;
        }
        check_custom_headers(&settings.custom_headers)
            .map_err(WebhookSettingsError::CustomHeaders)?;
        if !(0..=MAX_ROTATION_OVERLAP_SECS).contains(&settings.signing_rotation_overlap_secs) {
            return Err(WebhookSettingsError::RotationOverlap);
        }
        Ok(settings)
    }
}

/// An absolute `http`/`https` URL with a host.
fn check_webhook_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_WEBHOOK_URL_BYTES {
        return Err(format!("is longer than {MAX_WEBHOOK_URL_BYTES} bytes"));
    }
    let parsed = url::Url::parse(url).map_err(|e| format!("is not a valid URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("must start with http:// or https://".into());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    Ok(())
}

/// A header value sent as configured (see [`header_value_problem`]), at most 4,096 bytes.
fn check_header_value(value: &str) -> Result<(), &'static str> {
    if value.len() > MAX_AUTHORIZATION_HEADER_BYTES {
        return Err("is longer than 4096 bytes");
    }
    header_value_problem(value).map_or(Ok(()), Err)
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
