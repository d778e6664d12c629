//! Kit forwarding statistics (the Web SDK's `/Forwarding` reports), counted per input and kit:
//! one transaction per request, at most the configured number of kits per input (the rule is
//! `model::forwarding::cap_kits`, run here between its read and its write), listed a page at a
//! time, and pruned once a kit has not reported for the retention.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::FromRow;

use super::backend::{Sql, args};
use super::writer::Writer;
use super::{Store, StoreResult};
use crate::model::forwarding::{Kit, cap_kits};
use crate::model::ids::InputId;

/// What one client-side kit (or bucket) reported forwarding for an input.
#[derive(Debug, Clone, FromRow)]
pub(crate) struct ForwardingStats {
    module_id: i64,
    pub(crate) events: i64,
    pub(crate) last_reported_at: i64,
}

impl ForwardingStats {
    pub(crate) fn kit(&self) -> Kit {
        Kit::from_column(self.module_id)
    }
}

/// One page of an input's statistics, and the kit to continue after if there is more.
#[derive(Debug, Clone)]
pub(crate) struct ForwardingPage {
    pub(crate) items: Vec<ForwardingStats>,
    pub(crate) next: Option<Kit>,
}

/// PostgreSQL: serialises the requests of one input, so two cannot both take the last free
/// place (SQLite's BEGIN IMMEDIATE serialises everything).
const LOCK_INPUT: Sql = Sql::postgres_only("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))");
const COUNT_KITS: Sql =
    Sql::shared("SELECT COUNT(*) FROM forwarding_stats WHERE input_id = $1 AND module_id > 0");
/// Which of the reported module ids (`$2`, a JSON array) the input already keeps.
const KNOWN_KITS: Sql = Sql::each(
    "SELECT module_id FROM forwarding_stats WHERE input_id = $1 \
     AND module_id IN (SELECT value FROM json_each($2))",
    "SELECT module_id FROM forwarding_stats WHERE input_id = $1 \
     AND module_id IN (SELECT jsonb_array_elements_text($2::jsonb)::bigint)",
);
/// Every kit of a request in one statement; `$2` is a JSON array of `[module_id, events]`.
// `WHERE true` keeps SQLite from reading ON CONFLICT as a join constraint.
const ADD_COUNTS: Sql = Sql::each(
    "INSERT INTO forwarding_stats (input_id, module_id, events, last_at) \
     SELECT $1, value ->> 0, value ->> 1, $3 FROM jsonb_each($2) WHERE true \
     ON CONFLICT (input_id, module_id) DO UPDATE SET \
     events = forwarding_stats.events + excluded.events, last_at = excluded.last_at",
    "INSERT INTO forwarding_stats (input_id, module_id, events, last_at) \
     SELECT $1, (r ->> 0)::bigint, (r ->> 1)::bigint, $3 FROM jsonb_array_elements($2::jsonb) AS r \
     ON CONFLICT (input_id, module_id) DO UPDATE SET \
     events = forwarding_stats.events + excluded.events, last_at = excluded.last_at",
);
const SELECT_PAGE: Sql = Sql::shared(
    "SELECT module_id, events, last_at AS last_reported_at FROM forwarding_stats \
     WHERE input_id = $1 AND module_id > $2 ORDER BY module_id LIMIT $3",
);
/// One statement: an input keeps at most its cap plus two rows, so even many inputs' stale
/// rows are few.
/// `$1` the cutoff, `$2` the most rows (a chunk of `Store::prune_oldest`). The cutoff is
/// checked again on the row deleted: on PostgreSQL a kit reporting while the chunk waits for its
/// row lock has a new `last_at` by then, and its fresh counts must stay.
pub(in crate::store) const PRUNE: Sql = Sql::shared(
    "DELETE FROM forwarding_stats WHERE last_at < $1 AND (input_id, module_id) IN \
     (SELECT input_id, module_id FROM forwarding_stats WHERE last_at < $1 ORDER BY last_at LIMIT $2)",
);

impl Store {
    /// Adds a request's reports (`counts`, per kit) to an input's statistics in one
    /// transaction; kits beyond `cap` per input are counted in the overflow bucket.
    pub(crate) async fn record_forwarding(
        &self,
        input_id: &InputId,
        counts: BTreeMap<Kit, i64>,
        cap: usize,
        now: i64,
    ) -> StoreResult<()> {
        if counts.is_empty() {
            return Ok(());
        }
        let reported: Vec<i64> = counts.keys().filter_map(|kit| kit.module_id()).collect();
        let reported = serde_json::to_string(&reported).unwrap_or_else(|_| "[]".to_owned());
        let mut tx = self.begin().await?;
        let lock_key = format!("forwarding:{input_id}");
        tx.execute(LOCK_INPUT, args![&lock_key]).await?;
        let (kept,): (i64,) = tx.fetch_one(COUNT_KITS, args![input_id]).await?;
        let known: BTreeSet<i64> = tx
            .fetch_ids(KNOWN_KITS, args![input_id, &reported])
            .await?
            .into_iter()
            .collect();
        let kept = usize::try_from(kept).unwrap_or(usize::MAX);
        let rows: Vec<(i64, i64)> = cap_kits(counts, &known, kept, cap)
            .into_iter()
            .map(|(kit, events)| (kit.column(), events))
            .collect();
        let rows = serde_json::to_string(&rows).unwrap_or_else(|_| "[]".to_owned());
        tx.execute(ADD_COUNTS, args![input_id, &rows, now]).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Up to `limit` of an input's statistics in listing order (the buckets, then kits by
    /// module id), starting after the kit `after`.
    pub(crate) async fn forwarding_stats(
        &self,
        input_id: &InputId,
        after: Option<Kit>,
        limit: usize,
    ) -> StoreResult<ForwardingPage> {
        let after = after.map_or(i64::MIN, Kit::column);
        // One row more than asked says whether there is a next page.
        let fetch = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        let mut items: Vec<ForwardingStats> = self
            .fetch_all(SELECT_PAGE, args![input_id, after, fetch])
            .await?;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(ForwardingStats::kit)
        } else {
            None
        };
        Ok(ForwardingPage { items, next })
    }

    /// Deletes the statistics of kits that have not reported since `cutoff` (Unix ms), a chunk
    /// at a time in `writer`'s group commits on SQLite; returns how many rows went.
    pub(crate) async fn prune_forwarding_stats(
        &self,
        writer: &Writer,
        cutoff: i64,
    ) -> StoreResult<u64> {
        self.prune_oldest(PRUNE, cutoff, writer).await
    }
}
