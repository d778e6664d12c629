//! The Android and iOS SDKs' endpoints: gzip uploads signed with the input's secret
//! (`/v2/{key}/events`) and the config request (`/v4/{key}/config`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::header::{ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::body::{decode_body, parse_json};
use super::response::{IngestError, reject};
use crate::model::batch::Channel;
use crate::model::mobile::{MobileOs, translate};
use crate::model::signed_date::SignedDate;
use crate::model::{Platform, now_ms};
use crate::pipeline::Document;
use crate::pipeline::catalog::InputEntry;
use crate::state::AppState;

const X_MP_SIGNATURE: HeaderName = HeaderName::from_static("x-mp-signature");

/// `POST /v2/{key}/events`: one upload batch, gzip, signed.
pub(crate) async fn events(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(input) = state.catalog().input_by_key(&key) else {
        return reject(&state, None, IngestError::forbidden());
    };
    match accept(&state, &input, &key, &headers, body).await {
        // Android deletes a batch only after parsing a JSON object from a 2xx answer.
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({}))).into_response(),
        Err(error) => reject(&state, Some(&input.id), error),
    }
}

async fn accept(
    state: &AppState,
    input: &InputEntry,
    key: &str,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(), IngestError> {
    let os = match input.platform {
        Platform::Android => MobileOs::Android,
        Platform::Ios => MobileOs::Ios,
        other => return Err(IngestError::wrong_platform(other, Platform::Ios)),
    };
    let limit = state.config.ingest.max_body_bytes;
    let body = body.map_err(|r| IngestError::from_body_rejection(&r, limit))?;
    let signed = Signed::from_headers(headers)?;
    // Before inflating: an old upload replayed costs no more than reading its headers.
    check_date(
        signed.date,
        now_ms() / 1000,
        state.config.ingest.mobile_max_clock_skew_secs,
    )?;
    let body = decode_body(headers, &body, limit)?;
    // The SDKs sign the default path, whatever path (CNAME, custom host) they actually call.
    signed.verify(&input.secret, &format!("/v2/{key}/events"), &body)?;
    let envelope = parse_json(&body)?;
    check_upload_platform(&envelope, input.platform)?;
    let mut document = translate(&envelope, os)
        .map_err(|e| IngestError::bad_request("invalid_batch", e.message))?;
    set_replay_key(&mut document, &signed.signature);
    state
        .pipeline
        .accept(input, vec![Document::single(document)], Channel::Native)
        .await?;
    Ok(())
}

/// An Android upload to an iOS key (or the reverse) is refused: the data would be mislabelled.
fn check_upload_platform(envelope: &Value, platform: Platform) -> Result<(), IngestError> {
    let said = envelope
        .get("di")
        .and_then(|d| d.get("dp"))
        .and_then(Value::as_str);
    let from = match said.map(str::to_ascii_lowercase).as_deref() {
        Some("android" | "firetv") => Platform::Android,
        Some("ios" | "tvos") => Platform::Ios,
        _ => return Ok(()),
    };
    if from == platform {
        Ok(())
    } else {
        Err(IngestError::wrong_platform(platform, from))
    }
}

/// What a mobile upload is signed with: the `Date` header and the `x-mp-signature` bytes.
#[derive(Debug)]
struct Signed<'h> {
    date: &'h str,
    signature: Vec<u8>,
}

impl<'h> Signed<'h> {
    /// Both headers, or 401 when one is missing (403 when the signature is not hex).
    fn from_headers(headers: &'h HeaderMap) -> Result<Self, IngestError> {
        let header = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let (Some(date), Some(signature)) =
            (header(&axum::http::header::DATE), header(&X_MP_SIGNATURE))
        else {
            return Err(IngestError::unsigned());
        };
        let signature = hex::decode(signature.trim()).map_err(|_| IngestError::bad_signature())?;
        Ok(Self { date, signature })
    }

    /// Checks the signature: hex HMAC-SHA256, keyed with the input's secret, of
    /// `POST\n{Date}\n{path}{uncompressed body}`.
    fn verify(&self, secret: &str, path: &str, body: &[u8]) -> Result<(), IngestError> {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|_| IngestError::bad_signature())?;
        mac.update(format!("POST\n{}\n{path}", self.date).as_bytes());
        mac.update(body);
        // `verify_slice` compares in constant time.
        mac.verify_slice(&self.signature)
            .map_err(|_| IngestError::bad_signature())
    }
}

