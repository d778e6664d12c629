//! The Live Stream's inbound items for a stored batch: one per event, and for every inactive
//! connection of the input an outbound "filtered: status" (those connections get no delivery
//! job, so nothing else would report them).

use serde_json::Value;

use super::catalog::Catalog;
use crate::live::{Direction, LiveItem, LiveStream, Outcome, event_type_of, name_of};
use crate::model::ids::{BatchId, InputId, Mpid};
use crate::model::now_ms;
use crate::model::settings::SettingName;

/// Publishes a stored batch's events.
pub(crate) fn publish(
    live: &LiveStream,
    catalog: &Catalog,
    input_id: &InputId,
    batch_id: BatchId,
    document: &Value,
) {
    let mpid = document.get("mpid").and_then(Value::as_i64).map(Mpid::new);
    let inactive = catalog.inactive_connections(input_id);
    let now = now_ms();
    for (index, event) in document
        .get("events")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let item = LiveItem {
            direction: Direction::Inbound,
            at: now,
            input_id: input_id.clone(),
            connection_id: None,
            batch_id,
            index,
            event_type: event_type_of(event),
            name: name_of(event),
            mpid,
            event: Some(event.clone()),
            outcome: None,
            setting: None,
            reason: None,
            note: None,
            status: None,
            latency_ms: None,
            error: None,
            next_attempt_at: None,
        };
        for connection in &inactive {
            live.publish(LiveItem {
                direction: Direction::Outbound,
                connection_id: Some(connection.clone()),
                event: None,
                outcome: Some(Outcome::Filtered),
                setting: Some(SettingName::Status),
                ..item.clone()
            });
        }
        live.publish(item);
    }
}
