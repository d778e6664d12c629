//! Working one job: filter the batch with the connection's settings revision, POST each body in
//! order from where the job left off, and report what happened to the writer.
//!
//! Requests of one job go out one after another and the job stops at the first that must be
//! retried, so `progress` (the count of requests already settled) is all the state a retry needs,
//! and a receiver sees a batch's events in order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;

use super::lane::LaneControl;
use super::retry::{Classification, classify};
use super::webhook::SendError;
use super::{DeliveryContext, HeldJob};
use crate::live::{Direction, LiveItem, Outcome, event_type_of, name_of};
use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{BatchId, InputId, Mpid};
use crate::model::metrics::minute_of;
use crate::model::now_ms;
use crate::model::settings::ConnectionSettings;
use crate::pipeline::filter;
use crate::pipeline::output::Output;
use crate::pipeline::stored_batch::StoredBatch;
use crate::store::StoreError;
use crate::store::queue::{AttemptRecord, DeadLetter, Job, JobKey, JobUpdate};

/// Delivers what is left of `job` and returns the update to record. Each request waits its turn
/// under the connection's rate limit (`lane`), then the `lease` is confirmed (a renewal may find
/// another node took the job over), so a lost job sends nothing more.
pub(super) async fn work(
    ctx: &DeliveryContext,
    job: Job,
    lease: &HeldJob<'_>,
    lane: &LaneControl,
) -> JobUpdate {
    let mut attempt = Attempt::new(ctx, &job);
    let Some((connection, output)) = ctx.catalog.connection(&job.connection_id) else {
        let whole_batch = vec![(job.progress, job.body.to_vec())];
        return missing_connection(ctx, &job, attempt, whole_batch).await;
    };
    let settings = match ctx.catalog.revision(job.revision_id).await {
        Ok(settings) => settings,
        Err(error) => {
            let whole_batch = vec![(job.progress, job.body.to_vec())];
            return attempt.retry(
                job.progress,
                format!("settings unavailable: {error}"),
                None,
                whole_batch,
            );
        }
    };
    let stored = match read_stored(&settings, &job.body) {
        Ok(stored) => stored,
        Err(error) => {
            attempt.dead_letter(
                0,
                job.body.to_vec(),
                None,
                format!("stored batch is unreadable: {error}"),
            );
            return attempt.finish(AttemptOutcome::DeadLetter, None);
        }
    };
    let document = &stored.document;
    let consent = match profile_consent(ctx, &job, &settings, document).await {
        Ok(consent) => consent,
        Err(error) => {
            // Never forward without knowing the user's consent: try again later.
            let whole_batch = vec![(job.progress, job.body.to_vec())];
            return attempt.retry(
                job.progress,
                format!("consent unavailable: {error}"),
                None,
                whole_batch,
            );
        }
    };
    let filter::Plan {
        payloads,
        verdicts,
        removed_attributes,
        ..
    } = filter::plan_stored(
        &settings,
        &output.settings,
        job.batch_id,
        &stored,
        consent.as_deref(),
    );
    let live = Live {
        ctx,
        job: &job,
        input_id: &connection.input_id,
        members: vec![Member {
            batch_id: job.batch_id,
            document: Some(document),
            removed: &removed_attributes,
        }],
    };
    // Once per job: a retry's verdicts are the ones already reported.
    if job.attempts == 0 {
        live.filtered(0, &verdicts);
    }
    let bodies: Vec<Outgoing> = payloads
        .into_iter()
        .enumerate()
        .skip(usize::try_from(job.progress).unwrap_or(0))
        .map(|(i, p)| Outgoing {
            index: i64::try_from(i).unwrap_or(i64::MAX),
            event_count: p.event_count,
            body: Bytes::from(p.body),
            events: p.event_indexes.into_iter().map(|e| (0, e)).collect(),
        })
        .collect();
    let sending = Sending {
        ctx,
        job: &job,
        lease,
        lane,
        rate_limit: settings.rate_limit_per_second,
        output: &output,
        live: &live,
    };
    sending.send(attempt, &bodies).await
}

/// A stored batch read for a connection with these settings: settings that change no event
/// read each event as its outline (most of the cost of reading a batch).
pub(super) fn read_stored<'a>(
    settings: &ConnectionSettings,
    body: &'a [u8],
) -> serde_json::Result<StoredBatch<'a>> {
    if filter::outlines_suffice(settings) {
        StoredBatch::read_outlines(body)
    } else {
        StoredBatch::read(body)
    }
}

