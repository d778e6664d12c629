//! The data catalog's rows: nodes' tallies merged in by upsert (never overwritten, so any number
//! of nodes flush into one catalog), and an input's data points read back.

use std::time::Duration;

use sqlx::FromRow;

use super::backend::{Sql, args};
use super::{Store, StoreResult};
use crate::model::data_points::{Kind, PointKey, Seen, ValueType};
use crate::model::ids::InputId;
use crate::model::now_ms;

/// Rows per statement: keeps each statement's JSON argument and its locks small.
const CHUNK: usize = 500;

/// How long a flush's row is kept: it is only asked about just after its own COMMIT.
const FLUSH_RECORD_KEPT_MS: i64 = 10 * 60 * 1000;
const RECORD_FLUSH: Sql =
    Sql::shared("INSERT INTO catalog_flushes (id, flushed_at) VALUES ($1, $2)");
const PRUNE_FLUSHES: Sql = Sql::shared("DELETE FROM catalog_flushes WHERE flushed_at < $1");
const FLUSH_RECORDED: Sql = Sql::shared("SELECT id FROM catalog_flushes WHERE id = $1");

/// `$1` is a JSON array of `[input_id, kind, event_type, event_name, name, value_type, count,
/// first_seen_ms, last_seen_ms]`. A null type gives way to any other, two others make `mixed`
/// (as `ValueType::merge`); `''` is the type of data points without values.
// `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
const MERGE: Sql = Sql::each(
    "INSERT INTO data_points (input_id, kind, event_type, event_name, name, value_type, seen, \
     first_seen_ms, last_seen_ms) \
     SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, \
     value ->> 6, value ->> 7, value ->> 8 FROM jsonb_each($1) WHERE true \
     ON CONFLICT (input_id, kind, event_type, event_name, name) DO UPDATE SET \
     seen = data_points.seen + excluded.seen, \
     first_seen_ms = MIN(data_points.first_seen_ms, excluded.first_seen_ms), \
     last_seen_ms = MAX(data_points.last_seen_ms, excluded.last_seen_ms), \
     value_type = CASE \
     WHEN excluded.value_type IN (data_points.value_type, '', 'null') THEN data_points.value_type \
     WHEN data_points.value_type IN ('', 'null') THEN excluded.value_type \
     ELSE 'mixed' END",
    "INSERT INTO data_points (input_id, kind, event_type, event_name, name, value_type, seen, \
     first_seen_ms, last_seen_ms) \
     SELECT r ->> 0, r ->> 1, r ->> 2, r ->> 3, r ->> 4, r ->> 5, (r ->> 6)::bigint, \
     (r ->> 7)::bigint, (r ->> 8)::bigint FROM jsonb_array_elements($1::jsonb) AS r \
     ON CONFLICT (input_id, kind, event_type, event_name, name) DO UPDATE SET \
     seen = data_points.seen + excluded.seen, \
     first_seen_ms = LEAST(data_points.first_seen_ms, excluded.first_seen_ms), \
     last_seen_ms = GREATEST(data_points.last_seen_ms, excluded.last_seen_ms), \
     value_type = CASE \
     WHEN excluded.value_type IN (data_points.value_type, '', 'null') THEN data_points.value_type \
     WHEN data_points.value_type IN ('', 'null') THEN excluded.value_type \
     ELSE 'mixed' END",
);
const SELECT_INPUT: Sql = Sql::shared(
    "SELECT kind, event_type, event_name, name, value_type, seen, first_seen_ms, last_seen_ms \
     FROM data_points WHERE input_id = $1 ORDER BY kind, event_type, event_name, name",
);
const SELECT_KEYS: Sql =
    Sql::shared("SELECT input_id, kind, event_type, event_name, name FROM data_points");

#[derive(Debug, FromRow)]
struct DataPointRow {
    kind: String,
    event_type: String,
    event_name: String,
    name: String,
    value_type: String,
    seen: i64,
    first_seen_ms: i64,
    last_seen_ms: i64,
}

impl DataPointRow {
    /// The row as the model's types; a row this version cannot read (a kind of a later
    /// version) is skipped.
    fn into_point(self) -> Option<(PointKey, Seen)> {
        let kind = Kind::parse(&self.kind)?;
        let key = PointKey::new(kind, &self.event_type, &self.event_name, &self.name);
        let seen = Seen {
            count: self.seen,
            first_seen_ms: self.first_seen_ms,
            last_seen_ms: self.last_seen_ms,
            value_type: ValueType::parse(&self.value_type),
        };
        Some((key, seen))
    }
}

