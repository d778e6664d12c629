//! The per-minute figures behind the dashboard's charts: nodes' tallies merged in by upsert
//! (counts add, the backlog keeps the greatest, latency buckets add), read back for a time
//! range, pruned past the retention; and the backlog sample (jobs waiting per connection).

use sqlx::FromRow;

use super::backend::{Sql, args};
use super::writer::Writer;
use super::{Store, StoreResult};
use crate::model::ids::ConnectionId;
use crate::model::metrics::{Figures, Latency, Subject};

/// Rows per statement: keeps each statement's JSON argument and its locks small.
const CHUNK: usize = 500;

/// `$1` is a JSON array of `[subject, minute_ms, received, forwarded, requests, failures,
/// dead_letters, backlog]`.
// `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
const MERGE_MINUTES: Sql = Sql::each(
    "INSERT INTO metric_minutes (subject, minute_ms, received, forwarded, requests, failures, \
     dead_letters, backlog) \
     SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, \
     value ->> 6, value ->> 7 FROM jsonb_each($1) WHERE true \
     ON CONFLICT (subject, minute_ms) DO UPDATE SET \
     received = metric_minutes.received + excluded.received, \
     forwarded = metric_minutes.forwarded + excluded.forwarded, \
     requests = metric_minutes.requests + excluded.requests, \
     failures = metric_minutes.failures + excluded.failures, \
     dead_letters = metric_minutes.dead_letters + excluded.dead_letters, \
     backlog = MAX(metric_minutes.backlog, excluded.backlog)",
    "INSERT INTO metric_minutes (subject, minute_ms, received, forwarded, requests, failures, \
     dead_letters, backlog) \
     SELECT r ->> 0, (r ->> 1)::bigint, (r ->> 2)::bigint, (r ->> 3)::bigint, \
     (r ->> 4)::bigint, (r ->> 5)::bigint, (r ->> 6)::bigint, (r ->> 7)::bigint \
     FROM jsonb_array_elements($1::jsonb) AS r \
     ON CONFLICT (subject, minute_ms) DO UPDATE SET \
     received = metric_minutes.received + excluded.received, \
     forwarded = metric_minutes.forwarded + excluded.forwarded, \
     requests = metric_minutes.requests + excluded.requests, \
     failures = metric_minutes.failures + excluded.failures, \
     dead_letters = metric_minutes.dead_letters + excluded.dead_letters, \
     backlog = GREATEST(metric_minutes.backlog, excluded.backlog)",
);
/// `$1` is a JSON array of `[subject, minute_ms, bucket, count]`.
const MERGE_LATENCY: Sql = Sql::each(
    "INSERT INTO metric_latency (subject, minute_ms, bucket, count) \
     SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM jsonb_each($1) WHERE true \
     ON CONFLICT (subject, minute_ms, bucket) DO UPDATE SET \
     count = metric_latency.count + excluded.count",
    "INSERT INTO metric_latency (subject, minute_ms, bucket, count) \
     SELECT r ->> 0, (r ->> 1)::bigint, (r ->> 2)::int, (r ->> 3)::bigint \
     FROM jsonb_array_elements($1::jsonb) AS r \
     ON CONFLICT (subject, minute_ms, bucket) DO UPDATE SET \
     count = metric_latency.count + excluded.count",
);
/// Minutes in `[$1, $2)`, of one subject when `$3` is not empty.
const SELECT_MINUTES: Sql = Sql::shared(
    "SELECT subject, minute_ms, received, forwarded, requests, failures, dead_letters, backlog \
     FROM metric_minutes WHERE minute_ms >= $1 AND minute_ms < $2 AND ($3 = '' OR subject = $3)",
);
const SELECT_LATENCY: Sql = Sql::shared(
    "SELECT subject, minute_ms, CAST(bucket AS BIGINT) AS bucket, count FROM metric_latency \
     WHERE minute_ms >= $1 AND minute_ms < $2 AND ($3 = '' OR subject = $3)",
);
/// `$1` the cutoff, `$2` the most rows (a chunk of `Store::prune_oldest`).
pub(in crate::store) const PRUNE_MINUTES: Sql = Sql::shared(
    "DELETE FROM metric_minutes WHERE (subject, minute_ms) IN (SELECT subject, minute_ms \
     FROM metric_minutes WHERE minute_ms < $1 ORDER BY minute_ms LIMIT $2)",
);
/// `$1` the cutoff, `$2` the most rows.
pub(in crate::store) const PRUNE_LATENCY: Sql = Sql::shared(
    "DELETE FROM metric_latency WHERE (subject, minute_ms, bucket) IN (SELECT subject, \
     minute_ms, bucket FROM metric_latency WHERE minute_ms < $1 ORDER BY minute_ms LIMIT $2)",
);
const BACKLOG: Sql =
    Sql::shared("SELECT connection_id, COUNT(*) AS jobs FROM jobs GROUP BY connection_id");