/// A job whose connection this node's catalog lacks. A miss may only mean this node has not yet
/// applied another node's new connection: the job is dropped only when the store confirms the
/// connection is gone, else retried (`whole`: what is dead-lettered if the retries run out).
pub(super) async fn missing_connection(
    ctx: &DeliveryContext,
    job: &Job,
    attempt: Attempt<'_>,
    whole: Vec<(i64, Vec<u8>)>,
) -> JobUpdate {
    match ctx.catalog.connection_exists(&job.connection_id).await {
        Ok(false) => attempt.finish(AttemptOutcome::Dropped, Some("connection deleted".into())),
        Ok(true) => attempt.retry(
            job.progress,
            "connection not loaded yet".into(),
            None,
            whole,
        ),
        Err(error) => attempt.retry(
            job.progress,
            format!("catalog unavailable: {error}"),
            None,
            whole,
        ),
    }
}

/// One request to send: its place among the job's requests, and its events (by the batch they
/// come from, its place among the job's batches, and their index in it).
pub(super) struct Outgoing {
    pub(super) index: i64,
    pub(super) event_count: usize,
    pub(super) body: Bytes,
    pub(super) events: Vec<(usize, usize)>,
}

/// What sending a job's requests needs.
pub(super) struct Sending<'a> {
    pub(super) ctx: &'a DeliveryContext,
    pub(super) job: &'a Job,
    pub(super) lease: &'a HeldJob<'a>,
    pub(super) lane: &'a LaneControl,
    pub(super) rate_limit: Option<u32>,
    pub(super) output: &'a Output,
    pub(super) live: &'a Live<'a>,
}

impl Sending<'_> {
    /// Posts `bodies` in order (each under the delivery id `<job id>-<index>`) and returns the
    /// update to record: finished, or a retry from the first request that must be tried again.
    pub(super) async fn send(&self, mut attempt: Attempt<'_>, bodies: &[Outgoing]) -> JobUpdate {
        let (ctx, job, live) = (self.ctx, self.job, self.live);
        let mut delivered = Delivered {
            ctx,
            job,
            events: 0,
            ages_ms: Vec::with_capacity(bodies.len()),
            since_ms: now_ms(),
        };
        for (position, out) in bodies.iter().enumerate() {
            let (index, event_count, body, events) =
                (&out.index, &out.event_count, &out.body, &out.events);
            let delivery_id = format!("{}-{index}", job.id);
            let Some((result, sent)) = self.post(&mut attempt, &delivery_id, body).await else {
                // Another node delivers it now. The release is fenced: it changes nothing there.
                return JobUpdate::Release { job_id: job.id };
            };
            let latency = i64::try_from(sent.elapsed().as_millis()).unwrap_or(i64::MAX);
            live.report(events, &result, latency);
            let (error, after) = match result {
                Ok(answer) => {
                    attempt.last_status = Some(i64::from(answer.status));
                    match classify(answer.status, answer.retry_after) {
                        Classification::Delivered => {
                            delivered.add(*event_count);
                            attempt.events += i64::try_from(*event_count).unwrap_or(0);
                            continue;
                        }
                        Classification::DeadLetter => {
                            ctx.metrics.request_failed(&job.connection_id);
                            let error = format!("receiver answered {}", answer.status);
                            attempt.dead_letter(*index, body.to_vec(), attempt.last_status, error);
                            continue;
                        }
                        Classification::Retry { after } => {
                            (format!("receiver answered {}", answer.status), after)
                        }
                    }
                }
                Err(SendError::Refused(error)) => {
                    ctx.metrics.request_failed(&job.connection_id);
                    attempt.dead_letter(*index, body.to_vec(), None, error);
                    continue;
                }
                Err(SendError::Transport(error)) => {
                    // No answer this time: the status of an earlier request must not be reported.
                    attempt.last_status = None;
                    (error, None)
                }
            };
            // A request to retry is a failure in the charts, as a dead-lettered one is above.
            ctx.metrics.request_failed(&job.connection_id);
            let remaining = bodies[position..]
                .iter()
                .map(|o| (o.index, o.body.to_vec()))
                .collect();
            let status = attempt.last_status;
            let update = attempt.retry(*index, error.clone(), after, remaining);
            live.retried(events, status, &error, latency, &update);
            return update;
        }
        let outcome = if attempt.dead.is_empty() {
            AttemptOutcome::Delivered
        } else {
            AttemptOutcome::DeadLetter
        };
        attempt.finish(outcome, None)
    }

    /// Sends one request once the lease is confirmed, and again (same delivery id) if the
    /// endpoint is found back by another request while this one is unanswered (see
    /// [`LaneControl::recoveries`]); the result and when the request that gave it went out, or
    /// `None` if the job is no longer this node's.
    async fn post(
        &self,
        attempt: &mut Attempt<'_>,
        delivery_id: &str,
        body: &Bytes,
    ) -> Option<(Result<super::webhook::Answer, SendError>, Instant)> {
        loop {
            // Paced here, not once per body: a request sent again is a request to the receiver
            // like any other, and a recovery must not let a burst past the rate limit.
            self.lane.pace(self.rate_limit).await;
            if !self.lease.confirm().await {
                return None;
            }
            let mut recoveries = self.lane.recoveries();
            // An error means the lane is gone, which it is not while a job of it is worked: then
            // the request runs its course.
            let recovered = async move {
                if recoveries.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            attempt.requests += 1;
            let sent = Instant::now();
            let client = &self.ctx.client;
            // Given up only while no status has come back (a request answered must not be sent
            // twice); dropping it closes its connection.
            if let Some(result) = client
                .post_unless(self.output, delivery_id, body.clone(), recovered)
                .await
            {
                return Some((result, sent));
            }
            tracing::debug!(
                delivery_id,
                "Endpoint back while this request hung; sending it again."
            );
        }
    }
}

