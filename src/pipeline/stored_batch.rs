//! A stored batch read once for delivery: its document, and the bytes each of its events was
//! stored as, so the filter can send an event it leaves unchanged without writing it again (see
//! [`super::request_body`]).
//!
//! The batch's object and its `events` array are walked by hand ([`crate::model::json_walk`]),
//! each key and value in them read by serde_json as one value of a stream, which tells where
//! each event's bytes end. Scanning the body a second time for the events' bytes (as
//! `RawValue`s) cost as many instructions as writing the events again. The walk refuses what
//! serde_json would refuse in the body, depth included (ingest stores nothing that deep, see
//! [`crate::model::nesting`], but a batch stored before it checked may be).
//!
//! [`StoredBatch::read_outlines`] reads each event as its outline ([`super::event_outline`]),
//! for settings that change no event.

use serde_json::{Map, Value};

use super::event_outline::OutlinedEvent;
use crate::model::json_walk::{Cursor, too_deep};

/// A stored batch body, read.
#[derive(Debug)]
pub(crate) struct StoredBatch<'a> {
    /// The whole batch, parsed (what `serde_json::from_slice` gives), events included: the
    /// filter decides from it, and writes from it what it changes.
    pub(crate) document: Value,
    /// Each event's bytes in the body, in order; `None` if the body has no `events` array.
    events: Option<Vec<&'a [u8]>>,
}

impl<'a> StoredBatch<'a> {
    /// Reads `body`: the document is the one `serde_json::from_slice` gives, and so is the error
    /// (past serde_json's depth limit too).
    pub(crate) fn read(body: &'a [u8]) -> serde_json::Result<Self> {
        Self::read_as(body, Events::Whole)
    }

    /// [`read`](Self::read), but with each event of the `events` array as its outline
    /// ([`super::event_outline`]): only for settings under which the filter reads no more of an
    /// event (`filter::outlines_suffice`), which then sends every event as its stored bytes.
    /// What it refuses, and its errors, are `read`'s, but for a number beyond `f64`'s range or
    /// a lone surrogate escape (`"\ud800"`) in a member an outline skips, which serde_json skips
    /// unchecked: a stored batch holds neither (ingest refuses both, in events it keeps as sent
    /// too: `model::kept_members` checks them as a `Value` parse does).
    pub(crate) fn read_outlines(body: &'a [u8]) -> serde_json::Result<Self> {
        Self::read_as(body, Events::Outlined)
    }

    fn read_as(body: &'a [u8], events: Events) -> serde_json::Result<Self> {
        match walk(body, events) {
            Some(read) => Ok(read),
            // Not an object as the walk reads one: whatever serde_json makes of it (usually
            // the error it names), without events' bytes.
            None => serde_json::from_slice(body).map(|document| Self {
                document,
                events: None,
            }),
        }
    }

    /// Each event's stored bytes, in order, when the body has an `events` array.
    pub(crate) fn stored_events(&self) -> Option<&[&'a [u8]]> {
        self.events.as_deref()
    }
}

/// How the events of an `events` array are read.
#[derive(Debug, Clone, Copy)]
enum Events {
    Whole,
    Outlined,
}

/// The batch if `body` is one JSON object; `None` for anything else or any error (left to
/// serde_json to report). A key given twice keeps its last value, as in serde_json's `Map`.
fn walk(body: &[u8], how: Events) -> Option<StoredBatch<'_>> {
    let mut cursor = Cursor::new(std::str::from_utf8(body).ok()?);
    let mut document = Map::new();
    let mut events = None;
    cursor.object(|key, cursor| {
        if key == "events" && cursor.peek() == Some(b'[') {
            let (parsed, stored) = array(cursor, how)?;
            document.insert(key, Value::Array(parsed));
            events = Some(stored);
        } else {
            // A field's value is the body's second level.
            let (value, _) = cursor.nested_value(2)?;
            if key == "events" {
                events = None;
            }
            document.insert(key, value);
        }
        Some(())
    })?;
    cursor.at_end().then_some(StoredBatch {
        document: Value::Object(document),
        events,
    })
}

