//! A model-based test of the queue: random sequences of operations (ingest, claim, finish, retry,
//! release, renew, crowded connections, releasing every lease, prune, and the clock moving on)
//! run on the real store, through writers as delivery uses them, and on a small in-memory model
//! of what the queue promises. After every step the two must agree on what was claimed and on
//! every row of the jobs, batches, attempts and dead-letter tables.
//!
//! The model counts time in ticks of ten minutes and the clock moves by whole ticks. The writer
//! takes "now" from the wall clock, which runs on by the few seconds a case takes: far less than
//! a tick, so the model can be exact about which jobs are due and which leases have run out, and
//! it checks that this holds. The seed is fixed so a run is repeatable; set `PROPTEST_RNG_SEED`
//! (or `PROPTEST_CASES`) to explore further.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{RngSeed, TestCaseError};

use super::harness::{JobRow, MINUTE, Node, TestStore, attempt, batch, dead_letter, on_postgres};
use crate::model::attempt::AttemptOutcome;
use crate::model::ids::{BatchId, ConnectionId, InputId};
use crate::model::now_ms;
use crate::store::queue::{IngestOutcome, JobKey, JobUpdate};

/// The model's unit of time.
const TICK: i64 = 10 * MINUTE;
const LEASE_TICKS: i64 = 3;
const LEASE: Duration = Duration::from_secs(30 * 60);
const CONNECTIONS: [&str; 3] = ["c0", "c1", "c2"];
const INPUTS: [&str; 2] = ["in0", "in1"];
const NODES: usize = 2;
/// Every batch's event count (see `harness::batch`).
const EVENTS: i64 = 3;

/// A batch to ingest.
#[derive(Debug, Clone)]
struct BatchSpec {
    input: usize,
    /// Few distinct ids, so duplicates are common.
    request: Option<u8>,
    /// Ticks before now it was received (its jobs are due from then).
    age: i64,
    /// Which of `CONNECTIONS` it is routed to, as bits.
    routes: u8,
}

