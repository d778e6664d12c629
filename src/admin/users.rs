//! User profiles from the identity store: by MPID, or by one of the user's identities.

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::model::consent;
use crate::model::identity::names::{Kind, classify};
use crate::model::ids::Mpid;
use crate::state::AppState;
use crate::store::identity_sql::UserProfile;

fn not_found(error: crate::store::StoreError) -> ApiError {
    ApiError::from_store(error, "user_not_found", "user")
}

fn profile_json(user: UserProfile) -> Value {
    let identities: Map<String, Value> = user
        .identities
        .into_iter()
        .map(|(k, v)| (k, Value::from(v)))
        .collect();
    let history: Vec<Value> = user
        .history
        .into_iter()
        .map(|h| json!({"identity_type": h.identity_type, "old_value": h.old_value, "new_value": h.new_value, "changed_at": h.changed_at}))
        .collect();
    json!({
        // As a string too: MPIDs exceed JavaScript's exact integer range.
        "mpid": user.mpid.to_string(),
        "user_identities": identities,
        "user_attributes": attributes(&user.user_attributes),
        "consent_state": consent::state(&user.consent),
        "first_seen_at": user.created_at,
        "last_seen_at": user.last_seen_at,
        "identity_history": history,
    })
}

/// Stored attributes, without the `null`s a merge patch may have left on a new profile.
fn attributes(stored: &str) -> Value {
    let mut attributes: Map<String, Value> = serde_json::from_str(stored).unwrap_or_default();
    attributes.retain(|_, v| !v.is_null());
    Value::Object(attributes)
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(mpid): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let mpid: Mpid = mpid
        .parse()
        .map_err(|_| ApiError::bad_request("invalid_mpid", "the MPID must be a 64-bit integer"))?;
    Ok(Json(profile_json(
        state.store.get_user(mpid).await.map_err(not_found)?,
    )))
}

#[derive(Debug, Deserialize)]
pub(crate) struct Lookup {
    identity_type: Option<String>,
    value: Option<String>,
}

/// `GET /api/v1/users?identity_type=email&value=…`
pub(crate) async fn find(
    State(state): State<AppState>,
    Query(lookup): Query<Lookup>,
) -> Result<Json<Value>, ApiError> {
    let (Some(kind), Some(value)) = (lookup.identity_type, lookup.value) else {
        return Err(ApiError::bad_request(
            "invalid_query",
            "give identity_type and value, e.g. ?identity_type=email&value=…",
        ));
    };
    let Some(Kind::User(kind)) = classify(&kind) else {
        return Err(ApiError::bad_request(
            "invalid_identity_type",
            format!("unknown identity type {kind:?}"),
        ));
    };
    Ok(Json(profile_json(
        state
            .store
            .find_user(kind, &value)
            .await
            .map_err(not_found)?,
    )))
}
