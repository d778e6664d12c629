//! What the identity store holds for a group's batches without an MPID ([`Known`]), in the
//! shape its PostgreSQL read answers ([`Found`]), and what a PostgreSQL lane remembers of it
//! from one group to the next, to guess the next group's read ([`Remembered`]).
//!
//! A guess saves a group the read's round trip on the lane's serial path (issue 16, item 4): the
//! group is decided against it, and its batch insert reads under the identities' locks and
//! stores nothing unless the read answers exactly the rows the guess expects (see
//! [`super::batch_steps`]). Decisions are a function of those rows, so a group that stores is
//! decided as it would have been after the read; one that guessed wrong is decided again against
//! the rows its insert read, which cost no round trip more. A guess may be anything: what is
//! remembered is never trusted, only checked, so it need not be current, complete or committed.
//! An identity the lane does not remember is guessed unknown, as a new user's always are; a
//! returning user's is remembered from the group that last read or gave it, and forgotten when
//! a group asks and does not find it. A lane whose guesses are often wrong (more users than it
//! remembers, or users whose batches went to another lane or node) reads first instead, as a
//! wrong guess sends the insert's work twice, and guesses again once it would have been right
//! for a while ([`Remembered::trusted`]).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

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

/// The most a lane remembers, in bytes of keys (and about as much again in the maps' own
/// overhead): past it, it forgets all and starts again (a guess it cannot make costs only a
/// wrong guess's wasted work).
const MOST_REMEMBERED_BYTES: usize = 1 << 20;
/// A map entry's overhead beside its key's bytes, for the bound above.
const ENTRY_BYTES: usize = 64;
/// How far a wrong guess sets the lane back from guessing again: guessing goes on while about
/// one group in this many would have guessed wrong, or fewer.
const WRONG_WEIGHT: u8 = 4;
/// The most doubt a lane carries, so it comes back to guessing after this many right guesses
/// in a row.
const MOST_DOUBT: u8 = 16;

impl Known {
    pub(super) fn summary(&self, mpid: Mpid) -> UserSummary {
        UserSummary {
            mpid,
            logged_in: self.logged_in.contains(&mpid),
        }
    }

    /// The store as `self` remembers it, for these identities and devices only, as the read
    /// would find it if it still holds that: a user's login is read only with a device (the
    /// rule [`Found::of`] turns back into rows).
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

/// What a PostgreSQL lane remembers of the identities its groups knew, and how often its
/// guesses from it have been wrong lately.
#[derive(Debug, Default)]
pub(super) struct Remembered {
    known: Known,
    /// The keys' bytes remembered, for [`MOST_REMEMBERED_BYTES`].
    bytes: usize,
    /// Raised by a wrong guess, lowered by a right one: the lane guesses only at none, and
    /// reads first otherwise (its groups with many users it does not remember, say, where
    /// nearly every guess would be wrong and cost the insert's work twice).
    doubt: u8,
}

impl Remembered {
    /// Whether the lane's guesses have been right often enough lately to guess the next read.
    pub(super) fn trusted(&self) -> bool {
        self.doubt == 0
    }

    /// The guess for these identities and devices ([`Known::guess`]).
    pub(super) fn guess<'a>(
        &self,
        identities: impl Iterator<Item = &'a (String, String)>,
        devices: impl Iterator<Item = &'a String> + Clone,
    ) -> Known {
        self.known.guess(identities, devices)
    }

    /// Counts a guess that the read found right or wrong (made or only compared: a lane that
    /// reads first still learns whether it would have guessed right).
    pub(super) fn guessed(&mut self, right: bool) {
        self.doubt = if right {
            self.doubt.saturating_sub(1)
        } else {
            self.doubt.saturating_add(WRONG_WEIGHT).min(MOST_DOUBT)
        };
    }

    /// Learns what a group knew once its batches were decided (its read, or its guess that the
    /// insert will check, and its own writes) about the identities and devices it asked for:
    /// each asked is remembered as found, or forgotten if not found (detached, or made by a
    /// group that did not commit); a user's login as read, where the group read it (with a
    /// device) or gave one.
    pub(super) fn learn<'a>(
        &mut self,
        group: &Known,
        identities: impl Iterator<Item = &'a (String, String)>,
        devices: impl Iterator<Item = &'a String> + Clone,
    ) {
        let with_logins = devices.clone().next().is_some();
        for identity in identities {
            let mpid = group.owners.get(identity).copied();
            let size = identity.0.len() + identity.1.len();
            self.bytes = (self.bytes).saturating_add_signed(keep(
                &mut self.known.owners,
                identity,
                mpid,
                size,
            ));
            if let Some(mpid) = mpid {
                self.learn_login(group, mpid, with_logins);
            }
        }
        for device in devices {
            let mpid = group.devices.get(device).copied();
            let size = device.len();
            self.bytes = (self.bytes).saturating_add_signed(keep(
                &mut self.known.devices,
                device,
                mpid,
                size,
            ));
            if let Some(mpid) = mpid {
                self.learn_login(group, mpid, true);
            }
        }
        if self.bytes > MOST_REMEMBERED_BYTES {
            *self = Remembered {
                doubt: self.doubt,
                ..Remembered::default()
            };
        }
    }

    /// Whether `mpid` has a login, as `group` knows it: known either way where the group read
    /// logins, and where it has one (given by the group itself).
    fn learn_login(&mut self, group: &Known, mpid: Mpid, read: bool) {
        if group.logged_in.contains(&mpid) {
            self.known.logged_in.insert(mpid);
        } else if read {
            self.known.logged_in.remove(&mpid);
        }
    }
}

