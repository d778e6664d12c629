//! Fan-out: the rows one accepted batch becomes, as a function of the batch, its input's routes
//! and delivery's [`Handoff`] answers, with no I/O, so what a batch creates can be tested without
//! a database. The hand-off is the one input that reads live state (which lanes are crowded
//! now); it is asked when the request is accepted, a few milliseconds before the commit, where
//! the writer used to ask at the commit: a lane that fills in between releases the job it gets,
//! as one that filled between the commit and the hand-over always did.

use std::sync::Arc;

use serde_json::Value;

use super::Handoff;
use super::catalog::Route;
use super::identity::Unnamed;
use crate::model::consent;
use crate::model::ids::{InputId, Mpid};
use crate::store::queue::{NewBatch, NewJob, ProfileUpdate, Unresolved};

/// A normalised batch, serialised, as the store will keep it.
#[derive(Debug, Clone)]
pub(crate) struct AcceptedBatch<'a> {
    pub(crate) input_id: &'a InputId,
    pub(crate) source_request_id: Option<String>,
    pub(crate) received_at: i64,
    pub(crate) event_count: usize,
    /// The outbound-form document, for the profile update.
    pub(crate) document: &'a Value,
    pub(crate) body: Arc<[u8]>,
}

/// The batch row, one job per route (in route order), and the batch's profile update.
pub(crate) fn fan_out(
    batch: AcceptedBatch<'_>,
    routes: &[Route],
    handoff: &dyn Handoff,
) -> NewBatch {
    NewBatch {
        input_id: batch.input_id.clone(),
        source_request_id: batch.source_request_id,
        received_at: batch.received_at,
        event_count: i64::try_from(batch.event_count).unwrap_or(i64::MAX),
        jobs: jobs_for(routes, user_of(batch.document), handoff),
        profile: profile_update(batch.document),
        body: batch.body,
        unresolved: None,
    }
}

/// Stands for the user a batch without an MPID gets in its commit, which replaces it.
const TO_RESOLVE: Mpid = Mpid::new(0);

/// [`fan_out`] for a batch without an MPID (its body without one): both what it becomes with
/// the user `who` resolves to in the commit that stores it, and without one (none found, and
/// `may_create` forbids a new one). Until then it has the jobs of a batch without a user.
pub(crate) fn fan_out_unnamed(
    batch: AcceptedBatch<'_>,
    routes: &[Route],
    handoff: &dyn Handoff,
    who: Unnamed,
    may_create: bool,
) -> NewBatch {
    let anonymous_jobs = jobs_for(routes, None, handoff);
    let unresolved = Unresolved {
        identities: who.identities,
        device: who.device,
        may_create,
        said_zero: who.said_zero,
        body: Arc::clone(&batch.body),
        user_jobs: jobs_for(routes, Some(TO_RESOLVE), handoff),
        anonymous_jobs: anonymous_jobs.clone(),
        profile: profile_of(batch.document, TO_RESOLVE),
        resolved: Arc::default(),
    };
    NewBatch {
        input_id: batch.input_id.clone(),
        source_request_id: batch.source_request_id,
        received_at: batch.received_at,
        event_count: i64::try_from(batch.event_count).unwrap_or(i64::MAX),
        jobs: anonymous_jobs,
        profile: None,
        body: batch.body,
        unresolved: Some(Box::new(unresolved)),
    }
}

/// A job per active connection of the input, each with the settings revision current now, and
/// the batch's user (`mpid`) where the revision orders by user or gathers a user's batches.
/// A gathered job (a window and a user) is never leased at once: it waits out its window in the
/// table. A batch without a user is not gathered.
pub(crate) fn jobs_for(routes: &[Route], mpid: Option<Mpid>, handoff: &dyn Handoff) -> Vec<NewJob> {
    routes
        .iter()
        .map(|route| {
            let window_ms = if mpid.is_some() { route.window_ms } else { 0 };
            NewJob {
                connection_id: route.connection_id.clone(),
                revision_id: route.revision_id,
                leased: window_ms == 0 && handoff.takes_now(&route.connection_id),
                reads_consent: route.reads_consent,
                mpid: mpid.filter(|_| route.per_user || window_ms > 0),
                window_ms,
            }
        })
        .collect()
}

/// The batch's user: its MPID, unless missing or 0.
pub(crate) fn user_of(document: &Value) -> Option<Mpid> {
    Some(Mpid::new(
        document.get("mpid")?.as_i64().filter(|m| *m != 0)?,
    ))
}

/// The batch's user attributes as a merge patch on its user's profile (deletions as `null`), and
/// the consent purposes it states; none for a batch without a user (MPID missing or 0).
pub(crate) fn profile_update(document: &Value) -> Option<ProfileUpdate> {
    Some(profile_of(document, user_of(document)?))
}

