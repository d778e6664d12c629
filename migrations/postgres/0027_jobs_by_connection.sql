-- A connection's jobs in acceptance order, and in due order. The due claim takes each
-- connection it may claim (not one it skips: full lanes, open breakers, paused, draining)
-- through `jobs_connection_due`, so a failing connection's thousands of waiting jobs are never
-- read by the claims of the healthy ones (they were, on every poll of every node, walking
-- `jobs_due` in due order); the probe and a recovery's drain walk `jobs_connection` in id
-- order and stop at their limit (they sorted all of the connection's jobs). Issue 11, item 3.
CREATE INDEX jobs_connection ON jobs (connection_id, id);
CREATE INDEX jobs_connection_due ON jobs (connection_id, next_attempt_at, id);