/// Sets `key`'s entry in `map` to `mpid`, or removes it (`None`), cloning the key only for an
/// entry it did not hold (a lane learns its returning users' keys at every group); answers how
/// the bytes remembered changed, the key's `size` and [`ENTRY_BYTES`] an entry.
fn keep<K: Hash + Eq + Clone>(
    map: &mut HashMap<K, Mpid>,
    key: &K,
    mpid: Option<Mpid>,
    size: usize,
) -> isize {
    let bytes = isize::try_from(size + ENTRY_BYTES).unwrap_or(isize::MAX);
    match (map.get_mut(key), mpid) {
        (Some(held), Some(mpid)) => {
            *held = mpid;
            0
        }
        (None, Some(mpid)) => {
            map.insert(key.clone(), mpid);
            bytes
        }
        (Some(_), None) => {
            map.remove(key);
            -bytes
        }
        (None, None) => 0,
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

    const NO_DEVICE: [String; 0] = [];

    #[test]
    fn a_guess_holds_only_the_groups_keys_and_logins_only_with_a_device() {
        let mut remembered = Remembered::default();
        let mut group = Known::default();
        group.owners.insert(pair("email", "a@x"), Mpid::new(1));
        group.owners.insert(pair("email", "b@x"), Mpid::new(2));
        group.devices.insert("dev".to_owned(), Mpid::new(2));
        group.logged_in.insert(Mpid::new(1));
        let known = [pair("email", "a@x"), pair("email", "b@x")];
        let device = ["dev".to_owned()];
        remembered.learn(&group, known.iter(), device.iter());
        let asked = [pair("email", "a@x"), pair("email", "new@x")];
        let guess = remembered.guess(asked.iter(), NO_DEVICE.iter());
        assert_eq!(guess.owners.len(), 1);
        assert!(guess.logged_in.is_empty(), "a login read without a device");
        let guess = remembered.guess(asked.iter(), device.iter());
        assert_eq!(guess.devices.get("dev"), Some(&Mpid::new(2)));
        assert_eq!(guess.logged_in, HashSet::from([Mpid::new(1)]));
        let found = Found::of(&guess, asked.iter(), device.iter());
        assert_eq!(found.kinds, ["o", "d"]);
        assert_eq!(found.logged_in, [true, false]);
    }

    #[test]
    fn what_a_group_asked_and_did_not_find_is_forgotten() {
        let mut remembered = Remembered::default();
        let mut group = Known::default();
        group.owners.insert(pair("email", "a@x"), Mpid::new(1));
        group.devices.insert("dev".to_owned(), Mpid::new(1));
        group.logged_in.insert(Mpid::new(1));
        let asked = [pair("email", "a@x")];
        let device = ["dev".to_owned()];
        remembered.learn(&group, asked.iter(), device.iter());
        // Later the identity is gone and the device's user has no login (read with a device).
        let mut later = Known::default();
        later.devices.insert("dev".to_owned(), Mpid::new(1));
        remembered.learn(&later, asked.iter(), device.iter());
        let guess = remembered.guess(asked.iter(), device.iter());
        assert!(guess.owners.is_empty(), "a detached identity guessed");
        assert_eq!(
            remembered.bytes,
            "dev".len() + ENTRY_BYTES,
            "a forgotten key counted"
        );
        assert!(guess.logged_in.is_empty(), "a login lost still guessed");
    }

    #[test]
    fn a_lane_forgets_everything_past_its_bound() {
        let mut remembered = Remembered::default();
        let mut group = Known::default();
        let names: Vec<(String, String)> = (0..MOST_REMEMBERED_BYTES / ENTRY_BYTES)
            .map(|n| pair("email", &n.to_string()))
            .collect();
        for name in &names[..10] {
            group.owners.insert(name.clone(), Mpid::new(1));
        }
        remembered.learn(&group, names[..10].iter(), NO_DEVICE.iter());
        assert_eq!(remembered.known.owners.len(), 10);
        for name in &names {
            group.owners.insert(name.clone(), Mpid::new(1));
        }
        remembered.learn(&group, names.iter(), NO_DEVICE.iter());
        assert!(remembered.known.owners.is_empty(), "over its bound");
    }

    #[test]
    fn a_lane_guesses_again_only_after_being_right_for_a_while() {
        let mut remembered = Remembered::default();
        assert!(remembered.trusted());
        remembered.guessed(false);
        assert!(!remembered.trusted());
        for _ in 1..WRONG_WEIGHT {
            remembered.guessed(true);
        }
        assert!(!remembered.trusted());
        remembered.guessed(true);
        assert!(remembered.trusted());
        for _ in 0..100 {
            remembered.guessed(false);
        }
        for _ in 0..MOST_DOUBT {
            remembered.guessed(true);
        }
        assert!(remembered.trusted(), "doubt is bounded");
    }
}
