//! Merging the filtered bodies of one user's coalesced batches into as few requests as the size
//! cap allows (pure, property-tested).
//!
//! Each part is one batch's body as `pipeline::filter::plan` cut it (Send as Batch: one body per
//! batch, `{"events":[…],<batch fields>}`), in the group's order (its jobs' order). A request
//! carries whole parts: their events, in that order, with the batch fields (user and device
//! fields, `batch_id`, …) of its most recently accepted part. That part is usually the last, but
//! not when a replay's job for an old batch joined a user's group behind newer live ones: the
//! receiver must not be told the user's state of a month ago as the current one. Parts go into a request while its body stays within the cap; a part that alone
//! is larger than the cap goes in a request of its own, since a batch is never cut.

use serde_json::Value;

use crate::pipeline::events_body::{self, EventsBody, to_json};

/// One batch's filtered body, with its events' indexes in the stored batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Part {
    /// Which batch of the group (its place in id order).
    pub(crate) member: usize,
    /// Grows with the batch's acceptance (its batch id): the newest part's fields go out.
    pub(crate) accepted: i64,
    pub(crate) body: Vec<u8>,
    pub(crate) events: Vec<usize>,
}

/// One request of the group: its body and its events, as (member, index in the stored batch).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Merged {
    pub(crate) body: Vec<u8>,
    pub(crate) events: Vec<(usize, usize)>,
}

/// A part taken apart: its serialised events and its batch fields (a serialised object).
struct Split {
    member: usize,
    accepted: i64,
    indexes: Vec<usize>,
    events: Vec<Vec<u8>>,
    base: Vec<u8>,
}

/// The requests for `parts` (see the module docs).
pub(crate) fn merge(parts: Vec<Part>, max_bytes: usize) -> Vec<Merged> {
    let mut out = Vec::new();
    let mut chunk: Vec<Split> = Vec::new();
    for part in parts {
        let Some(split) = split(&part) else {
            // Not a body this module understands: it goes as it is, on its own.
            flush(&mut chunk, &mut out);
            out.push(Merged {
                events: part.events.iter().map(|&e| (part.member, e)).collect(),
                body: part.body,
            });
            continue;
        };
        if !chunk.is_empty() && size_with(&chunk, &split) > max_bytes {
            flush(&mut chunk, &mut out);
        }
        chunk.push(split);
    }
    flush(&mut chunk, &mut out);
    out
}

fn split(part: &Part) -> Option<Split> {
    let Value::Object(mut object) = serde_json::from_slice::<Value>(&part.body).ok()? else {
        return None;
    };
    let Some(Value::Array(events)) = object.remove("events") else {
        return None;
    };
    if events.len() != part.events.len() {
        return None;
    }
    let events = events.iter().map(to_json).collect();
    Some(Split {
        member: part.member,
        accepted: part.accepted,
        indexes: part.events.clone(),
        events,
        base: to_json(&Value::Object(object)),
    })
}

/// The body length of `chunk` with `next` added (whose fields would then be the request's).
fn size_with(chunk: &[Split], next: &Split) -> usize {
    let events = chunk.iter().chain([next]).flat_map(|s| &s.events);
    let (count, bytes) = events.fold((0, 0), |(n, b), e| (n + 1, b + e.len()));
    events_body::len(count, bytes, next.base.len())
}

fn flush(chunk: &mut Vec<Split>, out: &mut Vec<Merged>) {
    // The last of the most recent, should two parts share an acceptance.
    let Some(newest) = chunk.iter().max_by_key(|split| split.accepted) else {
        return;
    };
    let mut body = EventsBody::with_capacity(newest.base.len());
    let mut events = Vec::new();
    for split in chunk.iter() {
        for (event, &index) in split.events.iter().zip(&split.indexes) {
            body.next_event().extend_from_slice(event);
            events.push((split.member, index));
        }
    }
    out.push(Merged {
        body: body.finish(&newest.base),
        events,
    });
    chunk.clear();
}