#[derive(Debug, Clone)]
enum Op {
    Ingest {
        node: usize,
        batches: Vec<BatchSpec>,
    },
    Claim {
        node: usize,
        limit: i64,
        skip: u8,
    },
    /// Updates pick a job still queued or one already gone (a late update from a stale worker),
    /// and come from the node that holds it or from any node (one that lost it: fenced).
    Finish {
        pick: Index,
        by: By,
        dead: i64,
    },
    Retry {
        pick: Index,
        by: By,
        progress: i64,
        delay: i64,
        dead: i64,
    },
    Release {
        pick: Index,
        by: By,
    },
    Renew {
        node: usize,
        picks: Vec<Index>,
    },
    Advance {
        ticks: i64,
    },
    Crowd {
        node: usize,
        connection: usize,
        crowded: bool,
    },
    ReleaseAll,
    Prune {
        age: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let batch = (
        0..INPUTS.len(),
        proptest::option::of(0u8..3),
        0i64..3,
        0u8..8,
    )
        .prop_map(|(input, request, age, routes)| BatchSpec {
            input,
            request,
            age,
            routes,
        });
    prop_oneof![
        3 => (0..NODES, proptest::collection::vec(batch, 1..4))
            .prop_map(|(node, batches)| Op::Ingest { node, batches }),
        3 => (0..NODES, 0i64..5, 0u8..8)
            .prop_map(|(node, limit, skip)| Op::Claim { node, limit, skip }),
        2 => (any::<Index>(), arb_by(), 0i64..3)
            .prop_map(|(pick, by, dead)| Op::Finish { pick, by, dead }),
        2 => (any::<Index>(), arb_by(), 0i64..4, -1i64..5, 0i64..2).prop_map(
            |(pick, by, progress, delay, dead)| Op::Retry { pick, by, progress, delay, dead }
        ),
        1 => (any::<Index>(), arb_by()).prop_map(|(pick, by)| Op::Release { pick, by }),
        2 => (0..NODES, proptest::collection::vec(any::<Index>(), 1..4))
            .prop_map(|(node, picks)| Op::Renew { node, picks }),
        2 => (1i64..5).prop_map(|ticks| Op::Advance { ticks }),
        1 => (0..NODES, 0..CONNECTIONS.len(), any::<bool>())
            .prop_map(|(node, connection, crowded)| Op::Crowd { node, connection, crowded }),
        1 => Just(Op::ReleaseAll),
        1 => (0i64..4).prop_map(|age| Op::Prune { age }),
    ]
}

/// Which node sends an update.
#[derive(Debug, Clone, Copy)]
enum By {
    /// The node the job is leased to (node 0 if none).
    Holder,
    Node(usize),
}

fn arb_by() -> impl Strategy<Value = By> {
    prop_oneof![3 => Just(By::Holder), 1 => (0..NODES).prop_map(By::Node)]
}

/// A queued job as the model sees it; times in ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelJob {
    batch_id: BatchId,
    connection_id: ConnectionId,
    revision_id: i64,
    progress: i64,
    attempts: i64,
    created_at: i64,
    next_attempt_at: i64,
    /// `None`: not leased (0 in the table).
    lease_until: Option<i64>,
    /// The node that last leased it; a release leaves it.
    leased_by: Option<usize>,
    last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelBatch {
    input_id: InputId,
    source_request_id: Option<String>,
    received_at: i64,
    body: Vec<u8>,
}

/// An attempt log entry: (job, connection, attempted at, outcome).
type ModelAttempt = (i64, ConnectionId, i64, String);
/// A dead letter: (job, batch, connection, payload index, created at).
type ModelLetter = (i64, BatchId, ConnectionId, i64, i64);

#[derive(Debug, Default)]
struct Model {
    /// Ticks since the store was opened.
    clock: i64,
    jobs: BTreeMap<i64, ModelJob>,
    /// Keys of jobs that left the queue, for late updates.
    gone: BTreeMap<i64, JobKey>,
    batches: BTreeMap<BatchId, ModelBatch>,
    attempts: Vec<ModelAttempt>,
    letters: Vec<ModelLetter>,
    crowded: [HashSet<String>; NODES],
    last_batch_id: i64,
    last_job_id: i64,
}

impl Model {
    /// A job to update: one still queued, or one already gone.
    fn pick(&self, pick: &Index) -> Option<JobKey> {
        let queued = self.jobs.iter().map(|(&id, job)| JobKey {
            id,
            batch_id: job.batch_id,
            connection_id: job.connection_id.clone(),
            mates: Vec::new(),
        });
        let keys: Vec<JobKey> = queued.chain(self.gone.values().cloned()).collect();
        (!keys.is_empty()).then(|| keys[pick.index(keys.len())].clone())
    }

    /// The node that sends an update of job `id`, and whether it still holds the job (only then
    /// does the update change it).
    fn sender(&self, id: i64, by: By) -> (usize, bool) {
        let holder = self.jobs.get(&id).and_then(|job| job.leased_by);
        let node = match by {
            By::Holder => holder.unwrap_or(0),
            By::Node(node) => node,
        };
        (node, holder == Some(node))
    }

    fn leave(&mut self, id: i64) {
        if let Some(job) = self.jobs.remove(&id) {
            let key = JobKey {
                id,
                batch_id: job.batch_id,
                connection_id: job.connection_id,
                mates: Vec::new(),
            };
            self.gone.insert(id, key);
        }
    }

    fn record(&mut self, job: &JobKey, outcome: &str, dead: i64) {
        let connection = job.connection_id.clone();
        self.attempts
            .push((job.id, connection.clone(), self.clock, outcome.to_owned()));
        for index in 0..dead {
            self.letters
                .push((job.id, job.batch_id, connection.clone(), index, self.clock));
        }
    }
}

/// The store, its nodes and the model, stepped together.
struct Runner {
    db: TestStore,
    nodes: Vec<Node>,
    model: Model,
    /// Each node's name on the leases it takes, learnt from its first lease.
    names: [Option<String>; NODES],
}

impl Runner {
    async fn start() -> Self {
        let db = TestStore::open().await;
        let nodes = (0..NODES).map(|_| db.node(LEASE)).collect();
        Self {
            db,
            nodes,
            model: Model::default(),
            names: Default::default(),
        }
    }

    /// A stored time that was set exactly to a tick (by the test), in ticks.
    fn exact(&self, stored: i64) -> Result<i64, TestCaseError> {
        let at = self.db.elapsed(stored);
        prop_assert_eq!(at.rem_euclid(TICK), 0, "{} is not on a tick", at);
        Ok(at.div_euclid(TICK))
    }

