//! The identity step's read (see [`super::identity_steps`]): what the store holds for a group's
//! batches without an MPID, after their identities' and devices' locks: who owns their
//! identities, whom their devices point to, which of those users have a login, and, when the
//! step asks (a group run again because it held a resend: [`super::identity_steps::Resends`]),
//! which of their batch keys are stored.
//!
//! On PostgreSQL it is one round trip, a call of `boson_group_identities` (migration 0029),
//! which takes the advisory locks in key order and then reads, each read a statement of its
//! own with a fresh snapshot: a read in the locking statement would use the snapshot taken
//! before a lock was waited for and miss what its holder committed (two users of one new
//! identity). It replaced four or five round trips (locks, stored keys, owners, devices,
//! logins), whose plans, kept for the connection, could be hash joins over a whole table or
//! index per group (1.6–4.5 ms a group, issue 16 item 4); each key is one index probe in the
//! function. On a PostgreSQL lane the call usually goes in the batch insert's statement instead,
//! to check a guess ([`Asked`], [`super::identity_known`]). SQLite's writer holds the only write
//! lock, so it takes none and reads as it did.

use std::collections::HashSet;

use serde::Serialize;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::QueryAs;

use super::backend::{Sql, Tx, args, json};
use super::identity_known::Known;
use super::identity_sql::{device_lock_key, identity_lock_key, sorted};
use super::queue::Unresolved;
use crate::model::identity::types::IdentityType;
use crate::model::ids::Mpid;

/// PostgreSQL: the locks and reads in one call (see the module's comment).
/// `$1`, `$2` the batch keys to look for (inputs, `source_request_id`s), then [`Asked`]'s five.
const GROUP_IDENTITIES_POSTGRES: &str = "SELECT kind, a, b, mpid, logged_in \
     FROM boson_group_identities($3, $1, $2, $4, $5, $6, $7)";

// SQLite's reads (PostgreSQL's are the function's: no text for it here). Object rows are walked
// with `jsonb_each`, so each `->>` reads SQLite's binary JSON (see `super::steps`).

/// `$1` batch keys as a JSON array of `{"i": input, "r": source_request_id}`: those stored.
const STORED_KEYS: Sql = Sql::sqlite_only(
    "SELECT j.value ->> 'i', j.value ->> 'r' FROM jsonb_each($1) AS j WHERE EXISTS \
     (SELECT 1 FROM batches b WHERE b.input_id = j.value ->> 'i' AND b.source_request_id = j.value ->> 'r')",
);
/// `$1` identities as a JSON array of `{"t": type, "v": value}`: the owners of those known.
const OWNERS: Sql = Sql::sqlite_only(
    "SELECT u.identity_type, u.identity, u.mpid FROM jsonb_each($1) AS j \
     JOIN user_identities u ON u.identity_type = j.value ->> 't' AND u.identity = j.value ->> 'v'",
);
/// `$1` devices as a JSON array: the user each points to.
const DEVICE_USERS: Sql = Sql::sqlite_only(
    "SELECT device, mpid FROM device_users WHERE device IN (SELECT value FROM json_each($1))",
);
/// `$1` MPIDs as a JSON array, `$2` the login type: those of them with a login.
const LOGGED_IN: Sql = Sql::sqlite_only(
    "SELECT DISTINCT mpid FROM user_identities \
     WHERE identity_type = $2 AND mpid IN (SELECT value FROM json_each($1))",
);

/// The stored batch keys among `keys` (input, `source_request_id`; none looked for when empty),
/// and what is known of the identities and devices of `candidates`, read after their locks.
pub(super) async fn read(
    tx: &mut Tx<'_>,
    keys: &[(&str, &str)],
    candidates: &[&Unresolved],
) -> Result<(HashSet<(String, String)>, Known), sqlx::Error> {
    if tx.is_sqlite() {
        let stored = read_stored_keys(tx, keys).await?;
        Ok((stored, read_known(tx, candidates).await?))
    } else {
        read_postgres(tx, keys, candidates).await
    }
}

/// The keys PostgreSQL locks: every identity and device of `candidates`, in key order (the
/// keys [`Store::resolve_identity`](super::Store::resolve_identity) locks).
fn lock_keys(candidates: &[&Unresolved]) -> Vec<String> {
    let keys = candidates
        .iter()
        .flat_map(|u| {
            let identities = u.identities.iter().map(|(k, v)| identity_lock_key(k, v));
            identities.chain(u.device.as_deref().map(device_lock_key))
        })
        .collect();
    sorted(keys)
}

