//! Identity resolution against the identity store: IDSync's calls, and the identities by which
//! a batch that arrives without an MPID gets one. The rules are the pure
//! `model::identity::resolve::decide`: IDSync's calls run them between the store's reads and
//! writes in one transaction of their own; batches are resolved in the group commit that
//! stores them (`store::identity_steps`), many in one transaction.

use serde_json::Value;

use crate::model::identity::resolve::{Call, Target, decide};
use crate::model::ids::Mpid;
use crate::store::identity_sql::Resolution;
use crate::store::{Store, StoreResult};

/// Resolves an IDSync call (or an implied identify) to a user. `may_create` is asked before a
/// new user is created; when it says no, nothing is written and the answer is
/// [`StoreError::Refused`](crate::store::StoreError::Refused).
pub(crate) async fn resolve(
    store: &Store,
    call: Call,
    identities: &[(String, String)],
    device: Option<&str>,
    previous: Option<Mpid>,
    now: i64,
    may_create: impl FnOnce() -> bool + Send,
) -> StoreResult<Resolution> {
    store
        .resolve_identity(identities, device, previous, now, |lookup| {
            let decision = decide(call, identities, lookup);
            (decision.target != Target::New || may_create()).then_some(decision)
        })
        .await
}

/// Who a batch without an MPID is: its user identities and its device, by which the commit
/// that stores it gives it the MPID an IDSync identify would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unnamed {
    /// (type, value), as the identity store keeps them.
    pub(crate) identities: Vec<(String, String)>,
    /// `device_application_stamp:…`, as the identity store keys devices.
    pub(crate) device: Option<String>,
    /// Whether it said `"mpid": 0` (not known): if it gets no user, it keeps saying so.
    pub(crate) said_zero: bool,
}

/// Who `document` is, if it has no MPID (0, what SDKs send before they have one, counts as
/// none) but identities or a device to resolve one by; its `mpid` member is then taken out. A
/// batch with neither keeps what it has.
pub(crate) fn unnamed(document: &mut Value) -> Option<Unnamed> {
    let Value::Object(document) = document else {
        return None;
    };
    if document
        .get("mpid")
        .and_then(Value::as_i64)
        .is_some_and(|m| m != 0)
    {
        return None;
    }
    let identities: Vec<(String, String)> = document
        .get("user_identities")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            Some((
                i["identity_type"].as_str()?.to_owned(),
                i["identity"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let device = document
        .get("mp_deviceid")
        .and_then(Value::as_str)
        .map(|d| format!("device_application_stamp:{d}"));
    if identities.is_empty() && device.is_none() {
        return None;
    }
    // The commit writes the resolved one (or the 0 it said) in front of the body.
    let said_zero = document
        .remove("mpid")
        .is_some_and(|m| m.as_i64() == Some(0));
    Some(Unnamed {
        identities,
        device,
        said_zero,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_batch_without_a_user_but_with_identities_or_a_device_is_unnamed() {
        let mut named = json!({"mpid": 7, "user_identities": [
            {"identity_type": "email", "identity": "a@x"}]});
        assert_eq!(unnamed(&mut named), None);
        assert_eq!(named["mpid"], 7);
        let mut zero = json!({"mpid": 0, "mp_deviceid": "d1", "user_identities": [
            {"identity_type": "email", "identity": "a@x"}]});
        let who = unnamed(&mut zero).expect("unnamed");
        assert_eq!(who.identities, [("email".to_owned(), "a@x".to_owned())]);
        assert_eq!(who.device.as_deref(), Some("device_application_stamp:d1"));
        assert!(zero.get("mpid").is_none(), "0 is taken out: {zero}");
        assert!(who.said_zero);
        let mut missing = json!({"mp_deviceid": "d1"});
        assert!(!unnamed(&mut missing).expect("unnamed").said_zero);
        let mut nobody = json!({"mpid": 0, "events": []});
        assert_eq!(unnamed(&mut nobody), None);
        assert_eq!(nobody["mpid"], 0);
    }
}
