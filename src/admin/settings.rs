//! What the connection settings are: name, label, help text, kind and default of each, from the
//! settings model. The dashboard builds its settings form from this answer, so a setting is
//! described in Rust once and never copied into JavaScript.

use axum::Json;
use serde_json::{Value, json};

use crate::model::settings::SETTING_DESCRIPTORS;

/// `GET /api/v1/connection-settings`: every setting, in the model's order.
pub(crate) async fn list() -> Json<Value> {
    let settings: Vec<Value> = SETTING_DESCRIPTORS
        .iter()
        .map(|d| {
            json!({
                "name": d.name.as_str(),
                "label": d.label,
                "help": d.help,
                "kind": d.kind,
                "default": d.default_value(),
            })
        })
        .collect();
    Json(json!({ "settings": settings }))
}
