//! Security headers on every dashboard and admin API answer: the dashboard may run only its own
//! scripts and styles (it has no inline ones, and builds every element with DOM calls), may talk
//! only to its own origin, and may not be framed, so an injected name can neither run script
//! nor be clickjacked; browsers may not guess content types or leak URLs in `Referer`.

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::middleware::Next;
use axum::response::Response;

/// Everything is refused unless named: scripts, styles, images, fetches and the Live Stream's
/// `EventSource` from this origin only; no `<base>`, no framing by anyone.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Adds the security headers to a response (a middleware for `axum::middleware::from_fn`).
pub(super) async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    // For browsers that predate `frame-ancestors`.
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}