/// The batch's user attributes and consent as `mpid`'s profile update.
fn profile_of(document: &Value, mpid: Mpid) -> ProfileUpdate {
    let mut patch = document
        .get("user_attributes")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for deleted in document
        .get("deleted_user_attributes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = deleted.as_str() {
            patch.insert(name.to_owned(), Value::Null);
        }
    }
    ProfileUpdate {
        mpid,
        patch,
        consent: consent::stated(document),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::model::ids::ConnectionId;

    /// A hand-off that leaves the named connections in the table.
    #[derive(Debug)]
    struct Crowded(HashSet<String>);

    impl Handoff for Crowded {
        fn takes_now(&self, connection_id: &ConnectionId) -> bool {
            !self.0.contains(connection_id.as_str())
        }
    }

    fn arb_routes() -> impl Strategy<Value = Vec<Route>> {
        let route = (0u8..8, 1i64..100, any::<bool>(), any::<bool>(), 0i64..3);
        proptest::collection::vec(route, 0..6).prop_map(|routes| {
            routes
                .into_iter()
                .map(|(c, revision_id, reads_consent, per_user, window)| Route {
                    connection_id: ConnectionId::trusted(format!("conn_{c}")),
                    revision_id,
                    reads_consent,
                    per_user,
                    window_ms: window * 1000,
                })
                .collect()
        })
    }

    fn arb_attributes() -> impl Strategy<Value = BTreeMap<String, Option<i64>>> {
        // `None`: the attribute is deleted by the batch.
        proptest::collection::btree_map("[a-c]", proptest::option::of(0i64..5), 0..4)
    }

    proptest! {
        /// Every route gets exactly one job, in order, with its revision; a job is leased
        /// exactly when delivery takes it now and it is not gathered (a window and a user),
        /// reads consent when its route's rules do, and carries the user only where its route
        /// orders by user or gathers.
        #[test]
        fn one_job_per_route(
            routes in arb_routes(),
            crowded in proptest::collection::hash_set("conn_[0-7]", 0..4),
            mpid in proptest::option::of(1i64..100),
        ) {
            let handoff = Crowded(crowded.clone());
            let mpid = mpid.map(Mpid::new);
            let jobs = jobs_for(&routes, mpid, &handoff);
            prop_assert_eq!(jobs.len(), routes.len());
            for (job, route) in jobs.iter().zip(&routes) {
                prop_assert_eq!(&job.connection_id, &route.connection_id);
                prop_assert_eq!(job.revision_id, route.revision_id);
                let gathered = route.window_ms > 0 && mpid.is_some();
                prop_assert_eq!(job.window_ms, if gathered { route.window_ms } else { 0 });
                prop_assert_eq!(
                    job.leased,
                    !gathered && !crowded.contains(route.connection_id.as_str())
                );
                prop_assert_eq!(job.reads_consent, route.reads_consent);
                prop_assert_eq!(job.mpid, mpid.filter(|_| route.per_user || gathered));
            }
        }

        /// The profile update sets what the batch sets and deletes what it deletes, and exists
        /// only for a batch with a user.
        #[test]
        fn profile_update_mirrors_the_batch(
            mpid in prop_oneof![Just(0i64), 1i64..i64::MAX],
            attributes in arb_attributes(),
        ) {
            let set: serde_json::Map<String, Value> = attributes
                .iter()
                .filter_map(|(k, v)| v.map(|v| (k.clone(), json!(v))))
                .collect();
            let deleted: Vec<&String> =
                attributes.iter().filter(|(_, v)| v.is_none()).map(|(k, _)| k).collect();
            let document = json!({
                "mpid": mpid,
                "user_attributes": set,
                "deleted_user_attributes": deleted,
            });
            let update = profile_update(&document);
            if mpid == 0 {
                prop_assert!(update.is_none());
            } else {
                let update = update.expect("a batch with a user updates its profile");
                prop_assert_eq!(update.mpid, Mpid::new(mpid));
                prop_assert_eq!(update.patch.len(), attributes.len());
                for (name, value) in &attributes {
                    let expected = value.map_or(Value::Null, |v| json!(v));
                    prop_assert_eq!(update.patch.get(name), Some(&expected));
                }
            }
        }
    }

    #[test]
    fn a_batch_keeps_its_fields_and_body() {
        let document = json!({"mpid": 7, "events": [],
            "consent_state": {"ccpa": {"data_sale_opt_out": {"consented": true}}}});
        let body: Arc<[u8]> = Arc::from(b"{}".as_slice());
        let routes = vec![Route {
            connection_id: ConnectionId::trusted("conn_a"),
            revision_id: 3,
            reads_consent: false,
            per_user: true,
            window_ms: 0,
        }];
        let batch = fan_out(
            AcceptedBatch {
                input_id: &InputId::trusted("in_1"),
                source_request_id: Some("r1".into()),
                received_at: 42,
                event_count: 5,
                document: &document,
                body: Arc::clone(&body),
            },
            &routes,
            &Crowded(HashSet::new()),
        );
        assert_eq!(batch.input_id, "in_1");
        assert_eq!(batch.source_request_id.as_deref(), Some("r1"));
        assert_eq!((batch.received_at, batch.event_count), (42, 5));
        assert!(Arc::ptr_eq(&batch.body, &body));
        assert_eq!(batch.jobs.len(), 1);
        assert_eq!(batch.jobs[0].mpid, Some(Mpid::new(7)));
        let profile = batch
            .profile
            .expect("a batch with a user updates its profile");
        assert_eq!(profile.mpid, Mpid::new(7));
        assert_eq!(
            Value::Object(profile.consent),
            json!({"ccpa": {"data_sale_opt_out": {"consented": true}}})
        );
    }
}
