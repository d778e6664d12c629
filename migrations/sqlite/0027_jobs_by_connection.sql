-- A connection's jobs in acceptance order, and in due order, as on PostgreSQL (issue 11,
-- item 3). On SQLite the due claim still walks `jobs_due` (for the per-connection form
-- PostgreSQL uses, SQLite's planner builds a temporary index over the whole table); the probe
-- and a recovery's drain walk these in order and stop at their limit instead of sorting all
-- of the connection's jobs.
CREATE INDEX jobs_connection ON jobs (connection_id, id);
CREATE INDEX jobs_connection_due ON jobs (connection_id, next_attempt_at, id);
