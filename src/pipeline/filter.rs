//! The connection filter: a stored batch plus a connection's settings in, the webhook request
//! bodies and a per-event verdict out (spec §2, §3.2). Synchronous and free of I/O.

use serde_json::{Value, json};

use crate::model::alias_request;
use crate::model::event_type::EventType;
use crate::model::forwarding_rules::AttributeScope;
use crate::model::ids::BatchId;
use crate::model::settings::{ConnectionSettings, ConnectionStatus, SettingName, WebhookSettings};

use super::events_body::to_json;
use super::request_body::Payload;
use super::request_body::{self, OutboundEvent, with_events};
use super::rules;
pub(crate) use super::rules::{Rule, StrippedUserData};
use super::stored_batch::StoredBatch;

/// What the filter did with one inbound event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Forwarded,
    /// Dropped; names the setting that dropped it (e.g. `send_screen_views`).
    Filtered(SettingName),
    /// Dropped by a rule of the Data Filter or the forwarding rules, which it names.
    Ruled(Rule),
}

/// The filter's answer for one batch on one connection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) payloads: Vec<Payload>,
    /// One verdict per inbound event, in order.
    pub(crate) verdicts: Vec<Verdict>,
    /// Per inbound event, the `custom_attributes` keys the Data Filter removed (empty for most).
    pub(crate) removed_attributes: Vec<Vec<String>>,
    /// The user attributes and identities the Data Filter removed from the batch's fields.
    pub(crate) stripped: StrippedUserData,
}

/// A gate: the setting and whether it lets its event types through.
pub(crate) type Gate = (SettingName, fn(&ConnectionSettings) -> bool);

/// The setting that gates an event type, or `None` for types no setting controls.
///
/// mParticle documents the lifecycle toggle as "application start/stop, session start/end"; we put
/// the other install-lifecycle types (`first_run`, `uninstall`, `opt_out`) under it too, and
/// breadcrumbs with crashes, since a breadcrumb only exists to explain a crash.
pub(crate) fn gate(event_type: EventType) -> Option<Gate> {
    use EventType as T;
    use SettingName as N;
    let gate: Gate = match event_type {
        T::CustomEvent => (N::SendCustomEvents, |s| s.send_custom_events),
        T::SessionStart
        | T::SessionEnd
        | T::ApplicationStateTransition
        | T::FirstRun
        | T::Uninstall
        | T::OptOut => (N::SendLifecycleEvents, |s| s.send_lifecycle_events),
        T::Profile => (N::SendProfileChangeEvents, |s| s.send_profile_change_events),
        T::ScreenView => (N::SendScreenViews, |s| s.send_screen_views),
        T::CommerceEvent => (N::SendCommerceEvents, |s| s.send_commerce_events),
        T::UserIdentityChange => (N::IncludeUserIdentityChangeEvents, |s| {
            s.include_user_identity_change_events
        }),
        T::UserAttributeChange => (N::IncludeUserAttributeChangeEvents, |s| {
            s.include_user_attribute_change_events
        }),
        T::CrashReport | T::Breadcrumb => (N::SendCrashEvents, |s| s.send_crash_events),
        T::NetworkPerformance => (N::SendNetworkPerformanceEvents, |s| {
            s.send_network_performance_events
        }),
        T::PushRegistration | T::PushMessage | T::PushReaction => {
            (N::SendPushRegistrationsAndReceipts, |s| {
                s.send_push_registrations_and_receipts
            })
        }
        T::PreAttribution => return None,
    };
    Some(gate)
}

/// Decides what one event does on a connection with these settings.
pub(crate) fn verdict(settings: &ConnectionSettings, event: &Value) -> Verdict {
    if settings.status == ConnectionStatus::Inactive {
        return Verdict::Filtered(SettingName::Status);
    }
    let event_type = event
        .get("event_type")
        .and_then(Value::as_str)
        .and_then(EventType::parse);
    match event_type.and_then(gate) {
        Some((setting, allowed)) if !allowed(settings) => Verdict::Filtered(setting),
        _ => Verdict::Forwarded,
    }
}

