//! The inbound batch: validation of an Events API document and its normalisation into the one
//! batch model every connection sees (spec §1.4–§1.8). Pure: no I/O, the clock is a parameter.
//!
//! Validation checks the types of the keys routing and outputs depend on and leaves every other key
//! as it came, so nothing a client sent is lost. Normalisation adds what mParticle adds on receipt
//! (receive time, `message_id`s, `source_info`, `schema_version: 2`) and turns `user_identities`
//! into the outbound array form, once, so deliveries and retries all send the same document.

use serde_json::{Map, Value, json};

use super::consent::REGULATIONS;
use super::event_type::EventType;
use super::field_path::FieldPath;
use super::identity::types::IdentityType;
use super::identity::{NOT_STORABLE, is_storable};
use super::kept_events::{self, MAX_EVENT_NAME_CHARS, StoredEvent};
use super::kept_members::{KeptMembers, SentEvent, StoredForm, is_object_or_null};
use super::nesting::{self, MAX_LEVEL, Unreadable};

const ENVIRONMENTS: &[&str] = &["development", "production", "unknown"];

/// A batch that failed validation, naming the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct BatchError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl BatchError {
    fn new(field: impl std::fmt::Display, problem: &str) -> Self {
        let field = field.to_string();
        Self {
            message: format!("Field \"{field}\" {problem}."),
            field,
        }
    }
}

/// A validated, normalised batch ready to be stored.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NormalizedBatch {
    /// The outbound-form document (without `batch_id`, which the store assigns), without the
    /// members kept as sent and without `events`.
    pub(crate) document: Value,
    /// Members stored as the client sent them, which no step of the acceptance reads.
    pub(crate) kept: KeptMembers,
    /// The normalised events, as they are stored.
    pub(crate) events: Vec<StoredEvent>,
    pub(crate) source_request_id: Option<String>,
    pub(crate) event_count: usize,
}

impl NormalizedBatch {
    /// The batch as the store keeps it: the document with the kept members, as JSON text.
    pub(crate) fn stored_body(&self) -> serde_json::Result<Vec<u8>> {
        StoredForm {
            document: &self.document,
            kept: &self.kept,
            events: Some(&self.events),
        }
        .to_vec()
    }

    /// The document with its events, parsed (for the Live Stream, and tests).
    pub(crate) fn whole_document(&self) -> Value {
        let mut document = self.document.clone();
        if let Value::Object(members) = &mut document {
            let events = self.events.iter().map(|e| {
                serde_json::from_str(&e.text).expect("a stored event is serde_json's to read")
            });
            members.insert("events".into(), Value::Array(events.collect()));
        }
        document
    }
}

/// Where a batch came from; recorded as `source_info.channel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    ServerToServer,
    /// The Web SDK.
    Javascript,
    /// The Android and iOS SDKs.
    Native,
}

impl Channel {
    fn as_str(self) -> &'static str {
        match self {
            Channel::ServerToServer => "server_to_server",
            Channel::Javascript => "javascript",
            Channel::Native => "native",
        }
    }
}

/// Validates and normalises one inbound batch parsed whole. `prefix` locates the batch in error
/// messages (empty for `/v2/events`, `[3]` for the fourth batch of a bulk request). Requests
/// come through [`normalize_split`]; this is the form the tests and fuzz targets compare with.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn normalize(
    value: Value,
    channel: Channel,
    now_ms: i64,
    prefix: &str,
) -> Result<NormalizedBatch, BatchError> {
    normalize_split(value, KeptMembers::default(), channel, now_ms, prefix)
}

