//! HTTP Basic authentication of Events API requests with an input's API key and secret:
//! a missing header is 401, a present but wrong one 403 (spec §1.2).

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::response::IngestError;
use crate::pipeline::catalog::{Catalog, InputEntry};

/// Finds the input whose key and secret the request carries.
pub(crate) fn authenticate(
    catalog: &Catalog,
    headers: &HeaderMap,
) -> Result<InputEntry, IngestError> {
    let header = headers
        .get(AUTHORIZATION)
        .ok_or_else(IngestError::unauthorized)?;
    let (key, secret) = parse_basic(header.as_bytes()).ok_or_else(IngestError::forbidden)?;
    let input = catalog
        .input_by_key(&key)
        .ok_or_else(IngestError::forbidden)?;
    if constant_time_eq(input.secret.as_bytes(), secret.as_bytes()) {
        Ok(input)
    } else {
        Err(IngestError::forbidden())
    }
}

fn parse_basic(header: &[u8]) -> Option<(String, String)> {
    let header = std::str::from_utf8(header).ok()?;
    let (scheme, encoded) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (key, secret) = decoded.split_once(':')?;
    Some((key.to_owned(), secret.to_owned()))
}

/// Compares secrets without leaking, through timing, how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_parsed() {
        let header = format!("Basic {}", STANDARD.encode("key:sec:ret"));
        assert_eq!(
            parse_basic(header.as_bytes()),
            Some(("key".into(), "sec:ret".into()))
        );
        assert_eq!(parse_basic(b"Bearer abc"), None);
        assert_eq!(parse_basic(b"Basic !!!"), None);
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
