//! Standard Webhooks signatures (standardwebhooks.com): each request carries `webhook-id`,
//! `webhook-timestamp` (Unix seconds) and `webhook-signature`, an HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}` keyed with the output's secret, written
//! `v1,<base64>`; several signatures are separated by spaces. A secret is `whsec_` and the
//! base64 of its key.
//!
//! Signing is on the delivery hot path (one request per event in real-time mode), so a key's
//! HMAC state (the hashed inner and outer pads) is computed once per secret, when the output is
//! loaded, and each request clones it and hashes only its own bytes.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// What every Standard Webhooks secret starts with.
pub(crate) const SECRET_PREFIX: &str = "whsec_";
/// Bytes of key in a secret Boson issues: the specification asks for 24 to 64, and 32 is the
/// size of the HMAC-SHA256 output.
pub(crate) const SECRET_KEY_BYTES: usize = 32;
/// The signature scheme's version tag.
const VERSION: &str = "v1,";
/// Characters of one `v1,<base64>` signature (32 bytes are 44 base64 characters).
const SIGNATURE_CHARS: usize = 3 + 44;

/// A new random secret, `whsec_` + base64 of `SECRET_KEY_BYTES` bytes from the thread's CSPRNG.
pub(crate) fn generate_secret() -> String {
    let mut key = [0u8; SECRET_KEY_BYTES];
    rand::rng().fill_bytes(&mut key);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// Why a stored secret cannot sign.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SecretError {
    #[error("a signing secret must start with `whsec_`")]
    Prefix,
    #[error("a signing secret's key must be base64: {0}")]
    Base64(String),
    #[error("a signing secret's key must not be empty")]
    Empty,
}

/// An HMAC-SHA256 keyed with one secret, its key schedule done once. (No `Debug`: it is the
/// key.)
#[derive(Clone)]
pub(crate) struct SigningKey(Hmac<Sha256>);

impl SigningKey {
    /// The key of a `whsec_…` secret.
    pub(crate) fn from_secret(secret: &str) -> Result<Self, SecretError> {
        let encoded = secret
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::Prefix)?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|e| SecretError::Base64(e.to_string()))?;
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        // HMAC accepts keys of any length; the error is unreachable for it.
        let mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| SecretError::Empty)?;
        Ok(Self(mac))
    }

    /// Appends `v1,<base64 signature>` of one request to `out`.
    fn sign_into(&self, id: &str, timestamp: &str, body: &[u8], out: &mut String) {
        let mut mac = self.0.clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        // Encoded on the stack (32 bytes are always 44 characters), then copied once into
        // `out`, which was sized for it: no buffer grows and nothing is allocated here.
        let mut encoded = [0u8; SIGNATURE_CHARS - VERSION.len()];
        let written = STANDARD
            .encode_slice(mac.finalize().into_bytes(), &mut encoded)
            .unwrap_or(0);
        out.push_str(VERSION);
        out.push_str(std::str::from_utf8(&encoded[..written]).unwrap_or_default());
    }
}

/// What signs one output's requests: its current key and, for a while after a rotation, the
/// key it replaced, so receivers can move to the new secret without refusing a request.
#[derive(Clone)]
pub(crate) struct Signer {
    current: SigningKey,
    previous: Option<SigningKey>,
    /// Unix milliseconds until which the previous key signs too.
    previous_until_ms: i64,
}

impl std::fmt::Debug for Signer {
    // The keys are left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("previous", &self.previous.is_some())
            .field("previous_until_ms", &self.previous_until_ms)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// Signs with `current`, and with `previous` as well until `previous_until_ms`.
    pub(crate) fn new(current: SigningKey, previous: Option<(SigningKey, i64)>) -> Self {
        let (previous, previous_until_ms) = match previous {
            Some((key, until)) => (Some(key), until),
            None => (None, i64::MIN),
        };
        Self {
            current,
            previous,
            previous_until_ms,
        }
    }

