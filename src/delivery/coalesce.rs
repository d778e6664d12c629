//! Working a coalesced group: one user's batches gathered over the connection's
//! `batch_window_secs` (see `store::coalesce_sql` for how the group is formed and kept).
//!
//! Each batch is filtered on its own exactly as a lone job's would be (its own settings revision
//! and consent, its verdicts reported to the Live Stream), then the surviving bodies are merged
//! ([`super::merge`]) into requests cut between runs of whole batches whose stored sizes fit
//! `max_batch_bytes` (the head's revision's, as is its rate limit). The requests go out in order
//! under the delivery ids `<head job id>-<place of the request's first batch>`, and the whole
//! group is finished or retried as one job, its progress the place of the first batch not yet
//! delivered. The group and the cut are the same on every pass, so a retry, or a re-send after
//! a crash, starts where the last pass stopped, and a request filtered alike carries the same
//! body under the same id. Dead letters are per request, recorded under the head.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use super::lane::LaneControl;
use super::merge::{Merged, Part, merge};
use super::worker::{
    Attempt, Live, Member, Outgoing, Sending, missing_connection, profile_consent, read_stored,
};
use super::{DeliveryContext, HeldJob};
use crate::model::settings::ConnectionSettings;
use crate::pipeline::filter;
use crate::pipeline::stored_batch::StoredBatch;
use crate::store::queue::{Job, JobUpdate};

/// One batch of the group, read and filtered. Its parsed document is kept only while the Live
/// Stream is watched (to name each event): a parsed batch takes several times its stored
/// size, and a group holds up to 500 of them, so otherwise each is dropped once filtered.
struct Filtered {
    document: Option<serde_json::Value>,
    plan: filter::Plan,
}

/// Delivers what is left of the group headed by `head` and returns the update to record for all
/// of it.
pub(super) async fn work(
    ctx: &DeliveryContext,
    head: &Job,
    lease: &HeldJob<'_>,
    lane: &LaneControl,
) -> JobUpdate {
    let mut attempt = Attempt::new(ctx, head);
    let members: Vec<&Job> = std::iter::once(head).chain(&head.mates).collect();
    // The group is first sent when its window ends, so its retry window counts from there
    // (and from its newest batch's acceptance, if later): counted from the head's acceptance,
    // a retry window shorter than the batch window would be over at the first failure.
    let newest = members
        .iter()
        .map(|job| job.created_at)
        .max()
        .unwrap_or(head.created_at);
    attempt.retries_counted_from(retries_start(head.created_at, newest, 0));
    let stored = || {
        members
            .iter()
            .map(|job| (head.progress, job.body.to_vec()))
            .collect()
    };
    let Some((connection, output)) = ctx.catalog.connection(&head.connection_id) else {
        return missing_connection(ctx, head, attempt, stored()).await;
    };
    let head_settings = match ctx.catalog.revision(head.revision_id).await {
        Ok(settings) => settings,
        Err(error) => {
            let error = format!("settings unavailable: {error}");
            return attempt.retry(head.progress, error, None, stored());
        }
    };
    attempt.retries_counted_from(retries_start(
        head.created_at,
        newest,
        head_settings.batch_window_ms(),
    ));
    let mut filtered = Vec::with_capacity(members.len());
    for job in &members {
        let settings = match ctx.catalog.revision(job.revision_id).await {
            Ok(settings) => settings,
            Err(error) => {
                let error = format!("settings unavailable: {error}");
                return attempt.retry(head.progress, error, None, stored());
            }
        };
        let Some(batch) = readable(job, &settings, &mut attempt) else {
            continue;
        };
        let consent = match profile_consent(ctx, job, &settings, &batch.document).await {
            Ok(consent) => consent,
            Err(error) => {
                // Never forward without knowing the user's consent: try again later.
                let error = format!("consent unavailable: {error}");
                return attempt.retry(head.progress, error, None, stored());
            }
        };
        let plan = filter::plan_stored(
            &settings,
            &output.settings,
            job.batch_id,
            &batch,
            consent.as_deref(),
        );
        let document = ctx.live.watched().then_some(batch.document);
        filtered.push((*job, Filtered { document, plan }));
    }
    let live = Live {
        ctx,
        job: head,
        input_id: &connection.input_id,
        members: filtered
            .iter()
            .map(|(job, f)| Member {
                batch_id: job.batch_id,
                document: f.document.as_ref(),
                removed: &f.plan.removed_attributes,
            })
            .collect(),
    };
    if head.attempts == 0 {
        for (member, (_, f)) in filtered.iter().enumerate() {
            live.filtered(member, &f.plan.verdicts);
        }
    }
    let bodies = requests(&filtered, &members, &head_settings, head.progress);
    let sending = Sending {
        ctx,
        job: head,
        lease,
        lane,
        rate_limit: head_settings.rate_limit_per_second,
        output: &output,
        live: &live,
    };
    sending.send(attempt, &bodies).await
}

/// When a coalesced group's retry window starts (Unix ms): the end of its batch window (the
/// head's acceptance plus the head revision's `window_ms`), or its newest batch's acceptance if
/// later. The worker gives a group up once a retry would fall past this plus the retry window,
/// and the admin API's `gives_up_at` is computed with this same rule.
pub(crate) fn retries_start(head_created_at: i64, newest_created_at: i64, window_ms: i64) -> i64 {
    head_created_at
        .saturating_add(window_ms)
        .max(newest_created_at)
}

