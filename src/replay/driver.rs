//! The background task that drives running replays, one per node: it leases the oldest running
//! replay no node drives, walks its range from the cursor at the replay's rate, and ends it.
//! A node that stops (or dies) leaves the lease to run out; another node then resumes at the
//! cursor, so a batch is enqueued (or a dead letter sent) at most once more than planned.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::plan::{self, Source};
use super::{PAGE, RangePage, stored_sends};
use crate::delivery::webhook::WebhookClient;
use crate::model::now_ms;
use crate::model::settings::ConnectionSettings;
use crate::pipeline::output::Output;
use crate::store::replays_sql::{ReplayJob, ReplayLease, ReplayRow, Step};
use crate::store::{ConnectionRow, Store, StoreError};
use crate::supervise::{self, Task};

/// How long a lease on a replay lasts; renewed at least every [`RENEW_EVERY`].
const LEASE: Duration = Duration::from_secs(30);
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How often a node with nothing to drive looks for a replay that another node started, or
/// whose node died (its lease ran out). A replay started on this node rings [`Wake`] and is
/// looked for at once. Looking is a write (the claim), which on SQLite takes the database's
/// one write lock beside the writer's group commits: five looks a second were most of what
/// an idle node did.
const IDLE: Duration = Duration::from_secs(2);
/// The driver's name in the log and in a test's fault.
const TASK: Task = "replay driver";

/// Rung by the admin API when it starts a replay, so this node's driver claims it at once
/// rather than at its next look.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wake(Arc<Notify>);

impl Wake {
    pub(crate) fn ring(&self) {
        // Kept as a permit if the driver is busy or claiming: its next wait then ends at once,
        // after at most one claim that finds nothing.
        self.0.notify_one();
    }
}

/// Drives replays until `cancel`; then gives up this node's leases so another node (or this
/// one restarted) resumes at the cursor. Shutdown awaits this task: the step in hand (a batch
/// enqueued, a dead letter sent) is recorded with its cursor before the leases go.
pub(crate) async fn run(
    store: Store,
    webhooks: WebhookClient,
    wake: Wake,
    cancel: CancellationToken,
) {
    drive_replays(store, webhooks, wake, IDLE, cancel).await;
}

/// [`run`], looking every `idle` while there is nothing to drive. Looks at once when it starts
/// (a replay a restart interrupted resumes without waiting) and after each replay it drove.
///
/// A driver that panics (a bug) starts again (see [`crate::supervise`]) as the same node. The
/// replay it was driving resumes at its cursor at once, here or on another node (the lease is
/// given up first), instead of when the lease runs out; a replay that makes the driver panic
/// twice is ended `failed` instead, so one a bug always trips is not tried again every second
/// (a dead letter sent and not yet recorded would be sent each time).
async fn drive_replays(
    store: Store,
    webhooks: WebhookClient,
    wake: Wake,
    idle: Duration,
    cancel: CancellationToken,
) {
    let node = format!("replay-{}", uuid::Uuid::now_v7());
    let driver = || Driver {
        store: store.clone(),
        webhooks: webhooks.clone(),
        node: node.clone(),
        cancel: cancel.clone(),
    };
    let driving = Driving::default();
    let mut started = false;
    supervise::restarting(TASK, cancel.clone(), || {
        let restarted = std::mem::replace(&mut started, true);
        driver().run(&wake, idle, &driving, restarted)
    })
    .await;
    // Shutdown may come while a panicked driver waits to start again: its lease goes too.
    driver().release_leases().await;
}

/// Which replay the driver is driving, and which one it was driving at its last panic, kept
/// across restarts.
#[derive(Debug, Default)]
struct Driving {
    /// The replay being driven (0: none).
    now: AtomicI64,
    /// The replay a panic interrupted before (0: none).
    interrupted: AtomicI64,
}

impl Driving {
    /// After a panic: the replay it interrupted, if any, and whether an earlier panic
    /// interrupted the same one.
    fn after_a_panic(&self) -> Option<(i64, bool)> {
        let id = self.now.swap(0, Ordering::Relaxed);
        let before = self.interrupted.swap(id, Ordering::Relaxed);
        (id != 0).then_some((id, id == before))
    }
}

impl Driver {
    /// [`drive_replays`]' loop, until `cancel` (the caller then gives up the leases) or a panic;
    /// `restarted` after a panic.
    async fn run(self, wake: &Wake, idle: Duration, driving: &Driving, restarted: bool) {
        if restarted {
            self.recover(driving).await;
        }
        while !self.cancel.is_cancelled() {
            let now = now_ms();
            match self
                .store
                .claim_replay(&self.node, now, lease_end(now))
                .await
            {
                Ok(Some(replay)) => {
                    driving.now.store(replay.id, Ordering::Relaxed);
                    // Where a bug would leave this node's lease held.
                    supervise::round(TASK);
                    self.drive(replay).await;
                    driving.now.store(0, Ordering::Relaxed);
                    continue;
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "Claiming a replay failed."),
            }
            tokio::select! {
                () = self.cancel.cancelled() => break,
                () = tokio::time::sleep(idle) => {}
                () = wake.0.notified() => {}
            }
        }
    }

