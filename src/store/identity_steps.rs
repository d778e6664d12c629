//! The group commit's identity step: the batches of a group that arrived without an MPID get
//! the one their identities resolve to, inside the group's transaction, before the batches,
//! profiles and jobs that carry it are written. The rules are the pure
//! [`decide`](crate::model::identity::resolve::decide), as for IDSync's identify; what changes
//! is the cost: the identities of the whole group are read in one query (and their devices
//! and logins in one more each), the group's batches are decided in order against what was
//! read plus what the earlier batches decided, and the new users, identities, history rows and
//! device pointers are written in one statement each. One transaction per batch was a fifth of
//! the rate of batches with an MPID (issue 16).
//!
//! The writes wait until the group's batches are stored ([`write`]): a new user's row is then
//! inserted once, with the profile the group's stored batches give it, instead of inserted
//! bare here and updated by the profile upsert (each new user cost about five more B-tree
//! writes than a batch with an MPID; this is one of them). Its identities and device pointer
//! follow it, since they refer to it.
//!
//! Locks: on PostgreSQL the group takes the advisory lock of every identity and device it
//! resolves, in key order, as [`Store::resolve_identity`](super::Store::resolve_identity) does
//! for IDSync, so two nodes (or a node and an IDSync call) never make two users of one new
//! identity; the reads come after the locks, so they see what a node that held them
//! committed. The step runs after the group's job-row changes and before its batch keys and
//! profile rows (see the lock order in [`super::group`]); it touches no user row another
//! transaction updates (a returning user's `last_seen_at` is set by the profile upsert, in
//! MPID order with the others), so it adds no cycle.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::backend::{Sql, Tx, args};
use super::identity_sql::{new_mpid, sorted};
use super::queue::{NewBatch, ProfileUpdate, Unresolved};
use super::steps::ProfileRow;
use crate::model::consent;
use crate::model::identity::resolve::{Call, Lookup, Target, UserSummary, decide};
use crate::model::identity::types::IdentityType;
use crate::model::ids::Mpid;

