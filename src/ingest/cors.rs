//! CORS for the browser-facing routes. The Web SDK uploads events as `text/plain` (no preflight)
//! but calls IDSync with `application/json` and an `x-mp-key` header, so every identity call is
//! preceded by a preflight; without these answers the SDK never gets an MPID and sends nothing.

use std::time::Duration;

use axum::http::{HeaderName, Method, header};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// IDSync's API key header.
pub(crate) const X_MP_KEY: HeaderName = HeaderName::from_static("x-mp-key");
/// Identity cache lifetime the SDK reads when its `cacheIdentity` flag is on.
const X_MP_MAX_AGE: HeaderName = HeaderName::from_static("x-mp-max-age");

/// Any origin, the methods and headers the SDKs use. (Credentials are never sent by the SDK.)
pub(crate) fn layer() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::mirror_request())
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([header::CONTENT_TYPE, header::ACCEPT, X_MP_KEY])
        .expose_headers([X_MP_MAX_AGE])
        .max_age(Duration::from_secs(3600))
}
