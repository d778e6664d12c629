//! The group commit's identity step: the batches of a group that arrived without an MPID get
//! the one their identities resolve to, inside the group's transaction, before the batches,
//! profiles and jobs that carry it are written. The rules are the pure
//! [`decide`], as for IDSync's identify; what changes
//! is the cost: what the store knows of the whole group's identities and devices is read at
//! once ([`super::identity_read`]: one round trip on PostgreSQL, locks included; on a PostgreSQL
//! lane none, as the lane guesses it and the batch insert reads it and checks the guess:
//! [`super::identity_known`]), the group's
//! batches are decided in order against what was read plus what the earlier batches decided,
//! and the new users, identities, history rows and device pointers are written in one
//! statement on PostgreSQL (one per kind of row on SQLite). One transaction per batch was a
//! fifth of the rate of batches with an MPID (issue 16).
//!
//! The writes wait until the group's batches are stored ([`write()`]): a new user's row is then
//! inserted once, with the profile the group's stored batches give it, instead of inserted
//! bare here and updated by the profile upsert (each new user cost about five more B-tree
//! writes than a batch with an MPID; this is one of them). Its identities and device pointer
//! follow it, since they refer to it. On PostgreSQL they usually go in the batch insert's
//! statement itself ([`Writing`], [`super::batch_steps`]).
//!
//! Locks: on PostgreSQL the group takes the advisory lock of every identity and device it resolves,
//! in key order, as [`Store::resolve_identity`](super::Store::resolve_identity) does for IDSync, so
//! two nodes (or a node and an IDSync call) never make two users of one new identity; the reads
//! come after the locks, each with a snapshot taken after them (READ COMMITTED, pinned at the
//! group's BEGIN), so they see what a node that held them committed (see [`super::identity_read`]).
//! A lane that guesses the read decides before taking the locks, but stores nothing decided so
//! unless its batch insert, after taking them and before any batch key, reads exactly what was
//! guessed ([`super::identity_known`]): what is stored is decided as it would have been after
//! the locks.
//! The step runs after the group's job-row changes and before its batch keys and profile rows (see
//! the lock order in [`super::group`]); it touches no user row another transaction updates (a
//! returning user's `last_seen_at` is set by the profile upsert, in MPID order with the others), so
//! it adds no cycle.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Serialize;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;

use super::backend::{Sql, Tx, args, json};
use super::identity_known::{Found, Known};
use super::identity_read::{self, Asked, Row};
use super::identity_sql::new_mpid;
use super::queue::{NewBatch, ProfileUpdate, Unresolved};
use super::steps::{self, ProfileRow};
use crate::model::identity::resolve::{Call, Lookup, Target, decide};
use crate::model::identity::types::IdentityType;
use crate::model::ids::{BatchId, Mpid};

// SQLite's writes, one statement each (a statement costs SQLite no round trip over a network;
// PostgreSQL's are one statement, `WRITE_POSTGRES`). Object rows are walked with `jsonb_each`,
// so each `->>` reads SQLite's binary JSON (see `super::steps`).