/// `normalize` for a batch whose members in `kept` were kept as the text they came in
/// ([`super::kept_members::split_batch`]): `value` holds the others. Checks and answers the
/// same as `normalize` of the whole batch parsed as one `Value`.
pub(crate) fn normalize_split(
    value: Value,
    mut kept: KeptMembers,
    channel: Channel,
    now_ms: i64,
    prefix: &str,
) -> Result<NormalizedBatch, BatchError> {
    let Value::Object(mut batch) = value else {
        return Err(BatchError::new(root(prefix), "must be a JSON object"));
    };
    let root_path = FieldPath::Root(prefix);
    let at = |key: &'static str| root_path.key(key);
    // The batch's own keys: the walk below checks what is under them.
    if batch.contains_key(nesting::RESERVED_KEY) {
        let problem = "is a key serde_json reserves, which Boson cannot store";
        return Err(BatchError::new(at(nesting::RESERVED_KEY), problem));
    }

    let source_request_id = match batch.remove("source_request_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if is_request_id(&s) => Some(s),
        Some(_) => {
            let problem = "must be a string of at most 1024 characters without control characters";
            return Err(BatchError::new(at("source_request_id"), problem));
        }
    };
    // Outbound only: set per connection (spec §2), never taken from a client.
    batch.remove("unique_id");
    // Marks a stored alias request (`model::alias_request`); no batch may carry it.
    batch.remove("request_type");
    let events = normalize_events(&mut batch, kept.take_events(), at("events"), now_ms)?;
    normalize_identities(&mut batch, at("user_identities"), now_ms)?;
    check_user_attributes(&batch, at("user_attributes"))?;
    normalize_mpid(&mut batch, at("mpid"))?;
    for key in [
        "device_info",
        "application_info",
        "context",
        "consent_state",
        "integration_attributes",
    ] {
        match kept.get(key) {
            Some(text) if !is_object_or_null(text) => {
                return Err(BatchError::new(at(key), "must be an object"));
            }
            Some(_) => {}
            None => expect_optional(&batch, key, at(key), Value::is_object, "must be an object")?,
        }
    }
    check_deleted_attributes(&batch, at("deleted_user_attributes"))?;
    check_profile_consent(&batch, at("consent_state"))?;
    for key in ["ip", "mp_deviceid", "sdk_version"] {
        expect_optional(&batch, key, at(key), Value::is_string, "must be a string")?;
    }
    if batch
        .get("mp_deviceid")
        .and_then(Value::as_str)
        .is_some_and(|id| !is_storable(id))
    {
        return Err(BatchError::new(at("mp_deviceid"), NOT_STORABLE));
    }
    match batch.get("environment") {
        None | Some(Value::Null) => {
            batch.insert("environment".into(), json!("production"));
        }
        Some(Value::String(env)) if ENVIRONMENTS.contains(&env.as_str()) => {}
        Some(_) => {
            return Err(BatchError::new(
                at("environment"),
                "must be one of \"development\", \"production\"",
            ));
        }
    }
    // `schema_version` is accepted whatever it holds (spec §1.4) and overwritten below. The
    // events are checked where `events` sorts, so the first error named is the one it was.
    let mut events_checked = false;
    for (key, value) in &batch {
        if !events_checked && key.as_str() > "events" {
            check_events(&events, at("events"))?;
            events_checked = true;
        }
        check_reads_back(value, 2, root_path.key(key))?;
    }
    if !events_checked {
        check_events(&events, at("events"))?;
    }
    let events = events
        .into_iter()
        .map(Normalized::stored)
        .collect::<serde_json::Result<Vec<_>>>()
        .map_err(|_| BatchError::new(at("events"), "could not be stored"))?;

    // What mParticle adds on receipt (spec §1.8); read-only keys a client sent are overwritten.
    batch.insert("schema_version".into(), json!(2));
    batch.insert("timestamp_unixtime_ms".into(), json!(now_ms));
    batch.insert("message_id".into(), new_message_id());
    batch.insert("message_type".into(), json!("events"));
    batch.insert("source_info".into(), json!({ "channel": channel.as_str() }));
    batch
        .entry("system_notifications")
        .or_insert_with(|| json!([]));

    Ok(NormalizedBatch {
        document: Value::Object(batch),
        kept,
        source_request_id,
        event_count: events.len(),
        events,
    })
}

/// Refuses `value`, at `level` of the batch (the batch is level 1), if serde_json would not read
/// it back as written: nested too deeply, or holding its reserved key (see [`nesting`]). The
/// error names the field down to an event's data member (`events[0].data.custom_attributes`),
/// the level an SDK's attributes reach.
fn check_reads_back(value: &Value, level: usize, field: FieldPath<'_>) -> Result<(), BatchError> {
    let Some(why) = nesting::unreadable_at(value, level) else {
        return Ok(());
    };
    if level < 5 {
        match value {
            Value::Object(map) if !map.contains_key(nesting::RESERVED_KEY) => {
                for (key, inner) in map {
                    check_reads_back(inner, level + 1, field.key(key))?;
                }
            }
            Value::Array(items) => {
                for (i, inner) in items.iter().enumerate() {
                    check_reads_back(inner, level + 1, field.index(i))?;
                }
            }
            _ => {}
        }
    }
    let problem = match why {
        Unreadable::TooDeep => {
            format!("is nested too deeply; a batch may nest at most {MAX_LEVEL} levels")
        }
        Unreadable::ReservedKey => format!(
            "holds the key \"{}\", which Boson cannot store",
            nesting::RESERVED_KEY
        ),
    };
    Err(BatchError::new(field, &problem))
}

