//! IDSync resolution rules, as a pure function: given what a request knows and what the store
//! found for it, decide which MPID answers and which identities to attach.
//!
//! The rules (mParticle's default identity strategy, as far as the SDKs can observe it):
//! - A known user identity resolves to its user; when several are known, the first by
//!   [`IdentityType::match_rank`] wins (a customer id beats an email).
//! - Unknown identities are attached to the resolved user.
//! - When no identity is known yet: a login converts the previous user if that user is
//!   anonymous (has no customer id), an identify converts the device's anonymous user likewise;
//!   otherwise a new user is created.
//! - Without user identities (or on logout) the answer is the device's anonymous user, or a new
//!   one when that user has since logged in.

use super::types::IdentityType;
use crate::model::ids::Mpid;

/// Which IDSync call is being resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Identify,
    Login,
    Logout,
}

/// A user the store knows, as resolution needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UserSummary {
    pub(crate) mpid: Mpid,
    /// Has a customer id (a login identity).
    pub(crate) logged_in: bool,
}

/// What the store found for a request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lookup {
    /// For each known user identity, in request order, the MPID that owns it.
    pub(crate) owners: Vec<Option<Mpid>>,
    /// The device's anonymous user.
    pub(crate) device_user: Option<UserSummary>,
    /// The user named by `previous_mpid`.
    pub(crate) previous: Option<UserSummary>,
}

/// The user that answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Existing(Mpid),
    New,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) target: Target,
    /// Indexes (into the request's identities) of identities to attach to the target.
    pub(crate) attach: Vec<usize>,
    /// Whether the device's anonymous user becomes the target.
    pub(crate) point_device: bool,
}

/// Decides a resolution. `identities` are the request's user identities (Events API type names,
/// as the store keeps them).
pub(crate) fn decide(call: Call, identities: &[(String, String)], lookup: &Lookup) -> Decision {
    // Callers pass names already validated as types; a name that is not one (never the case
    // today) matches last and is no login, as before types were an enum.
    let kinds: Vec<Option<IdentityType>> = identities
        .iter()
        .map(|(kind, _)| IdentityType::parse(kind))
        .collect();
    let is_login = |kind: &Option<IdentityType>| *kind == Some(IdentityType::CustomerId);
    let anonymous = |user: Option<UserSummary>| user.filter(|u| !u.logged_in).map(|u| u.mpid);
    let known = if call == Call::Logout {
        None
    } else {
        first_match(&kinds, &lookup.owners)
    };
    let target = match (call, known) {
        (Call::Logout, _) => anonymous(lookup.device_user).map_or(Target::New, Target::Existing),
        (_, Some(mpid)) => Target::Existing(mpid),
        (_, None) if identities.is_empty() => {
            anonymous(lookup.device_user).map_or(Target::New, Target::Existing)
        }
        (Call::Login, None) => anonymous(lookup.previous)
            .or_else(|| anonymous(lookup.device_user))
            .map_or(Target::New, Target::Existing),
        (_, None) => anonymous(lookup.device_user).map_or(Target::New, Target::Existing),
    };
    let attach: Vec<usize> = if call == Call::Logout {
        Vec::new()
    } else {
        (0..identities.len())
            .filter(|&i| lookup.owners.get(i).copied().flatten().is_none())
            .collect()
    };
    let gains_login = attach.iter().any(|&i| is_login(&kinds[i]));
    let target_logged_in = match target {
        Target::Existing(mpid) => {
            let owns_login = kinds
                .iter()
                .zip(&lookup.owners)
                .any(|(kind, owner)| is_login(kind) && *owner == Some(mpid));
            owns_login || gains_login
        }
        Target::New => gains_login,
    };
    Decision {
        target,
        attach,
        point_device: !target_logged_in,
    }
}

