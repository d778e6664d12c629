//! How this node gets the jobs it delivers: the poller claims due jobs (and probe jobs for
//! failing connections) and offers them to their lanes, the renewer keeps the leases of the
//! jobs it holds from running out, and claimed jobs are read with their batches' bodies.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

#[cfg(test)]
use super::faults::{Point, reached};
use super::{Lanes, claimed_consent, coalesce};
use crate::model::ids::BatchId;
use crate::model::now_ms;
use crate::store::StoreError;
use crate::store::queue::{AttemptRecord, ClaimedJob, Job, JobUpdate};

/// Claims due jobs (retries, and anything unleased) for lanes with room and offers them.
/// After a claim that found nothing, the next poll first reads whether anything is due at all
/// ([`Store::anything_to_claim`](crate::store::Store::anything_to_claim)): an idle node's
/// claims, twice a second, were each a write transaction through the writer.
pub(super) async fn poll(lanes: Arc<Lanes>, interval: Duration) {
    let mut found_last = true;
    loop {
        #[cfg(test)]
        reached(Point::Polling);
        lanes.uncrowd_roomy_lanes();
        probe(&lanes).await;
        let claimed = match claim_if_due(&lanes, found_last).await {
            Ok(jobs) => jobs,
            Err(error) => {
                tracing::warn!(%error, "Claiming due jobs failed.");
                Vec::new()
            }
        };
        found_last = !claimed.is_empty();
        // A full claim means more is due: go again soon, but not in a tight loop.
        let more = claimed.len() >= lanes.claim_limit();
        for job in claimed {
            lanes.offer(job).await;
        }
        let pause = if more {
            Duration::from_millis(10)
        } else {
            interval
        };
        tokio::select! {
            () = lanes.cancel.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
            () = lanes.poll_now.notified() => {}
        }
    }
}

/// Keeps the leases of every job this node holds from running out while it waits in a lane or
/// is in flight (a slow endpoint can keep jobs queued for longer than a lease), so another node
/// never claims a job this one is still going to deliver. Renews first, then waits: a renewer
/// started again after a panic may have missed a round.
pub(super) async fn renew_leases(lanes: Arc<Lanes>, every: Duration, stop: CancellationToken) {
    loop {
        renew_held(&lanes).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

async fn renew_held(lanes: &Lanes) {
    let mut held: Vec<i64> = lanes.held().keys().copied().collect();
    if held.is_empty() {
        return;
    }
    #[cfg(test)]
    reached(Point::Renewing);
    // In id order: rows are then locked in a consistent order on PostgreSQL, which keeps
    // deadlocks with other multi-row updates of the same jobs rare.
    held.sort_unstable();
    match lanes.ctx.writer.renew(held.clone()).await {
        Ok(renewed) => lanes.renewed(&held, &renewed),
        Err(error) => tracing::warn!(%error, "Could not renew leases."),
    }
}

/// Sends each failing connection whose breaker allows it one job as a probe: its oldest, even
/// if it waits out a backoff, since the endpoint may well be back before that; one of a user
/// that has not failed recently if there is one, so a user the receiver keeps refusing cannot
/// keep the breaker open for everyone else.
async fn probe(lanes: &Arc<Lanes>) {
    for (connection_id, avoid) in lanes.due_probes() {
        if lanes.ctx.catalog.is_paused(&connection_id) {
            continue;
        }
        let claimed = lanes.ctx.writer.claim_probe(connection_id, &avoid).await;
        match with_bodies(lanes, claimed).await {
            Ok(jobs) => {
                for job in jobs {
                    lanes.offer(job).await;
                }
            }
            Err(error) => tracing::warn!(%error, "Claiming a probe job failed."),
        }
    }
}

/// [`claim`], unless the last claim found nothing (`found_last` false) and nothing is due now.
async fn claim_if_due(lanes: &Lanes, found_last: bool) -> Result<Vec<Job>, StoreError> {
    if !found_last {
        match lanes.ctx.store.anything_to_claim(now_ms()).await {
            Ok(true) => {}
            Ok(false) => return Ok(Vec::new()),
            // Claimed all the same: the read failing says nothing of the writer.
            Err(error) => tracing::warn!(%error, "Reading whether any job is due failed."),
        }
    }
    claim(lanes).await
}

/// Leases due jobs to this node and reads their batches (outside the writer: bodies never change).
async fn claim(lanes: &Lanes) -> Result<Vec<Job>, StoreError> {
    let claimed = lanes
        .ctx
        .writer
        .claim(
            i64::try_from(lanes.claim_limit()).unwrap_or(i64::MAX),
            lanes.not_to_claim(),
        )
        .await;
    with_bodies(lanes, claimed).await
}

/// Claimed jobs with their batches' bodies (read outside the writer: bodies never change). A job
/// whose batch is gone (pruned) is finished: nothing is left to deliver. The jobs of a coalesced
/// group go to its head (see [`coalesce`]), a pruned batch in it as an empty body.
pub(super) async fn with_bodies(
    lanes: &Lanes,
    claimed: Result<Vec<ClaimedJob>, StoreError>,
) -> Result<Vec<Job>, StoreError> {
    let claimed = claimed?;
    let batch_ids: Vec<BatchId> = claimed.iter().map(|c| c.batch_id()).collect();
    let bodies = lanes.ctx.store.batch_bodies(&batch_ids).await?;
    let mut jobs = Vec::with_capacity(claimed.len());
    for claim in claimed {
        match bodies.get(&claim.batch_id()) {
            Some(body) => jobs.push(claim.into_job(Arc::clone(body))),
            None if claim.coalesce_head().is_some() => {
                jobs.push(claim.into_job(Arc::from(Vec::new())));
            }
            None => {
                let key = claim.key();
                let attempt = AttemptRecord::dropped("batch no longer stored");
                lanes
                    .record(
                        key.id,
                        JobUpdate::Finished {
                            job: key,
                            attempt,
                            dead: Vec::new(),
                        },
                    )
                    .await;
            }
        }
    }
    claimed_consent::attach(lanes, &mut jobs).await;
    Ok(coalesce::gather_groups(jobs))
}
