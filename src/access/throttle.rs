//! Sign-in throttling: a client that keeps giving the wrong admin token waits longer and longer
//! before it may try again. A few failures are free (typos); each one after that doubles the
//! wait, up to a cap. A right token after the wait clears the client's record.
//!
//! Clients are told apart by IP address (IPv6 by its /64, which one host usually owns whole).
//! The records live in this node's memory: they are lost on restart and not shared between
//! nodes, so N nodes allow N times the attempts; with a token of at least 16 characters that
//! still leaves guessing hopeless. Behind a reverse proxy every client has the proxy's address
//! and shares one record, so a guesser slows everyone's sign-in (never the admin API's token).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Wrong sign-ins a client may make before it has to wait.
pub(crate) const FREE_FAILURES: u32 = 5;
/// The wait after the first failure past the free ones; it doubles with each further one.
pub(crate) const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(300);
/// A client with no failure for this long starts over.
const FORGET_AFTER: Duration = Duration::from_secs(900);
/// Clients remembered at most; past this the stalest record is dropped, so the table stays
/// bounded whatever the number of addresses a guesser has.
const MAX_CLIENTS: usize = 10_000;

/// Who a sign-in comes from, as far as throttling is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6Prefix([u8; 8]),
    /// The address is not known (a request that did not come through the listener).
    Unknown,
}

impl Client {
    pub(crate) fn of(ip: Option<IpAddr>) -> Self {
        match ip.map(canonical) {
            Some(IpAddr::V4(v4)) => Client::V4(v4.octets()),
            Some(IpAddr::V6(v6)) => {
                let mut prefix = [0; 8];
                prefix.copy_from_slice(&v6.octets()[..8]);
                Client::V6Prefix(prefix)
            }
            None => Client::Unknown,
        }
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack listener's view of an IPv4 client) as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    last_failure: Instant,
}

impl Record {
    /// When the client may try again.
    fn free_at(self) -> Instant {
        self.last_failure + wait_after(self.failures)
    }
}

/// How long a client waits after its `failures`-th consecutive wrong sign-in.
pub(crate) fn wait_after(failures: u32) -> Duration {
    let Some(past_free) = failures.checked_sub(FREE_FAILURES).filter(|n| *n > 0) else {
        return Duration::ZERO;
    };
    // 2^(n-1) seconds; the shift is capped so it cannot overflow before the cap applies.
    let doublings = (past_free - 1).min(20);
    FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT)
}

/// The failure records of every client (pure: the time is given), for unit tests and for
/// [`LoginThrottle`], which wraps it in a lock.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    records: HashMap<Client, Record>,
}

impl Throttle {
    /// `Err(wait)` when the client must wait before its next attempt.
    pub(crate) fn check(&self, client: Client, now: Instant) -> Result<(), Duration> {
        match self.records.get(&client) {
            Some(record) if record.free_at() > now => Err(record.free_at() - now),
            _ => Ok(()),
        }
    }

    /// Records a wrong sign-in.
    pub(crate) fn failed(&mut self, client: Client, now: Instant) {
        if !self.records.contains_key(&client) && self.records.len() >= MAX_CLIENTS {
            self.make_room(now);
        }
        let record = self.records.entry(client).or_insert(Record {
            failures: 0,
            last_failure: now,
        });
        if now.saturating_duration_since(record.last_failure) > FORGET_AFTER {
            record.failures = 0;
        }
        record.failures = record.failures.saturating_add(1);
        record.last_failure = now;
    }

    /// Forgets a client's failures after a right sign-in.
    pub(crate) fn succeeded(&mut self, client: Client) {
        self.records.remove(&client);
    }

    /// Drops forgotten records, or if none, the stalest one.
    fn make_room(&mut self, now: Instant) {
        self.records
            .retain(|_, r| now.saturating_duration_since(r.last_failure) <= FORGET_AFTER);
        if self.records.len() >= MAX_CLIENTS {
            let stalest = self
                .records
                .iter()
                .min_by_key(|(_, r)| r.last_failure)
                .map(|(client, _)| *client);
            if let Some(client) = stalest {
                self.records.remove(&client);
            }
        }
    }
}

/// [`Throttle`] shared by the sign-in handler of one node.
#[derive(Debug, Default)]
pub(crate) struct LoginThrottle {
    inner: Mutex<Throttle>,
}

impl LoginThrottle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Throttle> {
        // The records stay consistent whatever panicked while holding the lock.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `Err(wait)` when the client must wait before its next attempt.
    pub(crate) fn check(&self, client: Client) -> Result<(), Duration> {
        self.lock().check(client, Instant::now())
    }

    pub(crate) fn failed(&self, client: Client) {
        self.lock().failed(client, Instant::now());
    }

    pub(crate) fn succeeded(&self, client: Client) {
        self.lock().succeeded(client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Client = Client::V4([192, 0, 2, 1]);
    const B: Client = Client::V4([192, 0, 2, 2]);

    #[test]
    fn the_wait_doubles_after_the_free_failures_up_to_the_cap() {
        let waits: Vec<u64> = (1..=16).map(|n| wait_after(n).as_secs()).collect();
        assert_eq!(
            waits,
            [0, 0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
        );
        assert_eq!(wait_after(u32::MAX), MAX_WAIT);
    }

    #[test]
    fn a_client_waits_after_its_failures_and_others_do_not() {
        let mut throttle = Throttle::default();
        let t0 = Instant::now();
        for _ in 0..FREE_FAILURES {
            throttle.failed(A, t0);
            assert_eq!(throttle.check(A, t0), Ok(()));
        }
        throttle.failed(A, t0);
        assert_eq!(throttle.check(A, t0), Err(Duration::from_secs(1)));
        assert_eq!(throttle.check(B, t0), Ok(()));
        let later = t0 + Duration::from_secs(1);
        assert_eq!(throttle.check(A, later), Ok(()));
        throttle.failed(A, later);
        assert_eq!(throttle.check(A, later), Err(Duration::from_secs(2)));
        throttle.succeeded(A);
        assert_eq!(throttle.check(A, later), Ok(()));
    }

    #[test]
    fn failures_long_past_are_forgotten() {
        let mut throttle = Throttle::default();
        let t0 = Instant::now();
        for _ in 0..=FREE_FAILURES {
            throttle.failed(A, t0);
        }
        let much_later = t0 + FORGET_AFTER + Duration::from_secs(1);
        throttle.failed(A, much_later);
        assert_eq!(
            throttle.check(A, much_later),
            Ok(()),
            "counted from one again"
        );
    }

    #[test]
    fn the_table_stays_bounded() {
        let mut throttle = Throttle::default();
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 + 10) {
            throttle.failed(
                Client::V4(i.to_be_bytes()),
                t0 + Duration::from_millis(i.into()),
            );
        }
        assert_eq!(throttle.records.len(), MAX_CLIENTS);
    }

    #[test]
    fn ipv6_clients_are_told_apart_by_their_64_bit_prefix() {
        let ip = |s: &str| Client::of(Some(s.parse().unwrap()));
        assert_eq!(ip("2001:db8:1:2::1"), ip("2001:db8:1:2:ffff::9"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), A);
    }
}
