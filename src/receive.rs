//! `boson receive`: a small webhook receiver for trying Boson out. It listens on loopback,
//! answers 200 to every request (so Boson counts each delivery as done and never retries) and
//! prints each one on stdout as `METHOD /path BODY`, the body as one line of JSON when it is
//! JSON (else as text). Not for production: it keeps nothing and checks no signature.

use std::future::Future;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::http::{Method, StatusCode, Uri};

/// Serves on `127.0.0.1:port` until `shutdown` completes.
pub async fn run(
    port: u16,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("failed to listen on {address}"))?;
    // On stderr, so stdout holds only the requests (a script can read it line by line).
    eprintln!(
        "Receiving webhooks on http://{address}/ (every request is answered 200 and printed)"
    );
    let app = Router::new().fallback(print_request);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .context("the receiver failed")
}

async fn print_request(method: Method, uri: Uri, body: Bytes) -> StatusCode {
    let line = format!("{method} {uri} {}", one_line(&body));
    // Flushed per request: the output is often a pipe or a file that someone is watching.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
    StatusCode::OK
}

/// The body as compact JSON when it parses, else as text with its line breaks escaped, so each
/// request stays one line.
fn one_line(body: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(json) => json.to_string(),
        Err(_) => String::from_utf8_lossy(body).escape_debug().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn json_is_printed_compact_and_text_on_one_line() {
        assert_eq!(one_line(b"{ \"a\" :\n [1, 2] }"), r#"{"a":[1,2]}"#);
        assert_eq!(one_line(b"not json\nsecond"), r"not json\nsecond");
        assert_eq!(one_line(b""), "");
    }
}
