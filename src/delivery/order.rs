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

/// The users whose job left a lane unworked (given back to the table, lost to another node, or
/// turned away by the breaker) while later jobs of theirs from the same hand-off may still be on
/// their way through the lane's queue, not yet admitted to [`UserTurns`]: those must leave too,
/// or they would go before it. The writer hands a group's jobs over one by one, so the lane may
/// not have them all yet when one leaves; the hand-off they came in tells them apart. Jobs of
/// other hand-offs need no fence: a claim is ordered by the store, and a later group's job is
/// not handed over behind a pending job of its user.
#[derive(Debug, Default)]
pub(super) struct Fence {
    /// Per user, the hand-off of the job that left, and the lowest id that left in it.
    users: HashMap<Mpid, (u64, i64)>,
}

impl Fence {
    /// User `mpid`'s job `id`, handed over in `handoff` (`None`: claimed), left the lane unworked.
    pub(super) fn left(&mut self, mpid: Mpid, id: i64, handoff: Option<u64>) {
        let Some(handoff) = handoff else {
            return;
        };
        let fence = self.users.entry(mpid).or_insert((handoff, id));
        *fence = if fence.0 == handoff {
            (handoff, fence.1.min(id))
        } else {
            (handoff, id)
        };
    }

    /// A job taken off the queue: whether it must leave too (an earlier job of its user from
    /// the same hand-off left).
    pub(super) fn holds_back(&mut self, mpid: Option<Mpid>, id: i64, handoff: Option<u64>) -> bool {
        let Some(handoff) = handoff else {
            return false;
        };
        if self.users.is_empty() {
            return false;
        }
        // Hand-offs reach the lane in order: an earlier one's jobs have all been taken.
        self.users.retain(|_, (left_in, _)| *left_in >= handoff);
        mpid.and_then(|mpid| self.users.get(&mpid))
            .is_some_and(|&(left_in, floor)| left_in == handoff && id > floor)
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
    fn a_fence_holds_back_the_later_jobs_of_the_same_hand_off() {
        let mut fence = Fence::default();
        assert!(!fence.holds_back(Some(ADA), 5, Some(1)), "no fence yet");
        // Ada's job 3 of hand-off 1 leaves.
        fence.left(ADA, 3, Some(1));
        assert!(!fence.holds_back(Some(BOB), 4, Some(1)), "another user");
        assert!(fence.holds_back(Some(ADA), 6, Some(1)), "behind it");
        assert!(!fence.holds_back(Some(ADA), 2, Some(1)), "before it");
        assert!(
            !fence.holds_back(Some(ADA), 7, None),
            "claimed: the store ordered it"
        );
        assert!(!fence.holds_back(None, 8, Some(1)), "no user");
        // A later hand-off reached the lane: Ada's next job there goes, and the fence is gone.
        assert!(!fence.holds_back(Some(ADA), 9, Some(2)));
        assert!(!fence.holds_back(Some(ADA), 6, Some(1)));
    }

    #[test]
    fn a_fence_keeps_the_lowest_job_that_left_in_a_hand_off() {
        let mut fence = Fence::default();
        fence.left(ADA, 5, Some(1));
        fence.left(ADA, 3, Some(1));
        assert!(fence.holds_back(Some(ADA), 4, Some(1)));
        // A claimed job leaving sets no fence.
        fence.left(BOB, 3, None);
        assert!(!fence.holds_back(Some(BOB), 4, Some(1)));
        // A job of a later hand-off leaving replaces the user's fence.
        fence.left(ADA, 10, Some(2));
        assert!(!fence.holds_back(Some(ADA), 4, Some(1)));
        assert!(fence.holds_back(Some(ADA), 11, Some(2)));
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
