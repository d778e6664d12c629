//! Operator alerts as they go on the wire: Standard Webhooks' recommended payload shape,
//! `{"type": "connection.failing", "timestamp": "<RFC 3339, UTC>", "data": {...}}`. Pure: the
//! caller passes the time.

use serde_json::{Map, Value, json};

use super::ids::ConnectionId;

/// The kinds of operator alert; their wire names are fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlertKind {
    ConnectionFailing,
    ConnectionRecovered,
    ConnectionPaused,
    DeadLetterCreated,
    BacklogOverThreshold,
}

impl AlertKind {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::ConnectionFailing => "connection.failing",
            Self::ConnectionRecovered => "connection.recovered",
            Self::ConnectionPaused => "connection.paused",
            Self::DeadLetterCreated => "dead_letter.created",
            Self::BacklogOverThreshold => "backlog.over_threshold",
        }
    }
}

/// The connection an alert is about, with the names an operator knows it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AlertSubject {
    pub(crate) connection_id: ConnectionId,
    pub(crate) input_name: Option<String>,
    pub(crate) output_name: Option<String>,
}

/// One alert: its kind, its connection, and what it says beyond them (`since_ms`, `count`, …).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OperatorAlert {
    pub(crate) kind: AlertKind,
    pub(crate) subject: AlertSubject,
    pub(crate) details: Map<String, Value>,
}

impl OperatorAlert {
    /// The request body, as sent at `now_ms`.
    pub(crate) fn body(&self, now_ms: i64) -> Vec<u8> {
        let mut data = Map::new();
        data.insert(
            "connection_id".into(),
            json!(self.subject.connection_id.to_string()),
        );
        data.insert("input_name".into(), json!(self.subject.input_name));
        data.insert("output_name".into(), json!(self.subject.output_name));
        data.extend(self.details.clone());
        let body = json!({
            "type": self.kind.as_str(),
            "timestamp": rfc3339(now_ms),
            "data": data,
        });
        body.to_string().into_bytes()
    }
}

/// `2026-11-23T19:24:01.123Z` for Unix milliseconds `ms` (proleptic Gregorian, UTC).
pub(crate) fn rfc3339(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let secs = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms_of_day % 1000
    )
}

/// Year, month and day of the `days`-th day after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_461_841_123), "2026-11-23T19:24:01.123Z");
    }

    #[test]
    fn the_body_has_type_timestamp_and_data() {
        let mut details = Map::new();
        details.insert("count".into(), json!(3));
        let alert = OperatorAlert {
            kind: AlertKind::DeadLetterCreated,
            subject: AlertSubject {
                connection_id: ConnectionId::new(),
                input_name: Some("web".into()),
                output_name: None,
            },
            details,
        };
        let body: Value = serde_json::from_slice(&alert.body(0)).unwrap();
        assert_eq!(body["type"], "dead_letter.created");
        assert_eq!(body["timestamp"], "1970-01-01T00:00:00.000Z");
        assert_eq!(body["data"]["count"], 3);
        assert_eq!(body["data"]["input_name"], "web");
        assert!(body["data"]["connection_id"].is_string());
    }
}
