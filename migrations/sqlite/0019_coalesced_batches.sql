-- Coalesced batches (a connection's `batch_window_secs` with Send as Batch): a job whose
-- batches are gathered per user carries `coalesce_head`: 0 while it waits for its window's
-- first claim, then the id of the first job of the group that claim formed (that job included).
-- The group is leased, renewed, released, retried and finished together; this index finds it.
-- NULL: an ordinary job.
ALTER TABLE jobs ADD COLUMN coalesce_head BIGINT;
CREATE INDEX jobs_coalesce_group ON jobs (coalesce_head) WHERE coalesce_head IS NOT NULL;
