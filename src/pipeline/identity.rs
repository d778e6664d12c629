//! Identity resolution against the identity store: IDSync's calls, and the MPID of a batch that
//! arrives without one. The rules are the pure `model::identity::resolve::decide`; the store
//! runs them between its reads and writes, in one transaction.

use serde_json::Value;

use crate::model::batch::NormalizedBatch;
use crate::model::identity::resolve::{Call, Target, decide};
use crate::model::ids::Mpid;
use crate::store::identity_sql::Resolution;
use crate::store::{Store, StoreError, StoreResult};

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

/// Gives a batch without an `mpid` the one its identities (or its device) resolve to, as an
/// IDSync identify would. A batch with neither keeps none, and so does one that would need a
/// new user when `may_create` is false: inputs called with a public key get their users from
/// IDSync, whose caps on new users a stream of batches must not get around.
pub(crate) async fn resolve_batch_mpid(
    store: &Store,
    batch: &mut NormalizedBatch,
    now: i64,
    may_create: bool,
) -> StoreResult<()> {
    let Value::Object(document) = &mut batch.document else {
        return Ok(());
    };
    // 0 is what SDKs send before they have an MPID: as good as none.
    if document
        .get("mpid")
        .and_then(Value::as_i64)
        .is_some_and(|m| m != 0)
    {
        return Ok(());
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
        return Ok(());
    }
    let resolution = match resolve(
        store,
        Call::Identify,
        &identities,
        device.as_deref(),
        None,
        now,
        || may_create,
    )
    .await
    {
        Err(StoreError::Refused) => return Ok(()),
        other => other?,
    };
    document.insert("mpid".into(), Value::from(resolution.mpid.get()));
    Ok(())
}
