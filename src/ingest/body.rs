//! Request bodies of the SDK-facing routes: JSON whatever the declared content type, gzip when
//! the mobile SDKs compress, and MPIDs as numbers or strings. Shared by ingest and IDSync.

use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use serde_json::Value;

use super::response::IngestError;
use crate::model::ids::Mpid;

/// Parses a JSON body (whatever its declared content type: the Web SDK sends `text/plain`).
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, IngestError> {
    serde_json::from_slice(body).map_err(|e| {
        IngestError::bad_request(
            "malformed_json",
            format!("Request body is not valid JSON: {e}."),
        )
    })
}

/// The request body, gunzipped when `Content-Encoding: gzip` (the mobile SDKs compress uploads
/// and Android identity calls). The decompressed size is bounded too, against gzip bombs.
pub(crate) fn decode_body(
    headers: &HeaderMap,
    body: &[u8],
    limit: usize,
) -> Result<Vec<u8>, IngestError> {
    use std::io::Read;
    let gzip = headers
        .get(CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("gzip"));
    if !gzip {
        return Ok(body.to_vec());
    }
    // Compressed JSON expands about tenfold; allow that much of the body limit.
    let ceiling = limit.saturating_mul(10);
    let mut out = Vec::with_capacity(body.len() * 4);
    let mut decoder =
        flate2::read::GzDecoder::new(body).take(u64::try_from(ceiling).unwrap_or(u64::MAX) + 1);
    decoder.read_to_end(&mut out).map_err(|e| {
        IngestError::bad_request("bad_gzip", format!("Request body is not valid gzip: {e}."))
    })?;
    if out.len() > ceiling {
        return Err(IngestError::too_large(ceiling));
    }
    Ok(out)
}

/// An MPID sent as a number or as a decimal string (the Web SDK keeps MPIDs as strings).
pub(crate) fn mpid_of(value: &Value) -> Option<Mpid> {
    match value {
        Value::Number(n) => n.as_i64().map(Mpid::new),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}