/// The group's requests from member `progress` on (a request's index is the place of its first
/// batch in the group). Requests are cut between runs of whole batches by their STORED sizes,
/// not their filtered bodies: the cut must stay put when a retry filters differently (a consent
/// statement since, edited output settings), or a retry's `progress` would skip undelivered
/// events or repeat delivered ones. Filtering only removes, and no stored batch is shorter than
/// serde_json writes it back (text kept as sent holds only numbers serde_json spells the same:
/// `model::value_check::Numbers::as_sent_in`); but
/// the request adds `batch_id` (and `unique_id` when set), which its stored batches do not hold.
/// A run of two or more batches drops more than that with its older batches' fields; a run of
/// one whose stored size is within a few dozen bytes of the cap can go out that much over it.
fn requests(
    filtered: &[(&Job, Filtered)],
    members: &[&Job],
    settings: &ConnectionSettings,
    progress: i64,
) -> Vec<Outgoing> {
    let cap = usize::try_from(settings.max_batch_bytes).unwrap_or(usize::MAX);
    let place: HashMap<i64, usize> = members.iter().enumerate().map(|(m, j)| (j.id, m)).collect();
    let sizes: Vec<usize> = members.iter().map(|job| job.body.len()).collect();
    let from = usize::try_from(progress).unwrap_or(0);
    let parts = filtered.iter().enumerate().map(|(at, (job, f))| {
        let parts = f.plan.payloads.iter().map(|p| Part {
            member: at,
            accepted: job.batch_id.get(),
            body: p.body.clone(),
            events: p.event_indexes.clone(),
        });
        (place[&job.id], parts.collect())
    });
    cut(&sizes, cap, from, parts)
        .into_iter()
        .filter_map(|merged| {
            let (first, _) = merged.events.first()?;
            let index = place[&filtered[*first].0.id];
            Some(Outgoing {
                index: i64::try_from(index).unwrap_or(i64::MAX),
                event_count: merged.events.len(),
                body: Bytes::from(merged.body),
                events: merged.events,
            })
        })
        .collect()
}

/// A group's requests, in order: the filtered `parts` of each member (by its place in the
/// group), from place `from` on, merged within runs of whole members whose STORED `sizes` fit
/// `cap` (see [`requests`] for why stored sizes). Replay's dry run cuts its sample with it too.
pub(crate) fn cut(
    sizes: &[usize],
    cap: usize,
    from: usize,
    parts: impl IntoIterator<Item = (usize, Vec<Part>)>,
) -> Vec<Merged> {
    let run_of = runs_by_size(sizes.iter().copied(), cap);
    let mut runs: BTreeMap<usize, Vec<Part>> = BTreeMap::new();
    for (member, parts) in parts {
        if member < from {
            continue;
        }
        runs.entry(run_of[member]).or_default().extend(parts);
    }
    runs.into_values()
        .flat_map(|parts| merge(parts, usize::MAX))
        .collect()
}

/// Which run each batch of the given stored sizes falls in: consecutive batches while their
/// sizes add up to at most `cap`; a batch larger than the cap is a run of its own.
fn runs_by_size(sizes: impl Iterator<Item = usize>, cap: usize) -> Vec<usize> {
    let (mut run, mut total, mut out) = (0, 0usize, Vec::new());
    for size in sizes {
        if total > 0 && total.saturating_add(size) > cap {
            run += 1;
            total = 0;
        }
        total = total.saturating_add(size);
        out.push(run);
    }
    out
}

/// A member's stored batch, read as a lone job's is (its unchanged events then go out as their
/// stored bytes), or `None`: pruned (nothing left to send) or unreadable (kept as a dead letter
/// on the group's first pass).
fn readable<'a>(
    job: &'a Job,
    settings: &ConnectionSettings,
    attempt: &mut Attempt<'_>,
) -> Option<StoredBatch<'a>> {
    if job.body.is_empty() {
        return None;
    }
    match read_stored(settings, &job.body) {
        Ok(stored) => Some(stored),
        Err(error) => {
            if job.attempts == 0 {
                let error = format!("stored batch {} is unreadable: {error}", job.batch_id);
                attempt.dead_letter(0, job.body.to_vec(), None, error);
            }
            None
        }
    }
}

/// Moves each coalesced group's other jobs into its head's `mates`, in id order.
pub(super) fn gather_groups(jobs: Vec<Job>) -> Vec<Job> {
    let (mates, mut jobs): (Vec<Job>, Vec<Job>) = jobs
        .into_iter()
        .partition(|job| job.coalesce_head.is_some_and(|head| head != job.id));
    if mates.is_empty() {
        return jobs;
    }
    let heads: HashMap<i64, usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, job)| job.coalesce_head == Some(job.id))
        .map(|(at, job)| (job.id, at))
        .collect();
    for mate in mates {
        match mate.coalesce_head.and_then(|head| heads.get(&head)) {
            Some(&at) => jobs[at].mates.push(mate),
            // Claimed without its head (not expected: the head is always claimed first); it
            // goes alone, as a group of its own.
            None => jobs.push(mate),
        }
    }
    for job in &mut jobs {
        job.mates.sort_by_key(|mate| mate.id);
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::runs_by_size;

    #[test]
    fn runs_follow_the_stored_sizes_and_a_batch_over_the_cap_runs_alone() {
        let runs = runs_by_size([400, 500, 200, 1500, 100, 100].into_iter(), 1000);
        assert_eq!(runs, vec![0, 0, 1, 2, 3, 3]);
    }
}
