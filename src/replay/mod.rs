//! Replay by time range: send a connection's past traffic again. A replay walks either the batch
//! log (each batch filtered again with the connection's settings of the moment the replay
//! started, restricted to some event types if asked) or the connection's dead letters (the stored
//! bodies, as they were), in id order, at a capped rate.
//!
//! Invariants: a replay's cursor only moves inside a transaction fenced by its lease and its
//! `running` status, so a cancel stops it at the next step and two nodes never drive one replay;
//! a replayed batch becomes an ordinary job, delivered by the ordinary workers (retries,
//! breaker, signing), so what it sends is exactly what the worker would send for that batch.

mod driver;
mod gather;
pub(crate) mod plan;

pub(crate) use driver::{Wake, run};

use crate::model::settings::{ConnectionSettings, WebhookSettings};
use crate::store::replays_sql::RangePage;
use crate::store::{ConnectionRow, Store, StoreResult};
use plan::{Source, Tally};

/// Rows a dry run reads at most: a count over a larger range stops there (and says so).
pub(crate) const DRY_RUN_SCAN_CAP: i64 = 10_000;
/// Rows read per page.
pub(crate) const PAGE: i64 = 200;

/// What a stored batch sends under `settings`, with its user's consent read as the worker
/// reads it; an unreadable batch sends nothing (the worker dead-letters it).
pub(crate) async fn stored_sends(
    store: &Store,
    settings: &ConnectionSettings,
    webhook: &WebhookSettings,
    batch_id: crate::model::ids::BatchId,
    body: &[u8],
) -> StoreResult<plan::Sends> {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(plan::Sends::default());
    };
    let consent = store
        .consent_for(&settings.forwarding_rules, &document)
        .await?;
    Ok(plan::sends(
        settings,
        webhook,
        batch_id,
        &document,
        consent.as_ref(),
    ))
}

/// What a replay of `source` over `[from_ms, to_ms]` would send under `settings`, without
/// sending or storing anything; the flag says whether the whole range was read. Where the
/// settings gather a user's batches, the requests and the sample are the gathered ones
/// ([`gather`]).
pub(crate) async fn dry_run(
    store: &Store,
    connection: &ConnectionRow,
    webhook: &WebhookSettings,
    settings: &ConnectionSettings,
    source: Source,
    (from_ms, to_ms): (i64, i64),
) -> StoreResult<(Tally, bool)> {
    let mut tally = Tally::default();
    let mut page = RangePage {
        from_ms,
        to_ms,
        after: 0,
        limit: PAGE,
    };
    let mut scanned = 0;
    let mut gathering = gather::Gathering::new(settings);
    loop {
        let rows = match source {
            Source::Batches => store.batches_in_range(&connection.input_id, page).await?,
            Source::DeadLetters => store
                .dead_letters_in_range(&connection.id, page)
                .await?
                .into_iter()
                .map(|(id, body)| (crate::model::ids::BatchId::new(id), body))
                .collect(),
        };
        let Some((last, _)) = rows.last() else {
            tally.add_requests(gathering.finish());
            return Ok((tally, true));
        };
        page.after = last.get();
        for (id, body) in rows {
            match source {
                Source::Batches => {
                    let sends = stored_sends(store, settings, webhook, id, &body).await?;
                    tally.add_batch(sends.events);
                    let shape = plan::job_shape(settings, &connection.id, 0, sends.user);
                    tally.add_requests(gathering.add(shape, body.len(), sends));
                }
                Source::DeadLetters => tally.add(plan::events_in_body(&body), vec![body]),
            }
            scanned += 1;
            if scanned >= DRY_RUN_SCAN_CAP {
                tally.add_requests(gathering.finish());
                return Ok((tally, false));
            }
        }
    }
}