/// A fresh `message_id`: a random UUID in its lowercase hyphenated form, written without the
/// formatting machinery (run for every event that comes without one).
fn new_message_id() -> Value {
    Value::String(new_message_id_text())
}

fn new_message_id_text() -> String {
    let mut text = uuid::Uuid::encode_buffer();
    uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut text)
        .to_owned()
}

/// A request id that every backend can store and index: bounded, no control characters (a NUL
/// is not valid in PostgreSQL text).
fn is_request_id(id: &str) -> bool {
    id.chars().count() <= 1024 && !id.chars().any(char::is_control)
}

/// Missing, or an explicit `null`: both mean "not given".
fn is_absent(data: &Map<String, Value>, key: &str) -> bool {
    data.get(key).is_none_or(Value::is_null)
}

fn root(prefix: &str) -> String {
    if prefix.is_empty() {
        "batch".to_owned()
    } else {
        prefix.to_owned()
    }
}

fn is_integer(v: &Value) -> bool {
    v.is_i64() || v.is_u64()
}

fn expect_optional(
    batch: &Map<String, Value>,
    key: &str,
    field: FieldPath<'_>,
    ok: fn(&Value) -> bool,
    problem: &str,
) -> Result<(), BatchError> {
    match batch.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) if ok(v) => Ok(()),
        Some(_) => Err(BatchError::new(field, problem)),
    }
}

/// Accepts an int64 or a string of digits (clients serialise 64-bit ids either way) and
/// stores a JSON number.
fn parse_int64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn normalize_mpid(batch: &mut Map<String, Value>, field: FieldPath<'_>) -> Result<(), BatchError> {
    match batch.get("mpid") {
        None | Some(Value::Null) => Ok(()),
        Some(v) => {
            let mpid =
                parse_int64(v).ok_or_else(|| BatchError::new(field, "must be a 64-bit integer"))?;
            batch.insert("mpid".into(), json!(mpid));
            Ok(())
        }
    }
}

/// An event normalised: kept as sent with what normalising adds, or parsed.
enum Normalized {
    Kept(StoredEvent),
    Parsed(Value),
}

impl Normalized {
    fn stored(self) -> serde_json::Result<StoredEvent> {
        match self {
            Self::Kept(event) => Ok(event),
            Self::Parsed(event) => StoredEvent::written(&event),
        }
    }
}

/// The batch's events normalised: those `sent` as text when the split kept them (see
/// [`kept_events`]), else the `events` member's; it leaves the batch.
fn normalize_events(
    batch: &mut Map<String, Value>,
    sent: Option<Vec<SentEvent>>,
    field: FieldPath<'_>,
    now_ms: i64,
) -> Result<Vec<Normalized>, BatchError> {
    if let Some(sent) = sent {
        return sent
            .into_iter()
            .enumerate()
            .map(|(i, event)| normalize_sent(event, field.index(i), now_ms))
            .collect();
    }
    let events = match batch.remove("events") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(events)) => events,
        Some(_) => return Err(BatchError::new(field, "must be an array of events")),
    };
    events
        .into_iter()
        .enumerate()
        .map(|(i, mut event)| {
            normalize_event(&mut event, field.index(i), now_ms)?;
            Ok(Normalized::Parsed(event))
        })
        .collect()
}

/// One event as sent: kept when normalising would only add its ids, else parsed and normalised.
fn normalize_sent(
    event: SentEvent,
    field: FieldPath<'_>,
    now_ms: i64,
) -> Result<Normalized, BatchError> {
    let text = &*event.text;
    if let Some(scanned) = event.scanned {
        let kept = kept_events::keep(text, scanned, now_ms, new_message_id_text);
        return Ok(Normalized::Kept(kept));
    }
    // The split checked it as a `Value` parse does, so it parses.
    let mut value: Value =
        serde_json::from_str(text).map_err(|_| BatchError::new(field, "must be valid JSON"))?;
    normalize_event(&mut value, field, now_ms)?;
    Ok(Normalized::Parsed(value))
}

/// Refuses a parsed event that would not read back as written (see [`check_reads_back`]); kept
/// events were checked as they were split.
fn check_events(events: &[Normalized], field: FieldPath<'_>) -> Result<(), BatchError> {
    for (i, event) in events.iter().enumerate() {
        if let Normalized::Parsed(value) = event {
            check_reads_back(value, 3, field.index(i))?;
        }
    }
    Ok(())
}