/// `$1` the keys as a JSON array, in the order to lock them (SQLite's writer already holds the
/// only write lock).
const LOCK_KEYS: Sql = Sql::postgres_only(
    "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) \
     FROM jsonb_array_elements_text($1::jsonb) WITH ORDINALITY AS x(k, n) ORDER BY n",
);
/// `$1` batch keys as a JSON array of `{"i": input, "r": source_request_id}`: those stored.
const STORED_KEYS: Sql = Sql::each(
    "SELECT j.value ->> 'i', j.value ->> 'r' FROM json_each($1) AS j WHERE EXISTS \
     (SELECT 1 FROM batches b WHERE b.input_id = j.value ->> 'i' AND b.source_request_id = j.value ->> 'r')",
    "SELECT j.i, j.r FROM jsonb_to_recordset($1::jsonb) AS j(i text, r text) WHERE EXISTS \
     (SELECT 1 FROM batches b WHERE b.input_id = j.i AND b.source_request_id = j.r)",
);
/// `$1` identities as a JSON array of `{"t": type, "v": value}`: the owners of those known.
const OWNERS: Sql = Sql::each(
    "SELECT u.identity_type, u.identity, u.mpid FROM json_each($1) AS j \
     JOIN user_identities u ON u.identity_type = j.value ->> 't' AND u.identity = j.value ->> 'v'",
    "SELECT u.identity_type, u.identity, u.mpid FROM jsonb_to_recordset($1::jsonb) AS j(t text, v text) \
     JOIN user_identities u ON u.identity_type = j.t AND u.identity = j.v",
);
/// `$1` devices as a JSON array: the user each points to.
const DEVICE_USERS: Sql = Sql::each(
    "SELECT device, mpid FROM device_users WHERE device IN (SELECT value FROM json_each($1))",
    "SELECT device, mpid FROM device_users \
     WHERE device IN (SELECT jsonb_array_elements_text($1::jsonb))",
);
/// `$1` MPIDs as a JSON array, `$2` the login type: those of them with a login.
const LOGGED_IN: Sql = Sql::each(
    "SELECT DISTINCT mpid FROM user_identities \
     WHERE identity_type = $2 AND mpid IN (SELECT value FROM json_each($1))",
    "SELECT DISTINCT mpid FROM user_identities \
     WHERE identity_type = $2 AND mpid IN (SELECT jsonb_array_elements_text($1::jsonb)::bigint)",
);
/// `$1` new MPIDs, `$2` now: new users none of whose batches was stored (a resend racing its
/// original; their identities are still given to them).
const INSERT_USERS: Sql = Sql::each(
    "INSERT INTO users (mpid, created_at, last_seen_at) SELECT value, $2, $2 FROM json_each($1)",
    "INSERT INTO users (mpid, created_at, last_seen_at) \
     SELECT jsonb_array_elements_text($1::jsonb)::bigint, $2, $2",
);
// A new user's attributes and consent as the profile upsert would merge its profile rows into
// an empty profile (`user_attributes` and `consent` start as `{}`), so the row is written once
// and reads the same. No `ON CONFLICT`: two nodes that made one MPID fail the group, which is
// retried with fresh ones, rather than merge two users.
macro_rules! insert_new_profiles_sqlite {
    () => {
        "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes, consent) \
         SELECT value ->> 'mpid', $2, $2, json_patch('{}', value ->> 'patch'), \
         json_patch('{\"gdpr\":{},\"ccpa\":{}}', value ->> 'consent') FROM json_each($1)"
    };
}
macro_rules! insert_new_profiles_postgres {
    () => {
        "INSERT INTO users (mpid, created_at, last_seen_at, user_attributes, consent) \
         SELECT mpid, $2, $2, jsonb_strip_nulls('{}'::jsonb || patch)::text, jsonb_build_object( \
         'gdpr', '{}'::jsonb || COALESCE(consent -> 'gdpr', '{}'::jsonb), \
         'ccpa', '{}'::jsonb || COALESCE(consent -> 'ccpa', '{}'::jsonb))::text \
         FROM jsonb_to_recordset($1::jsonb) AS x(mpid bigint, patch jsonb, consent jsonb)"
    };
}
/// `$1` the new users' profile rows, `$2` now.
const INSERT_NEW_PROFILES: Sql = Sql::each(
    insert_new_profiles_sqlite!(),
    insert_new_profiles_postgres!(),
);
/// The same, answering each user's consent (for jobs handed to delivery with it).
const INSERT_NEW_PROFILES_RETURNING_CONSENT: Sql = Sql::each(
    concat!(insert_new_profiles_sqlite!(), " RETURNING mpid, consent"),
    concat!(insert_new_profiles_postgres!(), " RETURNING mpid, consent"),
);
/// `$1` `Attach` rows, `$2` now. The advisory locks make a conflict impossible but for an
/// identity `/modify` gave its user meanwhile (then, as in IDSync, the first owner keeps it).
const ATTACH: Sql = Sql::each(
    "INSERT INTO user_identities (identity_type, identity, mpid, created_at) \
     SELECT value ->> 't', value ->> 'v', value ->> 'mpid', $2 FROM json_each($1) WHERE true \
     ON CONFLICT (identity_type, identity) DO NOTHING",
    "INSERT INTO user_identities (identity_type, identity, mpid, created_at) \
     SELECT t, v, mpid, $2 FROM jsonb_to_recordset($1::jsonb) AS x(t text, v text, mpid bigint) \
     ON CONFLICT (identity_type, identity) DO NOTHING",
);
/// `$1` `Attach` rows, `$2` now: each attached identity in its user's history.
const RECORD_ATTACHED: Sql = Sql::each(
    "INSERT INTO identity_changes (mpid, identity_type, old_value, new_value, changed_at) \
     SELECT value ->> 'mpid', value ->> 't', NULL, value ->> 'v', $2 FROM json_each($1)",
    "INSERT INTO identity_changes (mpid, identity_type, old_value, new_value, changed_at) \
     SELECT mpid, t, NULL, v, $2 FROM jsonb_to_recordset($1::jsonb) AS x(t text, v text, mpid bigint)",
);
/// `$1` `PointDevice` rows (one per device), `$2` now.
const POINT_DEVICES: Sql = Sql::each(
    "INSERT INTO device_users (device, mpid, updated_at) \
     SELECT value ->> 'd', value ->> 'mpid', $2 FROM json_each($1) WHERE true \
     ON CONFLICT (device) DO UPDATE SET mpid = excluded.mpid, updated_at = excluded.updated_at",
    "INSERT INTO device_users (device, mpid, updated_at) \
     SELECT d, mpid, $2 FROM jsonb_to_recordset($1::jsonb) AS x(d text, mpid bigint) \
     ON CONFLICT (device) DO UPDATE SET mpid = excluded.mpid, updated_at = excluded.updated_at",
);

/// An identity as the reads take it.
#[derive(Debug, Serialize)]
struct Key<'a> {
    t: &'a str,
    v: &'a str,
}

/// A batch's unique key as the duplicate check takes it.
#[derive(Debug, Serialize)]
struct BatchKey<'a> {
    i: &'a str,
    r: &'a str,
}

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