/// `$1` new MPIDs, `$2` now: new users none of whose batches was stored (a resend racing its
/// original; their identities are still given to them).
const INSERT_USERS: Sql = Sql::sqlite_only(
    "INSERT INTO users (mpid, created_at, last_seen_at) SELECT value, $2, $2 FROM json_each($1)",
);
// A new user's attributes and consent as the profile upsert would merge its profile rows into
// an empty profile (`user_attributes` and `consent` start as `{}`), so the row is written once
// and reads the same. No `ON CONFLICT`: two nodes that made one MPID fail the group, which is
// retried with fresh ones, rather than merge two users.
macro_rules! insert_new_profiles_sqlite {
    () => {
        "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes, consent) \
         SELECT value ->> 'mpid', $2, $2, json_patch('{}', value ->> 'patch'), \
         json_patch('{\"gdpr\":{},\"ccpa\":{}}', value ->> 'consent') FROM jsonb_each($1)"
    };
}
/// `$1` the new users' profile rows, `$2` now.
const INSERT_NEW_PROFILES: Sql = Sql::sqlite_only(insert_new_profiles_sqlite!());
/// The same, answering each user's consent (for jobs handed to delivery with it).
const INSERT_NEW_PROFILES_RETURNING_CONSENT: Sql = Sql::sqlite_only(concat!(
    insert_new_profiles_sqlite!(),
    " RETURNING mpid, consent"
));
/// `$1` `Attach` rows, `$2` now. The group read the owners under SQLite's one write lock, so
/// nobody can have given an identity meanwhile; `ON CONFLICT` is only a guard (the first owner
/// keeps it, as in IDSync).
const ATTACH: Sql = Sql::sqlite_only(
    "INSERT INTO user_identities (identity_type, identity, mpid, created_at) \
     SELECT value ->> 't', value ->> 'v', value ->> 'mpid', $2 FROM jsonb_each($1) WHERE true \
     ON CONFLICT (identity_type, identity) DO NOTHING",
);
/// `$1` `Attach` rows, `$2` now: each attached identity in its user's history.
const RECORD_ATTACHED: Sql = Sql::sqlite_only(
    "INSERT INTO identity_changes (mpid, identity_type, old_value, new_value, changed_at) \
     SELECT value ->> 'mpid', value ->> 't', NULL, value ->> 'v', $2 FROM jsonb_each($1)",
);
/// `$1` `PointDevice` rows (one per device), `$2` now.
const POINT_DEVICES: Sql = Sql::sqlite_only(
    "INSERT INTO device_users (device, mpid, updated_at) \
     SELECT value ->> 'd', value ->> 'mpid', $2 FROM jsonb_each($1) WHERE true \
     ON CONFLICT (device) DO UPDATE SET mpid = excluded.mpid, updated_at = excluded.updated_at",
);
/// PostgreSQL: every write above as the parts of one statement (four round trips were one
/// each), each part's rows kept by `$filter` (a `WHERE`, or nothing): `$profiles` the new users'
/// profile rows, `$bare` the new users without one, `$types`, `$values`, `$mpids` the identities
/// given (arrays, which arrive parsed, where a JSON text was parsed once per part that read it),
/// `$devices` `PointDevice` rows, `$now` the time. `made` answers the profiled users' consent.
/// Data-modifying `WITH` parts always run to completion, read or not. The parts go in their own
/// statement ([`WRITE_POSTGRES`]) or, on the lane's usual path, in the batch insert's (see
/// [`super::batch_steps`]), whose numbering the parameters then take.
///
/// The identities go in with a plain INSERT: no other owner can appear, since the group holds
/// every attached identity's advisory lock and read the owners after taking it (IDSync and
/// `/modify` take the same lock before they attach), and [`decide_one`] gives an identity once
/// even when a batch names it twice. `ON CONFLICT` cost each row a speculative insertion and
/// its confirmation (about an eighth of this statement's instructions per new user). Were
/// there a conflict all the same, the group fails and is retried one by one, and the batch's
/// request is answered an error to retry: nothing is given twice. The identities, devices
/// and history refer to users without a foreign key (migration 0030).
macro_rules! write_postgres_ctes {
    ($profiles:literal, $bare:literal, $types:literal, $values:literal, $mpids:literal,
     $devices:literal, $now:literal, $filter:expr) => {
        concat!(
            "made AS (INSERT INTO users (mpid, created_at, last_seen_at, user_attributes, consent) \
             SELECT mpid, ", $now, ", ", $now, ", jsonb_strip_nulls('{}'::jsonb || patch)::text, \
             jsonb_build_object('gdpr', '{}'::jsonb || COALESCE(consent -> 'gdpr', '{}'::jsonb), \
             'ccpa', '{}'::jsonb || COALESCE(consent -> 'ccpa', '{}'::jsonb))::text \
             FROM jsonb_to_recordset(", $profiles, "::jsonb) AS x(mpid bigint, patch jsonb, consent jsonb) ",
            $filter, " RETURNING mpid, consent), \
             bare AS (INSERT INTO users (mpid, created_at, last_seen_at) \
             SELECT unnest(", $bare, "::int8[]), ", $now, ", ", $now, " ", $filter, "), \
             attached AS (INSERT INTO user_identities (identity_type, identity, mpid, created_at) \
             SELECT t, v, mpid, ", $now, " FROM unnest(", $types, "::text[], ", $values, "::text[], ",
            $mpids, "::int8[]) AS x(t, v, mpid) ", $filter, "), \
             recorded AS (INSERT INTO identity_changes \
             (mpid, identity_type, old_value, new_value, changed_at) \
             SELECT mpid, t, NULL, v, ", $now, " FROM unnest(", $types, "::text[], ", $values,
            "::text[], ", $mpids, "::int8[]) AS x(t, v, mpid) ", $filter, "), \
             pointed AS (INSERT INTO device_users (device, mpid, updated_at) \
             SELECT d, mpid, ", $now, " FROM jsonb_to_recordset(", $devices,
            "::jsonb) AS x(d text, mpid bigint) ", $filter, " \
             ON CONFLICT (device) DO UPDATE SET mpid = excluded.mpid, updated_at = excluded.updated_at)"
        )
    };
}
pub(super) use write_postgres_ctes;
/// The writes on their own ([`write_postgres_ctes`]): `$1` to `$6` as [`Writing::bind`] binds
/// them, `$7` now; with `$8`, answers the profiled users' consent.
const WRITE_POSTGRES: &str = concat!(
    "WITH ",
    write_postgres_ctes!("$1", "$2", "$3", "$4", "$5", "$6", "$7", ""),
    " SELECT mpid, consent FROM made WHERE $8"
);

