//! The batches the sender posts to `/v2/events`: their shape (`--payload`), whose they are
//! (`--identities`) and a `source_request_id` of their own.
//!
//! Written as text directly: building a `serde_json::Value` first cost the generator more than
//! the request itself, and the generator shares the machine's two cores with Boson.

use std::fmt::Write as _;

use clap::ValueEnum;
use serde::Serialize;

/// Number of custom events in every batch sent to `/v2/events`.
///
/// Fixed rather than a flag so results stay comparable between runs.
pub(crate) const EVENTS_PER_BATCH: usize = 10;

/// How big and how rich a batch is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Payload {
    /// Ten bare custom events, about 2 KB: what earlier runs of this tool measured.
    #[default]
    Small,
    /// Ten custom events the way an SDK sends them, with `device_info`, `application_info` and
    /// session fields, about 4.3 KB (the batch of `../shared/limits/`' load generator).
    Sdk,
}

/// Who a batch says it is from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Identities {
    /// An MPID (the user's number plus one) and a customer id: Boson resolves nothing.
    #[default]
    Mpid,
    /// No MPID; the customer id and email of one of `--users` users (64 by default), so Boson
    /// looks up users it already knows, as a server-side feed's batches make it do.
    Returning,
    /// No MPID; the customer id and email of a user nobody has seen, so every batch makes Boson
    /// create a user.
    New,
}

/// This process's run, in every `source_request_id` it sends (the time it first asked), so a
/// second run against the same input is not answered as duplicates.
pub(crate) fn this_run() -> u64 {
    static RUN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *RUN.get_or_init(crate::clock::unix_micros)
}

/// How many returning users `--identities returning` spreads its batches over without `--users`.
pub(crate) const DEFAULT_RETURNING_USERS: u64 = 64;

/// What every batch of a run looks like.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Shape {
    pub(crate) payload: Payload,
    pub(crate) identities: Identities,
    /// Every batch states consent to `marketing` and no CCPA opt-out (`--consent`, or `--rules`).
    pub(crate) consent: bool,
    /// Batch k comes from user k mod `users` (`--users`); `None`: user k (or, with
    /// `--identities returning`, k mod [`DEFAULT_RETURNING_USERS`]).
    pub(crate) users: Option<u64>,
    /// Distinguishes this run's `source_request_id`s from another run's against the same input.
    pub(crate) run: u64,
}

impl Shape {
    /// Batch `k`, stamped with `sent_at_us`.
    pub(crate) fn batch(&self, k: u64, sent_at_us: u64) -> String {
        let user = match (self.users, self.identities) {
            (Some(users), _) => k % users,
            (None, Identities::Returning) => k % DEFAULT_RETURNING_USERS,
            (None, _) => k,
        };
        self.batch_of(k, user, sent_at_us)
    }

