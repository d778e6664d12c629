//! What a settings change would have done: the same events judged by [`filter::plan`] under the
//! current settings and under proposed ones, side by side, with totals. Pure; the admin API
//! feeds it the last events of the connection's input (`POST /api/v1/connections/{id}/dry-run`).
//!
//! [`filter::plan`]: crate::pipeline::filter::plan

use serde::Serialize;
use serde_json::Value;

use super::filter::{Plan, StrippedUserData, Verdict};
use super::rules;
use crate::model::ids::BatchId;

/// What the filter did with one event, in the Live Stream's words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct EventVerdict {
    pub(crate) outcome: Outcome,
    /// The setting or rule that decided it (`send_screen_views`, `data_filter: coupon_code`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Forwarded,
    /// Forwarded with some of its attributes removed by the Data Filter.
    AttributeRemoved,
    Filtered,
}

/// Per inbound event of a planned batch, its verdict.
pub(crate) fn verdicts(plan: &Plan) -> Vec<EventVerdict> {
    plan.verdicts
        .iter()
        .zip(&plan.removed_attributes)
        .map(|(verdict, removed)| match verdict {
            Verdict::Forwarded if removed.is_empty() => EventVerdict {
                outcome: Outcome::Forwarded,
                reason: None,
            },
            Verdict::Forwarded => EventVerdict {
                outcome: Outcome::AttributeRemoved,
                reason: Some(format!("data_filter: {}", removed.join(", "))),
            },
            Verdict::Filtered(setting) => EventVerdict {
                outcome: Outcome::Filtered,
                reason: Some(setting.as_str().to_owned()),
            },
            Verdict::Ruled(rule) => EventVerdict {
                outcome: Outcome::Filtered,
                reason: Some(rule.to_string()),
            },
        })
        .collect()
}

/// Events by outcome. `forwarded` counts every event that goes, those with attributes removed
/// included; `attribute_removed` counts those alone. The last two count the user attributes and
/// identities the Data Filter removed from the batches' fields, over all the batches read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Totals {
    pub(crate) forwarded: usize,
    pub(crate) filtered: usize,
    pub(crate) attribute_removed: usize,
    pub(crate) user_attributes_removed: usize,
    pub(crate) identities_removed: usize,
}

impl Totals {
    fn add(&mut self, verdict: &EventVerdict) {
        match verdict.outcome {
            Outcome::Forwarded => self.forwarded += 1,
            Outcome::AttributeRemoved => {
                self.forwarded += 1;
                self.attribute_removed += 1;
            }
            Outcome::Filtered => self.filtered += 1,
        }
    }

    fn add_stripped(&mut self, stripped: &StrippedUserData) {
        self.user_attributes_removed += stripped.user_attributes.len();
        self.identities_removed += stripped.identity_types.len();
    }
}

/// The user data one batch loses under either settings (listed only when it loses some).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct UserDataItem {
    pub(crate) batch_id: BatchId,
    pub(crate) before: StrippedUserData,
    pub(crate) after: StrippedUserData,
}

/// One event under both settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Item {
    pub(crate) batch_id: BatchId,
    /// Position of the event in its batch.
    pub(crate) index: usize,
    pub(crate) event_type: String,
    /// The name the Data Filter knows the event by, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) event_name: Option<String>,
    pub(crate) before: EventVerdict,
    pub(crate) after: EventVerdict,
}

/// The comparison over some events, built one batch at a time, newest batch first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Preview {
    pub(crate) events: usize,
    pub(crate) before: Totals,
    pub(crate) after: Totals,
    /// Events whose verdict differs between the two settings.
    pub(crate) changed: usize,
    pub(crate) items: Vec<Item>,
    /// Newest batch first, the batches whose user attributes or identities either settings
    /// strip, and what they strip.
    pub(crate) user_data: Vec<UserDataItem>,
}

impl Preview {
    /// Adds the last `limit - events` events (at most) of one batch, planned under the current
    /// (`before`) and the proposed (`after`) settings; returns whether the preview is full.
    pub(crate) fn add_batch(
        &mut self,
        limit: usize,
        (batch_id, document): (BatchId, &Value),
        before: &Plan,
        after: &Plan,
    ) -> bool {
        let empty = Vec::new();
        let events = document
            .get("events")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        self.add_user_data(batch_id, before, after);
        let (before, after) = (verdicts(before), verdicts(after));
        let room = limit.saturating_sub(self.events);
        // The newest events of the batch are its last ones.
        let first = events.len().saturating_sub(room);
        for (index, event) in events.iter().enumerate().skip(first) {
            let (Some(was), Some(would)) = (before.get(index), after.get(index)) else {
                continue;
            };
            self.before.add(was);
            self.after.add(would);
            self.changed += usize::from(was != would);
            self.events += 1;
            self.items.push(item(batch_id, index, event, was, would));
        }
        self.events >= limit
    }

    fn add_user_data(&mut self, batch_id: BatchId, before: &Plan, after: &Plan) {
        self.before.add_stripped(&before.stripped);
        self.after.add_stripped(&after.stripped);
        if !(before.stripped.is_empty() && after.stripped.is_empty()) {
            self.user_data.push(UserDataItem {
                batch_id,
                before: before.stripped.clone(),
                after: after.stripped.clone(),
            });
        }
    }
}

