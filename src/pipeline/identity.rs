//! Identity resolution against the identity store: IDSync's calls, and the MPID of a batch that
//! arrives without one. The rules are the pure `model::identity::resolve::decide`; the store
//! runs them between its reads and writes, in one transaction.

use serde_json::Value;

use crate::model::batch::NormalizedBatch;
use crate::model::identity::resolve::{Call, decide};
use crate::model::ids::Mpid;
use crate::store::identity_sql::Resolution;
use crate::store::{Store, StoreResult};

/// Resolves an IDSync call (or an implied identify) to a user.
pub(crate) async fn resolve(
    store: &Store,
    call: Call,
    identities: &[(String, String)],
    device: Option<&str>,
    previous: Option<Mpid>,
    now: i64,
) -> StoreResult<Resolution> {
    store
        .resolve_identity(identities, device, previous, now, |lookup| {
            decide(call, identities, lookup)
        })
        .await
}

/// Gives a batch without an `mpid` the one its identities (or its device) resolve to, as an
/// IDSync identify would. A batch with neither keeps none.
pub(crate) async fn resolve_batch_mpid(
    store: &Store,
    batch: &mut NormalizedBatch,
    now: i64,
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
    let resolution = resolve(
        store,
        Call::Identify,
        &identities,
        device.as_deref(),
        None,
        now,
    )
    .await?;
    document.insert("mpid".into(), Value::from(resolution.mpid.get()));
    Ok(())
}