    /// The `webhook-signature` value of one request sent at `now_ms`: the current key's
    /// signature, then (space-separated) the previous key's while the overlap lasts.
    pub(crate) fn signature(&self, id: &str, timestamp: &str, body: &[u8], now_ms: i64) -> String {
        let previous = self
            .previous
            .as_ref()
            .filter(|_| now_ms < self.previous_until_ms);
        let mut value = String::with_capacity(2 * SIGNATURE_CHARS + 1);
        self.current.sign_into(id, timestamp, body, &mut value);
        if let Some(previous) = previous {
            value.push(' ');
            previous.sign_into(id, timestamp, body, &mut value);
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed with the reference `standardwebhooks` package (PyPI, 1.1.0).
    const SECRET: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const SIGNED: &str = "v1,wyQzbvdCf1hxOiQuBOLs8EK/iy9md6J73CCjejqrZ+8=";
    const OLD_SECRET: &str = "whsec_ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoM=";
    const OLD_SIGNED: &str = "v1,VwvpYviOFH6bXoT0jv400oHredkhjySbME91ZHgTwnk=";
    const BODY: &[u8] = br#"{"events":[]}"#;

    fn key(secret: &str) -> SigningKey {
        SigningKey::from_secret(secret).expect("a valid secret")
    }

    #[test]
    fn signs_like_the_reference_library() {
        let signer = Signer::new(key(SECRET), None);
        assert_eq!(signer.signature("42-0", "1700000000", BODY, 0), SIGNED);
        // Every byte is signed: another id, time or body is another signature.
        assert_ne!(signer.signature("42-1", "1700000000", BODY, 0), SIGNED);
        assert_ne!(signer.signature("42-0", "1700000001", BODY, 0), SIGNED);
        assert_ne!(signer.signature("42-0", "1700000000", b"{}", 0), SIGNED);
    }

    #[test]
    fn the_previous_key_signs_second_until_the_overlap_ends() {
        let signer = Signer::new(key(SECRET), Some((key(OLD_SECRET), 5_000)));
        assert_eq!(
            signer.signature("42-0", "1700000000", BODY, 4_999),
            format!("{SIGNED} {OLD_SIGNED}")
        );
        assert_eq!(signer.signature("42-0", "1700000000", BODY, 5_000), SIGNED);
    }

    #[test]
    fn generated_secrets_are_random_keys_of_32_bytes() {
        let (a, b) = (generate_secret(), generate_secret());
        assert_ne!(a, b);
        for secret in [a, b] {
            let encoded = secret.strip_prefix(SECRET_PREFIX).expect("prefix");
            assert_eq!(STANDARD.decode(encoded).expect("base64").len(), 32);
            assert!(SigningKey::from_secret(&secret).is_ok());
        }
    }

    /// The signature alone (HMAC clone, hashing, base64, the header string), in this thread's
    /// CPU time, run by hand in a release build:
    /// `cargo test --release --lib signature_cost -- --ignored --nocapture`. No time is asserted.
    #[test]
    #[ignore = "a timing loop to run by hand"]
    fn signature_cost_per_request() {
        let cpu = || {
            let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
            let ns: u64 = stat
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("ns");
            std::time::Duration::from_nanos(ns)
        };
        let signer = Signer::new(key(SECRET), None);
        for size in [600, 2500, 16 * 1024, 256 * 1024] {
            // About a second of hashing per size.
            let rounds = if size > 100_000 { 4_000u32 } else { 200_000 };
            let body = vec![b'x'; size];
            let started = cpu();
            for _ in 0..rounds {
                let signature = signer.signature("1234567-0", "1700000000", &body, 0);
                assert_eq!(signature.len(), SIGNATURE_CHARS);
                std::hint::black_box(signature);
            }
            println!(
                "{size:>5} byte body: {:?} per signature",
                (cpu() - started) / rounds
            );
        }
    }

    #[test]
    fn malformed_secrets_are_refused() {
        let refused = |secret: &str| SigningKey::from_secret(secret).err();
        assert_eq!(refused("AAEC"), Some(SecretError::Prefix));
        assert_eq!(refused("whsec_"), Some(SecretError::Empty));
        assert!(matches!(refused("whsec_!!"), Some(SecretError::Base64(_))));
    }
}
