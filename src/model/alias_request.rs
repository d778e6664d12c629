//! Alias requests ("the data of one MPID belongs to another") as the SDKs send them and as
//! connections with `send_alias_requests` forward them. Pure: parsing and shaping only.
//!
//! Every SDK family sends the same document: `request_type: "alias"`, a `request_id`, the
//! `environment`, the public key, and `data` with the two MPIDs, the time range and optionally
//! the device stamp and `scope`. The outbound form keeps that shape, the document mParticle's
//! IDSync takes, because a receiver that already handles mParticle alias requests can read it
//! unchanged; it drops the input's key, makes the MPIDs numbers (as every outbound `mpid`) and
//! adds when Boson received it.
//!
//! The stored form is the outbound one: it rides the batch log and the delivery queue like a
//! batch, and the filter tells it apart by its `request_type`, which normalisation removes from
//! every inbound batch so that no client batch can pass itself off as an alias request.

use serde_json::{Map, Value, json};

use super::ids::Mpid;

/// The `request_type` that marks a stored alias request.
pub(crate) const REQUEST_TYPE: &str = "alias";

/// Longest `request_id`, `device_application_stamp` or `scope` kept (a UUID is 36).
const MAX_TEXT_CHARS: usize = 256;

/// An alias request, parsed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AliasRequest {
    pub(crate) source_mpid: Mpid,
    pub(crate) destination_mpid: Mpid,
    pub(crate) start_ms: Option<i64>,
    pub(crate) end_ms: Option<i64>,
    /// The SDK's id for the request: a retried request carries the same one.
    pub(crate) request_id: Option<String>,
    pub(crate) received_ms: i64,
    /// The request as connections receive it.
    pub(crate) document: Value,
}

/// Whether a stored document is an alias request rather than a batch.
pub(crate) fn is_alias(document: &Value) -> bool {
    document.get("request_type").and_then(Value::as_str) == Some(REQUEST_TYPE)
}

/// Parses an alias request body received at `received_ms`, or says what is wrong with it.
pub(crate) fn parse(body: &[u8], received_ms: i64) -> Result<AliasRequest, &'static str> {
    let request: Map<String, Value> = serde_json::from_slice(body)
        .ok()
        .filter(|r: &Map<String, Value>| r.get("data").is_some_and(Value::is_object))
        .ok_or("Alias request must be JSON with data.source_mpid and data.destination_mpid.")?;
    let data = &request["data"];
    let (Some(source_mpid), Some(destination_mpid)) = (
        Mpid::from_json(&data["source_mpid"]),
        Mpid::from_json(&data["destination_mpid"]),
    ) else {
        return Err("data.source_mpid and data.destination_mpid must be 64-bit integers.");
    };
    let start_ms = data.get("start_unixtime_ms").and_then(Value::as_i64);
    let end_ms = data.get("end_unixtime_ms").and_then(Value::as_i64);
    let environment = match request.get("environment").and_then(Value::as_str) {
        None => "production",
        Some(env @ ("production" | "development")) => env,
        Some(_) => return Err("environment must be \"production\" or \"development\"."),
    };
    let request_id = text(request.get("request_id"));
    let mut outbound = Map::new();
    outbound.insert("source_mpid".into(), json!(source_mpid.get()));
    outbound.insert("destination_mpid".into(), json!(destination_mpid.get()));
    outbound.insert("start_unixtime_ms".into(), json!(start_ms));
    outbound.insert("end_unixtime_ms".into(), json!(end_ms));
    for key in ["device_application_stamp", "scope"] {
        if let Some(value) = text(data.get(key)) {
            outbound.insert(key.into(), json!(value));
        }
    }
    let document = json!({
        "request_type": REQUEST_TYPE,
        "request_id": request_id,
        "environment": environment,
        "timestamp_unixtime_ms": received_ms,
        "data": outbound,
    });
    Ok(AliasRequest {
        source_mpid,
        destination_mpid,
        start_ms,
        end_ms,
        request_id,
        received_ms,
        document,
    })
}

/// A short printable string, or nothing: anything else is not forwarded.
fn text(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .filter(|s| s.chars().count() <= MAX_TEXT_CHARS && !s.chars().any(char::is_control))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: &Value) -> Vec<u8> {
        serde_json::to_vec(value).unwrap()
    }

    #[test]
    fn the_web_sdks_request_becomes_the_outbound_document() {
        let web = json!({"request_type": "alias", "request_id": "r-1", "environment": "development",
                         "api_key": "us1-key",
                         "data": {"source_mpid": "-17", "destination_mpid": "42", "start_unixtime_ms": 5,
                                  "end_unixtime_ms": 9, "device_application_stamp": "das", "scope": "mpid"}});
        let parsed = parse(&body(&web), 1000).unwrap();
        assert_eq!(parsed.source_mpid, Mpid::new(-17));
        assert_eq!(parsed.destination_mpid, Mpid::new(42));
        assert_eq!((parsed.start_ms, parsed.end_ms), (Some(5), Some(9)));
        assert_eq!(parsed.request_id.as_deref(), Some("r-1"));
        assert_eq!(
            parsed.document,
            json!({"request_type": "alias", "request_id": "r-1", "environment": "development",
                   "timestamp_unixtime_ms": 1000,
                   "data": {"source_mpid": -17, "destination_mpid": 42, "start_unixtime_ms": 5,
                            "end_unixtime_ms": 9, "device_application_stamp": "das", "scope": "mpid"}})
        );
        assert!(is_alias(&parsed.document));
    }

    #[test]
    fn what_a_request_leaves_out_or_gets_wrong() {
        let minimal = json!({"data": {"source_mpid": 1, "destination_mpid": 2}});
        let parsed = parse(&body(&minimal), 7).unwrap();
        assert_eq!(parsed.request_id, None);
        assert_eq!(parsed.document["environment"], "production");
        assert_eq!(parsed.document["data"]["start_unixtime_ms"], Value::Null);
        let odd_stamp = json!({"data": {"source_mpid": 1, "destination_mpid": 2,
                                        "device_application_stamp": "a\u{0}b", "scope": 3}});
        let parsed = parse(&body(&odd_stamp), 7).unwrap();
        assert!(
            parsed.document["data"]
                .get("device_application_stamp")
                .is_none()
        );
        assert!(parsed.document["data"].get("scope").is_none());

        for (bad, why) in [
            (json!([]), "JSON with data"),
            (json!({"data": "x"}), "JSON with data"),
            (json!({"data": {"source_mpid": 1}}), "64-bit integers"),
            (
                json!({"data": {"source_mpid": "x", "destination_mpid": 2}}),
                "64-bit integers",
            ),
            (
                json!({"environment": "staging", "data": {"source_mpid": 1, "destination_mpid": 2}}),
                "environment",
            ),
        ] {
            let error = parse(&body(&bad), 7).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn only_a_stored_alias_request_is_one() {
        assert!(!is_alias(&json!({"events": []})));
        assert!(!is_alias(&json!({"request_type": "identify"})));
        assert!(is_alias(&json!({"request_type": "alias"})));
    }
}