/// What the identity store holds for the group, as read and then as the group's earlier
/// batches changed it.
#[derive(Debug, Default)]
struct Known {
    owners: HashMap<(String, String), Mpid>,
    devices: HashMap<String, Mpid>,
    logged_in: HashSet<Mpid>,
}

impl Known {
    fn summary(&self, mpid: Mpid) -> UserSummary {
        UserSummary {
            mpid,
            logged_in: self.logged_in.contains(&mpid),
        }
    }
}

/// The writes the group's decisions call for.
#[derive(Debug, Default)]
struct Writes<'a> {
    users: Vec<Mpid>,
    attach: Vec<Attach<'a>>,
    devices: Vec<PointDevice<'a>>,
}

/// What the group's decisions write once its batches are stored (see [`write`]), owned, so the
/// batches are free for the steps between.
#[derive(Debug, Default)]
pub(super) struct Decided {
    /// The new users.
    users: HashSet<Mpid>,
    /// `Attach` rows as JSON, if any.
    attach: Option<String>,
    /// `PointDevice` rows as JSON, if any.
    devices: Option<String>,
}

impl Decided {
    fn of(writes: &Writes<'_>) -> Self {
        Self {
            users: writes.users.iter().copied().collect(),
            attach: (!writes.attach.is_empty()).then(|| json(&writes.attach)),
            devices: (!writes.devices.is_empty()).then(|| json(&writes.devices)),
        }
    }

    /// Whether the group made this user.
    pub(super) fn is_new(&self, mpid: Mpid) -> bool {
        self.users.contains(&mpid)
    }
}

/// Gives every batch of `batches` that arrived without an MPID its user, in order, and
/// answers the writes the decisions call for, for [`write`] once the batches are stored. A batch that would need a new user where it may not
/// make one keeps none. A duplicate (its `source_request_id` already stored, or taken by an
/// earlier batch of the group) is stored as nothing, so it resolves nothing and writes nothing:
/// whatever identities a resend names, only the batch first stored had its say. The stored
/// keys are read without a lock on them: a resend racing its uncommitted original on another
/// lane or node, with no identity or device in common (so no advisory lock between them),
/// still resolves before its insert finds the duplicate.
pub(super) async fn resolve_batches(
    tx: &mut Tx<'_>,
    batches: &mut [&mut NewBatch],
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
    // The locks first: a resend racing its original on another node (the same identities)
    // waits here until the original commits, and the read below then finds it stored.
    lock_keys(tx, &candidates).await?;
    let stored = read_stored_keys(tx, batches, &resolving).await?;
    for (flag, batch) in resolving.iter_mut().zip(batches.iter()) {
        let key = batch_key(batch).map(|(i, r)| (i.to_owned(), r.to_owned()));
        if key.is_some_and(|key| stored.contains(&key)) {
            *flag = false;
        }
    }
    let pending = unresolved_of(batches, &resolving);
    let mut known = read_known(tx, &pending).await?;
    let mut writes = Writes::default();
    let mut users = Vec::with_capacity(pending.len());
    for unresolved in pending.iter().copied() {
        users.push(decide_one(unresolved, &mut known, &mut writes));
    }
    let decided = Decided::of(&writes);
    settle_all(batches, &resolving, users);
    Ok(decided)
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

/// The keys of the batches `resolving` marks that are already stored.
async fn read_stored_keys(
    tx: &mut Tx<'_>,
    batches: &[&mut NewBatch],
    resolving: &[bool],
) -> Result<HashSet<(String, String)>, sqlx::Error> {
    let keys: Vec<BatchKey<'_>> = batches
        .iter()
        .zip(resolving)
        .filter(|(_, resolve)| **resolve)
        .filter_map(|(b, _)| batch_key(b))
        .map(|(i, r)| BatchKey { i, r })
        .collect();
    if keys.is_empty() {
        return Ok(HashSet::new());
    }
    let rows: Vec<(String, String)> = tx
        .fetch_all(STORED_KEYS, args![json(&keys).as_str()])
        .await?;
    Ok(rows.into_iter().collect())
}

/// PostgreSQL: the advisory lock of every identity and device of the group, in key order (the
/// keys [`Store::resolve_identity`](super::Store::resolve_identity) locks).
async fn lock_keys(tx: &mut Tx<'_>, pending: &[&Unresolved]) -> Result<(), sqlx::Error> {
    let keys: Vec<String> = pending
        .iter()
        .flat_map(|u| {
            let identities = u.identities.iter().map(|(k, v)| format!("{k}:{v}"));
            identities.chain(u.device.iter().map(|d| format!("device:{d}")))
        })
        .collect();
    let keys = serde_json::to_string(&sorted(keys)).unwrap_or_else(|_| "[]".to_owned());
    tx.execute(LOCK_KEYS, args![keys.as_str()]).await?;
    Ok(())
}

/// The owners of the group's identities, its devices' users, and which of those users have a
/// login.
async fn read_known(tx: &mut Tx<'_>, pending: &[&Unresolved]) -> Result<Known, sqlx::Error> {
    let keys: Vec<Key<'_>> = pending
        .iter()
        .flat_map(|u| u.identities.iter())
        .map(|(t, v)| Key { t, v })
        .collect();
    let mut known = Known::default();
    if !keys.is_empty() {
        let rows: Vec<(String, String, Mpid)> =
            tx.fetch_all(OWNERS, args![json(&keys).as_str()]).await?;
        known.owners = rows.into_iter().map(|(t, v, m)| ((t, v), m)).collect();
    }
    let devices: Vec<&str> = pending.iter().filter_map(|u| u.device.as_deref()).collect();
    if devices.is_empty() {
        // Without a device, whether a user has a login never decides (see `decide`).
        return Ok(known);
    }
    let rows: Vec<(String, Mpid)> = tx
        .fetch_all(DEVICE_USERS, args![json(&devices).as_str()])
        .await?;
    known.devices = rows.into_iter().collect();
    let mpids: HashSet<Mpid> = known
        .owners
        .values()
        .chain(known.devices.values())
        .copied()
        .collect();
    if !mpids.is_empty() {
        let mpids: Vec<Mpid> = mpids.into_iter().collect();
        let login = IdentityType::CustomerId.as_str();
        let rows: Vec<(Mpid,)> = tx
            .fetch_all(LOGGED_IN, args![json(&mpids).as_str(), login])
            .await?;
        known.logged_in = rows.into_iter().map(|(m,)| m).collect();
    }
    Ok(known)
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
            mpid
        }
        Target::New => return None,
    };
    for index in decision.attach {
        let (t, v) = &identities[index];
        known.owners.insert((t.clone(), v.clone()), mpid);
        if IdentityType::parse(t) == Some(IdentityType::CustomerId) {
            known.logged_in.insert(mpid);
        }
        writes.attach.push(Attach { t, v, mpid });
    }
    if decision.point_device
        && let Some(device) = &unresolved.device
    {
        known.devices.insert(device.clone(), mpid);
        // One row per device: PostgreSQL cannot update a row twice in one statement.
        writes.devices.retain(|p| p.d != device);
        writes.devices.push(PointDevice { d: device, mpid });
    }
    Some(mpid)
}

