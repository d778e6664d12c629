//! The identity store: users, their identities, devices' anonymous users, identity history and
//! alias requests. Resolution reads, asks the caller's rule what to do (a pure function over what
//! was read), and writes, all in one transaction, so two requests for the same identities cannot
//! split a user in two. The store itself decides nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use rand::Rng;
use serde_json::Value;
use sqlx::FromRow;

use super::backend::{Sql, Tx, args};
use super::{Store, StoreError, StoreResult};
use crate::model::consent;
use crate::model::forwarding_rules::ForwardingRules;
use crate::model::identity::resolve::{Decision, Lookup, Target, UserSummary};
use crate::model::identity::types::IdentityType;
use crate::model::ids::{InputId, Mpid};

/// The answer to an IDSync call.
#[derive(Debug, Clone)]
pub(crate) struct Resolution {
    pub(crate) mpid: Mpid,
    pub(crate) logged_in: bool,
    /// The user's identities, as (type, value).
    pub(crate) identities: Vec<(String, String)>,
}

/// A change asked by `/modify`.
#[derive(Debug, Clone)]
pub(crate) struct IdentityChange {
    pub(crate) identity_type: IdentityType,
    pub(crate) old_value: Option<String>,
    pub(crate) new_value: Option<String>,
}

/// A user's profile, as the admin API shows it.
#[derive(Debug, Clone)]
pub(crate) struct UserProfile {
    pub(crate) mpid: Mpid,
    pub(crate) created_at: i64,
    pub(crate) last_seen_at: i64,
    pub(crate) user_attributes: String,
    /// The consent purposes stated so far, merged (see [`crate::model::consent`]).
    pub(crate) consent: String,
    pub(crate) identities: Vec<(String, String)>,
    pub(crate) history: Vec<HistoryRow>,
}

/// One identity change in a user's history.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct HistoryRow {
    pub(crate) identity_type: String,
    pub(crate) old_value: Option<String>,
    pub(crate) new_value: Option<String>,
    pub(crate) changed_at: i64,
}

/// An alias request.
#[derive(Debug, Clone)]
pub(crate) struct NewAlias {
    pub(crate) input_id: InputId,
    pub(crate) source_mpid: Mpid,
    pub(crate) destination_mpid: Mpid,
    pub(crate) start_ms: Option<i64>,
    pub(crate) end_ms: Option<i64>,
}

/// PostgreSQL: serialises resolutions that touch the same identity or device, so two concurrent
/// first sightings cannot create two users (SQLite's BEGIN IMMEDIATE serialises everything).
const LOCK_KEY: Sql = Sql::postgres_only("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))");

const OWNER: Sql =
    Sql::shared("SELECT mpid FROM user_identities WHERE identity_type = $1 AND identity = $2");
const DEVICE_USER: Sql = Sql::shared("SELECT mpid FROM device_users WHERE device = $1");
const CONSENT_OF: Sql = Sql::shared("SELECT consent FROM users WHERE mpid = $1");
const CONSENTS_OF: Sql = Sql::each(
    "SELECT mpid, consent FROM users WHERE mpid IN (SELECT value FROM json_each($1))",
    "SELECT mpid, consent FROM users WHERE mpid IN \
     (SELECT jsonb_array_elements_text($1::jsonb)::bigint)",
);
const USER_EXISTS: Sql = Sql::shared("SELECT mpid FROM users WHERE mpid = $1");
/// Bound with the login type's name, so the name is spelled only by [`IdentityType::as_str`].
const HAS_LOGIN: Sql =
    Sql::shared("SELECT COUNT(*) FROM user_identities WHERE mpid = $1 AND identity_type = $2");
const INSERT_USER: Sql =
    Sql::shared("INSERT INTO users (mpid, created_at, last_seen_at) VALUES ($1, $2, $2)");