/// The owner of the highest-priority known identity.
fn first_match(kinds: &[Option<IdentityType>], owners: &[Option<Mpid>]) -> Option<Mpid> {
    let rank = |kind: &Option<IdentityType>| kind.map_or(usize::MAX, IdentityType::match_rank);
    kinds
        .iter()
        .zip(owners)
        .filter_map(|(kind, owner)| owner.map(|mpid| (rank(kind), mpid)))
        .min_by_key(|(rank, _)| *rank)
        .map(|(_, mpid)| mpid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn m(id: i64) -> Mpid {
        Mpid::new(id)
    }

    fn ids(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_customer_id_beats_an_email() {
        let identities = ids(&[("email", "a@x"), ("customer_id", "c1")]);
        let lookup = Lookup {
            owners: vec![Some(m(7)), Some(m(9))],
            ..Lookup::default()
        };
        assert_eq!(
            decide(Call::Identify, &identities, &lookup).target,
            Target::Existing(m(9))
        );
    }

    /// Each identity type beats every type after it, in this order (a known identity of a type
    /// outside the list, which validation never lets through, loses to all of them).
    #[test]
    fn match_priority_is_pinned() {
        let order = [
            "customer_id",
            "email",
            "mobile_number",
            "other",
            "other_id_2",
            "other_id_3",
            "other_id_4",
            "other_id_5",
            "other_id_6",
            "other_id_7",
            "other_id_8",
            "other_id_9",
            "other_id_10",
            "facebook",
            "google",
            "microsoft",
            "twitter",
            "yahoo",
            "facebook_custom_audience_id",
            "phone_number_2",
            "phone_number_3",
            "alias",
            "not_a_type",
        ];
        for (i, better) in order.iter().enumerate() {
            for worse in &order[i + 1..] {
                // Request order must not matter: try the better one second as well as first.
                for pair in [[better, worse], [worse, better]] {
                    let identities = ids(&[(pair[0], "a"), (pair[1], "b")]);
                    let owners = pair
                        .iter()
                        .map(|k| Some(m(if k == &better { 1 } else { 2 })))
                        .collect();
                    let lookup = Lookup {
                        owners,
                        ..Lookup::default()
                    };
                    assert_eq!(
                        decide(Call::Identify, &identities, &lookup).target,
                        Target::Existing(m(1)),
                        "{better} should beat {worse}"
                    );
                }
            }
        }
    }

    #[test]
    fn login_converts_an_anonymous_previous_user_but_not_a_known_one() {
        let identities = ids(&[("customer_id", "c1")]);
        let anonymous = UserSummary {
            mpid: m(5),
            logged_in: false,
        };
        let lookup = Lookup {
            owners: vec![None],
            previous: Some(anonymous),
            ..Lookup::default()
        };
        let d = decide(Call::Login, &identities, &lookup);
        assert_eq!(d.target, Target::Existing(m(5)));
        assert_eq!(d.attach, vec![0]);
        assert!(
            !d.point_device,
            "a logged-in user is no longer the device's anonymous user"
        );
        let someone = UserSummary {
            mpid: m(5),
            logged_in: true,
        };
        let lookup = Lookup {
            owners: vec![None],
            previous: Some(someone),
            ..Lookup::default()
        };
        assert_eq!(
            decide(Call::Login, &identities, &lookup).target,
            Target::New
        );
    }

    #[test]
    fn logout_returns_the_devices_anonymous_user() {
        let anonymous = UserSummary {
            mpid: m(3),
            logged_in: false,
        };
        let lookup = Lookup {
            device_user: Some(anonymous),
            ..Lookup::default()
        };
        assert_eq!(
            decide(Call::Logout, &[], &lookup).target,
            Target::Existing(m(3))
        );
        let converted = UserSummary {
            mpid: m(3),
            logged_in: true,
        };
        let lookup = Lookup {
            device_user: Some(converted),
            ..Lookup::default()
        };
        let d = decide(Call::Logout, &[], &lookup);
        assert_eq!(d.target, Target::New);
        assert!(d.point_device);
    }

    /// A tiny in-memory store applying decisions, to check sequences of calls.
    #[derive(Default)]
    struct Model {
        owners: HashMap<(String, String), Mpid>,
        device: Option<Mpid>,
        next: i64,
    }

    impl Model {
        fn summary(&self, mpid: Mpid) -> UserSummary {
            let logged_in = self
                .owners
                .iter()
                .any(|((k, _), m)| k == IdentityType::CustomerId.as_str() && *m == mpid);
            UserSummary { mpid, logged_in }
        }

        fn call(
            &mut self,
            call: Call,
            identities: &[(String, String)],
            previous: Option<Mpid>,
        ) -> Mpid {
            let lookup = Lookup {
                owners: identities
                    .iter()
                    .map(|i| self.owners.get(i).copied())
                    .collect(),
                device_user: self.device.map(|m| self.summary(m)),
                previous: previous.map(|m| self.summary(m)),
            };
            let d = decide(call, identities, &lookup);
            let mpid = match d.target {
                Target::Existing(m) => m,
                Target::New => {
                    self.next += 1;
                    m(self.next)
                }
            };
            for i in d.attach {
                self.owners.entry(identities[i].clone()).or_insert(mpid);
            }
            if d.point_device {
                self.device = Some(mpid);
            }
            mpid
        }
    }

    fn arb_identities() -> impl Strategy<Value = Vec<(String, String)>> {
        let kind = proptest::sample::select(vec!["customer_id", "email", "other"]);
        let value = proptest::sample::select(vec!["a", "b", "c"]);
        proptest::collection::vec((kind, value), 0..3).prop_map(|v| {
            let mut seen = std::collections::HashSet::new();
            v.into_iter()
                .filter(|(k, _)| seen.insert(*k))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
    }

    proptest! {
        /// Whatever happened before, identifying twice with the same identities gives the same
        /// MPID, and a known customer id always resolves to its owner.
        #[test]
        fn resolution_is_stable(
            history in proptest::collection::vec((0u8..3, arb_identities()), 0..12),
            identities in arb_identities(),
        ) {
            let mut model = Model::default();
            let mut current = None;
            for (call, ids) in &history {
                let call = [Call::Identify, Call::Login, Call::Logout][usize::from(*call)];
                current = Some(model.call(call, ids, current));
            }
            let first = model.call(Call::Identify, &identities, current);
            let second = model.call(Call::Identify, &identities, Some(first));
            prop_assert_eq!(first, second);
            if let Some(&owner) = identities.iter().find(|(k, _)| k == IdentityType::CustomerId.as_str()).and_then(|i| model.owners.get(i)) {
                prop_assert_eq!(owner, first);
                prop_assert_eq!(model.call(Call::Login, &identities, None), owner);
            }
            let after_logout = model.call(Call::Logout, &[], Some(first));
            prop_assert!(!model.summary(after_logout).logged_in);
        }
    }
}