/// One row of `boson_group_identities`: (kind, a, b, mpid, has a login).
pub(super) type Row = (String, String, Option<String>, Option<Mpid>, bool);

/// What the PostgreSQL read asks about a group's candidates, owned (the group's decisions keep
/// it when they were made against a guess, for the batch insert to read and check: see
/// [`super::identity_known`]): the lock keys in key order, the identities as a column each, the
/// devices.
#[derive(Debug)]
pub(super) struct Asked {
    lock_keys: Vec<String>,
    types: Vec<String>,
    values: Vec<String>,
    devices: Vec<String>,
}

impl Asked {
    pub(super) fn of(candidates: &[&Unresolved]) -> Self {
        let identities = candidates.iter().flat_map(|u| u.identities.iter());
        let (types, values) = identities.cloned().unzip();
        Self {
            lock_keys: lock_keys(candidates),
            types,
            values,
            devices: candidates.iter().filter_map(|u| u.device.clone()).collect(),
        }
    }

    /// Binds the lock keys, the identities' types and values, the devices and the login type:
    /// five parameters.
    pub(super) fn bind<'q, O>(
        &'q self,
        query: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        query
            .bind(&self.lock_keys)
            .bind(&self.types)
            .bind(&self.values)
            .bind(&self.devices)
            .bind(IdentityType::CustomerId.as_str())
    }
}

async fn read_postgres(
    tx: &mut Tx<'_>,
    keys: &[(&str, &str)],
    candidates: &[&Unresolved],
) -> Result<(HashSet<(String, String)>, Known), sqlx::Error> {
    let (inputs, requests): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
    let asked = Asked::of(candidates);
    let query = sqlx::query_as::<Postgres, Row>(GROUP_IDENTITIES_POSTGRES)
        .bind(inputs)
        .bind(requests);
    let rows = tx.fetch_all_postgres(asked.bind(query)).await?;
    known_of(rows)
}

/// The stored keys and what is known, from the read's rows.
pub(super) fn known_of(rows: Vec<Row>) -> Result<(HashSet<(String, String)>, Known), sqlx::Error> {
    let mut stored = HashSet::new();
    let mut known = Known::default();
    for (kind, a, b, mpid, logged_in) in rows {
        match (kind.as_str(), b, mpid) {
            ("s", Some(request), _) => {
                stored.insert((a, request));
            }
            ("o", Some(value), Some(mpid)) => {
                known.owners.insert((a, value), mpid);
            }
            ("d", None, Some(mpid)) => {
                known.devices.insert(a, mpid);
            }
            _ => {
                return Err(sqlx::Error::Protocol(format!(
                    "boson_group_identities answered a {kind:?} row it does not make"
                )));
            }
        }
        if let (true, Some(mpid)) = (logged_in, mpid) {
            known.logged_in.insert(mpid);
        }
    }
    Ok((stored, known))
}

/// An identity as SQLite's reads take it.
#[derive(Debug, Serialize)]
struct Key<'a> {
    t: &'a str,
    v: &'a str,
}

/// A batch's unique key as SQLite's duplicate check takes it.
#[derive(Debug, Serialize)]
struct BatchKey<'a> {
    i: &'a str,
    r: &'a str,
}

/// SQLite: the stored keys among `keys`.
async fn read_stored_keys(
    tx: &mut Tx<'_>,
    keys: &[(&str, &str)],
) -> Result<HashSet<(String, String)>, sqlx::Error> {
    if keys.is_empty() {
        return Ok(HashSet::new());
    }
    let keys: Vec<BatchKey<'_>> = keys.iter().map(|&(i, r)| BatchKey { i, r }).collect();
    let rows: Vec<(String, String)> = tx
        .fetch_all(STORED_KEYS, args![json(&keys).as_str()])
        .await?;
    Ok(rows.into_iter().collect())
}

/// SQLite: the owners of the group's identities, its devices' users, and which of those users
/// have a login.
async fn read_known(tx: &mut Tx<'_>, candidates: &[&Unresolved]) -> Result<Known, sqlx::Error> {
    let keys: Vec<Key<'_>> = candidates
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
    let devices: Vec<&str> = candidates
        .iter()
        .filter_map(|u| u.device.as_deref())
        .collect();
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