    /// After a panic: ends the replay it interrupted if a panic interrupted it before, and
    /// gives up this node's leases.
    async fn recover(&self, driving: &Driving) {
        if let Some((id, true)) = driving.after_a_panic() {
            let reason = "the replay driver failed twice while driving it (see the node's log)";
            tracing::error!(
                replay = id,
                "A replay made its driver panic twice; it is ended."
            );
            let ended = (self.store)
                .finish_replay(self.lease(id), "failed", Some(reason), now_ms())
                .await;
            if let Err(error) = ended {
                tracing::warn!(%error, replay = id, "Ending a replay failed.");
            }
        }
        self.release_leases().await;
    }

    /// Gives up this node's replay leases, so their replays resume at their cursors at once.
    async fn release_leases(&self) {
        if let Err(error) = self.store.release_replays(&self.node).await {
            tracing::warn!(%error, "Releasing replay leases failed.");
        }
    }
}

fn lease_end(now: i64) -> i64 {
    now.saturating_add(i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX))
}

struct Driver {
    store: Store,
    webhooks: WebhookClient,
    node: String,
    cancel: CancellationToken,
}

/// Why a replay stopped before its range ended.
enum Stop {
    /// Cancelled, taken over by another node, or this node is stopping: nothing to record.
    Released,
    /// The replay cannot go on; it is marked failed with this reason.
    Failed(String),
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Self {
        // A database hiccup leaves the replay to be resumed when the lease runs out.
        tracing::warn!(%error, "A replay step failed; it resumes after its lease.");
        Stop::Released
    }
}

