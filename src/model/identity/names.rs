//! Identity names as IDSync requests spell them: user identity types (under their Events API
//! names or the SDKs' spellings, see [`IdentityType::from_sdk_name`]), and the device identities
//! that mark a device rather than a user.

use super::types::IdentityType;

/// The kind of an identity named in an IDSync request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A user identity.
    User(IdentityType),
    /// A device identity (its SDK name is kept as the device key's prefix).
    Device(&'static str),
}

/// Classifies an SDK identity name; `None` for names no SDK sends.
pub(crate) fn classify(name: &str) -> Option<Kind> {
    match IdentityType::from_sdk_name(name) {
        Some(kind) => Some(Kind::User(kind)),
        None => device(name).map(Kind::Device),
    }
}

/// Device identities, most specific first: the first one a request carries keys the device.
const DEVICE_NAMES: &[&str] = &[
    "device_application_stamp",
    "ios_idfv",
    "android_uuid",
    "ios_idfa",
    "android_aaid",
    "push_token",
    "roku_aid",
    "roku_publisher_id",
    "fire_aid",
    "microsoft_aid",
    "microsoft_publisher_id",
];

fn device(name: &str) -> Option<&'static str> {
    DEVICE_NAMES.iter().copied().find(|d| *d == name)
}

/// The rank of a device identity name (lower is preferred as the device key).
pub(crate) fn device_rank(name: &str) -> usize {
    DEVICE_NAMES
        .iter()
        .position(|d| *d == name)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_spellings_map_to_server_types() {
        assert_eq!(
            classify("customerid"),
            Some(Kind::User(IdentityType::CustomerId))
        );
        assert_eq!(classify("other3"), Some(Kind::User(IdentityType::OtherId3)));
        assert_eq!(
            classify("facebookcustomaudienceid"),
            Some(Kind::User(IdentityType::FacebookCustomAudienceId))
        );
        assert_eq!(
            classify("device_application_stamp"),
            Some(Kind::Device("device_application_stamp"))
        );
        assert_eq!(classify("ios_idfv"), Some(Kind::Device("ios_idfv")));
        assert_eq!(classify("shoe_size"), None);
    }

    /// What a name classifies as, spelled out: ("user", Events API type) or ("device", name).
    fn spelled(name: &str) -> Option<(&'static str, &'static str)> {
        match classify(name)? {
            Kind::User(kind) => Some(("user", kind.as_str())),
            Kind::Device(kind) => Some(("device", kind)),
        }
    }

    /// Every name IDSync has accepted, with what it meant; written before identity types became
    /// an enum, so the refactoring provably accepts the same names with the same meanings.
    #[test]
    fn every_accepted_spelling_keeps_its_meaning() {
        let user = [
            ("customerid", "customer_id"),
            ("customer_id", "customer_id"),
            ("email", "email"),
            ("other", "other"),
            ("email_sha256", "other"),
            ("other2", "other_id_2"),
            ("other_id_2", "other_id_2"),
            ("mobile_sha256", "other_id_2"),
            ("other3", "other_id_3"),
            ("other_id_3", "other_id_3"),
            ("other4", "other_id_4"),
            ("other_id_4", "other_id_4"),
            ("other5", "other_id_5"),
            ("other_id_5", "other_id_5"),
            ("other6", "other_id_6"),
            ("other_id_6", "other_id_6"),
            ("other7", "other_id_7"),
            ("other_id_7", "other_id_7"),
            ("other8", "other_id_8"),
            ("other_id_8", "other_id_8"),
            ("other9", "other_id_9"),
            ("other_id_9", "other_id_9"),
            ("other10", "other_id_10"),
            ("other_id_10", "other_id_10"),
            ("facebook", "facebook"),
            ("twitter", "twitter"),
            ("google", "google"),
            ("microsoft", "microsoft"),
            ("yahoo", "yahoo"),
            ("alias", "alias"),
            ("facebookcustomaudienceid", "facebook_custom_audience_id"),
            ("facebook_custom_audience_id", "facebook_custom_audience_id"),
            ("mobile_number", "mobile_number"),
            ("phone_number_2", "phone_number_2"),
            ("phone_number_3", "phone_number_3"),
        ];
        for (name, kind) in user {
            assert_eq!(spelled(name), Some(("user", kind)), "{name}");
        }
        let device = [
            "device_application_stamp",
            "ios_idfv",
            "android_uuid",
            "ios_idfa",
            "android_aaid",
            "push_token",
            "roku_aid",
            "roku_publisher_id",
            "fire_aid",
            "microsoft_aid",
            "microsoft_publisher_id",
        ];
        for (rank, name) in device.into_iter().enumerate() {
            assert_eq!(spelled(name), Some(("device", name)), "{name}");
            assert_eq!(device_rank(name), rank, "{name}");
        }
        // Near misses stay unknown: names are exact and case-sensitive.
        for name in [
            "",
            "CustomerId",
            "customerId",
            "Email",
            "other1",
            "other_id_1",
            "other11",
            "other_id_11",
            "phone_number",
            "phone_number_1",
            "mobile_number_2",
            "facebook_custom_audience",
            "device",
            "idfa",
        ] {
            assert_eq!(spelled(name), None, "{name:?}");
        }
        assert_eq!(device_rank("customer_id"), usize::MAX);
    }
}
