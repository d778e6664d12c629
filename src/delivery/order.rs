//! Per-user ordering inside one lane (a connection whose `ordering` is `per_user`).
//!
//! The store keeps the rule between nodes and across restarts: a claim never takes a job whose
//! user has an earlier job of the connection still in the table, and a new job behind such a
//! job is not leased at insert (see `store::steps`). What it cannot see is one group commit's
//! jobs of the same user, which are all leased to this node and handed to the lane together.
//! [`UserTurns`] orders those: one job per user goes at a time, the others wait here in job id
//! (acceptance) order. When the job in flight is finished (delivered or dead-lettered) the next
//! one goes; when it is to be retried or was released, the ones behind it are released too, and
//! the claims bring them back in order once it is done.
//!
//! Pure bookkeeping, generic over what waits, so it is tested without a lane.

use std::collections::{BTreeMap, HashMap};

use crate::model::ids::Mpid;

/// The users of one lane with a job in flight, and the jobs that wait behind each.
#[derive(Debug)]
pub(super) struct UserTurns<T> {
    users: HashMap<Mpid, Turn<T>>,
}

#[derive(Debug)]
struct Turn<T> {
    /// The job whose turn it is (in flight, or queued again to go next).
    head: i64,
    /// Later jobs of the user, by id.
    waiting: BTreeMap<i64, T>,
}

/// What follows from a user's job ending.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next<T> {
    /// Nothing waits (or the job was not the user's turn).
    Nothing,
    /// The next job of the user: its turn now.
    Go(T),
    /// The jobs that waited: the user's earlier job is still pending, so they go back to the
    /// table.
    Release(Vec<T>),
}

impl<T> Default for UserTurns<T> {
    fn default() -> Self {
        Self {
            users: HashMap::new(),
        }
    }
}

impl<T> UserTurns<T> {
    /// A job of `mpid` taken off the lane: `Some` if it may go now (the user has no other job
    /// here, or its turn has come), `None` if it waits behind the user's job in flight.
    pub(super) fn admit(&mut self, mpid: Mpid, id: i64, job: T) -> Option<T> {
        let turn = self.users.entry(mpid).or_insert_with(|| Turn {
            head: id,
            waiting: BTreeMap::new(),
        });
        if turn.head == id {
            Some(job)
        } else {
            turn.waiting.insert(id, job);
            None
        }
    }

    /// The user's job `id` ended: `finished` (it left the queue) lets the next one go; else
    /// the waiting ones are given back.
    pub(super) fn ended(&mut self, mpid: Mpid, id: i64, finished: bool) -> Next<T> {
        let Some(turn) = self.users.get_mut(&mpid) else {
            return Next::Nothing;
        };
        if turn.head != id {
            return Next::Nothing;
        }
        if finished && let Some((next, job)) = turn.waiting.pop_first() {
            turn.head = next;
            return Next::Go(job);
        }
        let waiting: Vec<T> = self
            .users
            .remove(&mpid)
            .map(|turn| turn.waiting.into_values().collect())
            .unwrap_or_default();
        if waiting.is_empty() {
            Next::Nothing
        } else {
            Next::Release(waiting)
        }
    }

    /// Users with a job here (for tests and checks).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.users.len()
    }
}

/// The users whose job left a lane unworked (given back to the table, or lost to another node)
/// while later jobs of theirs may still wait in the lane's queue, not yet admitted to
/// [`UserTurns`]: those must leave too, or they would go before it. Only the jobs queued when it
/// left can be such jobs (later offers are claims, which the store orders, or the next group's
/// jobs, which the store does not lease behind a pending job), so the fence counts them down and
/// is gone once they have been taken.
#[derive(Debug, Default)]
pub(super) struct Fence {
    /// Per user, the lowest id of a job that left.
    users: HashMap<Mpid, i64>,
    /// How many of the jobs taken off the queue from now on were queued when one left.
    queued: usize,
}

impl Fence {
    /// User `mpid`'s job `id` left the lane unworked while `queued` jobs waited in its queue.
    pub(super) fn left(&mut self, mpid: Mpid, id: i64, queued: usize) {
        if queued == 0 {
            return;
        }
        let floor = self.users.entry(mpid).or_insert(id);
        *floor = (*floor).min(id);
        // The queue is first in, first out: what was queued at an earlier leave is a prefix of
        // what is queued now.
        self.queued = self.queued.max(queued);
    }