/// Whether the filter reads no more of an event than its outline under `settings`
/// (`event_outline`): no Data Filter, no event attribute rule, and locations kept. Then it
/// changes no event, so each goes out as its stored bytes and the rest of it need not be parsed
/// ([`StoredBatch::read_outlines`]).
pub(crate) fn outlines_suffice(settings: &ConnectionSettings) -> bool {
    let event_attribute_rule = settings
        .forwarding_rules
        .attribute
        .as_ref()
        .is_some_and(|rule| rule.scope == AttributeScope::Event);
    settings.data_filter.is_pass_through()
        && settings.include_location_information
        && !event_attribute_rule
}

/// Applies `settings` (and the output's own options) to a normalised batch document.
/// `profile_consent`: the user's consent as their profile keeps it, which the consent rules
/// follow instead of the batch's own `consent_state` (read by the caller only when the
/// connection's rules ask for consent; see [`ForwardingRules::reads_consent`]).
///
/// [`ForwardingRules::reads_consent`]: crate::model::forwarding_rules::ForwardingRules::reads_consent
pub(crate) fn plan(
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: BatchId,
    document: &Value,
    profile_consent: Option<&Value>,
) -> Plan {
    plan_with(settings, webhook, batch_id, document, None, profile_consent)
}

/// [`plan`] for a stored batch: the events the filter leaves unchanged go out as the bytes
/// they were stored as (see [`request_body`]).
pub(crate) fn plan_stored(
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: BatchId,
    batch: &StoredBatch<'_>,
    profile_consent: Option<&Value>,
) -> Plan {
    plan_with(
        settings,
        webhook,
        batch_id,
        &batch.document,
        batch.stored_events(),
        profile_consent,
    )
}