const TOUCH_USER: Sql = Sql::shared("UPDATE users SET last_seen_at = $2 WHERE mpid = $1");
const ATTACH: Sql = Sql::shared(
    "INSERT INTO user_identities (identity_type, identity, mpid, created_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (identity_type, identity) DO NOTHING",
);
const DETACH: Sql = Sql::shared(
    "DELETE FROM user_identities WHERE identity_type = $1 AND identity = $2 AND mpid = $3",
);
const POINT_DEVICE: Sql = Sql::shared(
    "INSERT INTO device_users (device, mpid, updated_at) VALUES ($1, $2, $3) \
     ON CONFLICT (device) DO UPDATE SET mpid = excluded.mpid, updated_at = excluded.updated_at",
);
const RECORD_CHANGE: Sql = Sql::shared(
    "INSERT INTO identity_changes \
     (mpid, identity_type, old_value, new_value, changed_at) VALUES ($1, $2, $3, $4, $5)",
);
const IDENTITIES_OF: Sql = Sql::shared(
    "SELECT identity_type, identity FROM user_identities WHERE mpid = $1 ORDER BY identity_type",
);
const SELECT_USER: Sql = Sql::shared(
    "SELECT mpid, created_at, last_seen_at, user_attributes, consent FROM users WHERE mpid = $1",
);
const HISTORY_OF: Sql = Sql::shared(
    "SELECT identity_type, old_value, new_value, changed_at FROM identity_changes \
     WHERE mpid = $1 ORDER BY id",
);
const INSERT_ALIAS: Sql = Sql::shared(
    "INSERT INTO aliases \
     (input_id, source_mpid, destination_mpid, start_ms, end_ms, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
);

/// The advisory lock key of an identity. IDSync, `/modify` and the group commit's identity step
/// must spell it alike, or two of them would not exclude each other on one identity.
pub(super) fn identity_lock_key(kind: &str, value: &str) -> String {
    format!("{kind}:{value}")
}

/// The advisory lock key of a device (see [`identity_lock_key`]).
pub(super) fn device_lock_key(device: &str) -> String {
    format!("device:{device}")
}

/// Lock keys in one order, so two transactions never wait on each other crosswise.
pub(super) fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys.dedup();
    keys
}

/// Whether a user with these (stored) identities is logged in: has a customer id.
fn logged_in(identities: &[(String, String)]) -> bool {
    let login = IdentityType::CustomerId.as_str();
    identities.iter().any(|(kind, _)| kind == login)
}

/// MPIDs count their seconds from 2025-01-01 UTC (in seconds since the Unix epoch).
const MPID_EPOCH_S: i64 = 1_735_689_600;
/// The bits of an MPID below its second: 32 bits of seconds above them last until 2161, and
/// every MPID is positive, as mParticle's signed 64-bit MPIDs may be.
const MPID_SECOND_SHIFT: u32 = 31;
/// The largest gap between two MPIDs this process makes in one second.
const MPID_MAX_STEP: i64 = 16;
/// The last MPID this process made.
static LAST_MPID: AtomicI64 = AtomicI64::new(0);

/// A fresh MPID, larger than every MPID this process made before (until a collision, see
/// [`new_run_after`]) and than those any node made in an earlier second. A random MPID put each
/// new user's row, and the `mpid` indexes of its identities and history, on a random page of
/// each B-tree: about three random page writes per new user, where growing MPIDs append at the
/// right edge (issue 16, item 4). Each second starts at a random place in its 2^30 and each MPID
/// after it is a random 1 to 16 further, so an MPID tells its user's creation second, and the
/// next one is near it (a user's MPID is no secret in mParticle's model either: `/modify` and
/// the admin API check who asks, not which number). Two nodes collide only if their runs in one
/// second overlap; the insert then fails (the group is retried one by one, never two users
/// merged) and the node that saw it starts a new run at another random place, so an overlap
/// costs one failed group, not a burst of them.
pub(super) fn new_mpid() -> Mpid {
    let now = crate::model::now_ms();
    let mut rng = rand::rng();
    let mut last = LAST_MPID.load(Ordering::Relaxed);
    loop {
        let next = next_mpid(last, now, &mut rng);
        match LAST_MPID.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Mpid::new(next),
            Err(seen) => last = seen,
        }
    }
}

/// After `error`, a unique violation (another node made the same MPID: their runs overlap),
/// the next MPID starts a new run at a random place of the current second instead of going on
/// right behind the other node's.
pub(super) fn new_run_after(error: &sqlx::Error) {
    if is_collision(error) {
        LAST_MPID.store(0, Ordering::Relaxed);
    }
}

