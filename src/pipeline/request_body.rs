//! The webhook request bodies the filter cuts from one batch: the batch-level fields, written
//! once per batch, and each event, written into its own body (real time) or all into one (send
//! as batch).
//!
//! An event the filter leaves as it is goes out as the bytes it was stored as (found by
//! [`super::stored_batch`]): the event as its client sent it with its ids added, or as
//! serde_json wrote it ([`crate::model::kept_events`]); either way they read as the parsed
//! event, and for a batch serde_json wrote they are the very bytes serialising the parsed event
//! again gives (the equivalence tests in `request_body_tests.rs` hold the two ways to each
//! other). Writing each event anew was most of building a body in real-time delivery, where
//! every event is a request of its own. The batch-level fields are
//! borrowed from the parsed document and cloned only where a setting changes them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::model::data_filter::DataFilter;
use crate::model::ids::BatchId;
use crate::model::settings::{ConnectionSettings, WebhookSettings};

use super::events_body::{EventsBody, write_json};
use super::rules::{self, StrippedUserData};

/// One webhook request body and how many events it carries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Payload {
    /// The JSON body, serialised.
    pub(crate) body: Vec<u8>,
    pub(crate) event_count: usize,
    /// Positions in the inbound batch of the events this body carries.
    pub(crate) event_indexes: Vec<usize>,
}

/// A batch's fields other than `events`, in key order, as they go out: borrowed unless a
/// setting changed them.
pub(super) type Base<'a> = BTreeMap<&'a str, Cow<'a, Value>>;

/// One event as it goes out.
#[derive(Debug)]
pub(super) enum OutboundEvent<'a> {
    /// Unchanged, and its stored bytes are at hand.
    Stored(&'a [u8]),
    /// Unchanged, read from the parsed document only.
    Parsed(&'a Value),
    /// Something was removed from it (its location, or custom attributes).
    Changed(Value),
}

impl OutboundEvent<'_> {
    fn write_to(&self, body: &mut Vec<u8>) {
        match self {
            Self::Stored(bytes) => body.extend_from_slice(bytes),
            Self::Parsed(event) => write_json(body, event),
            Self::Changed(event) => write_json(body, event),
        }
    }
}

/// The batch-level part of every outbound body: everything but `events`, stripped per settings;
/// and the user data the Data Filter stripped from it.
pub(super) fn outbound_base<'a>(
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: BatchId,
    document: &'a Value,
) -> (Base<'a>, StrippedUserData) {
    let mut base: Base<'a> = document
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| key.as_str() != "events")
        .map(|(key, value)| (key.as_str(), Cow::Borrowed(value)))
        .collect();
    base.insert("batch_id", Cow::Owned(json!(batch_id)));
    if !settings.include_metadata {
        for key in ["application_info", "device_info", "source_info"] {
            base.remove(key);
        }
    }
    for path in &settings.metadata_field_exclusions {
        remove_path(&mut base, path);
    }
    // The batch location has its own switch, off by default; Include Location Information
    // governs the events' locations (spec §1.7.1, §2).
    if !settings.include_event_batch_location {
        remove_path(&mut base, "context.location");
    }
    if !webhook.include_mp_deviceid {
        base.remove("mp_deviceid");
    }
    if let Some(unique_id) = settings.unique_id.as_deref().filter(|u| !u.is_empty()) {
        base.insert("unique_id", Cow::Owned(json!(unique_id)));
    }
    let stripped = strip_user_data(&settings.data_filter, &mut base);
    (base, stripped)
}

/// Removes the user attributes and identities the Data Filter does not send from the base,
/// and names what it removed; a field is cloned only if the filter may remove from it.
fn strip_user_data(filter: &DataFilter, base: &mut Base<'_>) -> StrippedUserData {
    let mut stripped = StrippedUserData::default();
    if filter.is_pass_through() {
        return stripped;
    }
    if let Some(attributes) = base.get_mut("user_attributes") {
        stripped.user_attributes = rules::strip_user_attributes(filter, attributes.to_mut());
    }
    if let Some(identities) = base.get_mut("user_identities") {
        stripped.identity_types = rules::strip_identities(filter, identities.to_mut());
    }
    stripped
}

/// An event as it goes out: as stored (`stored`, when at hand) or parsed, unless something must
/// be removed from it: its location, or the `removed` custom attributes.
pub(super) fn outbound_event<'a>(
    settings: &ConnectionSettings,
    event: &'a Value,
    stored: Option<&'a [u8]>,
    removed: &[String],
) -> OutboundEvent<'a> {
    let has_location = event
        .get("data")
        .is_some_and(|d| d.get("location").is_some());
    let strip_location = !settings.include_location_information && has_location;
    if !strip_location && removed.is_empty() {
        return stored.map_or(OutboundEvent::Parsed(event), OutboundEvent::Stored);
    }
    let mut event = event.clone();
    if let Some(Value::Object(data)) = event.get_mut("data") {
        if strip_location {
            data.remove("location");
        }
        if let Some(Value::Object(attributes)) = data.get_mut("custom_attributes") {
            for key in removed {
                attributes.remove(key);
            }
        }
    }
    OutboundEvent::Changed(event)
}

/// `{"events":[…],<base fields>}` from the serialised base object and the events.
pub(super) fn with_events(base: &[u8], events: &[(usize, OutboundEvent<'_>)]) -> Payload {
    let stored_len: usize = events
        .iter()
        .map(|(_, event)| match event {
            OutboundEvent::Stored(bytes) => bytes.len() + 1,
            _ => 0,
        })
        .sum();
    let mut body = EventsBody::with_capacity(base.len() + stored_len + 16);
    for (_, event) in events {
        event.write_to(body.next_event());
    }
    Payload {
        body: body.finish(base),
        event_count: events.len(),
        event_indexes: events.iter().map(|(i, _)| *i).collect(),
    }
}

/// Removes a dotted path (`ip`, `device_info.device`) if present, cloning only the fields on
/// the way to it.
fn remove_path(base: &mut Base<'_>, path: &str) {
    match path.split_once('.') {
        None => {
            base.remove(path);
        }
        Some((head, rest)) => {
            if let Some(field) = base.get_mut(head)
                && has_path(field, rest)
                && let Value::Object(inner) = field.to_mut()
            {
                remove_inner_path(inner, rest);
            }
        }
    }
}

/// Whether the dotted `path` leads to a value inside `value`.
fn has_path(value: &Value, path: &str) -> bool {
    let mut value = value;
    for key in path.split('.') {
        match value.get(key) {
            Some(inner) => value = inner,
            None => return false,
        }
    }
    true
}

fn remove_inner_path(map: &mut serde_json::Map<String, Value>, path: &str) {
    match path.split_once('.') {
        None => {
            map.remove(path);
        }
        Some((head, rest)) => {
            if let Some(Value::Object(inner)) = map.get_mut(head) {
                remove_inner_path(inner, rest);
            }
        }
    }
}

#[cfg(test)]
#[path = "request_body_tests.rs"]
mod tests;