#[derive(Debug, FromRow)]
struct MinuteRow {
    subject: String,
    minute_ms: i64,
    received: i64,
    forwarded: i64,
    requests: i64,
    failures: i64,
    dead_letters: i64,
    backlog: i64,
}

#[derive(Debug, FromRow)]
struct LatencyRow {
    subject: String,
    minute_ms: i64,
    bucket: i64,
    count: i64,
}

#[derive(Debug, FromRow)]
struct BacklogRow {
    connection_id: ConnectionId,
    jobs: i64,
}

/// One subject's figures for one minute, as read back (the subject as its id's text).
pub(crate) type StoredMinute = (String, i64, Figures);

impl Store {
    /// Adds tallied minutes to the stored ones, a chunk per statement. Rows go in key order, so
    /// two nodes' statements lock shared rows in the same order and cannot deadlock.
    pub(crate) async fn merge_minutes(
        &self,
        minutes: &[(Subject, i64, Figures)],
    ) -> StoreResult<()> {
        let mut minutes: Vec<&(Subject, i64, Figures)> = minutes.iter().collect();
        minutes.sort_unstable_by(|a, b| (a.0.as_str(), a.1).cmp(&(b.0.as_str(), b.1)));
        let rows: Vec<serde_json::Value> = minutes
            .iter()
            .map(|(subject, minute, f)| {
                serde_json::json!([
                    subject.as_str(),
                    minute,
                    f.received,
                    f.forwarded,
                    f.requests,
                    f.failures,
                    f.dead_letters,
                    f.backlog
                ])
            })
            .collect();
        let buckets: Vec<serde_json::Value> = minutes
            .iter()
            .flat_map(|(subject, minute, f)| {
                f.latency
                    .buckets()
                    .map(move |(b, n)| serde_json::json!([subject.as_str(), minute, b, n]))
            })
            .collect();
        // One transaction: a flush that fails part way writes nothing, so putting its figures
        // back for the next flush (`server::minutes::flush`) never counts any twice.
        let mut tx = self.begin().await?;
        for chunk in rows.chunks(CHUNK) {
            let json = serde_json::Value::from(chunk.to_vec()).to_string();
            tx.execute(MERGE_MINUTES, args![&json]).await?;
        }
        for chunk in buckets.chunks(CHUNK) {
            let json = serde_json::Value::from(chunk.to_vec()).to_string();
            tx.execute(MERGE_LATENCY, args![&json]).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Stored minutes in `[from_ms, to_ms)`, of one subject (an id's text) or of all.
    pub(crate) async fn minutes_between(
        &self,
        from_ms: i64,
        to_ms: i64,
        subject: Option<&str>,
    ) -> StoreResult<Vec<StoredMinute>> {
        let subject = subject.unwrap_or("");
        let rows: Vec<MinuteRow> = self
            .fetch_all(SELECT_MINUTES, args![from_ms, to_ms, subject])
            .await?;
        let buckets: Vec<LatencyRow> = self
            .fetch_all(SELECT_LATENCY, args![from_ms, to_ms, subject])
            .await?;
        let mut minutes: std::collections::HashMap<(String, i64), Figures> = rows
            .into_iter()
            .map(|r| {
                let figures = Figures {
                    received: r.received,
                    forwarded: r.forwarded,
                    requests: r.requests,
                    failures: r.failures,
                    dead_letters: r.dead_letters,
                    backlog: r.backlog,
                    latency: Latency::default(),
                };
                ((r.subject, r.minute_ms), figures)
            })
            .collect();
        for b in buckets {
            let bucket = u16::try_from(b.bucket).unwrap_or(u16::MAX);
            minutes
                .entry((b.subject, b.minute_ms))
                .or_default()
                .latency
                .add(bucket, b.count);
        }
        Ok(minutes
            .into_iter()
            .map(|((subject, minute), figures)| (subject, minute, figures))
            .collect())
    }

    /// Deletes minutes before `cutoff` (Unix ms), a chunk at a time in `writer`'s group commits
    /// on SQLite.
    pub(crate) async fn prune_minutes(&self, writer: &Writer, cutoff: i64) -> StoreResult<u64> {
        let minutes = self.prune_oldest(PRUNE_MINUTES, cutoff, writer).await?;
        let buckets = self.prune_oldest(PRUNE_LATENCY, cutoff, writer).await?;
        Ok(minutes + buckets)
    }

    /// Delivery jobs waiting per connection (only connections with some).
    pub(crate) async fn backlog_by_connection(&self) -> StoreResult<Vec<(ConnectionId, i64)>> {
        let rows: Vec<BacklogRow> = self.fetch_all(BACKLOG, &[]).await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.connection_id, r.jobs))
            .collect())
    }
}
