//! `GET /api/v1/catalog?input_id=`: the data points an input's accepted batches carried, named
//! as Data Filter rules name them, so the dashboard builds its filter grid from the answer.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::model::data_points::{Kind, PointKey, Seen, ValueType};
use crate::model::ids::InputId;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
pub(crate) struct CatalogQuery {
    input_id: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct CatalogOut {
    input_id: InputId,
    events: Vec<EventOut>,
    user_attributes: BTreeMap<String, &'static str>,
    identity_types: Vec<String>,
}

#[derive(Debug, Serialize)]
struct EventOut {
    event_type: String,
    /// Absent for events without a name (session_start, …), as in a type-wide filter rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    event_name: Option<String>,
    count: i64,
    first_seen_ms: i64,
    last_seen_ms: i64,
    attributes: BTreeMap<String, &'static str>,
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Query(query): Query<CatalogQuery>,
) -> Result<Json<CatalogOut>, ApiError> {
    let raw = query.input_id.ok_or_else(|| {
        ApiError::bad_request("invalid_query", "`input_id` is required: the input to list")
    })?;
    let id: InputId = super::path_id(&raw, "input_not_found", "input")?;
    let not_found = |e| ApiError::from_store(e, "input_not_found", "input");
    state.store.get_input(&id).await.map_err(not_found)?;
    let points = state.store.data_points(&id).await.map_err(not_found)?;
    Ok(Json(catalog_out(id, points)))
}

/// The answer from an input's data points.
fn catalog_out(input_id: InputId, mut points: Vec<(PointKey, Seen)>) -> CatalogOut {
    // Events first, so their attributes find them.
    points.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = CatalogOut {
        input_id,
        events: Vec::new(),
        user_attributes: BTreeMap::new(),
        identity_types: Vec::new(),
    };
    let mut index: BTreeMap<(Box<str>, Box<str>), usize> = BTreeMap::new();
    let type_name = |seen: &Seen| seen.value_type.map_or("null", ValueType::as_str);
    for (key, seen) in points {
        let PointKey {
            kind,
            event_type,
            event_name,
            name,
        } = key;
        match kind {
            Kind::Event => {
                index.insert((event_type.clone(), event_name.clone()), out.events.len());
                out.events.push(EventOut {
                    event_type: event_type.into(),
                    event_name: (!event_name.is_empty()).then(|| event_name.into()),
                    count: seen.count,
                    first_seen_ms: seen.first_seen_ms,
                    last_seen_ms: seen.last_seen_ms,
                    attributes: BTreeMap::new(),
                });
            }
            Kind::EventAttribute => {
                if let Some(&i) = index.get(&(event_type, event_name)) {
                    out.events[i]
                        .attributes
                        .insert(name.into(), type_name(&seen));
                }
            }
            Kind::UserAttribute => {
                out.user_attributes.insert(name.into(), type_name(&seen));
            }
            Kind::IdentityType => out.identity_types.push(name.into()),
        }
    }
    out
}
