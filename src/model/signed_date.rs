//! The `Date` header the mobile SDKs sign (spec `sdk-wire.md` §2.2, §3.2), read so that a signed
//! upload can be refused when its date is too far from the server's clock. Pure.
//!
//! iOS sends GMT (`Sat, 21 Nov 2026 10:00:00 GMT`). Android formats the device's local time and
//! names its zone (`EEE, dd MMM yyyy HH:mm:ss zzz`, no zone set): `GMT+05:30` or `GMT+1` where the
//! locale has no abbreviation, else an abbreviation such as `PST` or `CET`. Abbreviations are
//! ambiguous (`CST` is US Central or China, `IST` India, Israel or Ireland), so a named zone is
//! read as any offset a real zone has, from UTC−12 to UTC+14: the date is then only known to
//! within a day, and replays inside that span are left to de-duplication.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The furthest a real time zone is behind UTC (UTC−12, Baker Island), in seconds.
const ZONE_MOST_BEHIND: i64 = 12 * 3600;
/// The furthest a real time zone is ahead of UTC (UTC+14, Line Islands), in seconds.
const ZONE_MOST_AHEAD: i64 = 14 * 3600;

/// Seconds between a signed upload's first acceptance and the last moment a replay of it can
/// still pass the date check, for a clock skew of `max_skew_secs`: twice the skew, plus the
/// offsets a zone name may stand for. The batch log must keep batches at least this long for
/// a replay to be recognised.
pub(crate) fn replay_window_secs(max_skew_secs: u64) -> u64 {
    let zones = u64::try_from(ZONE_MOST_BEHIND + ZONE_MOST_AHEAD).unwrap_or(u64::MAX);
    max_skew_secs.saturating_mul(2).saturating_add(zones)
}

/// A signed `Date`: the wall clock it shows, and its offset from UTC when the zone says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SignedDate {
    /// The wall-clock time read as if it were UTC, in Unix seconds.
    wall_clock: i64,
    /// Seconds east of UTC, or `None` for a zone name that does not say.
    offset: Option<i64>,
}

impl SignedDate {
    /// Reads `Www, dd Mmm yyyy hh:mm:ss ZONE`; `None` when the date and time cannot be read.
    /// A zone that is not GMT, UTC or a numeric offset counts as a name.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (date_time, zone) = text.trim().rsplit_once(' ')?;
        let as_gmt = httpdate::parse_http_date(&format!("{date_time} GMT")).ok()?;
        let wall_clock = unix_secs(as_gmt)?;
        Some(Self {
            wall_clock,
            offset: offset_of(zone),
        })
    }

    /// How many seconds the date is from `now` (Unix seconds): 0 when some offset its zone may
    /// have puts it at `now`, else the distance to the nearest instant it can mean.
    pub(crate) fn seconds_from(&self, now: i64) -> u64 {
        let (earliest, latest) = match self.offset {
            Some(offset) => (self.wall_clock - offset, self.wall_clock - offset),
            None => (
                self.wall_clock - ZONE_MOST_AHEAD,
                self.wall_clock + ZONE_MOST_BEHIND,
            ),
        };
        if now < earliest {
            (earliest - now).unsigned_abs()
        } else if now > latest {
            (now - latest).unsigned_abs()
        } else {
            0
        }
    }
}

fn unix_secs(time: SystemTime) -> Option<i64> {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    i64::try_from(since.as_secs()).ok()
}

/// Seconds east of UTC for `GMT`, `UTC`, `UT`, `Z` and numeric zones (`GMT+05:30`, `GMT-8`,
/// `UTC+1`, `+0100`); `None` for a name (or anything unreadable, which is treated alike).
fn offset_of(zone: &str) -> Option<i64> {
    let numeric = match zone {
        "GMT" | "UTC" | "UT" | "Z" => return Some(0),
        _ => ["GMT", "UTC", "UT"]
            .iter()
            .find_map(|prefix| zone.strip_prefix(prefix))
            .unwrap_or(zone),
    };
    let (sign, digits) = match numeric.as_bytes().first()? {
        b'+' => (1, &numeric[1..]),
        b'-' => (-1, &numeric[1..]),
        _ => return None,
    };
    let (hours, minutes) = match digits.split_once(':') {
        Some((hours, minutes)) => (hours, minutes),
        // `+0530` or `+5`: the last two digits are minutes only when there are four.
        None if digits.len() == 4 => digits.split_at(2),
        None => (digits, "0"),
    };
    let all_digits =
        |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(hours) || !all_digits(minutes) {
        return None;
    }
    let offset = sign * (hours.parse::<i64>().ok()? * 3600 + minutes.parse::<i64>().ok()? * 60);
    (-ZONE_MOST_BEHIND..=ZONE_MOST_AHEAD)
        .contains(&offset)
        .then_some(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21 10:00:00 UTC.
    const TEN_AM: i64 = 1_795_255_200;

    fn from_ten_am(text: &str) -> u64 {
        SignedDate::parse(text).unwrap().seconds_from(TEN_AM)
    }

    #[test]
    fn a_gmt_date_is_read_exactly() {
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 10:00:00 GMT"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 10:10:01 GMT"), 601);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 09:59:00 GMT"), 60);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 10:00:00 UTC"), 0);
    }

    #[test]
    fn a_numeric_zone_is_read_with_its_offset() {
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 15:30:00 GMT+05:30"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 11:00:00 GMT+1"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 02:00:00 GMT-08:00"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 11:00:00 +0100"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 11:00:00 UTC+01:00"), 0);
        // The same wall clock with the wrong offset is an hour off.
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 11:00:00 GMT"), 3600);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 10:00:00 GMT-01:00"), 3600);
    }

    #[test]
    fn a_named_zone_may_be_any_real_offset_but_no_further() {
        // 02:00 in PST, 18:00 in China Standard Time: both "CST"-like names pass.
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 02:00:00 PST"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 18:00:00 CST"), 0);
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 23:59:00 LINT"), 0);
        // Beyond UTC+14 or UTC−12, no zone explains the wall clock.
        assert_eq!(from_ten_am("Sun, 22 Nov 2026 00:10:00 XYZ"), 600);
        assert_eq!(from_ten_am("Fri, 20 Nov 2026 21:50:00 XYZ"), 600);
        // A numeric zone beyond any real one is no offset either.
        assert_eq!(from_ten_am("Sat, 21 Nov 2026 10:00:00 GMT+15:00"), 0);
    }

    #[test]
    fn a_date_that_cannot_be_read_is_none() {
        for text in [
            "",
            "yesterday at noon",
            "Sat, 21 Nov 2026 10:00:00",
            "Sat, 21 Nov 2026 25:00:00 GMT",
            "Sat, 31 Nov 2026 10:00:00 GMT",
            "2026-11-21T10:00:00Z",
        ] {
            assert_eq!(SignedDate::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_replay_window_covers_the_skew_both_ways_and_every_zone() {
        assert_eq!(replay_window_secs(600), 1200 + 26 * 3600);
        assert_eq!(replay_window_secs(u64::MAX), u64::MAX);
    }
}