    /// Batch `k` from user `user`, stamped with `sent_at_us`.
    pub(crate) fn batch_of(&self, k: u64, user: u64, sent_at_us: u64) -> String {
        let mut out = String::with_capacity(match self.payload {
            Payload::Small => 2560,
            Payload::Sdk => 5120,
        });
        out.push('{');
        if self.consent {
            out.push_str(CONSENT);
        }
        // A distinct id per request, as SDKs send: Boson answers a repeated one as a duplicate,
        // and it is part of the unique key every stored batch is checked against.
        let _ = write!(
            out,
            r#""source_request_id":"load-{run:016x}-{k:012x}","environment":"production","#,
            run = self.run,
        );
        self.write_user(&mut out, k, user);
        if self.payload == Payload::Sdk {
            out.push_str(DEVICE_AND_APPLICATION);
        }
        out.push_str(r#""events":["#);
        for j in 0..EVENTS_PER_BATCH as u64 {
            if j > 0 {
                out.push(',');
            }
            let n = k * EVENTS_PER_BATCH as u64 + j;
            match self.payload {
                Payload::Small => small_event(&mut out, n, j, sent_at_us),
                Payload::Sdk => sdk_event(&mut out, n, j, user, sent_at_us),
            }
        }
        out.push_str("]}");
        out
    }

    /// `user_identities`, `user_attributes` and, with [`Identities::Mpid`], `mpid`.
    fn write_user(&self, out: &mut String, k: u64, user: u64) {
        const PLANS: [&str; 3] = ["free", "pro", "enterprise"];
        let plan = PLANS[(user % 3) as usize];
        match self.identities {
            Identities::Mpid => {
                let _ = write!(
                    out,
                    r#""user_identities":{{"customer_id":"user-{user}"}},"user_attributes":{{"plan":"{plan}"}},"mpid":{mpid},"#,
                    mpid = user + 1,
                );
            }
            Identities::Returning | Identities::New => {
                // A new user's identities are unique to this run and batch.
                let who = match self.identities {
                    Identities::New => format!("new-{:x}-{k}", self.run),
                    _ => format!("user-{user}"),
                };
                let _ = write!(
                    out,
                    r#""user_identities":{{"customer_id":"{who}","email":"{who}@example.com"}},"user_attributes":{{"plan":"{plan}"}},"#,
                );
            }
        }
    }
}

/// Consent to the GDPR purpose `marketing` and no CCPA opt-out, as a batch's first member.
const CONSENT: &str = r#""consent_state":{"gdpr":{"marketing":{"consented":true,"timestamp_unixtime_ms":1}},"ccpa":{"data_sale_opt_out":{"consented":false,"timestamp_unixtime_ms":1}}},"#;

/// The device and app of every SDK-like batch (one phone, one app build).
const DEVICE_AND_APPLICATION: &str = concat!(
    r#""device_info":{"platform":"Android","brand":"google","product":"cheetah","device":"Pixel 7 Pro","#,
    r#""device_manufacturer":"Google","device_model":"Pixel 7 Pro","os_version":"14","#,
    r#""build_identifier":"UQ1A.240205.004","screen_width":1440,"screen_height":3120,"screen_dpi":512,"#,
    r#""device_country":"US","locale_language":"en","locale_country":"US","network_country":"us","#,
    r#""network_carrier":"T-Mobile","network_code":"260","network_mobile_country_code":"310","#,
    r#""timezone_offset":-5,"is_tablet":false,"is_dst":false,"cpu_architecture":"arm64-v8a","#,
    r#""supports_telephony":true,"has_nfc":true,"bluetooth_enabled":true,"#,
    r#""android_advertising_id":"38400000-8cf0-11bd-b23e-10b96e40000d","#,
    r#""http_header_user_agent":"Mozilla/5.0 (Linux; Android 14; Pixel 7 Pro) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Mobile Safari/537.36"},"#,
    r#""application_info":{"application_name":"Boson Shop","application_version":"5.12.3","#,
    r#""application_build_number":"51203","package":"com.example.bosonshop","os":"Android","#,
    r#""install_referrer":"utm_source=google-play&utm_medium=organic","sideloaded_kits_count":0},"#,
);

/// A bare custom event: `sent_at_us` (for latency) and the run-wide index `i` (for the
/// receiver's de-duplication); the rest varies a little so Boson doesn't see identical payloads.
fn small_event(out: &mut String, n: u64, j: u64, sent_at_us: u64) {
    let _ = write!(
        out,
        r#"{{"event_type":"custom_event","data":{{"event_name":"load_test","custom_event_type":"{kind}","timestamp_unixtime_ms":{ms},"custom_attributes":{{"sent_at_us":"{sent_at_us}","i":"{n}","page":"/page/{page}","step":"{j}"}}}}}}"#,
        kind = event_type(n),
        ms = sent_at_us / 1000,
        page = n % 37,
    );
}

/// A custom event as an SDK sends it: the same stamps as [`small_event`], with the session and
/// screen an app adds.
fn sdk_event(out: &mut String, n: u64, j: u64, user: u64, sent_at_us: u64) {
    let _ = write!(
        out,
        r#"{{"event_type":"custom_event","data":{{"event_name":"load_test","custom_event_type":"{kind}","#,
        kind = event_type(n),
    );
    let _ = write!(
        out,
        r#""timestamp_unixtime_ms":{ms},"session_uuid":"5e55{user:08x}-0000-4000-8000-{user:012x}","#,
        ms = sent_at_us / 1000,
    );
    let _ = write!(
        out,
        r#""custom_attributes":{{"sent_at_us":"{sent_at_us}","i":"{n}","page":"/catalog/{page}","step":"{j}","item_id":"sku-{item:06}"}}}}}}"#,
        page = n % 37,
        item = n % 997,
    );
}

fn event_type(n: u64) -> &'static str {
    const EVENT_TYPES: [&str; 4] = ["other", "navigation", "transaction", "search"];
    EVENT_TYPES[(n % 4) as usize]
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn parsed(shape: Shape, k: u64) -> (Value, usize) {
        let text = shape.batch(k, 1_700_000_000_123_456);
        (serde_json::from_str(&text).expect("valid JSON"), text.len())
    }