/// An identity given to a user.
#[derive(Debug, Serialize)]
struct Attach<'a> {
    t: &'a str,
    v: &'a str,
    mpid: Mpid,
}

/// A device pointed at its (anonymous) user.
#[derive(Debug, Serialize)]
struct PointDevice<'a> {
    d: &'a str,
    mpid: Mpid,
}

/// The writes the group's decisions call for.
#[derive(Debug, Default)]
struct Writes<'a> {
    users: Vec<Mpid>,
    attach: Vec<Attach<'a>>,
    devices: Vec<PointDevice<'a>>,
    /// How many writes the decisions called for (a device pointed twice counts twice).
    made: usize,
}

/// What the group's decisions write once its batches are stored (see [`write()`]), owned, so the
/// batches are free for the steps between.
#[derive(Debug, Default)]
pub(super) struct Decided {
    /// The new users.
    users: HashSet<Mpid>,
    /// The identities given, a column each, as PostgreSQL binds them.
    attached: Attached,
    /// `PointDevice` rows as JSON, if any.
    devices: Option<String>,
    /// For each batch of the group, in order, whether its decision wrote anything: made a
    /// user, gave an identity or pointed a device (only such a decision changes what later
    /// batches of the group are decided against).
    wrote: Vec<bool>,
    /// Decided against a guess, not a read: what the batch insert must read and find.
    pub(super) guessed: Option<Guessed>,
}

/// A group decided against a guess of its read ([`super::identity_known`]): what to read, under
/// the locks, in the batch insert, and the rows the guess expects it to find.
#[derive(Debug)]
pub(super) struct Guessed {
    pub(super) asked: Asked,
    pub(super) found: Found,
}

/// How the identity step learns what the store holds for the group.
#[derive(Debug)]
pub(super) enum Reading {
    /// Reads it, with the stored keys if [`Resends::Read`].
    Read(Resends),
    /// Guesses it from what a PostgreSQL lane remembers; reads it as `Read(FoundByInsert)` on
    /// any other transaction.
    Guess,
    /// The read's rows, as a batch insert that found a wrong guess answered them.
    Found(Vec<Row>),
}

/// Identities given to users, as columns: the i-th of each is one identity.
#[derive(Debug, Default)]
struct Attached {
    types: Vec<String>,
    values: Vec<String>,
    mpids: Vec<i64>,
}

