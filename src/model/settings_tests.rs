//! Connection and output settings: parsing, merging, validation naming the field, defaults.

use super::*;
use serde_json::json;

#[test]
fn webhook_settings_name_the_field_they_refuse() {
    let parse = |settings| WebhookSettings::parse(settings).map_err(|e| e.to_string());
    let refused = [
        (
            json!({"url": "http://e.com", "authorization_header": "a\r\nb: c"}),
            "`authorization_header`",
        ),
        (
            json!({"url": "http://e.com", "authorization_header": "a\tb"}),
            "`authorization_header`",
        ),
        (
            json!({"url": "http://e.com", "authorization_header": "x".repeat(4097)}),
            "`authorization_header`",
        ),
        (json!({"url": "ftp://e.com/"}), "`url`"),
        (json!({"url": "http://"}), "`url`"),
        (json!({"url": "e.com/hook"}), "`url`"),
        (
            json!({"url": format!("http://e.com/{}", "x".repeat(2048))}),
            "`url`",
        ),
        (
            json!({"url": "http://e.com", "headers": {}}),
            "invalid webhook settings",
        ),
    ];
    for (settings, field) in refused {
        let error = parse(settings.clone()).expect_err("refused");
        assert!(error.contains(field), "{settings}: {error}");
    }
    let ok =
        json!({"url": "https://u:p@e.com:8443/h?q=1", "authorization_header": "Bearer abc-._~+/="});
    assert!(parse(ok).is_ok());
}

#[test]
fn omitted_keys_take_mparticle_defaults() {
    let s = ConnectionSettings::from_json(json!({})).unwrap();
    assert_eq!(s, ConnectionSettings::default());
    assert!(!s.include_user_attribute_change_events);
    assert!(s.send_custom_events);
}

#[test]
fn unknown_key_is_refused() {
    let err = ConnectionSettings::from_json(json!({"send_everything": true})).unwrap_err();
    assert!(matches!(err, SettingsError::Malformed(m) if m.contains("send_everything")));
}

#[test]
fn unknown_metadata_path_names_the_valid_ones() {
    let err =
        ConnectionSettings::from_json(json!({"metadata_field_exclusions": ["device_info.nope"]}))
            .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("device_info.nope"));
    assert!(message.contains("device_info.device"));
    assert!(message.contains("ip"));
}

#[test]
fn every_setting_has_exactly_one_descriptor() {
    let mut described: Vec<&str> = SETTING_DESCRIPTORS
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    described.sort_unstable();
    let defaults = default_settings_json();
    let mut keys: Vec<&str> = defaults.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        described, keys,
        "SETTING_DESCRIPTORS must name every ConnectionSettings field once"
    );
}

#[test]
fn auto_pause_hours_are_positive_and_finite_or_null() {
    for bad in [json!(0), json!(-0.5), json!("1"), json!([1])] {
        let error = ConnectionSettings::from_json(json!({"auto_pause_after_hours": bad}))
            .expect_err("refused")
            .to_string();
        assert!(error.contains("`auto_pause_after_hours`"), "{error}");
    }
    let s = ConnectionSettings::from_json(json!({"auto_pause_after_hours": 0.0005})).unwrap();
    assert_eq!(s.auto_pause_after_hours.map(Hours::as_ms), Some(1800));
    let s = ConnectionSettings::from_json(json!({"auto_pause_after_hours": null})).unwrap();
    assert_eq!(s.auto_pause_after_hours, None);
}

#[test]
fn merge_changes_only_given_keys() {
    let base = ConnectionSettings::from_json(json!({"send_screen_views": false})).unwrap();
    let merged = base.merged(json!({"status": "inactive"})).unwrap();
    assert_eq!(merged.status, ConnectionStatus::Inactive);
    assert!(!merged.send_screen_views);
}
