//! CORS for the browser-facing routes. The Web SDK uploads events as `text/plain` (no preflight)
//! but calls IDSync with `application/json` and an `x-mp-key` header, so every identity call is
//! preceded by a preflight; without these answers the SDK never gets an MPID and sends nothing.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::pipeline::catalog::InputEntry;

/// IDSync's API key header.
pub(crate) const X_MP_KEY: HeaderName = HeaderName::from_static("x-mp-key");
/// Identity cache lifetime the SDK reads when its `cacheIdentity` flag is on.
const X_MP_MAX_AGE: HeaderName = HeaderName::from_static("x-mp-max-age");

/// Whether a request may use `input`: requests without an `Origin` (not from a browser) always
/// may; browser requests only from the input's allowed origins, when it has a list.
pub(crate) fn origin_allowed(input: &InputEntry, headers: &HeaderMap) -> Result<(), String> {
    match headers
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or_default())
    {
        Some(origin) if !input.settings.allows(origin) => Err(origin.to_owned()),
        _ => Ok(()),
    }
}

/// Preflights are answered for any origin (they carry no API key to look the input up by);
/// the requests themselves are then checked with [`origin_allowed`].
/// Any origin, the methods and headers the SDKs use. (Credentials are never sent by the SDK.)
pub(crate) fn layer() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::mirror_request())
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([header::CONTENT_TYPE, header::ACCEPT, X_MP_KEY])
        .expose_headers([X_MP_MAX_AGE])
        .max_age(Duration::from_secs(3600))
}
