//! Device bindings: proof that a device was answered a given MPID by IDSync, so that only that
//! device may `/modify` the user's identities.
//!
//! IDSync is called with a public key, so the key proves nothing about the caller. What the SDKs
//! do give back is the answer's `context`: the Web and Android SDKs keep the `context` of their
//! last successful identify, login or logout and send it with every later IDSync request,
//! modify included. Boson puts a binding there: `b1.{mpid}.{issued_ms}.{tag}`, where the tag is
//! an HMAC-SHA256, keyed with the input's secret (which never leaves the server for web inputs),
//! of the input, the MPID and the time of issue. Nothing is stored: any node that knows the
//! input's secret can check a binding, and rotating the secret ends every binding (the SDKs get
//! new ones at their next identify, which they make at every start).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::model::ids::Mpid;

const VERSION: &str = "b1";

/// Why a binding does not let a request modify a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No context, or one that is not a binding Boson issued.
    Missing,
    /// A binding for another MPID.
    OtherUser,
    /// A binding older than the configured lifetime (or from the future).
    Expired,
}

/// Issues a binding of `mpid` for the input whose secret is `secret`.
pub(crate) fn issue(secret: &str, input: &str, mpid: Mpid, now_ms: i64) -> String {
    let tag = URL_SAFE_NO_PAD.encode(tag_of(secret, input, mpid, now_ms).finalize().into_bytes());
    format!("{VERSION}.{mpid}.{now_ms}.{tag}")
}

/// Checks that `context` is a binding of `mpid` issued for this input at most `max_age_ms` ago.
pub(crate) fn check(
    context: Option<&str>,
    secret: &str,
    input: &str,
    mpid: Mpid,
    now_ms: i64,
    max_age_ms: i64,
) -> Result<(), Refusal> {
    let context = context.ok_or(Refusal::Missing)?;
    let mut parts = context.split('.');
    let (Some(VERSION), Some(bound), Some(issued), Some(tag), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(Refusal::Missing);
    };
    let bound: Mpid = bound.parse().map_err(|_| Refusal::Missing)?;
    let issued: i64 = issued.parse().map_err(|_| Refusal::Missing)?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| Refusal::Missing)?;
    // `verify_slice` compares in constant time; the tag covers the MPID and the time, so neither
    // can be changed without the secret.
    tag_of(secret, input, bound, issued)
        .verify_slice(&tag)
        .map_err(|_| Refusal::Missing)?;
    if bound != mpid {
        return Err(Refusal::OtherUser);
    }
    let age = now_ms.saturating_sub(issued);
    if !(0..=max_age_ms).contains(&age) {
        return Err(Refusal::Expired);
    }
    Ok(())
}

fn tag_of(secret: &str, input: &str, mpid: Mpid, issued_ms: i64) -> Hmac<Sha256> {
    // Any key length is accepted by HMAC, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(format!("boson-idsync-binding\n{input}\n{mpid}\n{issued_ms}").as_bytes());
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn a_binding_lets_only_its_own_mpid_through_while_fresh() {
        let user = Mpid::new(42);
        let binding = issue("secret", "in-1", user, 1_000);
        let check_at = |mpid, now| check(Some(&binding), "secret", "in-1", mpid, now, DAY);
        assert_eq!(check_at(user, 1_000), Ok(()));
        assert_eq!(check_at(user, 1_000 + DAY), Ok(()));
        assert_eq!(check_at(user, 1_001 + DAY), Err(Refusal::Expired));
        assert_eq!(check_at(user, 999), Err(Refusal::Expired), "issued later");
        assert_eq!(check_at(Mpid::new(43), 1_000), Err(Refusal::OtherUser));
    }

    #[test]
    fn a_binding_of_another_input_secret_or_a_forged_one_is_refused() {
        let user = Mpid::new(42);
        let binding = issue("secret", "in-1", user, 1_000);
        let refused = |context: &str, secret, input| {
            check(Some(context), secret, input, user, 1_000, DAY) == Err(Refusal::Missing)
        };
        assert!(refused(&binding, "rotated", "in-1"));
        assert!(refused(&binding, "secret", "in-2"));
        let tag = binding.rsplit('.').next().unwrap();
        assert!(
            refused(&format!("b1.42.2000.{tag}"), "secret", "in-1"),
            "a later time"
        );
        assert!(
            refused(&format!("b1.43.1000.{tag}"), "secret", "in-1"),
            "another user"
        );
        for junk in [
            "",
            "b1",
            "b1.42.1000",
            "b1.42.1000.!!",
            "b2.42.1000.AAAA",
            "a.b.c.d.e",
        ] {
            assert!(refused(junk, "secret", "in-1"), "{junk:?}");
        }
        assert_eq!(
            check(None, "secret", "in-1", user, 1_000, DAY),
            Err(Refusal::Missing)
        );
    }
}