    /// A stored time the writer took from the wall clock, in ticks.
    fn wall(&self, stored: i64) -> i64 {
        self.db.elapsed(stored).div_euclid(TICK)
    }

    /// Notes that `node` leases as `name`.
    fn learn(&mut self, node: usize, name: Option<&String>) -> Result<(), TestCaseError> {
        let name = name.ok_or_else(|| TestCaseError::fail("a lease names no node"))?;
        match &self.names[node] {
            Some(known) => prop_assert_eq!(known, name, "node {} leases under two names", node),
            None => {
                prop_assert!(
                    !self.names.iter().flatten().any(|n| n == name),
                    "two nodes lease as {}",
                    name
                );
                self.names[node] = Some(name.clone());
            }
        }
        Ok(())
    }

    fn node_named(&self, name: &str) -> Result<usize, TestCaseError> {
        self.names
            .iter()
            .position(|n| n.as_deref() == Some(name))
            .ok_or_else(|| TestCaseError::fail(format!("a job is leased to unknown node {name}")))
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let drift = self.db.elapsed(now_ms()) - self.model.clock * TICK;
        prop_assert!(
            (0..TICK).contains(&drift),
            "the wall clock ran {} ms past the model's; the model needs less than a tick",
            drift
        );
        match op {
            Op::Ingest { node, batches } => self.ingest(*node, batches).await?,
            Op::Claim { node, limit, skip } => self.claim(*node, *limit, *skip).await?,
            Op::Finish { pick, by, dead } => {
                let Some(job) = self.model.pick(pick) else {
                    return Ok(());
                };
                let (node, holds) = self.model.sender(job.id, *by);
                let update = JobUpdate::Finished {
                    job: job.clone(),
                    attempt: attempt(
                        self.db.stored(self.model.clock * TICK),
                        AttemptOutcome::Delivered,
                        None,
                    ),
                    dead: (0..*dead).map(dead_letter).collect(),
                };
                self.nodes[node].update(update).await;
                if holds {
                    self.model.leave(job.id);
                }
                self.model.record(&job, "delivered", *dead);
            }
            Op::Retry {
                pick,
                by,
                progress,
                delay,
                dead,
            } => {
                let Some(job) = self.model.pick(pick) else {
                    return Ok(());
                };
                let (node, holds) = self.model.sender(job.id, *by);
                let clock = self.model.clock;
                let attempts = self.model.jobs.get(&job.id).map_or(1, |j| j.attempts + 1);
                let error = "status 503";
                let update = JobUpdate::Retry {
                    job: job.clone(),
                    progress: *progress,
                    attempts,
                    next_attempt_at: self.db.stored((clock + delay) * TICK),
                    attempt: attempt(
                        self.db.stored(clock * TICK),
                        AttemptOutcome::Retry,
                        Some(error),
                    ),
                    dead: (0..*dead).map(dead_letter).collect(),
                };
                self.nodes[node].update(update).await;
                if holds && let Some(queued) = self.model.jobs.get_mut(&job.id) {
                    queued.progress = *progress;
                    queued.attempts = attempts;
                    queued.next_attempt_at = clock + delay;
                    queued.lease_until = None;
                    queued.last_error = Some(error.to_owned());
                }
                self.model.record(&job, "retry", *dead);
            }
            Op::Release { pick, by } => {
                let Some(job) = self.model.pick(pick) else {
                    return Ok(());
                };
                let (node, holds) = self.model.sender(job.id, *by);
                self.nodes[node]
                    .update(JobUpdate::Release { job_id: job.id })
                    .await;
                if holds && let Some(queued) = self.model.jobs.get_mut(&job.id) {
                    queued.lease_until = None;
                }
            }
            Op::Renew { node, picks } => {
                let ids: Vec<i64> = picks
                    .iter()
                    .filter_map(|p| self.model.pick(p))
                    .map(|k| k.id)
                    .collect();
                let mut renewed = self.nodes[*node].renew(ids.clone()).await;
                let until = self.model.clock + LEASE_TICKS;
                let mut expected = Vec::new();
                for id in ids {
                    if let Some(job) = self.model.jobs.get_mut(&id)
                        && job.lease_until.is_some()
                        && job.leased_by == Some(*node)
                    {
                        job.lease_until = Some(until);
                        expected.push(id);
                    }
                }
                renewed.sort_unstable();
                renewed.dedup();
                expected.sort_unstable();
                expected.dedup();
                prop_assert_eq!(
                    renewed,
                    expected,
                    "the store renewed other jobs than the model"
                );
            }
            Op::Advance { ticks } => {
                self.db.advance(ticks * TICK).await;
                self.model.clock += ticks;
            }
            Op::Crowd {
                node,
                connection,
                crowded,
            } => {
                let connection = CONNECTIONS[*connection];
                self.nodes[*node].crowd(connection, *crowded);
                if *crowded {
                    self.model.crowded[*node].insert(connection.to_owned());
                } else {
                    self.model.crowded[*node].remove(connection);
                }
            }
            Op::ReleaseAll => {
                let released = self.db.store.release_all_leases().await.expect("release");
                let mut expected = 0;
                for job in self.model.jobs.values_mut() {
                    expected += u64::from(job.lease_until.take().is_some());
                }
                prop_assert_eq!(released, expected, "leases released");
            }
            Op::Prune { age } => {
                let cutoff = self.model.clock - age;
                let deleted = self
                    .db
                    .store
                    .prune(self.db.stored(cutoff * TICK))
                    .await
                    .expect("prune");
                let model = &mut self.model;
                let before = model.attempts.len() + model.letters.len() + model.batches.len();
                model.attempts.retain(|a| a.2 >= cutoff);
                model.letters.retain(|l| l.4 >= cutoff);
                // Every batch from the oldest one a queued job needs on is kept.
                let needed = model.jobs.values().map(|j| j.batch_id).min();
                let needed = needed.unwrap_or(BatchId::new(i64::MAX));
                model
                    .batches
                    .retain(|&id, b| b.received_at >= cutoff || id >= needed);
                let after = model.attempts.len() + model.letters.len() + model.batches.len();
                prop_assert_eq!(deleted, u64::try_from(before - after).unwrap_or(0));
            }
        }
        Ok(())
    }