fn item(
    batch_id: BatchId,
    index: usize,
    event: &Value,
    before: &EventVerdict,
    after: &EventVerdict,
) -> Item {
    let event_type = rules::event_type(event);
    Item {
        batch_id,
        index,
        event_type: event
            .get("event_type")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned(),
        event_name: event_type
            .and_then(|t| rules::event_name(t, event))
            .map(str::to_owned),
        before: before.clone(),
        after: after.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::settings::{ConnectionSettings, WebhookSettings};
    use crate::pipeline::filter::plan;

    fn webhook() -> WebhookSettings {
        serde_json::from_value(json!({"url": "https://example.com/hook"})).unwrap()
    }

    fn settings(value: Value) -> ConnectionSettings {
        ConnectionSettings::from_json(value).unwrap()
    }

    fn batch(names: &[&str]) -> Value {
        let events: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"event_type": "custom_event",
                             "data": {"event_name": n, "custom_attributes": {"coupon": "x"}}})
            })
            .collect();
        json!({"mpid": 5, "events": events})
    }

    fn add(preview: &mut Preview, limit: usize, id: i64, document: &Value, after: &Value) -> bool {
        let id = BatchId::new(id);
        let before = plan(&settings(json!({})), &webhook(), id, document, None);
        let after = plan(&settings(after.clone()), &webhook(), id, document, None);
        preview.add_batch(limit, (id, document), &before, &after)
    }

    #[test]
    fn each_event_is_judged_under_both_settings_and_counted() {
        let proposed = json!({"data_filter": {"rules": [
            {"event_type": "custom_event", "event_name": "A", "send": false},
            {"event_type": "custom_event", "event_name": "B", "attribute": "coupon", "send": false},
        ]}});
        let mut preview = Preview::default();
        assert!(!add(
            &mut preview,
            10,
            1,
            &batch(&["A", "B", "C"]),
            &proposed
        ));
        assert_eq!(preview.events, 3);
        assert_eq!(
            preview.before,
            Totals {
                forwarded: 3,
                filtered: 0,
                attribute_removed: 0,
                ..Totals::default()
            }
        );
        assert_eq!(
            preview.after,
            Totals {
                forwarded: 2,
                filtered: 1,
                attribute_removed: 1,
                ..Totals::default()
            }
        );
        assert_eq!(preview.changed, 2);
        assert_eq!(
            preview.items[0].after.reason.as_deref(),
            Some("data_filter: custom_event \"A\"")
        );
        assert_eq!(preview.items[1].after.outcome, Outcome::AttributeRemoved);
        assert_eq!(preview.items[2].event_name.as_deref(), Some("C"));
    }

    #[test]
    fn a_full_preview_takes_the_newest_events_of_the_batch_that_fills_it() {
        let mut preview = Preview::default();
        assert!(!add(&mut preview, 3, 2, &batch(&["D"]), &json!({})));
        assert!(add(
            &mut preview,
            3,
            1,
            &batch(&["A", "B", "C"]),
            &json!({})
        ));
        let names: Vec<_> = preview
            .items
            .iter()
            .map(|i| i.event_name.clone().unwrap())
            .collect();
        assert_eq!(names, ["D", "B", "C"]);
        assert_eq!(preview.events, 3);
    }

    #[test]
    fn user_attributes_and_identities_the_filter_strips_are_reported_per_batch() {
        let mut document = batch(&["A"]);
        document["user_attributes"] = json!({"$Age": 30, "plan": "pro"});
        document["user_identities"] = json!([
            {"identity_type": "email", "identity": "a@b.c"},
            {"identity_type": "customer_id", "identity": "c1"},
        ]);
        let proposed = json!({"data_filter": {"rules": [
            {"user_attribute": "$Age", "send": false},
            {"identity_type": "email", "send": false},
        ]}});
        let mut preview = Preview::default();
        add(&mut preview, 10, 7, &document, &proposed);
        add(&mut preview, 10, 6, &batch(&["B"]), &proposed);
        assert_eq!(
            (
                preview.before.user_attributes_removed,
                preview.before.identities_removed
            ),
            (0, 0)
        );
        assert_eq!(
            (
                preview.after.user_attributes_removed,
                preview.after.identities_removed
            ),
            (1, 1)
        );
        // Only the batch that loses something is listed.
        assert_eq!(
            serde_json::to_value(&preview.user_data).unwrap(),
            json!([{"batch_id": 7,
                    "before": {"user_attributes": [], "identity_types": []},
                    "after": {"user_attributes": ["$Age"], "identity_types": ["email"]}}])
        );
    }

    #[test]
    fn a_user_rule_filters_every_event_and_names_itself() {
        let mut preview = Preview::default();
        let proposed = json!({"forwarding_rules": {"require_login_identity": true}});
        add(&mut preview, 10, 1, &batch(&["A", "B"]), &proposed);
        assert_eq!(preview.after.filtered, 2);
        assert_eq!(
            preview.items[1].after.reason.as_deref(),
            Some("forwarding_rule: login identity")
        );
    }
}
