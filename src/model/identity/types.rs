//! The Events API's user identity types, listed once. Everything Boson knows about a type lives
//! here: its name on the wire and in the store, its number in the SDKs' uploads, the other
//! spellings the SDKs send it under, and its rank when IDSync has to choose between users.
//! Code parses names into an [`IdentityType`] where they arrive and writes [`IdentityType::as_str`]
//! where JSON or the store needs the name back.

use std::fmt;

/// A user identity type (the keys of an Events API batch's `user_identities`).
///
/// Each discriminant is the type's number in the SDKs' `MParticle.IdentityType` (the mobile
/// SDKs and the Web SDK number them alike), which is how their uploads name it; so the
/// declaration order is the SDKs' numbering, not a preference. For preference see
/// [`IdentityType::match_rank`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum IdentityType {
    Other = 0,
    /// The login identity: a user with a customer id is "logged in", and IDSync no longer treats
    /// that user as a device's anonymous user.
    CustomerId = 1,
    Facebook = 2,
    Twitter = 3,
    Google = 4,
    Microsoft = 5,
    Yahoo = 6,
    Email = 7,
    Alias = 8,
    FacebookCustomAudienceId = 9,
    OtherId2 = 10,
    OtherId3 = 11,
    OtherId4 = 12,
    OtherId5 = 13,
    OtherId6 = 14,
    OtherId7 = 15,
    OtherId8 = 16,
    OtherId9 = 17,
    OtherId10 = 18,
    MobileNumber = 19,
    PhoneNumber2 = 20,
    PhoneNumber3 = 21,
}

use IdentityType as T;

impl IdentityType {
    /// Every type, in SDK number order (so a number indexes it).
    const ALL: [Self; 22] = [
        T::Other,
        T::CustomerId,
        T::Facebook,
        T::Twitter,
        T::Google,
        T::Microsoft,
        T::Yahoo,
        T::Email,
        T::Alias,
        T::FacebookCustomAudienceId,
        T::OtherId2,
        T::OtherId3,
        T::OtherId4,
        T::OtherId5,
        T::OtherId6,
        T::OtherId7,
        T::OtherId8,
        T::OtherId9,
        T::OtherId10,
        T::MobileNumber,
        T::PhoneNumber2,
        T::PhoneNumber3,
    ];

    /// IDSync's match order: when a request's identities belong to different known users, the
    /// owner of the identity whose type comes first here answers (a customer id beats an email).
    const MATCH_PRIORITY: [Self; 22] = [
        T::CustomerId,
        T::Email,
        T::MobileNumber,
        T::Other,
        T::OtherId2,
        T::OtherId3,
        T::OtherId4,
        T::OtherId5,
        T::OtherId6,
        T::OtherId7,
        T::OtherId8,
        T::OtherId9,
        T::OtherId10,
        T::Facebook,
        T::Google,
        T::Microsoft,
        T::Twitter,
        T::Yahoo,
        T::FacebookCustomAudienceId,
        T::PhoneNumber2,
        T::PhoneNumber3,
        T::Alias,
    ];

