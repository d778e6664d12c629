//! What the identity store holds for a group's batches without an MPID ([`Known`]), in the
//! shape its PostgreSQL read answers ([`Found`]), and what a PostgreSQL lane remembers of it
//! from one group to the next, to guess the next group's read ([`Known::guess`]).
//!
//! A guess saves a group the read's round trip on the lane's serial path (issue 16, item 4): the
//! group is decided against it, and its batch insert reads under the identities' locks and
//! stores nothing unless the read answers exactly the rows the guess expects (see
//! [`super::batch_steps`]). Decisions are a function of those rows, so a group that stores is
//! decided as it would have been after the read; one that guessed wrong is decided again against
//! the rows its insert read, which cost no round trip more. A guess may be anything: what is
//! remembered is never trusted, only checked, so it need not be current, complete or committed.
//! An identity the lane does not remember is guessed unknown, as a new user's always are; a
//! returning user's is remembered from the group that last read or gave it.

use std::collections::{HashMap, HashSet};

use crate::model::identity::resolve::UserSummary;
use crate::model::ids::Mpid;

/// What the identity store holds for the group, as read and then as the group's earlier
/// batches changed it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Known {
    pub(super) owners: HashMap<(String, String), Mpid>,
    pub(super) devices: HashMap<String, Mpid>,
    pub(super) logged_in: HashSet<Mpid>,
}

/// The most identities and devices a lane remembers: about 2 MB. Past it, it forgets all and
/// starts again (a guess it cannot make costs only a wrong guess's wasted work).
const MOST_REMEMBERED: usize = 16_384;

impl Known {
    pub(super) fn summary(&self, mpid: Mpid) -> UserSummary {
        UserSummary {
            mpid,
            logged_in: self.logged_in.contains(&mpid),
        }
    }

    /// Keeps what `group` knew once its batches were decided (its read and its own writes),
    /// over what was remembered.
    pub(super) fn remember(&mut self, group: &Known) {
        if self.owners.len() + self.devices.len() > MOST_REMEMBERED {
            *self = Known::default();
        }
        let owners = group.owners.iter().map(|(k, &m)| (k.clone(), m));
        self.owners.extend(owners);
        let devices = group.devices.iter().map(|(d, &m)| (d.clone(), m));
        self.devices.extend(devices);
        self.logged_in.extend(group.logged_in.iter().copied());
    }

    /// The store as remembered, for these identities and devices only, as the read would have
    /// found it if it still holds what was remembered: a user's login is read only with a
    /// device (see [`Found::of`]).
    pub(super) fn guess<'a>(
        &self,
        identities: impl Iterator<Item = &'a (String, String)>,
        devices: impl Iterator<Item = &'a String> + Clone,
    ) -> Known {
        let with_logins = devices.clone().next().is_some();
        let mut guess = Known::default();
        for identity in identities {
            if let Some(&mpid) = self.owners.get(identity) {
                guess.owners.insert(identity.clone(), mpid);
                if with_logins && self.logged_in.contains(&mpid) {
                    guess.logged_in.insert(mpid);
                }
            }
        }
        for device in devices {
            if let Some(&mpid) = self.devices.get(device) {
                guess.devices.insert(device.clone(), mpid);
                if self.logged_in.contains(&mpid) {
                    guess.logged_in.insert(mpid);
                }
            }
        }
        guess
    }
}

/// Rows as the PostgreSQL read (`boson_group_identities`, migration 0029) answers them for
/// known identities and devices, a column each: (kind `o` or `d`, identity type or device,
/// identity value or none, MPID, whether the user has a login).
#[derive(Debug, Default)]
pub(super) struct Found {
    pub(super) kinds: Vec<&'static str>,
    pub(super) a: Vec<String>,
    pub(super) b: Vec<Option<String>>,
    pub(super) mpids: Vec<i64>,
    pub(super) logged_in: Vec<bool>,
}

impl Found {
    /// The rows the read answers for these identities and devices when the store holds what
    /// `known` says (a login is read for an identity's owner only when the group has a device).
    pub(super) fn of<'a>(
        known: &Known,
        identities: impl Iterator<Item = &'a (String, String)>,
        devices: impl Iterator<Item = &'a String> + Clone,
    ) -> Self {
        let with_logins = devices.clone().next().is_some();
        let mut rows = Found::default();
        for (t, v) in identities {
            if let Some(&mpid) = known.owners.get(&(t.clone(), v.clone())) {
                let logged_in = with_logins && known.logged_in.contains(&mpid);
                rows.push("o", t.clone(), Some(v.clone()), mpid, logged_in);
            }
        }
        for device in devices {
            if let Some(&mpid) = known.devices.get(device) {
                let logged_in = known.logged_in.contains(&mpid);
                rows.push("d", device.clone(), None, mpid, logged_in);
            }
        }
        rows
    }

    fn push(&mut self, kind: &'static str, a: String, b: Option<String>, mpid: Mpid, logged: bool) {
        self.kinds.push(kind);
        self.a.push(a);
        self.b.push(b);
        self.mpids.push(mpid.get());
        self.logged_in.push(logged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(t: &str, v: &str) -> (String, String) {
        (t.to_owned(), v.to_owned())
    }

    #[test]
    fn a_guess_holds_only_the_groups_keys_and_logins_only_with_a_device() {
        let mut remembered = Known::default();
        let mut group = Known::default();
        group.owners.insert(pair("email", "a@x"), Mpid::new(1));
        group.owners.insert(pair("email", "b@x"), Mpid::new(2));
        group.devices.insert("dev".to_owned(), Mpid::new(2));
        group.logged_in.insert(Mpid::new(1));
        remembered.remember(&group);
        let asked = [pair("email", "a@x"), pair("email", "new@x")];
        let no_device: [String; 0] = [];
        let guess = remembered.guess(asked.iter(), no_device.iter());
        assert_eq!(guess.owners.len(), 1);
        assert!(guess.logged_in.is_empty(), "a login read without a device");
        let device = ["dev".to_owned()];
        let guess = remembered.guess(asked.iter(), device.iter());
        assert_eq!(guess.devices.get("dev"), Some(&Mpid::new(2)));
        assert_eq!(guess.logged_in, HashSet::from([Mpid::new(1)]));
        let found = Found::of(&guess, asked.iter(), device.iter());
        assert_eq!(found.kinds, ["o", "d"]);
        assert_eq!(found.logged_in, [true, false]);
    }

    #[test]
    fn a_lane_forgets_everything_past_its_bound() {
        let mut remembered = Known::default();
        let mut group = Known::default();
        for n in 0..=MOST_REMEMBERED {
            group
                .owners
                .insert(pair("email", &n.to_string()), Mpid::new(1));
        }
        remembered.remember(&group);
        assert_eq!(remembered.owners.len(), MOST_REMEMBERED + 1);
        let mut next = Known::default();
        next.owners.insert(pair("email", "late"), Mpid::new(2));
        remembered.remember(&next);
        assert_eq!(remembered.owners.len(), 1);
    }
}