/// Checks a request signed as the mobile SDKs sign every call: the signature over `path` (the
/// default path, whatever path was called) and the uncompressed `body`, and a `Date` within
/// `max_skew_secs` of now. IDSync uses it for the iOS SDK's modify, which carries no binding.
pub(crate) fn check_signed(
    headers: &HeaderMap,
    secret: &str,
    path: &str,
    body: &[u8],
    max_skew_secs: u64,
) -> Result<(), IngestError> {
    let signed = Signed::from_headers(headers)?;
    check_date(signed.date, now_ms() / 1000, max_skew_secs)?;
    signed.verify(secret, path, body)
}

/// Refuses a signed `Date` more than `max_skew_secs` from `now` (Unix seconds), so a captured
/// upload cannot be replayed later on.
fn check_date(date: &str, now: i64, max_skew_secs: u64) -> Result<(), IngestError> {
    let date = SignedDate::parse(date).ok_or_else(IngestError::bad_date)?;
    let off_by = date.seconds_from(now);
    if off_by > max_skew_secs {
        return Err(IngestError::clock_skew(off_by, max_skew_secs));
    }
    Ok(())
}

/// Gives the batch the key its replays are recognised by (the store keeps one batch per input
/// and `source_request_id`, on every node and across restarts): the SDK's batch `id` when it
/// sent one, else the signature. A replay carries the same `Date` and body, so the same
/// signature, and without the secret no other signature can be made for them.
fn set_replay_key(document: &mut Value, signature: &[u8]) {
    if let Value::Object(batch) = document {
        batch
            .entry("source_request_id")
            .or_insert_with(|| Value::from(format!("mobile-signature-{}", hex::encode(signature))));
    }
}

/// `GET /v4/{key}/config`: the answer both mobile SDKs accept (iOS insists on `dt: "ac"` and an
/// `ETag`), with no kits; `If-None-Match` with the current tag gets a 304.
pub(crate) async fn config(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(input) = state.catalog().input_by_key(&key) else {
        return IngestError::forbidden().into_response();
    };
    if !matches!(input.platform, Platform::Ios | Platform::Android) {
        return IngestError::wrong_platform(input.platform, Platform::Ios).into_response();
    }
    // One configuration per input, the same until Boson learns to serve kits: a stable tag.
    let tag = format!("\"{}-v1\"", input.id);
    let etag =
        HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("\"boson-v1\""));
    if headers
        .get(IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == tag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, [(ETAG, etag)]).into_response();
    }
    let body = json!({"dt": "ac", "id": uuid::Uuid::new_v4().to_string(), "ct": now_ms()});
    (StatusCode::OK, [(ETAG, etag)], Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(secret: &str, date: &str, path: &str, body: &[u8]) -> HeaderMap {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("POST\n{date}\n{path}").as_bytes());
        mac.update(body);
        let mut headers = HeaderMap::new();
        headers.insert(axum::http::header::DATE, date.parse().unwrap());
        headers.insert(
            X_MP_SIGNATURE,
            hex::encode(mac.finalize().into_bytes()).parse().unwrap(),
        );
        headers
    }

    #[test]
    fn signatures_are_checked_over_date_path_and_body() {
        let date = "Sat, 21 Nov 2026 10:00:00 GMT";
        let headers = signed("s3cret", date, "/v2/k/events", b"{}");
        let signed = Signed::from_headers(&headers).unwrap();
        assert!(signed.verify("s3cret", "/v2/k/events", b"{}").is_ok());
        assert!(signed.verify("other", "/v2/k/events", b"{}").is_err());
        assert!(signed.verify("s3cret", "/v2/k/events", b"{ }").is_err());
        assert!(Signed::from_headers(&HeaderMap::new()).is_err());
    }

    #[test]
    fn a_date_beyond_the_skew_is_refused_either_way() {
        let ten_am = 1_795_255_200;
        let check = |date: &str| check_date(date, ten_am, 600).map_err(|e| e.reason);
        assert_eq!(check("Sat, 21 Nov 2026 10:10:00 GMT"), Ok(()));
        assert_eq!(check("Sat, 21 Nov 2026 09:50:00 GMT"), Ok(()));
        assert_eq!(check("Sat, 21 Nov 2026 10:10:01 GMT"), Err("clock_skew"));
        assert_eq!(check("Sat, 21 Nov 2026 09:49:59 GMT"), Err("clock_skew"));
        assert_eq!(check("21/11/2026"), Err("bad_date"));
    }

    #[test]
    fn an_upload_is_known_by_its_id_else_by_its_signature() {
        let mut with_id = json!({"source_request_id": "batch-1"});
        set_replay_key(&mut with_id, &[0xab, 0xcd]);
        assert_eq!(with_id["source_request_id"], "batch-1");
        let mut without = json!({"events": []});
        set_replay_key(&mut without, &[0xab, 0xcd]);
        assert_eq!(without["source_request_id"], "mobile-signature-abcd");
    }
}