    async fn ingest(&mut self, node: usize, specs: &[BatchSpec]) -> Result<(), TestCaseError> {
        let clock = self.model.clock;
        let batches: Vec<_> = specs
            .iter()
            .map(|spec| {
                let request = spec.request.map(|r| format!("r{r}"));
                let routes: Vec<&str> = CONNECTIONS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| spec.routes & (1 << i) != 0)
                    .map(|(_, &c)| c)
                    .collect();
                let at = self.db.stored((clock - spec.age) * TICK);
                batch(INPUTS[spec.input], request.as_deref(), at, &routes)
            })
            .collect();
        let outcomes = self.nodes[node].ingest(batches.clone()).await;
        prop_assert_eq!(outcomes.len(), batches.len());

        // Which batches the model expects stored, and the jobs they bring:
        // (batch, connection) -> (revision, created at).
        let mut expected = BTreeMap::new();
        for ((spec, batch), outcome) in specs.iter().zip(&batches).zip(outcomes) {
            let duplicate = batch.source_request_id.is_some()
                && self.model.batches.values().any(|b| {
                    b.input_id == batch.input_id && b.source_request_id == batch.source_request_id
                });
            match outcome {
                IngestOutcome::Duplicate => {
                    prop_assert!(duplicate, "{:?} taken for a duplicate", batch)
                }
                IngestOutcome::Stored { batch_id } => {
                    prop_assert!(!duplicate, "duplicate {:?} stored", batch);
                    prop_assert!(
                        batch_id.get() > self.model.last_batch_id,
                        "batch id {} reused",
                        batch_id
                    );
                    self.model.last_batch_id = batch_id.get();
                    let received_at = clock - spec.age;
                    for job in &batch.jobs {
                        expected.insert(
                            (batch_id, job.connection_id.clone()),
                            (job.revision_id, received_at),
                        );
                    }
                    self.model.batches.insert(
                        batch_id,
                        ModelBatch {
                            input_id: batch.input_id.clone(),
                            source_request_id: batch.source_request_id.clone(),
                            received_at,
                            body: batch.body.to_vec(),
                        },
                    );
                }
            }
        }