/// Whether `error` is a unique violation, as a second user row of one MPID raises.
fn is_collision(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|error| error.is_unique_violation())
}

/// The MPID after `last` at `now_ms`: a random start in the lower half of a later second's
/// range (so the second never runs out), else `last` plus a random step (the same second, or
/// a clock that went back).
fn next_mpid(last: i64, now_ms: i64, rng: &mut impl Rng) -> i64 {
    let second = (now_ms.div_euclid(1000) - MPID_EPOCH_S).clamp(0, (1 << 32) - 1);
    if second > last >> MPID_SECOND_SHIFT {
        (second << MPID_SECOND_SHIFT) | rng.random_range(1..1 << (MPID_SECOND_SHIFT - 1))
    } else {
        last.saturating_add(rng.random_range(1..=MPID_MAX_STEP))
    }
}

/// Reads the user's identities and commits: the answer to a resolution or a modify.
async fn answer(mut tx: Tx<'_>, mpid: Mpid) -> StoreResult<Resolution> {
    let identities: Vec<(String, String)> = tx.fetch_all(IDENTITIES_OF, args![mpid]).await?;
    tx.commit().await?;
    Ok(Resolution {
        mpid,
        logged_in: logged_in(&identities),
        identities,
    })
}

impl Store {
    /// Resolves a request's identities to a user: looks up who owns them, the device's user and
    /// the previous user, lets `decide` choose from that, and applies its decision. When
    /// `decide` answers `None`, nothing is written and the answer is [`StoreError::Refused`].
    pub(crate) async fn resolve_identity(
        &self,
        identities: &[(String, String)],
        device: Option<&str>,
        previous: Option<Mpid>,
        now: i64,
        decide: impl FnOnce(&Lookup) -> Option<Decision> + Send,
    ) -> StoreResult<Resolution> {
        let mut keys: Vec<String> = identities
            .iter()
            .map(|(k, v)| identity_lock_key(k, v))
            .collect();
        keys.extend(device.map(device_lock_key));
        let mut tx = self.begin().await?;
        for key in sorted(keys) {
            tx.execute(LOCK_KEY, args![&key]).await?;
        }
        let mut owners = Vec::with_capacity(identities.len());
        for (kind, value) in identities {
            let owner: Option<(Mpid,)> = tx.fetch_optional(OWNER, args![kind, value]).await?;
            owners.push(owner.map(|(m,)| m));
        }
        let mut device_user = None;
        if let Some(device) = device {
            let row: Option<(Mpid,)> = tx.fetch_optional(DEVICE_USER, args![device]).await?;
            if let Some((mpid,)) = row {
                let login = IdentityType::CustomerId.as_str();
                let (logins,): (i64,) = tx.fetch_one(HAS_LOGIN, args![mpid, login]).await?;
                device_user = Some(UserSummary {
                    mpid,
                    logged_in: logins > 0,
                });
            }
        }
        let mut previous_user = None;
        if let Some(mpid) = previous {
            let row: Option<(Mpid,)> = tx.fetch_optional(USER_EXISTS, args![mpid]).await?;
            if row.is_some() {
                let login = IdentityType::CustomerId.as_str();
                let (logins,): (i64,) = tx.fetch_one(HAS_LOGIN, args![mpid, login]).await?;
                previous_user = Some(UserSummary {
                    mpid,
                    logged_in: logins > 0,
                });
            }
        }
        let lookup = Lookup {
            owners,
            device_user,
            previous: previous_user,
        };
        // Dropping the transaction rolls it back: the locks taken so far are all it holds.
        let decision = decide(&lookup).ok_or(StoreError::Refused)?;
        let mpid = match decision.target {
            Target::Existing(mpid) => {
                tx.execute(TOUCH_USER, args![mpid, now]).await?;
                mpid
            }
            Target::New => {
                let mpid = new_mpid();
                let inserted = tx.execute(INSERT_USER, args![mpid, now]).await;
                if let Err(error) = &inserted {
                    new_run_after(error);
                }
                inserted?;
                mpid
            }
        };
        let mut attached = std::collections::HashSet::new();
        for index in decision.attach {
            let (kind, value) = &identities[index];
            // Named twice (`customerid` and `customer_id`, say): given, and recorded, once, as
            // a batch's identities are (`identity_steps::decide_one`).
            if !attached.insert((kind, value)) {
                continue;
            }
            tx.execute(ATTACH, args![kind, value, mpid, now]).await?;
            tx.execute(RECORD_CHANGE, args![mpid, kind, None::<&str>, value, now])
                .await?;
        }
        if decision.point_device
            && let Some(device) = device
        {
            tx.execute(POINT_DEVICE, args![device, mpid, now]).await?;
        }
        answer(tx, mpid).await
    }

