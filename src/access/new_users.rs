//! Caps on the users IDSync may create for callers who hold only a public key. An identify with
//! a device id never seen before creates a user, and anyone can make up device ids: without a
//! cap, one script fills the users table. Two fixed windows bound it: users created per input
//! (everyone's budget, so a flood cannot grow the table faster than the cap) and users created
//! per client address (so one flooding host uses up its own budget long before the input's).
//!
//! Counts live in this node's memory, like the sign-in throttle's: N nodes allow N times the
//! cap, and behind a reverse proxy every client has the proxy's address (then set the per-client
//! cap to 0, which turns it off, and rely on the per-input one).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::throttle::Client;

/// Client windows remembered at most; past this, ended windows are dropped, and if none has
/// ended, the oldest. A flood from many addresses cannot grow the table.
const MAX_CLIENTS: usize = 10_000;

/// The caps, per window; 0 means no cap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewUserCaps {
    pub(crate) per_input: u32,
    pub(crate) per_client: u32,
    pub(crate) window: Duration,
}

/// Which cap a creation ran into, and when its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CapReached {
    Input { retry_after: Duration },
    Client { retry_after: Duration },
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    count: u32,
}

impl Window {
    fn current(self, now: Instant, length: Duration) -> Self {
        if now.saturating_duration_since(self.started) >= length {
            Window {
                started: now,
                count: 0,
            }
        } else {
            self
        }
    }
}

/// The windows of every input and client (pure: the time is given).
#[derive(Debug, Default)]
pub(crate) struct Windows {
    inputs: HashMap<String, Window>,
    clients: HashMap<Client, Window>,
}

impl Windows {
    /// Counts one new user for `input` and `client`, unless either is at its cap.
    pub(crate) fn take(
        &mut self,
        caps: NewUserCaps,
        input: &str,
        client: Client,
        now: Instant,
    ) -> Result<(), CapReached> {
        let fresh = Window {
            started: now,
            count: 0,
        };
        let input_window = self
            .inputs
            .get(input)
            .map_or(fresh, |w| w.current(now, caps.window));
        let client_window = self
            .clients
            .get(&client)
            .map_or(fresh, |w| w.current(now, caps.window));
        let retry_after = |w: Window| (w.started + caps.window).saturating_duration_since(now);
        if caps.per_input > 0 && input_window.count >= caps.per_input {
            let retry_after = retry_after(input_window);
            return Err(CapReached::Input { retry_after });
        }
        if caps.per_client > 0 && client_window.count >= caps.per_client {
            let retry_after = retry_after(client_window);
            return Err(CapReached::Client { retry_after });
        }
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            self.make_room(now, caps.window);
        }
        let counted = |w: Window| Window {
            count: w.count + 1,
            ..w
        };
        self.inputs.insert(input.to_owned(), counted(input_window));
        self.clients.insert(client, counted(client_window));
        Ok(())
    }

    fn make_room(&mut self, now: Instant, length: Duration) {
        self.clients
            .retain(|_, w| now.saturating_duration_since(w.started) < length);
        if self.clients.len() >= MAX_CLIENTS {
            let oldest = self
                .clients
                .iter()
                .min_by_key(|(_, w)| w.started)
                .map(|(client, _)| *client);
            if let Some(client) = oldest {
                self.clients.remove(&client);
            }
        }
    }
}

/// [`Windows`] shared by one node's IDSync handlers, with the configured caps.
#[derive(Debug)]
pub(crate) struct NewUserLimits {
    caps: NewUserCaps,
    windows: Mutex<Windows>,
}

impl NewUserLimits {
    pub(crate) fn new(caps: NewUserCaps) -> Self {
        Self {
            caps,
            windows: Mutex::default(),
        }
    }

    /// Counts one new user, unless a cap is reached.
    pub(crate) fn take(&self, input: &str, client: Client) -> Result<(), CapReached> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        windows.take(self.caps, input, client, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Client = Client::V4([192, 0, 2, 1]);
    const B: Client = Client::V4([192, 0, 2, 2]);
    const MINUTE: Duration = Duration::from_secs(60);

    fn caps(per_input: u32, per_client: u32) -> NewUserCaps {
        NewUserCaps {
            per_input,
            per_client,
            window: MINUTE,
        }
    }

    #[test]
    fn a_client_is_capped_within_its_window_and_others_are_not() {
        let mut windows = Windows::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(windows.take(caps(0, 3), "in", A, t0), Ok(()));
        }
        let later = t0 + Duration::from_secs(20);
        assert_eq!(
            windows.take(caps(0, 3), "in", A, later),
            Err(CapReached::Client {
                retry_after: Duration::from_secs(40)
            })
        );
        assert_eq!(windows.take(caps(0, 3), "in", B, later), Ok(()));
        assert_eq!(
            windows.take(caps(0, 3), "in", A, t0 + MINUTE),
            Ok(()),
            "a new window"
        );
    }

    #[test]
    fn an_input_is_capped_whoever_asks() {
        let mut windows = Windows::default();
        let t0 = Instant::now();
        for i in 0..5u8 {
            let client = Client::V4([198, 51, 100, i]);
            assert_eq!(windows.take(caps(5, 0), "in", client, t0), Ok(()));
        }
        assert!(matches!(
            windows.take(caps(5, 0), "in", B, t0),
            Err(CapReached::Input { .. })
        ));
        assert_eq!(windows.take(caps(5, 0), "other", B, t0), Ok(()));
    }

    #[test]
    fn a_refused_creation_is_not_counted() {
        let mut windows = Windows::default();
        let t0 = Instant::now();
        assert_eq!(windows.take(caps(2, 1), "in", A, t0), Ok(()));
        assert!(windows.take(caps(2, 1), "in", A, t0).is_err());
        assert_eq!(
            windows.take(caps(2, 1), "in", B, t0),
            Ok(()),
            "the input had room"
        );
    }

    #[test]
    fn zero_means_no_cap_and_the_client_table_stays_bounded() {
        let mut windows = Windows::default();
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 + 10) {
            let client = Client::V4(i.to_be_bytes());
            assert_eq!(windows.take(caps(0, 0), "in", client, t0), Ok(()));
        }
        assert_eq!(windows.clients.len(), MAX_CLIENTS);
    }
}