/// The requests of one pass over a job delivered so far, for the metrics: counted in one go
/// (see `Metrics::delivered`) when the pass ends, however it ends (also when it is dropped at
/// shutdown), or when a minute ends, so the dashboard's minutes get each request in its own
/// and a long, rate-limited pass shows as it goes.
struct Delivered<'a> {
    ctx: &'a DeliveryContext,
    job: &'a Job,
    events: usize,
    /// Per request, its batch's age when it was delivered.
    ages_ms: Vec<i64>,
    /// When the first of them was delivered.
    since_ms: i64,
}

impl Delivered<'_> {
    fn add(&mut self, events: usize) {
        let now = now_ms();
        if minute_of(now) != minute_of(self.since_ms) {
            self.count();
        }
        if self.ages_ms.is_empty() {
            self.since_ms = now;
        }
        self.events += events;
        self.ages_ms
            .push(now.saturating_sub(self.job.created_at).max(0));
    }

    fn count(&mut self) {
        let connection = &self.job.connection_id;
        let (events, ages) = (self.events, &self.ages_ms);
        self.ctx
            .metrics
            .delivered(connection, events, ages, self.since_ms);
        self.events = 0;
        self.ages_ms.clear();
    }
}

impl Drop for Delivered<'_> {
    fn drop(&mut self) {
        self.count();
    }
}

/// The user's consent the rules decide on: carried by the job, from the commit for a job handed
/// over there (the profile as that commit left it, this batch included), or read for its whole
/// claim by the poller (a retry, one left for a crowded lane or a paused connection, or another
/// node's), so a statement stored since counts too; else read from the profile now. `None` when
/// the rules do not read consent or the batch has no user.
pub(super) async fn profile_consent(
    ctx: &DeliveryContext,
    job: &Job,
    settings: &ConnectionSettings,
    document: &serde_json::Value,
) -> Result<Option<Arc<serde_json::Value>>, StoreError> {
    if let Some(carried) = job.profile_consent.as_ref()
        && settings.forwarding_rules.reads_consent()
    {
        return Ok(Some(Arc::clone(carried)));
    }
    if settings.forwarding_rules.reads_consent() {
        ctx.metrics.consent_read("job");
    }
    let read = ctx
        .store
        .consent_for(&settings.forwarding_rules, document)
        .await?;
    Ok(read.map(Arc::new))
}