/// Writes what [`resolve_batches`] decided, once the group's batches are stored: the new users
/// first, each with `profiles`' row of it (the new users' rows of the group's profile update,
/// which the profile upsert then leaves out), bare if none of its batches was stored; then the
/// identities and devices, which refer to them. With `returning`, answers the new users'
/// consent as stored, as the profile upsert does for the others.
pub(super) async fn write(
    tx: &mut Tx<'_>,
    decided: &Decided,
    profiles: &[ProfileRow],
    now: i64,
    returning: bool,
) -> Result<HashMap<Mpid, Arc<serde_json::Value>>, sqlx::Error> {
    let mut consents = HashMap::new();
    if returning && !profiles.is_empty() {
        let rows: Vec<(Mpid, String)> = tx
            .fetch_all(
                INSERT_NEW_PROFILES_RETURNING_CONSENT,
                args![json(profiles).as_str(), now],
            )
            .await?;
        consents.extend(
            rows.into_iter()
                .map(|(mpid, stored)| (mpid, Arc::new(consent::state(&stored)))),
        );
    } else if !profiles.is_empty() {
        tx.execute(INSERT_NEW_PROFILES, args![json(profiles).as_str(), now])
            .await?;
    }
    if profiles.len() < decided.users.len() {
        let profiled: HashSet<Mpid> = profiles.iter().map(|p| p.mpid).collect();
        let bare: Vec<Mpid> = decided.users.difference(&profiled).copied().collect();
        tx.execute(INSERT_USERS, args![json(&bare).as_str(), now])
            .await?;
    }
    if let Some(rows) = &decided.attach {
        tx.execute(ATTACH, args![rows.as_str(), now]).await?;
        tx.execute(RECORD_ATTACHED, args![rows.as_str(), now])
            .await?;
    }
    if let Some(rows) = &decided.devices {
        tx.execute(POINT_DEVICES, args![rows.as_str(), now]).await?;
    }
    Ok(consents)
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

fn json<T: Serialize + ?Sized>(rows: &T) -> String {
    serde_json::to_string(rows).unwrap_or_else(|_| "[]".to_owned())
}

#[cfg(test)]
#[path = "identity_steps_tests.rs"]
mod tests;