        // The new rows are the jobs of the stored batches: leased to this node, except those of
        // its crowded connections. Job ids grow, so the new rows are those above every id seen
        // before (a reused id would show up as a job missing here).
        let rows = self.db.jobs().await;
        let new: Vec<&JobRow> = rows
            .iter()
            .filter(|r| r.id > self.model.last_job_id)
            .collect();
        let mut found: Vec<(BatchId, ConnectionId)> = new
            .iter()
            .map(|r| (r.batch_id, r.connection_id.clone()))
            .collect();
        found.sort();
        prop_assert_eq!(&found, &expected.keys().cloned().collect::<Vec<_>>());
        let mut leased = Vec::new();
        for row in new {
            let (revision_id, created_at) = expected[&(row.batch_id, row.connection_id.clone())];
            let crowded = self.model.crowded[node].contains(row.connection_id.as_str());
            if !crowded {
                self.learn(node, row.leased_by.as_ref())?;
                leased.push(row.id);
            }
            let job = ModelJob {
                batch_id: row.batch_id,
                connection_id: row.connection_id.clone(),
                revision_id,
                progress: 0,
                attempts: 0,
                created_at,
                next_attempt_at: created_at,
                lease_until: (!crowded).then_some(clock + LEASE_TICKS),
                leased_by: (!crowded).then_some(node),
                last_error: None,
            };
            self.model.jobs.insert(row.id, job);
            self.model.last_job_id = row.id;
        }

        // Delivery is handed the leased ones, with their bodies.
        let handed = self.nodes[node].handed_over();
        let mut handed_ids: Vec<i64> = handed.iter().map(|j| j.id).collect();
        handed_ids.sort_unstable();
        prop_assert_eq!(handed_ids, leased);
        for job in handed {
            let queued = &self.model.jobs[&job.id];
            prop_assert_eq!(
                (job.batch_id, &job.connection_id, job.revision_id),
                (queued.batch_id, &queued.connection_id, queued.revision_id)
            );
            prop_assert_eq!((job.progress, job.attempts), (0, 0));
            prop_assert_eq!(self.exact(job.created_at)?, queued.created_at);
            prop_assert_eq!(&*job.body, &self.model.batches[&job.batch_id].body[..]);
        }
        Ok(())
    }