/// An event's outline, if serde_json reads the event (`text`) whole: an outline skips
/// members without checking their depth.
fn outlined(text: &str, outline: Value, level: usize) -> Option<Value> {
    (!too_deep(text, level)).then_some(outline)
}

/// The `events` array that comes next: its values, parsed (whole or as outlines), and the
/// bytes of each.
fn array<'a>(cursor: &mut Cursor<'a>, how: Events) -> Option<(Vec<Value>, Vec<&'a [u8]>)> {
    let (mut parsed, mut stored) = (Vec::new(), Vec::new());
    cursor.array(|cursor| {
        // An event is the body's third level.
        let (value, text) = match how {
            Events::Whole => cursor.nested_value(3)?,
            Events::Outlined => {
                let (OutlinedEvent(outline), text) = cursor.value::<OutlinedEvent>()?;
                (outlined(text, outline, 3)?, text)
            }
        };
        parsed.push(value);
        stored.push(text.as_bytes());
        Some(())
    })?;
    Some((parsed, stored))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The walk's document and error are serde_json's, and each event's bytes read as the event.
    fn check(body: &[u8]) {
        let read = StoredBatch::read(body);
        let expected = serde_json::from_slice::<Value>(body);
        match (&read, &expected) {
            (Ok(read), Ok(expected)) => {
                assert_eq!(&read.document, expected);
                if let Some(stored) = read.stored_events() {
                    let events = expected["events"].as_array().expect("an events array");
                    assert_eq!(stored.len(), events.len());
                    for (bytes, event) in stored.iter().zip(events) {
                        let reread: Value = serde_json::from_slice(bytes).expect("an event");
                        assert_eq!(&reread, event);
                    }
                }
            }
            (Err(read), Err(expected)) => assert_eq!(read.to_string(), expected.to_string()),
            _ => panic!("read {read:?}, serde_json {expected:?}"),
        }
    }

    /// Read as outlines, the body reads as it reads whole (the same error, if any), but for
    /// each event, which is the outline of the whole event.
    fn check_outlines(body: &[u8]) {
        let (outlines, whole) = (StoredBatch::read_outlines(body), StoredBatch::read(body));
        match (&outlines, &whole) {
            (Ok(outlines), Ok(whole)) => {
                assert_eq!(outlines.stored_events(), whole.stored_events());
                let without_events = |batch: &StoredBatch<'_>| {
                    let mut document = batch.document.clone();
                    if let Some(fields) = document.as_object_mut() {
                        fields.remove("events");
                    }
                    document
                };
                assert_eq!(without_events(outlines), without_events(whole));
                match (&outlines.document["events"], &whole.document["events"]) {
                    (Value::Array(outlined), Value::Array(events)) if whole.events.is_some() => {
                        assert_eq!(outlined.len(), events.len());
                        for (outline, event) in outlined.iter().zip(events) {
                            let text = serde_json::to_string(event).expect("serialisable");
                            let expected: OutlinedEvent =
                                serde_json::from_str(&text).expect("an event");
                            assert_eq!(outline, &expected.0);
                        }
                    }
                    (outlined, events) => assert_eq!(outlined, events),
                }
            }
            (Err(outlines), Err(whole)) => assert_eq!(outlines.to_string(), whole.to_string()),
            _ => panic!("outlines {outlines:?}, whole {whole:?}"),
        }
    }

    #[test]
    fn outlines_read_what_the_whole_read_reads() {
        let event = r#"{"event_type":"custom_event","n":[1,{"b":"\u00e9"}],"data":{"event_name":"e","custom_attributes":{"x":1.5}}}"#;
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        for body in [
            format!(r#"{{"mpid":5,"events":[{event},{event},3,"s",null]}}"#),
            format!(r#"{{"events":[{event}],"events":[]}}"#),
            format!(r#"{{"events":[{{"a":{}}}]}}"#, nested(123)),
            format!(r#"{{"events":[{{"a":{}}}]}}"#, nested(124)),
            format!(r#"{{"events":[{{"a":{}}}]}}"#, nested(2000)),
            format!(r#"{{"events":[{{"a":"{}"}}]}}"#, "x".repeat(300)),
        ] {
            check_outlines(body.as_bytes());
        }
        // Invalid UTF-8 in a member the outline skips is refused as the whole read refuses it.
        let mut invalid = br#"{"events":[{"a":"xx"}]}"#.to_vec();
        invalid[17] = 0xff;
        check_outlines(&invalid);
        assert!(StoredBatch::read_outlines(&invalid).is_err());
    }

    #[test]
    fn the_walk_reads_what_serde_json_reads() {
        for body in [
            r#"{"events":[{"a":1},{"b":[2,3]}],"mpid":5}"#,
            r#" { "mpid" : 1 , "events" : [ { "a" : "x" } , 2.5e3 , null , "s" ] } "#,
            r#"{"events":[]}"#,
            r#"{}"#,
            r#"{"events":null}"#,
            r#"{"events":[1],"events":[2,3]}"#,
            r#"{"events":[1],"events":{"a":1}}"#,
            r#"{"request_type":"alias","data":{"source_mpid":1}}"#,
            r#"{"k\u00e9\"y":"v\n","events":[{"\\":"\ud83d\ude00"}]}"#,
            r#"[1,2]"#,
            r#""text""#,
            r#"{"events":[1,]}"#,
            r#"{"events":[1 2]}"#,
            r#"{"a":1}x"#,
            r#"{"a" 1}"#,
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"events":[tru]}"#,
            r#"{"a":"#,
            "",
        ] {
            check(body.as_bytes());
            check_outlines(body.as_bytes());
        }
        // Nested to serde_json's limit (127 levels) and one past it, in an event (level 3
        // down) and in another field (level 2 down): each is parsed as a value of its own.
        let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
        for levels in [125, 126] {
            check(format!(r#"{{"events":[{{"a":1}},{}]}}"#, nested(levels)).as_bytes());
            check(format!(r#"{{"mpid":1,"a":{}}}"#, nested(levels + 1)).as_bytes());
            // A key given twice: the `Value` keeps the shallow last one, the text nests deeper.
            let repeated = format!(r#"{{"b":{},"b":1}}"#, nested(levels));
            check(format!(r#"{{"a":{repeated}}}"#).as_bytes());
            check_outlines(format!(r#"{{"events":[{repeated}]}}"#).as_bytes());
        }
    }

    #[test]
    fn a_stored_batch_gives_each_event_as_written() {
        let document = json!({"events": [{"event_type": "custom_event", "data": {"n": 0.1}},
                                         {"event_type": "screen_view"}], "mpid": 7});
        let body = serde_json::to_vec(&document).expect("serialisable");
        let read = StoredBatch::read(&body).expect("readable");
        let stored = read.stored_events().expect("events");
        assert_eq!(
            stored[0],
            br#"{"data":{"n":0.1},"event_type":"custom_event"}"#
        );
        assert_eq!(stored[1], br#"{"event_type":"screen_view"}"#);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_document_reads_as_serde_json_reads_it(
            fields in proptest::collection::btree_map("[a-z]{1,3}", arb_json(), 0..5),
            events in proptest::option::of(proptest::collection::vec(arb_json(), 0..6)),
            pretty in any::<bool>(),
        ) {
            let mut document: Map<String, Value> = fields.into_iter().collect();
            if let Some(events) = events {
                document.insert("events".into(), Value::from(events));
            }
            let document = Value::Object(document);
            let body = if pretty {
                serde_json::to_vec_pretty(&document)
            } else {
                serde_json::to_vec(&document)
            };
            let body = body.expect("serialisable");
            check(&body);
            check_outlines(&body);
        }
    }
}