impl Attached {
    fn of(rows: &[Attach<'_>]) -> Self {
        Self {
            types: rows.iter().map(|a| a.t.to_owned()).collect(),
            values: rows.iter().map(|a| a.v.to_owned()).collect(),
            mpids: rows.iter().map(|a| a.mpid.get()).collect(),
        }
    }

    /// SQLite's `Attach` rows as JSON, if any.
    fn json(&self) -> Option<String> {
        let rows: Vec<Attach<'_>> = (self.types.iter().zip(&self.values).zip(&self.mpids))
            .map(|((t, v), &mpid)| Attach {
                t,
                v,
                mpid: Mpid::new(mpid),
            })
            .collect();
        (!rows.is_empty()).then(|| json(&rows))
    }
}

impl Decided {
    fn of(writes: &Writes<'_>, wrote: Vec<bool>, guessed: Option<Guessed>) -> Self {
        Self {
            users: writes.users.iter().copied().collect(),
            attached: Attached::of(&writes.attach),
            devices: (!writes.devices.is_empty()).then(|| json(&writes.devices)),
            wrote,
            guessed,
        }
    }

    /// Whether a batch whose decision wrote something was not stored (`ids` the group's batch
    /// ids in order, `stored` those the insert stored): a resend, which made a user, gave
    /// identities or pointed a device that only its original had the say on. A resend whose
    /// decision wrote nothing (its identities already its user's, as they are once its
    /// original was stored, and no device) changed nothing, and is stored as nothing anyway.
    pub(super) fn a_resend_wrote(&self, ids: &[BatchId], stored: &HashSet<BatchId>) -> bool {
        (self.wrote.iter().zip(ids)).any(|(&wrote, id)| wrote && !stored.contains(id))
    }

    /// The group's profile rows split into the new users' and the known users'.
    pub(super) fn split_profiles(
        &self,
        rows: Vec<ProfileRow>,
    ) -> (Vec<ProfileRow>, Vec<ProfileRow>) {
        rows.into_iter()
            .partition(|row| self.users.contains(&row.mpid))
    }

    /// Counts, on the lane `tx` belongs to, a guess the batch insert found right (a wrong one
    /// is counted when the group is decided again: [`Reading::Found`]).
    pub(super) fn count_guess_held(&self, tx: &mut Tx<'_>) {
        if let (Some(_), Some(remembered)) = (&self.guessed, tx.remembered()) {
            remembered.guessed(true);
        }
    }
}

/// Whether the identity step reads which of the group's batch keys are stored before it
/// resolves the batches (a duplicate resolves nothing: whatever identities a resend names, only
/// the batch first stored has its say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resends {
    /// Not read: resends are rare, and the batch insert finds them anyway. A group in which a
    /// batch whose decision wrote something turns out to be one is rolled back and run again
    /// `Read` ([`Decided::a_resend_wrote`]). Reading the keys was a fifth of the identity read
    /// on PostgreSQL (a B-tree probe of `batches` per batch) and a statement of its own on
    /// SQLite.
    FoundByInsert,
    /// Read with the identities, under their locks.
    Read,
}

/// [`resolve_batches_by`] with a read: the shorthand of the step's own tests.
#[cfg(test)]
pub(super) async fn resolve_batches(
    tx: &mut Tx<'_>,
    batches: &mut [&mut NewBatch],
    resends: Resends,
) -> Result<Decided, sqlx::Error> {
    resolve_batches_by(tx, batches, Reading::Read(resends)).await
}