    #[test]
    fn a_small_batch_has_ten_stamped_events_and_is_about_two_kilobytes() {
        let (b, len) = parsed(Shape::default(), 41);
        let events = b["events"].as_array().expect("events array");
        assert_eq!(events.len(), EVENTS_PER_BATCH);
        assert_eq!(events[3]["data"]["custom_attributes"]["i"], "413");
        assert_eq!(
            events[3]["data"]["custom_attributes"]["sent_at_us"],
            "1700000000123456"
        );
        assert_eq!(
            events[0]["data"]["timestamp_unixtime_ms"],
            1_700_000_000_123_u64
        );
        assert_eq!(b["mpid"], 42);
        assert_eq!(b["user_identities"]["customer_id"], "user-41");
        assert_eq!(events[3]["data"]["custom_event_type"], "navigation");
        assert!((1000..=2600).contains(&len), "batch is {len} bytes");
    }

    /// Boson's tests store `tests/data/boson-load.sdk-batch.json` both ways (its members kept as
    /// sent, and parsed whole): it must be the batch this tool sends.
    #[test]
    fn the_sdk_batch_in_bosons_test_data_is_the_one_sent() {
        let shape = Shape {
            payload: Payload::Sdk,
            run: 0x17_a5c0_ffee,
            ..Shape::default()
        };
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/data/boson-load.sdk-batch.json"
        );
        let fixture = std::fs::read_to_string(path).expect("the test data");
        assert_eq!(fixture.trim_end(), shape.batch(7, 1_700_000_000_123_456));
    }

    #[test]
    fn an_sdk_batch_carries_device_and_app_and_is_about_4_3_kilobytes() {
        let shape = Shape {
            payload: Payload::Sdk,
            ..Shape::default()
        };
        let (b, len) = parsed(shape, 7);
        assert_eq!(b["device_info"]["platform"], "Android");
        assert_eq!(b["application_info"]["package"], "com.example.bosonshop");
        let events = b["events"].as_array().expect("events array");
        assert_eq!(events.len(), EVENTS_PER_BATCH);
        assert_eq!(events[9]["data"]["custom_attributes"]["i"], "79");
        assert_eq!(
            events[9]["data"]["custom_attributes"]["sent_at_us"],
            "1700000000123456"
        );
        assert!((4000..=4600).contains(&len), "batch is {len} bytes");
    }

    #[test]
    fn every_request_has_its_own_source_request_id_and_runs_differ() {
        let shape = Shape {
            run: 1,
            ..Shape::default()
        };
        let other_run = Shape {
            run: 2,
            ..Shape::default()
        };
        let ids: std::collections::HashSet<String> = [shape.batch(1, 0), shape.batch(2, 0)]
            .iter()
            .chain(&[other_run.batch(1, 0)])
            .map(|text| {
                let b: Value = serde_json::from_str(text).unwrap();
                b["source_request_id"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(ids.len(), 3, "{ids:?}");
    }

    #[test]
    fn returning_users_have_no_mpid_and_repeat_their_identities() {
        let shape = Shape {
            identities: Identities::Returning,
            ..Shape::default()
        };
        let (first, _) = parsed(shape, 3);
        let (again, _) = parsed(shape, 3 + DEFAULT_RETURNING_USERS);
        assert!(first.get("mpid").is_none());
        assert_eq!(first["user_identities"]["customer_id"], "user-3");
        assert_eq!(first["user_identities"]["email"], "user-3@example.com");
        assert_eq!(first["user_identities"], again["user_identities"]);
    }

    #[test]
    fn new_users_have_no_mpid_and_identities_never_seen_before() {
        let shape = Shape {
            identities: Identities::New,
            users: Some(2),
            ..Shape::default()
        };
        let (first, _) = parsed(shape, 1);
        let (next, _) = parsed(shape, 3);
        assert!(first.get("mpid").is_none());
        assert_ne!(first["user_identities"], next["user_identities"]);
        assert!(first["user_identities"]["email"].is_string());
    }

    #[test]
    fn a_batch_with_consent_is_the_same_batch_with_consent_state() {
        let plain = Shape::default();
        let with = Shape {
            consent: true,
            ..plain
        };
        let (plain, _) = parsed(plain, 7);
        let (mut with, _) = parsed(with, 7);
        assert_eq!(
            with["consent_state"]["gdpr"]["marketing"]["consented"],
            true
        );
        assert_eq!(
            with["consent_state"]["ccpa"]["data_sale_opt_out"]["consented"],
            false
        );
        with.as_object_mut().unwrap().remove("consent_state");
        assert_eq!(with, plain);
    }
}