    async fn claim(&mut self, node: usize, limit: i64, skip: u8) -> Result<(), TestCaseError> {
        let skip: Vec<&str> = CONNECTIONS
            .iter()
            .enumerate()
            .filter(|(i, _)| skip & (1 << i) != 0)
            .map(|(_, &c)| c)
            .collect();
        let claimed = self.nodes[node].claim(limit, &skip).await;
        let clock = self.model.clock;
        let eligible: BTreeMap<i64, &ModelJob> = self
            .model
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.next_attempt_at <= clock
                    && j.lease_until.is_none_or(|until| until <= clock)
                    && !skip.contains(&j.connection_id.as_str())
            })
            .map(|(&id, j)| (id, j))
            .collect();
        let wanted = usize::try_from(limit).unwrap_or(0).min(eligible.len());
        prop_assert_eq!(
            claimed.len(),
            wanted,
            "claimed {:?} of {:?}",
            claimed,
            eligible
        );
        let mut ids = HashSet::new();
        for job in &claimed {
            prop_assert!(ids.insert(job.id), "job {} claimed twice", job.id);
            let Some(queued) = eligible.get(&job.id) else {
                return Err(TestCaseError::fail(format!(
                    "claimed job {} is not due and free: {:?}",
                    job.id,
                    self.model.jobs.get(&job.id)
                )));
            };
            prop_assert_eq!(
                (job.batch_id, &job.connection_id, job.revision_id),
                (queued.batch_id, &queued.connection_id, queued.revision_id)
            );
            prop_assert_eq!(
                (job.progress, job.attempts),
                (queued.progress, queued.attempts)
            );
            prop_assert_eq!(self.exact(job.created_at)?, queued.created_at);
        }
        // Claims go oldest due first: nothing left behind is due earlier than what was taken.
        let latest = claimed
            .iter()
            .map(|j| eligible[&j.id].next_attempt_at)
            .max();
        if let Some(latest) = latest {
            for (id, job) in &eligible {
                prop_assert!(
                    ids.contains(id) || job.next_attempt_at >= latest,
                    "job {} due at {} left while one due at {} was claimed",
                    id,
                    job.next_attempt_at,
                    latest
                );
            }
        }
        for id in &ids {
            let job = self
                .model
                .jobs
                .get_mut(id)
                .expect("claimed job is modelled");
            job.lease_until = Some(clock + LEASE_TICKS);
            job.leased_by = Some(node);
        }
        let rows = self.db.jobs().await;
        for row in rows.iter().filter(|r| ids.contains(&r.id)) {
            self.learn(node, row.leased_by.as_ref())?;
        }
        Ok(())
    }

    /// Every row of the queue's tables, as the model has them.
    async fn compare(&self) -> Result<(), TestCaseError> {
        let mut jobs = BTreeMap::new();
        for row in self.db.jobs().await {
            let leased_by = match &row.leased_by {
                Some(name) => Some(self.node_named(name)?),
                None => None,
            };
            let job = ModelJob {
                batch_id: row.batch_id,
                connection_id: row.connection_id.clone(),
                revision_id: row.revision_id,
                progress: row.progress,
                attempts: row.attempts,
                created_at: self.exact(row.created_at)?,
                next_attempt_at: self.exact(row.next_attempt_at)?,
                lease_until: (row.lease_until != 0).then(|| self.wall(row.lease_until)),
                leased_by,
                last_error: row.last_error.clone(),
            };
            jobs.insert(row.id, job);
        }
        prop_assert_eq!(
            &jobs,
            &self.model.jobs,
            "jobs (left: the store, right: the model)"
        );

        let mut batches = BTreeMap::new();
        for row in self.db.batches().await {
            prop_assert_eq!(row.event_count, EVENTS);
            let batch = ModelBatch {
                input_id: row.input_id,
                source_request_id: row.source_request_id,
                received_at: self.exact(row.received_at)?,
                body: row.body,
            };
            batches.insert(row.id, batch);
        }
        prop_assert_eq!(&batches, &self.model.batches, "batches (left: the store)");
        for (id, job) in &jobs {
            prop_assert!(
                batches.contains_key(&job.batch_id),
                "job {} lost its batch {}",
                id,
                job.batch_id
            );
        }

        let mut attempts = Vec::new();
        for row in self.db.attempts().await {
            let at = self.exact(row.attempted_at)?;
            attempts.push((row.job_id, row.connection_id, at, row.outcome));
        }
        prop_assert_eq!(
            &attempts,
            &self.model.attempts,
            "attempts (left: the store)"
        );

        let letters: Vec<ModelLetter> = self
            .db
            .dead_letters()
            .await
            .into_iter()
            .map(|l| {
                let at = self.wall(l.created_at);
                (l.job_id, l.batch_id, l.connection_id, l.payload_index, at)
            })
            .collect();
        prop_assert_eq!(
            &letters,
            &self.model.letters,
            "dead letters (left: the store)"
        );

        let (count, oldest) = self.db.store.queue_stats().await.expect("queue stats");
        let oldest = oldest.map(|at| self.exact(at)).transpose()?;
        let expected_count = i64::try_from(self.model.jobs.len()).unwrap_or(i64::MAX);
        let expected_oldest = self.model.jobs.values().map(|j| j.created_at).min();
        prop_assert_eq!(
            (count, oldest),
            (expected_count, expected_oldest),
            "queue stats"
        );
        Ok(())
    }
}

/// Runs one case on a fresh store.
fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut runner = Runner::start().await;
        for (step, op) in ops.iter().enumerate() {
            let checked = match runner.step(op).await {
                Ok(()) => runner.compare().await,
                failed => failed,
            };
            checked.map_err(|e| TestCaseError::fail(format!("step {step}, {op:?}: {e}")))?;
        }
        Ok(())
    })
}

/// Few cases, so the suite stays fast; fewer on PostgreSQL, where each case creates a database.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok());
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|v| v.parse().ok());
    ProptestConfig {
        cases: cases.unwrap_or(if on_postgres() { 16 } else { 48 }),
        rng_seed: RngSeed::Fixed(seed.unwrap_or(0x5eed_b050)),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_queue_behaves_like_its_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}