    /// The Events API name, which is also what the store and every outbound document hold.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            T::Other => "other",
            T::CustomerId => "customer_id",
            T::Facebook => "facebook",
            T::Twitter => "twitter",
            T::Google => "google",
            T::Microsoft => "microsoft",
            T::Yahoo => "yahoo",
            T::Email => "email",
            T::Alias => "alias",
            T::FacebookCustomAudienceId => "facebook_custom_audience_id",
            T::OtherId2 => "other_id_2",
            T::OtherId3 => "other_id_3",
            T::OtherId4 => "other_id_4",
            T::OtherId5 => "other_id_5",
            T::OtherId6 => "other_id_6",
            T::OtherId7 => "other_id_7",
            T::OtherId8 => "other_id_8",
            T::OtherId9 => "other_id_9",
            T::OtherId10 => "other_id_10",
            T::MobileNumber => "mobile_number",
            T::PhoneNumber2 => "phone_number_2",
            T::PhoneNumber3 => "phone_number_3",
        }
    }

    /// The type an Events API name denotes (exact and case-sensitive, as the API is).
    pub(crate) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The type an SDK upload numbers `n` (`MParticle.IdentityType`).
    pub(crate) fn from_sdk_number(n: i64) -> Option<Self> {
        let index = usize::try_from(n).ok()?;
        Self::ALL.get(index).copied()
    }

    /// The type an IDSync request names: the Events API name, or a spelling the SDKs use
    /// instead. The SDKs' hashed email and mobile number have no type of their own; IDSync
    /// files them under `other` and `other_id_2`.
    pub(crate) fn from_sdk_name(name: &str) -> Option<Self> {
        let kind = match name {
            "customerid" => T::CustomerId,
            "email_sha256" => T::Other,
            "other2" | "mobile_sha256" => T::OtherId2,
            "other3" => T::OtherId3,
            "other4" => T::OtherId4,
            "other5" => T::OtherId5,
            "other6" => T::OtherId6,
            "other7" => T::OtherId7,
            "other8" => T::OtherId8,
            "other9" => T::OtherId9,
            "other10" => T::OtherId10,
            "facebookcustomaudienceid" => T::FacebookCustomAudienceId,
            _ => return Self::parse(name),
        };
        Some(kind)
    }

    /// This type's place in IDSync's match order; lower wins.
    pub(crate) fn match_rank(self) -> usize {
        Self::MATCH_PRIORITY
            .iter()
            .position(|t| *t == self)
            // Unreachable (the tests check the order lists every type); last is the safe answer.
            .unwrap_or(usize::MAX)
    }
}

impl fmt::Display for IdentityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_type_round_trips_through_its_name() {
        let names: HashSet<&str> = T::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names.len(), T::ALL.len(), "names are distinct");
        for t in T::ALL {
            assert_eq!(T::parse(t.as_str()), Some(t), "{t}");
            assert_eq!(T::from_sdk_name(t.as_str()), Some(t), "{t}");
            assert_eq!(t.to_string(), t.as_str());
        }
        for name in [
            "",
            "Email",
            "customerid",
            "other2",
            "other_id_1",
            "ios_idfv",
        ] {
            assert_eq!(T::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn every_type_round_trips_through_its_sdk_number() {
        for (n, t) in (0i64..).zip(T::ALL) {
            // The discriminant is the number, and ALL is indexed by it.
            assert_eq!(t as i64, n, "{t}");
            assert_eq!(T::from_sdk_number(t as i64), Some(t), "{t}");
        }
        let count = i64::try_from(T::ALL.len()).unwrap();
        for n in [-1, count, i64::MIN, i64::MAX] {
            assert_eq!(T::from_sdk_number(n), None, "{n}");
        }
    }

    #[test]
    fn the_match_order_ranks_every_type_once() {
        let mut ranks: Vec<usize> = T::ALL.iter().map(|t| t.match_rank()).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, (0..T::ALL.len()).collect::<Vec<_>>());
        assert_eq!(T::CustomerId.match_rank(), 0);
        assert!(T::Email.match_rank() < T::Other.match_rank());
    }

    #[test]
    fn sdk_spellings_other_than_the_name() {
        let spellings = [
            ("customerid", T::CustomerId),
            ("email_sha256", T::Other),
            ("other2", T::OtherId2),
            ("mobile_sha256", T::OtherId2),
            ("other3", T::OtherId3),
            ("other10", T::OtherId10),
            ("facebookcustomaudienceid", T::FacebookCustomAudienceId),
        ];
        for (name, t) in spellings {
            assert_eq!(T::from_sdk_name(name), Some(t), "{name}");
            assert_eq!(T::parse(name), None, "{name} is not an Events API name");
        }
        assert_eq!(T::from_sdk_name("shoe_size"), None);
    }
}