/// The batch fields of a merged body (everything but `events`), for tests and checks.
#[cfg(test)]
fn fields(body: &[u8]) -> serde_json::Map<String, Value> {
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(body) else {
        return serde_json::Map::new();
    };
    object.remove("events");
    object
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// Batch `member`'s body: `events` events tagged with (member, index), padded by `pad`.
    fn part(member: usize, events: usize, pad: usize) -> Part {
        let body = json!({
            "events": (0..events).map(|i| json!({"tag": [member, i], "pad": "x".repeat(pad)})).collect::<Vec<_>>(),
            "mpid": 7,
            "batch_id": member,
            "user_attributes": {"member": member},
        });
        Part {
            member,
            accepted: i64::try_from(member).unwrap(),
            body: serde_json::to_vec(&body).unwrap(),
            events: (0..events).collect(),
        }
    }

    #[test]
    fn an_older_batch_behind_a_newer_one_keeps_its_events_place_but_not_its_fields() {
        // A replayed batch (accepted long ago) whose job joined the group after a live one.
        let live = Part {
            accepted: 900,
            ..part(0, 1, 0)
        };
        let replayed = Part {
            accepted: 3,
            ..part(1, 1, 0)
        };
        let merged = merge(vec![live, replayed], 1 << 20);
        assert_eq!(merged[0].events, [(0, 0), (1, 0)]);
        assert_eq!(
            fields(&merged[0].body)["user_attributes"],
            json!({"member": 0})
        );
    }

    #[test]
    fn one_request_has_every_event_in_order_and_the_newest_fields() {
        let merged = merge(vec![part(0, 2, 0), part(1, 1, 0), part(2, 0, 0)], 1 << 20);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].events, [(0, 0), (0, 1), (1, 0)]);
        let body: Value = serde_json::from_slice(&merged[0].body).unwrap();
        assert_eq!(body["events"][2]["tag"], json!([1, 0]));
        assert_eq!(body["batch_id"], 2);
        assert_eq!(body["user_attributes"], json!({"member": 2}));
    }

    #[test]
    fn a_part_larger_than_the_cap_goes_alone() {
        let merged = merge(vec![part(0, 1, 0), part(1, 3, 500), part(2, 1, 0)], 400);
        let members: Vec<Vec<usize>> = merged
            .iter()
            .map(|m| m.events.iter().map(|e| e.0).collect())
            .collect();
        assert_eq!(members, [vec![0], vec![1, 1, 1], vec![2]]);
    }

    #[test]
    fn a_body_that_is_not_a_batch_goes_as_it_is() {
        let odd = Part {
            member: 1,
            accepted: 1,
            body: b"not json".to_vec(),
            events: vec![0],
        };
        let merged = merge(vec![part(0, 1, 0), odd, part(2, 1, 0)], 1 << 20);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged[1].body, b"not json");
    }

    proptest! {
        /// Every event goes exactly once, in order; a request is within the cap unless it is one
        /// part alone; its fields are its newest part's; its computed length is its length.
        #[test]
        fn merging_keeps_every_event_once_in_order_within_the_cap(
            shapes in proptest::collection::vec((0usize..4, 0usize..200), 0..12),
            cap in 100usize..3000,
        ) {
            let parts: Vec<Part> = shapes
                .iter()
                .enumerate()
                .map(|(m, &(events, pad))| part(m, events, pad))
                .collect();
            let expected: Vec<(usize, usize)> = parts
                .iter()
                .flat_map(|p| p.events.iter().map(move |&e| (p.member, e)))
                .collect();
            let merged = merge(parts, cap);
            let all: Vec<(usize, usize)> = merged.iter().flat_map(|m| m.events.clone()).collect();
            prop_assert_eq!(all, expected);
            let mut members_seen = 0;
            let mut last_fields: Option<usize> = None;
            for request in &merged {
                let body: Value = serde_json::from_slice(&request.body).unwrap();
                let tags: Vec<(usize, usize)> = body["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| serde_json::from_value(e["tag"].clone()).unwrap())
                    .collect();
                prop_assert_eq!(&tags, &request.events);
                let mut members: Vec<usize> = request.events.iter().map(|e| e.0).collect();
                members.dedup();
                if members.len() > 1 {
                    prop_assert!(request.body.len() <= cap, "{} > {cap}", request.body.len());
                }
                // The fields are the newest part's: no older than its newest event's part (a
                // newer part without events may follow it), and newer than the last request's.
                let batch_id = fields(&request.body)["batch_id"].as_u64().unwrap() as usize;
                if let Some(&newest) = members.last() {
                    prop_assert!(batch_id >= newest);
                }
                prop_assert!(last_fields.is_none_or(|last| batch_id > last));
                last_fields = Some(batch_id);
                members_seen += members.len();
            }
            // Parts without events leave no trace in `events`; the others are all there.
            prop_assert!(members_seen <= shapes.len());
        }
    }
}
