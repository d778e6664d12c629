-- A replay's batches that were pruned before their turn came (issue 14): the replay read them,
-- but by the time it enqueued their job the retention had deleted them, so no job was made.
ALTER TABLE replays ADD COLUMN expired BIGINT NOT NULL DEFAULT 0;