    /// Applies `/modify` changes to a user, recording each in its history. A new value that
    /// belongs to another user is a conflict, and nothing is changed.
    pub(crate) async fn modify_identities(
        &self,
        mpid: Mpid,
        changes: &[IdentityChange],
        now: i64,
    ) -> StoreResult<Resolution> {
        let keys = changes
            .iter()
            .filter_map(|c| {
                c.new_value
                    .as_ref()
                    .map(|v| identity_lock_key(c.identity_type.as_str(), v))
            })
            .collect();
        let mut tx = self.begin().await?;
        for key in sorted(keys) {
            tx.execute(LOCK_KEY, args![&key]).await?;
        }
        let exists: Option<(Mpid,)> = tx.fetch_optional(USER_EXISTS, args![mpid]).await?;
        if exists.is_none() {
            return Err(StoreError::NotFound);
        }
        for change in changes {
            if change.old_value == change.new_value {
                continue;
            }
            let kind = change.identity_type.as_str();
            if let Some(new) = &change.new_value {
                let owner: Option<(Mpid,)> = tx.fetch_optional(OWNER, args![kind, new]).await?;
                if owner.is_some_and(|(owner,)| owner != mpid) {
                    return Err(StoreError::Conflict("identity_taken"));
                }
            }
            if let Some(old) = &change.old_value {
                tx.execute(DETACH, args![kind, old, mpid]).await?;
            }
            if let Some(new) = &change.new_value {
                tx.execute(ATTACH, args![kind, new, mpid, now]).await?;
            }
            let record = args![mpid, kind, &change.old_value, &change.new_value, now];
            tx.execute(RECORD_CHANGE, record).await?;
        }
        tx.execute(TOUCH_USER, args![mpid, now]).await?;
        answer(tx, mpid).await
    }

    /// A user's profile.
    pub(crate) async fn get_user(&self, mpid: Mpid) -> StoreResult<UserProfile> {
        let user: Option<(Mpid, i64, i64, String, String)> =
            self.fetch_optional(SELECT_USER, args![mpid]).await?;
        let (mpid, created_at, last_seen_at, user_attributes, consent) =
            user.ok_or(StoreError::NotFound)?;
        let identities = self.fetch_all(IDENTITIES_OF, args![mpid]).await?;
        let history = self.fetch_all(HISTORY_OF, args![mpid]).await?;
        Ok(UserProfile {
            mpid,
            created_at,
            last_seen_at,
            user_attributes,
            consent,
            identities,
            history,
        })
    }

    /// A user's consent as their profile keeps it (every regulation present), `None` for an
    /// MPID without a profile. Delivery reads it for connections with consent rules.
    pub(crate) async fn user_consent(&self, mpid: Mpid) -> StoreResult<Option<Value>> {
        let stored: Option<(String,)> = self.fetch_optional(CONSENT_OF, args![mpid]).await?;
        Ok(stored.map(|(consent,)| consent::state(&consent)))
    }

    /// The consent of several users at once, as [`Self::user_consent`] reads each, in one
    /// query: delivery reads a whole claim of jobs' with it. Users without a profile are absent.
    pub(crate) async fn users_consent(&self, mpids: &[Mpid]) -> StoreResult<HashMap<Mpid, Value>> {
        if mpids.is_empty() {
            return Ok(HashMap::new());
        }
        let list = serde_json::to_string(mpids).unwrap_or_else(|_| "[]".to_owned());
        let rows: Vec<(Mpid, String)> = self.fetch_all(CONSENTS_OF, args![&list]).await?;
        Ok(rows
            .into_iter()
            .map(|(mpid, consent)| (mpid, consent::state(&consent)))
            .collect())
    }