/// Checks and normalises one event. Whatever this corrects or refuses, beyond adding the
/// `message_id` and a missing timestamp, [`kept_events::ScannedAt`] must decline to keep as
/// sent: the split property test (`fuzzing::parsers::check_split`) holds the two to each other.
fn normalize_event(event: &mut Value, field: FieldPath<'_>, now_ms: i64) -> Result<(), BatchError> {
    let Value::Object(event) = event else {
        return Err(BatchError::new(
            field,
            "must be an object with \"event_type\" and \"data\"",
        ));
    };
    // Parsed, not cloned: the checks below decide by type, and the event keeps its string.
    let name = event
        .get("event_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let Some(event_type) = EventType::parse(name) else {
        let message = if name.is_empty() {
            format!("Required event field \"{field}.event_type\" is missing or empty.")
        } else {
            format!("Field \"{field}.event_type\" has unknown event type \"{name}\".")
        };
        return Err(BatchError {
            field: format!("{field}.event_type"),
            message,
        });
    };
    let data = event.entry("data").or_insert_with(|| json!({}));
    let Value::Object(data) = data else {
        return Err(BatchError::new(
            format!("{field}.data"),
            "must be an object",
        ));
    };
    let data_field = field.key("data");
    check_common_data(data, data_field)?;
    check_type_specific(event_type, data, data_field)?;
    // Server time when the client gave none (spec §1.5).
    if is_absent(data, "timestamp_unixtime_ms") {
        data.insert("timestamp_unixtime_ms".into(), json!(now_ms));
    }
    if is_absent(data, "message_id") {
        data.insert("message_id".into(), new_message_id());
    }
    Ok(())
}

fn check_common_data(
    data: &mut Map<String, Value>,
    field: FieldPath<'_>,
) -> Result<(), BatchError> {
    for key in [
        "timestamp_unixtime_ms",
        "event_num",
        "session_start_unixtime_ms",
        "event_start_unixtime_ms",
    ] {
        // A string of digits becomes a number; an int64 is kept as it is (no key to allocate).
        if let Some(v) = data.get(key).filter(|v| !v.is_null() && !v.is_i64()) {
            let n = parse_int64(v).ok_or_else(|| {
                BatchError::new(format!("{field}.{key}"), "must be a 64-bit integer")
            })?;
            data.insert(key.into(), json!(n));
        }
    }
    for key in [
        "custom_attributes",
        "custom_flags",
        "location",
        "device_current_state",
    ] {
        expect_optional(
            data,
            key,
            field.key(key),
            Value::is_object,
            "must be an object",
        )?;
    }
    for key in ["source_message_id", "session_uuid"] {
        expect_optional(
            data,
            key,
            field.key(key),
            Value::is_string,
            "must be a string",
        )?;
    }
    if let Some(Value::Object(location)) = data.get("location") {
        for key in ["latitude", "longitude"] {
            if !location.get(key).is_some_and(Value::is_number) {
                return Err(BatchError::new(
                    format!("{field}.location.{key}"),
                    "must be a number",
                ));
            }
        }
    }
    Ok(())
}

fn check_type_specific(
    event_type: EventType,
    data: &mut Map<String, Value>,
    field: FieldPath<'_>,
) -> Result<(), BatchError> {
    let required_string = |data: &Map<String, Value>, key: &str| match data.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(()),
        _ => Err(BatchError {
            field: format!("{field}.{key}"),
            message: format!("Required event field \"{field}.{key}\" is missing or empty."),
        }),
    };
    match event_type {
        EventType::CustomEvent => {
            required_string(data, "event_name")?;
            required_string(data, "custom_event_type")?;
            truncate_event_name(data);
        }
        EventType::ScreenView => {
            expect_optional(
                data,
                "screen_name",
                field.key("screen_name"),
                Value::is_string,
                "must be a string",
            )?;
        }
        EventType::CommerceEvent => {
            for key in ["product_action", "promotion_action", "shopping_cart"] {
                expect_optional(
                    data,
                    key,
                    field.key(key),
                    Value::is_object,
                    "must be an object",
                )?;
            }
            expect_optional(
                data,
                "product_impressions",
                field.key("product_impressions"),
                Value::is_array,
                "must be an array",
            )?;
            normalize_promotion_action(data);
        }
        EventType::SessionEnd => {
            expect_optional(
                data,
                "session_duration_ms",
                field.key("session_duration_ms"),
                is_integer,
                "must be an integer",
            )?;
        }
        _ => {}
    }
    Ok(())
}

/// The Web SDK sends the promotion action as its enum number (1 view, 2 click); outputs get the
/// Events API's strings.
fn normalize_promotion_action(data: &mut Map<String, Value>) {
    if let Some(Value::Object(promotion)) = data.get_mut("promotion_action")
        && let Some(action) = promotion.get("action").and_then(Value::as_i64)
    {
        let name = match action {
            1 => "view",
            2 => "click",
            _ => return,
        };
        promotion.insert("action".into(), json!(name));
    }
}