    /// A job taken off the queue: whether it must leave too (its user's earlier job left).
    pub(super) fn holds_back(&mut self, mpid: Option<Mpid>, id: i64) -> bool {
        if self.queued == 0 {
            return false;
        }
        self.queued -= 1;
        let held = mpid
            .and_then(|mpid| self.users.get(&mpid))
            .is_some_and(|floor| id > *floor);
        if self.queued == 0 {
            self.users.clear();
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ADA: Mpid = Mpid::new(1);
    const BOB: Mpid = Mpid::new(2);

    #[test]
    fn one_job_per_user_goes_and_the_rest_follow_in_id_order() {
        let mut turns = UserTurns::default();
        assert_eq!(turns.admit(ADA, 10, "a10"), Some("a10"));
        assert_eq!(
            turns.admit(BOB, 11, "b11"),
            Some("b11"),
            "users are independent"
        );
        assert_eq!(turns.admit(ADA, 14, "a14"), None);
        assert_eq!(turns.admit(ADA, 12, "a12"), None);
        assert_eq!(turns.ended(ADA, 10, true), Next::Go("a12"));
        // The next one comes back through the lane: its turn, so it goes.
        assert_eq!(turns.admit(ADA, 12, "a12"), Some("a12"));
        assert_eq!(turns.ended(ADA, 12, true), Next::Go("a14"));
        assert_eq!(turns.admit(ADA, 14, "a14"), Some("a14"));
        assert_eq!(turns.ended(ADA, 14, true), Next::Nothing);
        assert_eq!(turns.ended(BOB, 11, true), Next::Nothing);
        assert_eq!(turns.len(), 0);
    }

    #[test]
    fn a_retry_gives_back_every_job_behind_it() {
        let mut turns = UserTurns::default();
        assert_eq!(turns.admit(ADA, 1, 1), Some(1));
        assert_eq!(turns.admit(ADA, 3, 3), None);
        assert_eq!(turns.admit(ADA, 2, 2), None);
        assert_eq!(turns.ended(ADA, 1, false), Next::Release(vec![2, 3]));
        assert_eq!(turns.len(), 0);
        // A job that was not the user's turn ending changes nothing.
        assert_eq!(turns.admit(ADA, 5, 5), Some(5));
        assert_eq!(turns.ended(ADA, 4, false), Next::Nothing);
        assert_eq!(turns.admit(ADA, 6, 6), None);
    }

    #[test]
    fn a_fence_holds_back_the_later_jobs_queued_when_a_user_job_left() {
        let mut fence = Fence::default();
        assert!(!fence.holds_back(Some(ADA), 5), "no fence yet");
        // Ada's job 3 leaves with three jobs queued behind it: 4 (Bob's), 6 (Ada's) and 2
        // (Ada's, earlier: it may go).
        fence.left(ADA, 3, 3);
        assert!(!fence.holds_back(Some(BOB), 4));
        assert!(fence.holds_back(Some(ADA), 6));
        assert!(!fence.holds_back(Some(ADA), 2));
        // The jobs queued then are all taken: a later one of Ada (a claim) goes.
        assert!(!fence.holds_back(Some(ADA), 9));
        assert!(!fence.holds_back(None, 10));
    }

    #[test]
    fn a_fence_lasts_until_the_longest_queue_it_saw_is_taken() {
        let mut fence = Fence::default();
        fence.left(ADA, 3, 1);
        fence.left(BOB, 4, 2);
        fence.left(ADA, 1, 0);
        assert!(fence.holds_back(Some(BOB), 7));
        assert!(fence.holds_back(Some(ADA), 8));
        assert!(!fence.holds_back(Some(BOB), 9));
    }

    proptest! {
        /// However jobs arrive and end, a user never has two jobs going at once, and its jobs
        /// go in id order among those that arrived before the earlier ones ended.
        #[test]
        fn never_two_of_one_user_at_once(ids in proptest::collection::btree_set(0i64..1000, 1..30)) {
            let mut arrival: Vec<i64> = ids.iter().copied().collect();
            arrival.reverse();
            let mut turns = UserTurns::default();
            let mut going: Vec<i64> = Vec::new();
            for id in &arrival {
                if let Some(id) = turns.admit(ADA, *id, *id) {
                    going.push(id);
                }
            }
            prop_assert_eq!(going.len(), 1);
            let mut order = Vec::new();
            while let Some(id) = going.pop() {
                order.push(id);
                match turns.ended(ADA, id, true) {
                    Next::Go(next) => going.extend(turns.admit(ADA, next, next)),
                    Next::Nothing => {}
                    Next::Release(_) => prop_assert!(false, "nothing was retried"),
                }
            }
            prop_assert_eq!(order.len(), ids.len());
            // The first to arrive went first; the rest in id order.
            prop_assert!(order[1..].windows(2).all(|w| w[0] < w[1]));
        }
    }
}
