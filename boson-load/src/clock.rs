//! Wall-clock timestamps shared by the sender and the receiver.
//!
//! Latency is measured across the sender → Boson → receiver path using Unix
//! epoch microseconds carried inside the events, so both ends must read the
//! same clock: the system clock (both ends live in this one process).

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch (0 if the clock is before 1970).
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
