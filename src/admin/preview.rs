//! `POST /api/v1/connections/{id}/dry-run`: what a settings change would have done to the last
//! 100 events of the connection's input, before it is saved. The proposed keys are merged over
//! the current settings and checked like a save; each stored batch goes through the filter the
//! worker uses (`pipeline::filter::plan`) once per settings, and nothing is stored or sent.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::connections::settings_error;
use super::path_id;
use crate::error::{ApiError, AppJson};
use crate::model::ids::ConnectionId;
use crate::model::settings::{ConnectionSettings, WebhookSettings};
use crate::pipeline::filter;
use crate::pipeline::output::Output;
use crate::pipeline::preview::Preview;
use crate::state::AppState;
use crate::store::{Store, StoreError, StoreResult};

/// Events a dry run judges: the input's newest.
const EVENTS: usize = 100;
/// Batches read per page, and at most (batches without events count for nothing).
const PAGE: i64 = 100;
const MAX_BATCHES: usize = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DryRunIn {
    /// Keys to change; omitted keys keep their value (as in a `PATCH` of the connection).
    #[serde(default)]
    settings: Option<Value>,
}

fn not_found(error: StoreError) -> ApiError {
    ApiError::from_store(error, "connection_not_found", "connection")
}

pub(crate) async fn dry_run(
    State(state): State<AppState>,
    Path(id): Path<String>,
    AppJson(request): AppJson<DryRunIn>,
) -> Result<Json<Value>, ApiError> {
    let id: ConnectionId = path_id(&id, "connection_not_found", "connection")?;
    let store = &state.store;
    let connection = store.get_connection(&id).await.map_err(not_found)?;
    let current =
        ConnectionSettings::from_json_str(&connection.settings).map_err(|e| settings_error(&e))?;
    let proposed = match request.settings {
        Some(changes) => current.merged(changes).map_err(|e| settings_error(&e))?,
        None => current.clone(),
    };
    let output = store
        .get_output(&connection.output_id)
        .await
        .map_err(not_found)?;
    let output = Output::from_row(&output)
        .map_err(|message| ApiError::bad_request("invalid_output", message))?;
    let compared = Compared {
        store,
        webhook: &output.settings,
        current: &current,
        proposed: &proposed,
    };
    let preview = compared
        .latest(&connection.input_id)
        .await
        .map_err(not_found)?;
    Ok(Json(json!(preview)))
}

/// The two settings a dry run compares, and where it reads.
struct Compared<'a> {
    store: &'a Store,
    webhook: &'a WebhookSettings,
    current: &'a ConnectionSettings,
    proposed: &'a ConnectionSettings,
}

impl Compared<'_> {
    /// The comparison over the input's newest events, newest batch first.
    async fn latest(&self, input_id: &crate::model::ids::InputId) -> StoreResult<Preview> {
        let mut preview = Preview::default();
        let mut before = i64::MAX;
        let mut read = 0;
        while read < MAX_BATCHES {
            let rows = self.store.latest_batches(input_id, before, PAGE).await?;
            let Some((oldest, _)) = rows.last() else {
                break;
            };
            before = oldest.get();
            for (batch_id, body) in rows {
                read += 1;
                // The worker dead-letters a batch it cannot read; it has no events to judge.
                let Ok(document) = serde_json::from_slice::<Value>(&body) else {
                    continue;
                };
                let plan = |settings: &ConnectionSettings, consent: Option<&Value>| {
                    filter::plan(settings, self.webhook, batch_id, &document, consent)
                };
                // Consent as delivery reads it now: the user's profile, for rules that ask.
                let consent_current = self
                    .store
                    .consent_for(&self.current.forwarding_rules, &document)
                    .await?;
                let consent_proposed = self
                    .store
                    .consent_for(&self.proposed.forwarding_rules, &document)
                    .await?;
                let was = plan(self.current, consent_current.as_ref());
                let would = plan(self.proposed, consent_proposed.as_ref());
                if preview.add_batch(EVENTS, (batch_id, &document), &was, &would) {
                    return Ok(preview);
                }
            }
        }
        Ok(preview)
    }
}
