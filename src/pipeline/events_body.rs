//! The shape of every webhook body that carries events, `{"events":[…],<batch fields>}`: the
//! filter writes one per request from a stored batch ([`super::request_body`]) and delivery
//! merges coalesced batches' bodies into one (`delivery::merge`). Either way each event is
//! written once, in place, and the batch fields (a serialised object) are copied after them.

use serde::Serialize;

/// What every such body starts with.
const HEAD: &[u8] = b"{\"events\":[";

/// A body being written: its events one by one, then the batch fields.
pub(crate) struct EventsBody {
    body: Vec<u8>,
    events: usize,
}

impl EventsBody {
    /// A body with room for `capacity` bytes.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let mut body = Vec::with_capacity(capacity.max(HEAD.len()));
        body.extend_from_slice(HEAD);
        Self { body, events: 0 }
    }

    /// Where the next event is to be written (after a comma, but for the first event).
    pub(crate) fn next_event(&mut self) -> &mut Vec<u8> {
        if self.events > 0 {
            self.body.push(b',');
        }
        self.events += 1;
        &mut self.body
    }

    /// The body, with the fields of `base`, a serialised object (`{}` or `{"k":…}`), after
    /// the events.
    pub(crate) fn finish(mut self, base: &[u8]) -> Vec<u8> {
        self.body.push(b']');
        if base.len() > 2 {
            self.body.push(b',');
            self.body.extend_from_slice(&base[1..]);
        } else {
            self.body.push(b'}');
        }
        self.body
    }
}

/// The length of the body written from `count` events of `event_bytes` in all and a base
/// object of `base_len` bytes.
pub(crate) fn len(count: usize, event_bytes: usize, base_len: usize) -> usize {
    let commas = count.saturating_sub(1);
    let tail = if base_len > 2 { base_len } else { 1 };
    HEAD.len() + event_bytes + commas + 1 + tail
}

/// Writes `value` as JSON. Serialising JSON values, and maps and enums of them with string
/// keys, cannot fail.
pub(crate) fn write_json(body: &mut Vec<u8>, value: &impl Serialize) {
    let _ = serde_json::to_writer(body, value);
}

/// `value` as JSON (see [`write_json`]).
pub(crate) fn to_json(value: &impl Serialize) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_json(&mut bytes, value);
    bytes
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn a_body_is_its_events_then_the_base_fields_and_as_long_as_len_says() {
        let events = [json!({"a": 1}), json!([2]), json!("three")];
        for base in [json!({}), json!({"mpid": 5, "batch_id": 1})] {
            let base_bytes = to_json(&base);
            for count in 0..=events.len() {
                let mut body = EventsBody::with_capacity(0);
                for event in &events[..count] {
                    write_json(body.next_event(), event);
                }
                let body = body.finish(&base_bytes);
                let mut expected = base.clone();
                expected["events"] = json!(events[..count]);
                let read: Value = serde_json::from_slice(&body).expect("json");
                assert_eq!(read, expected);
                let event_bytes = events[..count].iter().map(|e| to_json(e).len()).sum();
                assert_eq!(body.len(), len(count, event_bytes, base_bytes.len()));
            }
        }
    }
}