/// Gives every batch of `batches` that arrived without an MPID its user, in order, learning
/// what the store holds by `reading`, and answers the writes the decisions call for, for
/// [`write()`] once the batches are stored (or for the batch insert, which on PostgreSQL also
/// checks a guess: [`Reading::Guess`]). A batch that would need a new user where it may not
/// make one keeps none. A duplicate taken by an earlier batch
/// of the group, or, with [`Resends::Read`], whose `source_request_id` is already stored, is
/// stored as nothing, so it resolves nothing and writes nothing. A resend racing its
/// uncommitted original on another lane or node is found by the insert, which waits for the
/// original's commit, and the group runs again `Read`; in that run the stored keys are read
/// without a lock on them, so another resend racing its own original there (no identity or
/// device in common, so no advisory lock between them) still resolves before its insert finds
/// the duplicate.
pub(super) async fn resolve_batches_by(
    tx: &mut Tx<'_>,
    batches: &mut [&mut NewBatch],
    reading: Reading,
) -> Result<Decided, sqlx::Error> {
    if !batches.iter().any(|b| b.unresolved.is_some()) {
        return Ok(Decided::default());
    }
    let mut resolving = firsts_of_their_key(batches);
    let candidates: Vec<&Unresolved> = unresolved_of(batches, &resolving);
    if candidates.is_empty() {
        settle_all(batches, &resolving, Vec::new());
        return Ok(Decided::default());
    }
    let (stored, mut known, guessed) =
        what_is_known(tx, batches, &resolving, &candidates, reading).await?;
    // Empty unless read (`Resends::Read`): no owned key made per batch on a first run.
    if !stored.is_empty() {
        for (flag, batch) in resolving.iter_mut().zip(batches.iter()) {
            let key = batch_key(batch).map(|(i, r)| (i.to_owned(), r.to_owned()));
            if key.is_some_and(|key| stored.contains(&key)) {
                *flag = false;
            }
        }
    }
    let mut writes = Writes::default();
    let mut users = Vec::with_capacity(candidates.len());
    let mut wrote = vec![false; batches.len()];
    for ((batch, resolve), wrote) in batches.iter().zip(&resolving).zip(&mut wrote) {
        let Some(unresolved) = batch.unresolved.as_deref().filter(|_| *resolve) else {
            continue;
        };
        let before = writes.made;
        users.push(decide_one(unresolved, &mut known, &mut writes));
        *wrote = writes.made > before;
    }
    if let Some(remembered) = tx.remembered() {
        let (identities, devices) = asked_of(&candidates);
        remembered.learn(&known, identities, devices);
    }
    let decided = Decided::of(&writes, wrote, guessed);
    settle_all(batches, &resolving, users);
    Ok(decided)
}

/// Reads what the store holds for `candidates`, the unresolved batches `resolving` marks, with
/// the stored keys among theirs if `resends` says so.
async fn read(
    tx: &mut Tx<'_>,
    batches: &[&mut NewBatch],
    resolving: &[bool],
    candidates: &[&Unresolved],
    resends: Resends,
) -> Result<(HashSet<(String, String)>, Known), sqlx::Error> {
    // The locks first (in the read): a resend racing its original on another node (the same
    // identities) waits there until the original commits, and the read then finds it stored.
    let keys: Vec<(&str, &str)> = match resends {
        Resends::FoundByInsert => Vec::new(),
        Resends::Read => batches
            .iter()
            .zip(resolving)
            .filter(|(_, resolve)| **resolve)
            .filter_map(|(b, _)| batch_key(b))
            .collect(),
    };
    identity_read::read(tx, &keys, candidates).await
}

/// What the store holds for `candidates` (the unresolved batches `resolving` marks), learnt by
/// `reading`: the stored keys among theirs (if read), what is known of their identities and
/// devices, and, if that is a guess, what the batch insert must read and find. A PostgreSQL
/// lane guesses only while its guesses have been right lately; when it reads instead, it still
/// counts whether it would have guessed right, so it knows when to guess again.
async fn what_is_known(
    tx: &mut Tx<'_>,
    batches: &[&mut NewBatch],
    resolving: &[bool],
    candidates: &[&Unresolved],
    reading: Reading,
) -> Result<(HashSet<(String, String)>, Known, Option<Guessed>), sqlx::Error> {
    let resends = match reading {
        Reading::Read(resends) => resends,
        Reading::Guess => Resends::FoundByInsert,
        Reading::Found(rows) => {
            if let Some(remembered) = tx.remembered() {
                remembered.guessed(false);
            }
            let (stored, known) = identity_read::known_of(rows)?;
            return Ok((stored, known, None));
        }
    };
    let (identities, devices) = asked_of(candidates);
    let would = match (&reading, tx.remembered()) {
        (Reading::Guess, Some(remembered)) if remembered.trusted() => {
            let known = remembered.guess(identities, devices.clone());
            let (identities, _) = asked_of(candidates);
            let found = Found::of(&known, identities, devices);
            let asked = Asked::of(candidates);
            return Ok((HashSet::new(), known, Some(Guessed { asked, found })));
        }
        (Reading::Guess, Some(remembered)) => Some(remembered.guess(identities, devices)),
        _ => None,
    };
    let (stored, known) = read(tx, batches, resolving, candidates, resends).await?;
    if let (Some(would), Some(remembered)) = (would, tx.remembered()) {
        remembered.guessed(would == known);
    }
    Ok((stored, known, None))
}