impl Store {
    /// Merges tallied data points into the catalog, a chunk per statement, all in one
    /// transaction: a flush that fails part way keeps nothing, so the caller can put the whole
    /// tally back and the retry counts each sighting once. Rows go in key order, so two nodes'
    /// flushes lock shared rows in the same order and cannot deadlock.
    pub(crate) async fn merge_data_points(
        &self,
        points: &[(InputId, PointKey, Seen)],
    ) -> StoreResult<()> {
        let mut points: Vec<&(InputId, PointKey, Seen)> = points.iter().collect();
        points.sort_unstable_by(|a, b| sort_key(a).cmp(&sort_key(b)));
        let rows: Vec<[serde_json::Value; 9]> = points
            .into_iter()
            .map(|(input, key, seen)| {
                [
                    input.as_str().into(),
                    key.kind.as_str().into(),
                    serde_json::Value::from(&*key.event_type),
                    serde_json::Value::from(&*key.event_name),
                    serde_json::Value::from(&*key.name),
                    seen.value_type.map_or("", ValueType::as_str).into(),
                    seen.count.into(),
                    seen.first_seen_ms.into(),
                    seen.last_seen_ms.into(),
                ]
            })
            .collect();
        let flush_id = uuid::Uuid::new_v4().to_string();
        let now = now_ms();
        let mut tx = self.begin().await?;
        for chunk in rows.chunks(CHUNK) {
            let json = serde_json::to_string(chunk).unwrap_or_else(|_| "[]".to_owned());
            tx.execute(MERGE, args![&json]).await?;
        }
        tx.execute(RECORD_FLUSH, args![&flush_id, now]).await?;
        tx.execute(PRUNE_FLUSHES, args![now - FLUSH_RECORD_KEPT_MS])
            .await?;
        match tx.commit().await {
            Ok(()) => Ok(()),
            Err(error) => self.settle_flush_commit(&flush_id, error).await,
        }
    }

    /// A COMMIT that answered an error may have committed all the same (the answer was lost):
    /// the flush's own row says which, as the group commit's stored batch does for it. Written,
    /// the flush is answered as such, so the caller does not put it back and count it twice.
    async fn settle_flush_commit(&self, flush_id: &str, error: sqlx::Error) -> StoreResult<()> {
        for pause in [0, 100, 400] {
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let found: Result<Option<(String,)>, _> =
                self.fetch_optional(FLUSH_RECORDED, args![flush_id]).await;
            match found {
                Ok(Some(_)) => {
                    tracing::warn!(%error, "COMMIT of a data catalog flush reported an error but had committed.");
                    return Ok(());
                }
                Ok(None) => return Err(error.into()),
                Err(check) => {
                    tracing::warn!(%check, "Could not find out whether a catalog flush committed.");
                }
            }
        }
        // Unknown: retrying could count twice, dropping could lose a flush's counts; a few
        // seconds of counts lost is the smaller harm for a catalog of counts.
        tracing::warn!(%error, "A data catalog flush may not have been written; it is not retried.");
        Ok(())
    }

    /// The key of every data point in the catalog, of every input (a node seeds its caps with
    /// them at start, so a restart does not let an input past them).
    pub(crate) async fn data_point_keys(&self) -> StoreResult<Vec<(InputId, PointKey)>> {
        let rows: Vec<(InputId, String, String, String, String)> =
            self.fetch_all(SELECT_KEYS, &[]).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(input, kind, event_type, event_name, name)| {
                let kind = Kind::parse(&kind)?;
                Some((input, PointKey::new(kind, &event_type, &event_name, &name)))
            })
            .collect())
    }

    /// Every data point of an input, in key order.
    pub(crate) async fn data_points(&self, input: &InputId) -> StoreResult<Vec<(PointKey, Seen)>> {
        let rows: Vec<DataPointRow> = self.fetch_all(SELECT_INPUT, args![input]).await?;
        Ok(rows
            .into_iter()
            .filter_map(DataPointRow::into_point)
            .collect())
    }
}

/// A data point's primary key, as the table orders it.
fn sort_key((input, key, _): &(InputId, PointKey, Seen)) -> (&str, &str, &str, &str, &str) {
    (
        input.as_str(),
        key.kind.as_str(),
        &*key.event_type,
        &*key.event_name,
        &*key.name,
    )
}