fn plan_with(
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: BatchId,
    document: &Value,
    stored: Option<&[&[u8]]>,
    profile_consent: Option<&Value>,
) -> Plan {
    if alias_request::is_alias(document) {
        return alias_plan(settings, document);
    }
    let empty = Vec::new();
    let events = document
        .get("events")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut verdicts: Vec<Verdict> = events.iter().map(|e| verdict(settings, e)).collect();
    let mut removed_attributes = vec![Vec::new(); events.len()];
    if settings.status == ConnectionStatus::Inactive {
        return Plan {
            payloads: Vec::new(),
            verdicts,
            removed_attributes,
            stripped: StrippedUserData::default(),
        };
    }
    // The rules come after the event-class gates: an event a gate drops keeps the gate's name.
    let user_rule = rules::user_rule(&settings.forwarding_rules, document, profile_consent);
    for ((event, verdict), removed) in events
        .iter()
        .zip(&mut verdicts)
        .zip(&mut removed_attributes)
        .filter(|((_, v), _)| **v == Verdict::Forwarded)
    {
        let rule = user_rule.clone().or_else(|| {
            rules::event_rule(&settings.data_filter, &settings.forwarding_rules, event)
        });
        match rule {
            Some(rule) => *verdict = Verdict::Ruled(rule),
            None => *removed = rules::removed_attributes(&settings.data_filter, event),
        }
    }

    // The batch-level fields are serialised once and shared by every body cut from this batch;
    // cloning and re-serialising them per event was the largest cost of real-time delivery.
    let (base, stripped) = request_body::outbound_base(settings, webhook, batch_id, document);
    let base = to_json(&base);
    // The stored events only if they are the parsed ones, one for one.
    let stored = stored.filter(|stored| stored.len() == events.len());
    let forwarded: Vec<(usize, OutboundEvent<'_>)> = events
        .iter()
        .zip(&verdicts)
        .enumerate()
        .filter(|(_, (_, v))| **v == Verdict::Forwarded)
        .map(|(i, (event, _))| {
            let raw = stored.and_then(|stored| stored.get(i).copied());
            let event = request_body::outbound_event(settings, event, raw, &removed_attributes[i]);
            (i, event)
        })
        .collect();

    let payloads = if user_rule.is_some() {
        // A user the rules exclude sends nothing, not even a batch without events.
        Vec::new()
    } else if events.is_empty() {
        // A batch without events still carries identities and attributes.
        if settings.send_batches_without_events {
            vec![with_events(&base, &[])]
        } else {
            Vec::new()
        }
    } else if forwarded.is_empty() {
        Vec::new()
    } else if settings.send_as_batch {
        vec![with_events(&base, &forwarded)]
    } else {
        forwarded
            .chunks(1)
            .map(|event| with_events(&base, event))
            .collect()
    };
    Plan {
        payloads,
        verdicts,
        removed_attributes,
        stripped,
    }
}

/// An alias request goes out whole, as one request, where the connection forwards them.
fn alias_plan(settings: &ConnectionSettings, document: &Value) -> Plan {
    let forwards = settings.status.takes_jobs() && settings.send_alias_requests;
    let payloads = if forwards {
        let mut document = document.clone();
        if let (Some(unique_id), Value::Object(fields)) = (
            settings.unique_id.as_deref().filter(|u| !u.is_empty()),
            &mut document,
        ) {
            fields.insert("unique_id".into(), json!(unique_id));
        }
        vec![Payload {
            body: to_json(&document),
            event_count: 0,
            event_indexes: Vec::new(),
        }]
    } else {
        Vec::new()
    };
    Plan {
        payloads,
        verdicts: Vec::new(),
        removed_attributes: Vec::new(),
        stripped: StrippedUserData::default(),
    }
}

#[cfg(test)]
#[path = "filter_rules_tests.rs"]
mod rules_tests;

#[cfg(test)]
#[path = "filter_props.rs"]
mod rules_props;

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(payload: &Payload) -> Value {
        serde_json::from_slice(&payload.body).unwrap()
    }
    use proptest::prelude::*;

    fn webhook() -> WebhookSettings {
        WebhookSettings::with_url("http://x")
    }

    /// `plan` for batch 1 with a plain webhook and no profile consent.
    fn planned(settings: &ConnectionSettings, document: &Value) -> Plan {
        plan(settings, &webhook(), BatchId::new(1), document, None)
    }

    fn doc(types: &[&str]) -> Value {
        let events: Vec<Value> = types
            .iter()
            .map(|t| json!({"event_type": t, "data": {"location": {"latitude": 1.0, "longitude": 2.0}}}))
            .collect();
        json!({
            "events": events,
            "ip": "10.0.0.1",
            "mp_deviceid": "d",
            "device_info": {"device": "Jo's phone", "platform": "iOS"},
            "application_info": {"package": "p"},
            "source_info": {"channel": "server_to_server"},
            "context": {"location": {"latitude": 1.0, "longitude": 2.0}},
        })
    }

    #[test]
    fn real_time_sends_one_body_per_event_with_the_batch_fields() {
        let s = ConnectionSettings::default();
        let p = plan(
            &s,
            &webhook(),
            BatchId::new(7),
            &doc(&["custom_event", "screen_view"]),
            None,
        );
        assert_eq!(p.payloads.len(), 2);
        for payload in &p.payloads {
            assert_eq!(json_of(payload)["events"].as_array().unwrap().len(), 1);
            assert_eq!(json_of(payload)["batch_id"], json!(7));
            assert_eq!(
                json_of(payload)["device_info"]["device"],
                json!("Jo's phone")
            );
        }
    }

    #[test]
    fn metadata_switches_strip_what_they_name() {
        let s = ConnectionSettings {
            include_metadata: false,
            ..ConnectionSettings::default()
        };
        let body = &json_of(&planned(&s, &doc(&["custom_event"])).payloads[0]);
        for key in [
            "application_info",
            "device_info",
            "source_info",
            "mp_deviceid",
        ] {
            assert!(body.get(key).is_none(), "{key} survived");
        }
        let s = ConnectionSettings {
            metadata_field_exclusions: vec!["ip".into(), "device_info.device".into()],
            include_location_information: false,
            send_as_batch: true,
            unique_id: Some("u1".into()),
            ..ConnectionSettings::default()
        };
        let body = &json_of(&planned(&s, &doc(&["custom_event"])).payloads[0]);
        assert!(body.get("ip").is_none());
        assert!(body["device_info"].get("device").is_none());
        assert_eq!(body["device_info"]["platform"], json!("iOS"));
        assert!(body["context"].get("location").is_none());
        assert!(body["events"][0]["data"].get("location").is_none());
        assert_eq!(body["unique_id"], json!("u1"));
    }

    #[test]
    fn the_batch_location_has_its_own_switch() {
        let off = ConnectionSettings::default();
        let body = json_of(&planned(&off, &doc(&["custom_event"])).payloads[0]);
        assert!(body["context"].get("location").is_none());
        assert!(body["events"][0]["data"].get("location").is_some());
        let on = ConnectionSettings {
            include_event_batch_location: true,
            ..off
        };
        let body = json_of(&planned(&on, &doc(&["custom_event"])).payloads[0]);
        assert_eq!(body["context"]["location"]["latitude"], json!(1.0));
    }

    #[test]
    fn an_alias_request_goes_whole_only_where_alias_requests_are_sent() {
        let alias = json!({"request_type": "alias", "request_id": "r",
                           "data": {"source_mpid": 1, "destination_mpid": 2}});
        let off = ConnectionSettings::default();
        let on = ConnectionSettings {
            send_alias_requests: true,
            unique_id: Some("u".into()),
            ..ConnectionSettings::default()
        };
        let inactive = ConnectionSettings {
            status: ConnectionStatus::Inactive,
            ..on.clone()
        };
        for settings in [&off, &inactive] {
            assert!(planned(settings, &alias).payloads.is_empty());
        }
        let sent = planned(&on, &alias);
        assert_eq!(sent.payloads.len(), 1);
        assert!(sent.verdicts.is_empty());
        let mut expected = alias;
        expected["unique_id"] = json!("u");
        assert_eq!(json_of(&sent.payloads[0]), expected);
    }

    #[test]
    fn batches_without_events_follow_their_setting() {
        let on = ConnectionSettings::default();
        assert_eq!(planned(&on, &doc(&[])).payloads.len(), 1);
        let off = ConnectionSettings {
            send_batches_without_events: false,
            ..on
        };
        assert!(planned(&off, &doc(&[])).payloads.is_empty());
    }

    #[test]
    fn every_event_type_is_forwarded_by_default_except_the_two_change_types() {
        let s = ConnectionSettings::default();
        for t in EventType::ALL.map(EventType::as_str) {
            let v = verdict(&s, &json!({"event_type": t}));
            let expected_off = matches!(t, "user_identity_change" | "user_attribute_change");
            assert_eq!(v != Verdict::Forwarded, expected_off, "{t}");
        }
    }

    fn arb_settings() -> impl Strategy<Value = ConnectionSettings> {
        (any::<[bool; 13]>(), any::<bool>()).prop_map(|(b, active)| ConnectionSettings {
            status: if active {
                ConnectionStatus::Active
            } else {
                ConnectionStatus::Inactive
            },
            send_as_batch: b[0],
            send_custom_events: b[1],
            send_lifecycle_events: b[2],
            send_profile_change_events: b[3],
            send_screen_views: b[4],
            send_commerce_events: b[5],
            include_metadata: b[6],
            include_user_identity_change_events: b[7],
            include_user_attribute_change_events: b[8],
            send_crash_events: b[9],
            send_network_performance_events: b[10],
            send_push_registrations_and_receipts: b[11],
            include_location_information: b[12],
            ..ConnectionSettings::default()
        })
    }

    proptest! {
        /// Every forwarded event leaves exactly once, no filtered event leaves, and each verdict
        /// names the setting that is actually off.
        #[test]
        fn forwarded_events_leave_exactly_once(
            settings in arb_settings(),
            types in proptest::collection::vec(proptest::sample::select(EventType::ALL.map(EventType::as_str).to_vec()), 0..20),
        ) {
            let p = planned(&settings, &doc(&types));
            let forwarded = p.verdicts.iter().filter(|v| **v == Verdict::Forwarded).count();
            let sent: usize = p.payloads.iter().map(|x| x.event_count).sum();
            prop_assert_eq!(sent, if settings.status == ConnectionStatus::Active { forwarded } else { 0 });
            for (t, v) in types.iter().zip(&p.verdicts) {
                if let Verdict::Filtered(setting) = v {
                    let gate = EventType::parse(t).and_then(gate);
                    let off = match gate { Some((name, allowed)) => name == *setting && !allowed(&settings), None => false };
                    prop_assert!(off || *setting == SettingName::Status);
                }
            }
            if !settings.send_as_batch && !types.is_empty() {
                prop_assert!(p.payloads.iter().all(|x| x.event_count == 1));
            }
        }
    }
}