/// The identities and devices `candidates` ask about, in order.
fn asked_of<'a>(
    candidates: &'a [&'a Unresolved],
) -> (
    impl Iterator<Item = &'a (String, String)>,
    impl Iterator<Item = &'a String> + Clone,
) {
    let identities = candidates.iter().flat_map(|u| u.identities.iter());
    let devices = candidates.iter().filter_map(|u| u.device.as_ref());
    (identities, devices)
}

/// A batch's unique key, as `batches` keys it; `None` without a `source_request_id` (never a
/// duplicate).
fn batch_key(batch: &NewBatch) -> Option<(&str, &str)> {
    Some((batch.input_id.as_str(), batch.source_request_id.as_deref()?))
}

/// For each batch, whether it is unresolved and the first of the group with its key (the
/// insert stores the first of a key and answers the others as duplicates: rows go in in the
/// group's order, sorted stably by key).
fn firsts_of_their_key(batches: &[&mut NewBatch]) -> Vec<bool> {
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    batches
        .iter()
        .map(|batch| {
            let first = batch_key(batch).is_none_or(|key| seen.insert(key));
            first && batch.unresolved.is_some()
        })
        .collect()
}

/// The unresolved parts of the batches `resolving` marks, in order.
fn unresolved_of<'a>(batches: &'a [&mut NewBatch], resolving: &[bool]) -> Vec<&'a Unresolved> {
    batches
        .iter()
        .zip(resolving)
        .filter(|(_, resolve)| **resolve)
        .filter_map(|(b, _)| b.unresolved.as_deref())
        .collect()
}

/// Settles each resolved batch with its user (`users` in order) and every other unresolved
/// batch with none (a duplicate: stored as nothing, whatever it is made into).
fn settle_all(batches: &mut [&mut NewBatch], resolving: &[bool], users: Vec<Option<Mpid>>) {
    let mut users = users.into_iter();
    for (batch, resolve) in batches.iter_mut().zip(resolving) {
        let user = if *resolve {
            users.next().flatten()
        } else {
            None
        };
        settle(batch, user);
    }
}

/// One batch's user, decided against what is known (which then includes this decision), or
/// `None` if it gets none; the writes the decision calls for are added to `writes`.
fn decide_one<'a>(
    unresolved: &'a Unresolved,
    known: &mut Known,
    writes: &mut Writes<'a>,
) -> Option<Mpid> {
    let identities = &unresolved.identities;
    let lookup = Lookup {
        owners: identities
            .iter()
            .map(|i| known.owners.get(i).copied())
            .collect(),
        device_user: unresolved
            .device
            .as_ref()
            .and_then(|d| known.devices.get(d))
            .map(|&m| known.summary(m)),
        previous: None,
    };
    let decision = decide(Call::Identify, identities, &lookup);
    let mpid = match decision.target {
        Target::Existing(mpid) => mpid,
        Target::New if unresolved.may_create => {
            let mpid = new_mpid();
            writes.users.push(mpid);
            writes.made += 1;
            mpid
        }
        Target::New => return None,
    };
    for index in decision.attach {
        let (t, v) = &identities[index];
        // A batch may name an identity twice: it is given once (PostgreSQL's insert has no
        // `ON CONFLICT` to skip the second).
        if known.owners.insert((t.clone(), v.clone()), mpid).is_some() {
            continue;
        }
        if IdentityType::parse(t) == Some(IdentityType::CustomerId) {
            known.logged_in.insert(mpid);
        }
        writes.attach.push(Attach { t, v, mpid });
        writes.made += 1;
    }
    if decision.point_device
        && let Some(device) = &unresolved.device
    {
        known.devices.insert(device.clone(), mpid);
        // One row per device: PostgreSQL cannot update a row twice in one statement.
        writes.devices.retain(|p| p.d != device);
        writes.devices.push(PointDevice { d: device, mpid });
        writes.made += 1;
    }
    Some(mpid)
}

