//! The metadata paths `metadata_field_exclusions` accepts: the batch, device and application
//! fields a connection can strip, each with the label forms show. Pure data.

/// `device_info` keys of the Events API schema (spec §1.7.3), each excludable on its own.
pub(crate) const DEVICE_INFO_KEYS: &[(&str, &str)] = &[
    ("brand", "Brand"),
    ("product", "Product"),
    ("device", "Device Name"),
    ("android_uuid", "Android UUID"),
    ("device_manufacturer", "Device Manufacturer"),
    ("platform", "Platform"),
    ("os_version", "OS Version"),
    ("device_model", "Device Model"),
    ("screen_height", "Screen Height"),
    ("screen_width", "Screen Width"),
    ("screen_dpi", "Screen DPI"),
    ("device_country", "Device Country"),
    ("locale_language", "Locale Language"),
    ("locale_country", "Locale Country"),
    ("network_country", "Network Country"),
    ("network_carrier", "Network Carrier"),
    ("network_code", "Network Code"),
    ("network_mobile_country_code", "Network Mobile Country Code"),
    ("timezone_offset", "Timezone Offset"),
    ("build_identifier", "Build Identifier"),
    ("http_header_user_agent", "User Agent"),
    ("ios_advertising_id", "iOS Advertising ID (IDFA)"),
    ("att_authorization_status", "ATT Authorization Status"),
    ("att_timestamp_unixtime_ms", "ATT Timestamp"),
    ("push_token", "Push Token"),
    ("cpu_architecture", "CPU Architecture"),
    ("is_tablet", "Is Tablet"),
    ("push_notification_sound_enabled", "Push Sound Enabled"),
    ("push_notification_vibrate_enabled", "Push Vibrate Enabled"),
    ("radio_access_technology", "Radio Access Technology"),
    ("supports_telephony", "Supports Telephony"),
    ("has_nfc", "Has NFC"),
    ("bluetooth_enabled", "Bluetooth Enabled"),
    ("bluetooth_version", "Bluetooth Version"),
    ("ios_idfv", "iOS Vendor ID (IDFV)"),
    ("android_advertising_id", "Google Advertising ID"),
    ("build_version_release", "Build Version Release"),
    ("limit_ad_tracking", "Limit Ad Tracking"),
    ("amp_id", "AMP ID"),
    ("is_dst", "Is Daylight Saving Time"),
    ("roku_advertising_id", "Roku Advertising ID"),
    ("roku_publisher_id", "Roku Publisher ID"),
    ("microsoft_advertising_id", "Microsoft Advertising ID"),
    ("microsoft_publisher_id", "Microsoft Publisher ID"),
    ("fire_advertising_id", "Fire Advertising ID"),
];

/// `application_info` keys (spec §1.7.5).
pub(crate) const APPLICATION_INFO_KEYS: &[(&str, &str)] = &[
    ("application_name", "Application Name"),
    ("application_version", "Application Version"),
    ("application_build_number", "Application Build Number"),
    ("install_referrer", "Install Referrer"),
    ("package", "Package"),
    ("os", "Application OS"),
    ("apple_search_ads_attributes", "Apple Search Ads Attributes"),
];

/// Batch-level metadata keys that can be excluded.
pub(crate) const BATCH_METADATA_KEYS: &[(&str, &str)] = &[("ip", "IP Address")];

/// Every valid dotted metadata path with its readable label, in a stable order.
pub(crate) fn metadata_paths() -> impl Iterator<Item = (String, &'static str)> {
    let batch = BATCH_METADATA_KEYS
        .iter()
        .map(|(k, l)| ((*k).to_owned(), *l));
    let device = DEVICE_INFO_KEYS
        .iter()
        .map(|(k, l)| (format!("device_info.{k}"), *l));
    let app = APPLICATION_INFO_KEYS
        .iter()
        .map(|(k, l)| (format!("application_info.{k}"), *l));
    batch.chain(device).chain(app)
}

pub(super) fn valid_metadata_paths() -> Vec<String> {
    metadata_paths().map(|(path, _)| path).collect()
}

pub(super) fn is_metadata_path(path: &str) -> bool {
    let known = |keys: &[(&str, &str)], key: &str| keys.iter().any(|(k, _)| *k == key);
    match path.split_once('.') {
        None => known(BATCH_METADATA_KEYS, path),
        Some(("device_info", key)) => known(DEVICE_INFO_KEYS, key),
        Some(("application_info", key)) => known(APPLICATION_INFO_KEYS, key),
        Some(_) => false,
    }
}
