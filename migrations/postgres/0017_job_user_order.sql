-- Per-user ordering (a connection's `ordering` = "per_user"): the MPID of the job's batch, set
-- only on such connections' jobs (NULL: unordered). A claim skips a job whose user has an
-- earlier job of the same connection still in the table; this index answers that question.
ALTER TABLE jobs ADD COLUMN mpid BIGINT;
CREATE INDEX jobs_user_order ON jobs (connection_id, mpid, id) WHERE mpid IS NOT NULL;