    /// The consent a connection's `rules` decide a stored batch on: its user's profile consent
    /// when the rules read consent and the batch has a user (the profile was updated in the
    /// batch's own commit, so it includes this batch's statement); `None` otherwise, and the
    /// batch's own consent decides.
    pub(crate) async fn consent_for(
        &self,
        rules: &ForwardingRules,
        document: &Value,
    ) -> StoreResult<Option<Value>> {
        if !rules.reads_consent() {
            return Ok(None);
        }
        let Some(mpid) = document
            .get("mpid")
            .and_then(Value::as_i64)
            .filter(|mpid| *mpid != 0)
        else {
            return Ok(None);
        };
        self.user_consent(Mpid::new(mpid)).await
    }

    /// The user an identity belongs to.
    pub(crate) async fn find_user(
        &self,
        identity_type: IdentityType,
        value: &str,
    ) -> StoreResult<UserProfile> {
        let owner: Option<(Mpid,)> = self
            .fetch_optional(OWNER, args![identity_type.as_str(), value])
            .await?;
        let (mpid,) = owner.ok_or(StoreError::NotFound)?;
        self.get_user(mpid).await
    }

    pub(crate) async fn insert_alias(&self, alias: &NewAlias, now: i64) -> StoreResult<()> {
        let args = args![
            &alias.input_id,
            alias.source_mpid,
            alias.destination_mpid,
            alias.start_ms,
            alias.end_ms,
            now
        ];
        self.execute(INSERT_ALIAS, args).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn mpids_grow_within_a_second_and_from_one_second_to_the_next() {
        let mut rng = StdRng::seed_from_u64(7);
        let start = (MPID_EPOCH_S + 700 * 86_400) * 1000;
        let mut last = 0;
        for at in [start, start, start + 999, start + 1000, start + 5 * DAY_MS] {
            for _ in 0..1000 {
                let next = next_mpid(last, at, &mut rng);
                assert!(next > last, "{next} after {last}");
                last = next;
            }
        }
    }

    #[test]
    fn a_clock_that_goes_back_still_gives_growing_mpids() {
        let mut rng = StdRng::seed_from_u64(8);
        let now = (MPID_EPOCH_S + 1000) * 1000;
        let first = next_mpid(0, now, &mut rng);
        let after = next_mpid(first, now - 60_000, &mut rng);
        assert!(after > first && after - first <= MPID_MAX_STEP);
    }

    #[test]
    fn mpids_are_positive_from_before_the_epoch_to_after_2161() {
        let mut rng = StdRng::seed_from_u64(9);
        for now in [0, MPID_EPOCH_S * 1000, 4_102_444_800_000, 6_000_000_000_000] {
            let mpid = next_mpid(0, now, &mut rng);
            assert!(mpid > 0, "{now}: {mpid}");
        }
        assert!(next_mpid(i64::MAX - 1, 0, &mut rng) > 0);
    }

    #[tokio::test]
    async fn a_second_user_row_of_one_mpid_is_seen_as_a_collision() {
        let db = crate::store::tests::harness::TestStore::open().await;
        let mut tx = db.store.begin().await.expect("begin");
        let mpid = Mpid::new(42);
        tx.execute(INSERT_USER, args![mpid, 1_000_i64])
            .await
            .expect("the first row");
        let again = tx
            .execute(INSERT_USER, args![mpid, 2_000_i64])
            .await
            .expect_err("a second row of one MPID");
        assert!(is_collision(&again), "{again:?}");
        let other = sqlx::Error::Protocol("not a constraint".into());
        assert!(!is_collision(&other));
    }

    #[test]
    fn a_second_starts_at_a_random_place() {
        let mut rng = StdRng::seed_from_u64(10);
        let now = (MPID_EPOCH_S + 5) * 1000;
        let starts: std::collections::HashSet<i64> =
            (0..100).map(|_| next_mpid(0, now, &mut rng)).collect();
        assert!(starts.len() > 95);
    }
}