fn truncate_event_name(data: &mut Map<String, Value>) {
    if let Some(Value::String(name)) = data.get_mut("event_name")
        && let Some((cut, _)) = name.char_indices().nth(MAX_EVENT_NAME_CHARS)
    {
        name.truncate(cut);
    }
}

fn normalize_identities(
    batch: &mut Map<String, Value>,
    field: FieldPath<'_>,
    now_ms: i64,
) -> Result<(), BatchError> {
    let identities = match batch.remove("user_identities") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(BatchError::new(
                field,
                "must be an object of identity type to value",
            ));
        }
    };
    let mut out = Vec::with_capacity(identities.len());
    for (key, value) in identities {
        // Keys are Events API type names (spec §1.7.7), except that mParticle's Python SDK spells
        // the customer id `customerid`. IDSync's other SDK spellings are not batch keys.
        let identity_type = if key == "customerid" {
            Some(IdentityType::CustomerId)
        } else {
            IdentityType::parse(&key)
        };
        let Some(identity_type) = identity_type else {
            return Err(BatchError::new(
                format!("{field}.{key}"),
                "is not a known identity type",
            ));
        };
        match value {
            Value::Null => {}
            Value::String(identity) if !is_storable(&identity) => {
                let field = format!("{field}.{identity_type}");
                return Err(BatchError::new(field, NOT_STORABLE));
            }
            Value::String(identity) => out.push(json!({
                "identity_type": identity_type.as_str(),
                "identity": identity,
                "timestamp_unixtime_ms": now_ms,
            })),
            _ => {
                return Err(BatchError::new(
                    format!("{field}.{identity_type}"),
                    "must be a string",
                ));
            }
        }
    }
    batch.insert("user_identities".into(), Value::Array(out));
    Ok(())
}

fn check_user_attributes(
    batch: &Map<String, Value>,
    field: FieldPath<'_>,
) -> Result<(), BatchError> {
    let attributes = match batch.get("user_attributes") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(BatchError::new(field, "must be an object")),
    };
    for (name, value) in attributes {
        let scalar = |v: &Value| !v.is_object() && !v.is_array();
        let ok = match value {
            Value::Array(items) => items.iter().all(scalar),
            other => scalar(other),
        };
        if !ok {
            return Err(BatchError::new(
                format!("{field}.{name}"),
                "must be a string, number, boolean or a list of them",
            ));
        }
        if has_nul(value) {
            return Err(BatchError::new(format!("{field}.{name}"), NOT_STORABLE));
        }
    }
    if attributes.keys().any(|name| !is_storable(name)) {
        return Err(BatchError::new(field, NUL_IN_NAME));
    }
    Ok(())
}

/// What a refusal of a name with a NUL says (the name itself cannot be shown in the field).
const NUL_IN_NAME: &str = "must not have names with NUL characters";

/// Deleted attribute names become keys of the profile's attributes (see
/// [`check_profile_consent`] for why a NUL is refused).
fn check_deleted_attributes(
    batch: &Map<String, Value>,
    field: FieldPath<'_>,
) -> Result<(), BatchError> {
    let deleted = batch
        .get("deleted_user_attributes")
        .and_then(Value::as_array);
    if deleted.is_some_and(|names| names.iter().any(has_nul)) {
        return Err(BatchError::new(field, NOT_STORABLE));
    }
    Ok(())
}

/// The user's profile keeps its attributes and the stated consent purposes as JSON, which
/// PostgreSQL cannot hold with a U+0000 (see [`is_storable`]): a NUL there would fail the
/// commit (a 503 the client retries for ever), so it is refused here, naming the field.
fn check_profile_consent(
    batch: &Map<String, Value>,
    field: FieldPath<'_>,
) -> Result<(), BatchError> {
    let Some(Value::Object(consent)) = batch.get("consent_state") else {
        return Ok(());
    };
    // Only the regulations the profile keeps (`model::consent::stated`) reach the database.
    for regulation in REGULATIONS {
        let Some(Value::Object(purposes)) = consent.get(regulation) else {
            continue;
        };
        let field = field.key(regulation);
        if purposes.keys().any(|name| !is_storable(name)) {
            return Err(BatchError::new(field, NUL_IN_NAME));
        }
        if let Some((name, _)) = purposes.iter().find(|(_, purpose)| has_nul(purpose)) {
            return Err(BatchError::new(format!("{field}.{name}"), NOT_STORABLE));
        }
    }
    Ok(())
}

/// Whether a NUL is in any string or object key of `value`.
fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => !is_storable(s),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| !is_storable(k) || has_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
