//! The consent of the jobs the poller claims (retries, jobs left for a crowded or paused lane,
//! another node's): read for the whole claim in one query, instead of one profile read per job
//! when it is worked (which was most of what the consent rules cost at saturation).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::Lanes;
use crate::model::ids::Mpid;
use crate::store::queue::Job;

/// Gives each claimed job whose rules read consent its user's profile consent, read in one
/// query for the claim, as a job handed over at its commit carries it. A job left without one
/// (its user has no profile, its batch no MPID, or this read failed) reads the profile itself
/// when worked, so nothing is forwarded without knowing the user's consent.
pub(super) async fn attach(lanes: &Lanes, jobs: &mut [Job]) {
    let mut users: Vec<(usize, Mpid)> = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let Ok(settings) = lanes.ctx.catalog.revision(job.revision_id).await else {
            continue;
        };
        if !settings.forwarding_rules.reads_consent() {
            continue;
        }
        // Jobs of connections ordered per user or coalesced carry their MPID; others' batches are read.
        if let Some(mpid) = job.mpid.or_else(|| batch_mpid(&job.body)) {
            users.push((index, mpid));
        }
    }
    if users.is_empty() {
        return;
    }
    let mut mpids: Vec<Mpid> = users.iter().map(|(_, mpid)| *mpid).collect();
    mpids.sort_unstable();
    mpids.dedup();
    lanes.ctx.metrics.consent_read("claim");
    let consents = match lanes.ctx.store.users_consent(&mpids).await {
        Ok(consents) => consents,
        Err(error) => {
            tracing::debug!(%error, "Reading a claim's consent failed; each job reads its own.");
            return;
        }
    };
    // One shared copy per user, however many of their jobs the claim holds.
    let shared: HashMap<Mpid, Arc<Value>> = consents
        .into_iter()
        .map(|(mpid, consent)| (mpid, Arc::new(consent)))
        .collect();
    for (index, mpid) in users {
        if let Some(job) = jobs.get_mut(index) {
            job.profile_consent = shared.get(&mpid).cloned();
        }
    }
}

/// The MPID of a stored batch, as the consent rules read it (`None` for none, 0, or one that
/// is not an integer), without building the whole document.
pub(super) fn batch_mpid(body: &[u8]) -> Option<Mpid> {
    #[derive(Deserialize)]
    struct User {
        mpid: Option<Value>,
    }
    let user: User = serde_json::from_slice(body).ok()?;
    user.mpid
        .as_ref()
        .and_then(Value::as_i64)
        .filter(|mpid| *mpid != 0)
        .map(Mpid::new)
}

#[cfg(test)]
mod tests {
    use super::batch_mpid;
    use crate::model::ids::Mpid;

    #[test]
    fn the_mpid_is_read_as_the_consent_rules_read_it() {
        let mpid = |body: &str| batch_mpid(body.as_bytes());
        assert_eq!(
            mpid(r#"{"events":[{"a":1}],"mpid":42}"#),
            Some(Mpid::new(42))
        );
        assert_eq!(mpid(r#"{"mpid":0}"#), None);
        assert_eq!(mpid(r#"{"mpid":"42"}"#), None);
        assert_eq!(mpid(r#"{"events":[]}"#), None);
        assert_eq!(mpid("not json"), None);
    }
}
