//! Request bodies of the SDK-facing routes: JSON whatever the declared content type, gzip when
//! the mobile SDKs compress, and MPIDs as numbers or strings. Shared by ingest and IDSync.

use axum::http::HeaderMap;
use axum::http::header::CONTENT_ENCODING;
use serde_json::Value;

use super::response::IngestError;
use crate::model::kept_members::split_batch;
use crate::pipeline::Document;

/// Parses a JSON body (whatever its declared content type: the Web SDK sends `text/plain`).
pub(crate) fn parse_json(body: &[u8]) -> Result<Value, IngestError> {
    serde_json::from_slice(body).map_err(|e| {
        IngestError::bad_request(
            "malformed_json",
            format!("Request body is not valid JSON: {e}."),
        )
    })
}

/// An Events API batch body as one document, its members Boson only stores kept as the text
/// they came in (`model::kept_members`); a body that does not split so (malformed, not an
/// object, or refused by a `Value` parse) is parsed whole, which gives it the same answer and
/// error as before.
pub(crate) fn batch_document(body: &[u8]) -> Result<Document, IngestError> {
    match split_batch(body) {
        Some((members, kept)) => Ok(Document::split(String::new(), Value::Object(members), kept)),
        None => Ok(Document::single(parse_json(body)?)),
    }
}

/// The request body, gunzipped when `Content-Encoding: gzip` (the mobile SDKs compress uploads
/// and Android identity calls). The body limit holds for the decompressed body: it is the size
/// of the JSON that is documented (mParticle's 256 KB), and it bounds what a gzip bomb can
/// make us allocate. Inflating stops one byte past it.
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
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    let mut decoder = flate2::read::GzDecoder::new(body)
        .take(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1));
    decoder.read_to_end(&mut out).map_err(|e| {
        IngestError::bad_request("bad_gzip", format!("Request body is not valid gzip: {e}."))
    })?;
    if out.len() > limit {
        return Err(IngestError::too_large(limit));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use axum::http::HeaderValue;

    use super::*;

    fn gzipped(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_gzip_body_is_inflated_up_to_the_limit_and_no_further() {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let at_limit = vec![b' '; 1000];
        assert_eq!(
            decode_body(&headers, &gzipped(&at_limit), 1000).unwrap(),
            at_limit
        );
        let over = decode_body(&headers, &gzipped(&[b' '; 1001]), 1000).unwrap_err();
        assert_eq!(over.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(over.message.contains("1000 bytes"), "{}", over.message);
        let broken = decode_body(&headers, b"not gzip", 1000).unwrap_err();
        assert_eq!(broken.reason, "bad_gzip");
    }
}