/// Writes what [`resolve_batches_by`] decided, once the group's batches are stored: the new users
/// first, each with `profiles`' row of it (the new users' rows of the group's profile update,
/// which the profile upsert leaves out), bare if none of its batches was stored; then the
/// identities and devices, which refer to them. With `returning`, answers the new users'
/// consent as stored, as the profile upsert does for the others.
pub(super) async fn write(
    tx: &mut Tx<'_>,
    decided: &Decided,
    profiles: &[ProfileRow],
    now: i64,
    returning: bool,
) -> Result<HashMap<Mpid, Arc<serde_json::Value>>, sqlx::Error> {
    if tx.is_sqlite() {
        write_sqlite(tx, decided, profiles, now, returning).await
    } else {
        write_postgres(tx, decided, profiles, now, returning).await
    }
}

/// The new users of `decided` without a row in `profiles` (none of their batches was stored).
fn bare_users(decided: &Decided, profiles: &[ProfileRow]) -> Vec<Mpid> {
    if profiles.len() >= decided.users.len() {
        return Vec::new();
    }
    let profiled: HashSet<Mpid> = profiles.iter().map(|p| p.mpid).collect();
    decided.users.difference(&profiled).copied().collect()
}

/// [`write()`] on PostgreSQL: one statement, `WRITE_POSTGRES`.
async fn write_postgres(
    tx: &mut Tx<'_>,
    decided: &Decided,
    profiles: &[ProfileRow],
    now: i64,
    returning: bool,
) -> Result<HashMap<Mpid, Arc<serde_json::Value>>, sqlx::Error> {
    let Some(writing) = Writing::of(decided, profiles) else {
        return Ok(HashMap::new());
    };
    let query = sqlx::query_as::<Postgres, (Mpid, String)>(WRITE_POSTGRES);
    let query = writing.bind(query).bind(now).bind(returning);
    Ok(steps::consents_of(tx.fetch_all_postgres(query).await?))
}

/// What a group's decisions write on PostgreSQL, ready to bind: the parts of
/// [`write_postgres_ctes`], in their own statement or in the batch insert's.
pub(super) struct Writing<'a> {
    decided: &'a Decided,
    /// The new users' profile rows.
    profiles: &'a [ProfileRow],
    /// The new users without one.
    bare: Vec<i64>,
}

impl<'a> Writing<'a> {
    /// The writes of `decided` with `profiles`, its new users' rows of the group's profile
    /// update (see [`write()`]); `None` when there is nothing to write.
    pub(super) fn of(decided: &'a Decided, profiles: &'a [ProfileRow]) -> Option<Self> {
        let bare: Vec<i64> = bare_users(decided, profiles)
            .into_iter()
            .map(Mpid::get)
            .collect();
        let nothing = decided.attached.types.is_empty() && decided.devices.is_none();
        if profiles.is_empty() && bare.is_empty() && nothing {
            return None;
        }
        Some(Self {
            decided,
            profiles,
            bare,
        })
    }