/// Reports what a connection did with each event to the Live Stream (only while watched).
pub(super) struct Live<'a> {
    pub(super) ctx: &'a DeliveryContext,
    pub(super) job: &'a Job,
    pub(super) input_id: &'a InputId,
    /// The job's batches: one, or a coalesced group's in id order.
    pub(super) members: Vec<Member<'a>>,
}

/// One batch a job sends from.
pub(super) struct Member<'a> {
    pub(super) batch_id: BatchId,
    /// `None` when not kept (a coalesced group parsed while nobody watched): its events are
    /// not reported.
    pub(super) document: Option<&'a serde_json::Value>,
    /// Per event, the attributes the Data Filter removed.
    pub(super) removed: &'a [Vec<String>],
}

impl Live<'_> {
    /// The item for one event, or `None` if its batch's document was not kept.
    fn item(&self, (member, index): (usize, usize), outcome: Outcome) -> Option<LiveItem> {
        let member = &self.members[member];
        let document = member.document?;
        let event = &document["events"][index];
        Some(LiveItem {
            direction: Direction::Outbound,
            at: now_ms(),
            input_id: self.input_id.clone(),
            connection_id: Some(self.job.connection_id.clone()),
            batch_id: member.batch_id,
            index,
            event_type: event_type_of(event),
            name: name_of(event),
            mpid: document
                .get("mpid")
                .and_then(serde_json::Value::as_i64)
                .map(Mpid::new),
            event: None,
            outcome: Some(outcome),
            setting: None,
            reason: None,
            note: None,
            status: None,
            latency_ms: None,
            error: None,
            next_attempt_at: None,
        })
    }

    /// `attribute removed (data_filter: a, b)` when the Data Filter removed attributes.
    fn note(&self, (member, index): (usize, usize)) -> Option<String> {
        let removed = self.members[member]
            .removed
            .get(index)
            .filter(|r| !r.is_empty())?;
        Some(format!(
            "attribute removed (data_filter: {})",
            removed.join(", ")
        ))
    }

    /// Events of batch `member` the connection's settings dropped, naming the setting.
    pub(super) fn filtered(&self, member: usize, verdicts: &[filter::Verdict]) {
        if !self.ctx.live.watched() {
            return;
        }
        for (index, verdict) in verdicts.iter().enumerate() {
            let (setting, reason) = match verdict {
                filter::Verdict::Forwarded => continue,
                filter::Verdict::Filtered(setting) => (*setting, None),
                filter::Verdict::Ruled(rule) => (rule.setting(), Some(rule.to_string())),
            };
            let Some(item) = self.item((member, index), Outcome::Filtered) else {
                continue;
            };
            self.ctx.live.publish(LiveItem {
                setting: Some(setting),
                reason,
                ..item
            });
        }
    }

    /// How the request carrying `events` ended, unless it is to be retried: [`Self::retried`]
    /// reports that once the next attempt is scheduled.
    fn report(
        &self,
        events: &[(usize, usize)],
        result: &Result<super::webhook::Answer, SendError>,
        latency: i64,
    ) {
        if !self.ctx.live.watched() {
            return;
        }
        let (outcome, status, error) = match result {
            Ok(answer) => match classify(answer.status, answer.retry_after) {
                Classification::Delivered => (Outcome::Forwarded, Some(answer.status), None),
                Classification::DeadLetter => (
                    Outcome::Failed,
                    Some(answer.status),
                    Some(format!("receiver answered {}", answer.status)),
                ),
                Classification::Retry { .. } => return,
            },
            Err(SendError::Refused(e)) => (Outcome::Failed, None, Some(e.clone())),
            Err(SendError::Transport(_)) => return,
        };
        self.publish(events, outcome, status, error.as_deref(), latency, None);
    }

    /// A request to be tried again: why (its status or error) and when, or, if the retry window
    /// is over, that its events failed.
    fn retried(
        &self,
        events: &[(usize, usize)],
        status: Option<i64>,
        error: &str,
        latency: i64,
        update: &JobUpdate,
    ) {
        if !self.ctx.live.watched() {
            return;
        }
        let status = status.and_then(|s| u16::try_from(s).ok());
        match update {
            JobUpdate::Retry {
                next_attempt_at, ..
            } => self.publish(
                events,
                Outcome::Retrying,
                status,
                Some(error),
                latency,
                Some(*next_attempt_at),
            ),
            _ => {
                let error = format!("retry window exhausted; last error: {error}");
                self.publish(events, Outcome::Failed, status, Some(&error), latency, None);
            }
        }
    }

    fn publish(
        &self,
        events: &[(usize, usize)],
        outcome: Outcome,
        status: Option<u16>,
        error: Option<&str>,
        latency: i64,
        next_attempt_at: Option<i64>,
    ) {
        for &index in events {
            let Some(item) = self.item(index, outcome) else {
                continue;
            };
            self.ctx.live.publish(LiveItem {
                status,
                latency_ms: Some(latency),
                error: error.map(str::to_owned),
                note: self.note(index),
                next_attempt_at,
                ..item
            });
        }
    }
}