impl Driver {
    fn lease(&self, replay_id: i64) -> ReplayLease<'_> {
        ReplayLease {
            replay_id,
            node: &self.node,
            until: lease_end(now_ms()),
        }
    }

    async fn drive(&self, replay: ReplayRow) {
        let outcome = match Source::parse(&replay.source) {
            Some(Source::Batches) => self.batches(&replay).await,
            Some(Source::DeadLetters) => self.dead_letters(&replay).await,
            None => Err(Stop::Failed(format!("unknown source {:?}", replay.source))),
        };
        let (status, error) = match outcome {
            Ok(()) => ("done", None),
            Err(Stop::Failed(reason)) => ("failed", Some(reason)),
            Err(Stop::Released) => return,
        };
        let lease = self.lease(replay.id);
        if let Err(error) = self
            .store
            .finish_replay(lease, status, error.as_deref(), now_ms())
            .await
        {
            tracing::warn!(%error, replay = replay.id, "Ending a replay failed.");
        }
    }

    /// The connection and its output as they are now.
    async fn target(&self, replay: &ReplayRow) -> Result<(ConnectionRow, Output), Stop> {
        let connection = match self.store.get_connection(&replay.connection_id).await {
            Err(StoreError::NotFound) => return Err(Stop::Failed("connection deleted".into())),
            other => other?,
        };
        let output = self.store.get_output(&connection.output_id).await?;
        let output = Output::from_row(&output).map_err(Stop::Failed)?;
        Ok((connection, output))
    }

    /// Enqueues a job per batch in range, on the replay's own settings revision.
    async fn batches(&self, replay: &ReplayRow) -> Result<(), Stop> {
        let (connection, output) = self.target(replay).await?;
        let revision_id = replay
            .revision_id
            .ok_or_else(|| Stop::Failed("no settings revision".into()))?;
        let text = self.store.get_revision(revision_id).await?;
        let settings = ConnectionSettings::from_json_str(&text)
            .map_err(|e| Stop::Failed(format!("settings: {e}")))?;
        let mut pacer = Pacer::new(replay.rate_per_second);
        let mut page = range_page(replay);
        loop {
            let rows = self
                .store
                .batches_in_range(&connection.input_id, page)
                .await?;
            let Some((last, _)) = rows.last() else {
                return Ok(());
            };
            page.after = last.get();
            for (batch_id, body) in rows {
                let sends =
                    stored_sends(&self.store, &settings, &output.settings, batch_id, &body).await?;
                let requests = i64::try_from(sends.bodies.len()).unwrap_or(0);
                self.wait(replay.id, &mut pacer, requests).await?;
                let step = Step {
                    cursor_id: batch_id.get(),
                    batches: 1,
                    events: sends.events,
                    requests,
                    ..Step::default()
                };
                // A batch that sends nothing under these settings only moves the cursor. The
                // others are queued as a live batch accepted now would be: behind its user's
                // waiting jobs where the settings order per user, gathered with them over the
                // batch window where they coalesce.
                let (mpid, window_ms) =
                    plan::job_shape(&settings, &connection.id, revision_id, sends.user);
                let job = (requests > 0).then_some(ReplayJob {
                    batch_id,
                    connection_id: &connection.id,
                    revision_id,
                    mpid: mpid.map(|m| m.get()),
                    window_ms,
                });
                let lease = self.lease(replay.id);
                if !self
                    .store
                    .enqueue_replayed_batch(lease, job, step, now_ms())
                    .await?
                {
                    return Err(Stop::Released);
                }
            }
        }
    }

    /// Sends each dead letter in range again, as it was stored.
    async fn dead_letters(&self, replay: &ReplayRow) -> Result<(), Stop> {
        let (_, output) = self.target(replay).await?;
        let mut pacer = Pacer::new(replay.rate_per_second);
        let mut page = range_page(replay);
        loop {
            let rows = self
                .store
                .dead_letters_in_range(&replay.connection_id, page)
                .await?;
            let Some((last, _)) = rows.last() else {
                return Ok(());
            };
            page.after = *last;
            for (letter, body) in rows {
                self.wait(replay.id, &mut pacer, 1).await?;
                let events = plan::events_in_body(&body);
                // The id the single replay of this letter uses, so a receiver that deduplicates
                // sees one letter as one delivery however it was replayed.
                let delivery_id = format!("replay-{letter}");
                let sent = crate::delivery::replay(&self.webhooks, &output, &delivery_id, body)
                    .await
                    .is_ok();
                let step = Step {
                    cursor_id: letter,
                    batches: 0,
                    events,
                    requests: 1,
                    sent: i64::from(sent),
                    failed: i64::from(!sent),
                    expired: 0,
                };
                let lease = self.lease(replay.id);
                if !self
                    .store
                    .record_replayed_letter(lease, step, now_ms())
                    .await?
                {
                    return Err(Stop::Released);
                }
            }
        }
    }

    /// Waits until `requests` more may go, renewing the lease meanwhile; stops when the replay
    /// was cancelled (the renewal finds it no longer running) or this node is stopping.
    async fn wait(&self, replay_id: i64, pacer: &mut Pacer, requests: i64) -> Result<(), Stop> {
        let due = pacer.take(requests);
        loop {
            if self.cancel.is_cancelled() {
                return Err(Stop::Released);
            }
            if !self.store.renew_replay(self.lease(replay_id)).await? {
                return Err(Stop::Released);
            }
            let now = Instant::now();
            if now >= due {
                return Ok(());
            }
            // Woken by shutdown too, so the node gives its lease back before it exits.
            tokio::select! {
                () = self.cancel.cancelled() => return Err(Stop::Released),
                () = tokio::time::sleep((due - now).min(RENEW_EVERY)) => {}
            }
        }
    }
}

fn range_page(replay: &ReplayRow) -> RangePage {
    RangePage {
        from_ms: replay.from_ms,
        to_ms: replay.to_ms,
        after: replay.cursor_id,
        limit: PAGE,
    }
}

/// Spaces requests at a rate: each batch may go once the requests before it have had their time.
struct Pacer {
    rate: i64,
    next: Option<Instant>,
}

impl Pacer {
    fn new(rate: i64) -> Self {
        Self { rate, next: None }
    }

