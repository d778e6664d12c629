-- Retention without a full scan (issue 16 item 5). The prune finds, through these indexes, the
-- newest attempt and dead letter older than the cutoff, and the oldest batch a pending job still
-- needs; it then deletes by id range in small chunks, so no statement reads more than a chunk
-- of rows at any table size.
CREATE INDEX jobs_batch ON jobs (batch_id);
CREATE INDEX attempts_attempted_at ON attempts (attempted_at);
CREATE INDEX dead_letters_created_at ON dead_letters (created_at);
