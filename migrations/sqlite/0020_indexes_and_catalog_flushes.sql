-- The dry run of a settings change reads an input's newest batches (`latest_batches`:
-- input_id = ? AND id < ? ORDER BY id DESC LIMIT ?). Without this index the plan found every
-- batch of the input through the (input_id, source_request_id) key and sorted them all, bodies
-- included; with it, it walks the input's newest ids and stops at the limit.
CREATE INDEX batches_input_latest ON batches (input_id, id);

-- A failing connection's oldest retrying job and their count (`OLDEST_FAILING_JOB`:
-- connection_id = ? AND attempts > 0 ORDER BY id). The plan scanned the whole jobs table; this
-- partial index holds only jobs that failed at least once, so new jobs (attempts = 0, the
-- ingest path's inserts) never enter it.
CREATE INDEX jobs_retrying ON jobs (connection_id, id) WHERE attempts > 0;

-- One row per data catalog flush, written in the flush's own transaction, so a flush whose
-- COMMIT answer was lost can ask whether it committed (and not be retried and counted twice).
-- Each flush deletes the rows older than ten minutes: a row is only asked about just after
-- its own COMMIT.
CREATE TABLE catalog_flushes (
    id         TEXT PRIMARY KEY,
    flushed_at INTEGER NOT NULL
);