/// What one pass over a job has done so far.
pub(super) struct Attempt<'a> {
    ctx: &'a DeliveryContext,
    job: &'a Job,
    started: Instant,
    /// When the job's retry window starts: its acceptance, or for a coalesced group the end of
    /// its batch window (see [`Self::retries_counted_from`]).
    retries_from: i64,
    dead: Vec<DeadLetter>,
    last_status: Option<i64>,
    requests: i64,
    /// Events delivered so far.
    events: i64,
}

impl<'a> Attempt<'a> {
    pub(super) fn new(ctx: &'a DeliveryContext, job: &'a Job) -> Self {
        Self {
            ctx,
            job,
            started: Instant::now(),
            retries_from: job.created_at,
            dead: Vec::new(),
            last_status: None,
            requests: 0,
            events: 0,
        }
    }

    /// Counts the retry window from `at` instead of the job's acceptance (never earlier).
    pub(super) fn retries_counted_from(&mut self, at: i64) {
        self.retries_from = self.retries_from.max(at);
    }

    fn key(&self) -> JobKey {
        JobKey {
            id: self.job.id,
            batch_id: self.job.batch_id,
            connection_id: self.job.connection_id.clone(),
            mates: self.job.mates.iter().map(|mate| mate.id).collect(),
        }
    }

    fn record(&self, outcome: AttemptOutcome, error: Option<String>) -> AttemptRecord {
        AttemptRecord {
            attempted_at: now_ms(),
            outcome,
            status: self.last_status,
            error,
            requests: self.requests,
            events: self.events,
            latency_ms: i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX),
        }
    }

    pub(super) fn dead_letter(
        &mut self,
        payload_index: i64,
        body: Vec<u8>,
        status: Option<i64>,
        error: String,
    ) {
        self.ctx
            .metrics
            .delivery(&self.job.connection_id, AttemptOutcome::DeadLetter);
        self.dead.push(DeadLetter {
            payload_index,
            body,
            status,
            error,
        });
    }

    pub(super) fn finish(self, outcome: AttemptOutcome, error: Option<String>) -> JobUpdate {
        let error = error.or_else(|| self.dead.last().map(|d| d.error.clone()));
        JobUpdate::Finished {
            job: self.key(),
            attempt: self.record(outcome, error),
            dead: self.dead,
        }
    }

    /// Schedules a retry from request `progress` on, or, once the retry window is over,
    /// dead-letters every remaining request.
    pub(super) fn retry(
        mut self,
        progress: i64,
        error: String,
        after: Option<Duration>,
        remaining: Vec<(i64, Vec<u8>)>,
    ) -> JobUpdate {
        let attempts = self.job.attempts + 1;
        let draw = rand::rng().random::<f64>();
        let delay =
            self.ctx
                .backoff
                .delay(u32::try_from(attempts).unwrap_or(u32::MAX), after, draw);
        let next_attempt_at =
            now_ms().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
        if next_attempt_at <= self.retries_from.saturating_add(self.ctx.retry_window_ms) {
            self.ctx
                .metrics
                .delivery(&self.job.connection_id, AttemptOutcome::Retry);
            let attempt = self.record(AttemptOutcome::Retry, Some(error));
            return JobUpdate::Retry {
                job: self.key(),
                progress,
                attempts,
                next_attempt_at,
                attempt,
                dead: self.dead,
            };
        }
        let error =
            format!("retry window exhausted after {attempts} attempts; last error: {error}");
        for (index, body) in remaining {
            let status = self.last_status;
            self.dead_letter(index, body, status, error.clone());
        }
        self.finish(AttemptOutcome::DeadLetter, Some(error))
    }
}