    /// When a batch of `requests` may go; books the time they take.
    fn take(&mut self, requests: i64) -> Instant {
        let now = Instant::now();
        let due = self.next.map_or(now, |next| next.max(now));
        self.next = Some(due + plan::spacing(requests, self.rate));
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::ConnectionId;
    use crate::store::replays_sql::NewReplay;
    use crate::store::tests::harness::TestStore;
    use crate::supervise::{panic_next_round, panic_next_rounds, panic_pending};

    /// Longer than any test runs: a replay these tests see driven was not found by a timed look.
    const NEVER: Duration = Duration::from_secs(3600);

    /// Starts a replay of dead letters for a connection that does not exist: driving it ends
    /// it `failed` at once, which shows it was claimed.
    async fn start_replay(store: &Store) -> i64 {
        let connection_id = ConnectionId::new();
        let new = NewReplay {
            connection_id: &connection_id,
            source: "dead_letters",
            from_ms: 0,
            to_ms: 1,
            event_types: None,
            rate_per_second: 1,
            settings: None,
            now: now_ms(),
        };
        store.insert_replay(&new).await.expect("replay stored")
    }

    /// The replay's status once it is no longer running (or `running` after 20 s).
    async fn outcome(store: &Store, id: i64) -> (String, Option<String>) {
        for _ in 0..1000 {
            let row = store.get_replay(id).await.expect("replay readable");
            if row.status != "running" {
                return (row.status, row.error);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ("running".into(), None)
    }

    /// The driver as a node runs it, looking for work only when started or rung.
    fn spawn_driver(
        store: &Store,
        wake: &Wake,
        cancel: &CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(drive_replays(
            store.clone(),
            webhooks(),
            wake.clone(),
            NEVER,
            cancel.clone(),
        ))
    }

    fn webhooks() -> WebhookClient {
        WebhookClient::new(true, Duration::from_secs(1)).expect("client")
    }

    fn failed() -> (String, Option<String>) {
        ("failed".into(), Some("connection deleted".into()))
    }

    #[tokio::test]
    async fn replays_waiting_when_the_node_starts_are_driven_one_after_the_other_at_once() {
        let db = TestStore::open().await;
        let first = start_replay(&db.store).await;
        let second = start_replay(&db.store).await;
        let cancel = CancellationToken::new();
        let driver = spawn_driver(&db.store, &Wake::default(), &cancel);
        let ended = (
            outcome(&db.store, first).await,
            outcome(&db.store, second).await,
        );
        cancel.cancel();
        driver.await.expect("driver ended");
        assert_eq!(ended, (failed(), failed()));
    }

    #[tokio::test]
    async fn a_replay_started_on_this_node_rings_its_driver() {
        let db = TestStore::open().await;
        let wake = Wake::default();
        let cancel = CancellationToken::new();
        let driver = spawn_driver(&db.store, &wake, &cancel);
        // One replay driven (found by the first look or by this ring, whichever comes later)
        // shows the driver at work; the look that follows it at once finds nothing, and the
        // driver waits (an hour, but for a ring).
        let warm_up = start_replay(&db.store).await;
        wake.ring();
        assert_eq!(outcome(&db.store, warm_up).await, failed());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let id = start_replay(&db.store).await;
        wake.ring();
        let ended = outcome(&db.store, id).await;
        cancel.cancel();
        driver.await.expect("driver ended");
        assert_eq!(ended, failed());
    }

    /// A driver that panics holding a replay's lease starts again and drives that replay at
    /// once: without the restart it is never driven, and without giving up the lease first
    /// not before the lease (30 s) runs out.
    #[tokio::test]
    async fn a_driver_that_panicked_holding_a_lease_drives_its_replay_at_once() {
        let db = TestStore::open().await;
        let id = start_replay(&db.store).await;
        panic_next_round(TASK);
        let cancel = CancellationToken::new();
        let driver = spawn_driver(&db.store, &Wake::default(), &cancel);
        let ended = outcome(&db.store, id).await;
        assert!(!panic_pending(), "the driver never panicked");
        assert_eq!(ended, failed());
        cancel.cancel();
        driver.await.expect("driver ended");
    }

    /// A replay that makes the driver panic twice is ended `failed`, not tried again every
    /// second; the driver goes on to the next.
    #[tokio::test]
    async fn a_replay_that_made_the_driver_panic_twice_is_ended_failed() {
        let db = TestStore::open().await;
        let tripping = start_replay(&db.store).await;
        let next = start_replay(&db.store).await;
        panic_next_rounds(TASK, 2);
        let cancel = CancellationToken::new();
        let driver = spawn_driver(&db.store, &Wake::default(), &cancel);
        let ended = (
            outcome(&db.store, tripping).await,
            outcome(&db.store, next).await,
        );
        cancel.cancel();
        driver.await.expect("driver ended");
        assert!(!panic_pending(), "the driver did not panic twice");
        let reason = "the replay driver failed twice while driving it (see the node's log)";
        assert_eq!(ended, (("failed".into(), Some(reason.into())), failed()));
    }

    /// A node stopping while its driver waits to start again after a panic gives up the lease
    /// the driver held: another node resumes the replay at once.
    #[tokio::test]
    async fn a_stop_during_the_restart_pause_gives_up_the_lease() {
        let db = TestStore::open().await;
        let id = start_replay(&db.store).await;
        panic_next_round(TASK);
        let cancel = CancellationToken::new();
        let driver = spawn_driver(&db.store, &Wake::default(), &cancel);
        while panic_pending() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
        driver.await.expect("driver ended");
        let now = now_ms();
        let claimed = (db.store)
            .claim_replay("another-node", now, lease_end(now))
            .await
            .expect("claim");
        assert_eq!(
            claimed.map(|replay| replay.id),
            Some(id),
            "the lease was kept"
        );
    }
}