    /// Binds the six parameters of [`Self::bind`] as no writes at all (every part empty).
    pub(super) fn bind_none<'q, O>(
        query: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        let nothing: Vec<String> = Vec::new();
        query
            .bind("[]")
            .bind(Vec::<i64>::new())
            .bind(nothing.clone())
            .bind(nothing)
            .bind(Vec::<i64>::new())
            .bind("[]")
    }

    /// Binds the writes' six rows parameters (profiles, bare users, the identities' types,
    /// values and MPIDs, devices) to `query` (a statement, or a test's EXPLAIN of one).
    pub(super) fn bind<'q, O>(
        self,
        query: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments>
    where
        'a: 'q,
    {
        query
            .bind(json(self.profiles))
            .bind(self.bare)
            .bind(&self.decided.attached.types)
            .bind(&self.decided.attached.values)
            .bind(&self.decided.attached.mpids)
            .bind(self.decided.devices.as_deref().unwrap_or("[]"))
    }
}

/// [`write()`] on SQLite: a statement per kind of row.
async fn write_sqlite(
    tx: &mut Tx<'_>,
    decided: &Decided,
    profiles: &[ProfileRow],
    now: i64,
    returning: bool,
) -> Result<HashMap<Mpid, Arc<serde_json::Value>>, sqlx::Error> {
    let mut stored = HashMap::new();
    if returning && !profiles.is_empty() {
        let rows: Vec<(Mpid, String)> = tx
            .fetch_all(
                INSERT_NEW_PROFILES_RETURNING_CONSENT,
                args![json(profiles).as_str(), now],
            )
            .await?;
        stored = steps::consents_of(rows);
    } else if !profiles.is_empty() {
        tx.execute(INSERT_NEW_PROFILES, args![json(profiles).as_str(), now])
            .await?;
    }
    let bare = bare_users(decided, profiles);
    if !bare.is_empty() {
        tx.execute(INSERT_USERS, args![json(&bare).as_str(), now])
            .await?;
    }
    if let Some(rows) = decided.attached.json() {
        tx.execute(ATTACH, args![rows.as_str(), now]).await?;
        tx.execute(RECORD_ATTACHED, args![rows.as_str(), now])
            .await?;
    }
    if let Some(rows) = &decided.devices {
        tx.execute(POINT_DEVICES, args![rows.as_str(), now]).await?;
    }
    Ok(stored)
}

/// Makes `batch` what it is with `user`: its body, jobs and profile update. It can be settled
/// again (a group that failed is retried), each time from what it arrived as.
pub(super) fn settle(batch: &mut NewBatch, user: Option<Mpid>) {
    let Some(unresolved) = batch.unresolved.as_deref() else {
        return;
    };
    let resolved = user.map_or(0, Mpid::get);
    unresolved.resolved.store(resolved, Ordering::Relaxed);
    let (body, jobs, profile) = match user {
        Some(mpid) => {
            let jobs = unresolved
                .user_jobs
                .iter()
                .map(|job| {
                    let mut job = job.clone();
                    job.mpid = job.mpid.map(|_| mpid);
                    job
                })
                .collect();
            let profile = ProfileUpdate {
                mpid,
                ..unresolved.profile.clone()
            };
            (with_mpid(&unresolved.body, mpid), jobs, Some(profile))
        }
        // As it came: a batch that said "mpid": 0 (not known) still says so.
        None if unresolved.said_zero => (
            with_mpid(&unresolved.body, Mpid::new(0)),
            unresolved.anonymous_jobs.clone(),
            None,
        ),
        None => (
            Arc::clone(&unresolved.body),
            unresolved.anonymous_jobs.clone(),
            None,
        ),
    };
    batch.body = body;
    batch.jobs = jobs;
    batch.profile = profile;
}

/// A JSON object's text with `"mpid":N` as its first member (the object has no `mpid`: the
/// pipeline took it out), without parsing it again.
fn with_mpid(body: &[u8], mpid: Mpid) -> Arc<[u8]> {
    let member = format!("{{\"mpid\":{}", mpid.get());
    let rest = body.strip_prefix(b"{").unwrap_or(body);
    let mut out = Vec::with_capacity(member.len() + body.len() + 1);
    out.extend_from_slice(member.as_bytes());
    if !rest.trim_ascii_start().starts_with(b"}") {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    Arc::from(out)
}

#[cfg(test)]
#[path = "identity_steps_tests.rs"]
mod tests;
