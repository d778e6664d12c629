-- no-transaction
-- The history is read by user in order (`WHERE mpid = $1 ORDER BY id`). Its primary key on
-- `id` alone served nothing but its own uniqueness and cost every history row a second index
-- entry (about 18,000 instructions per new user with two identities, issue 16 item 4); the
-- index on (mpid, id) is as unique and becomes the key in 0032. Built without blocking writes
-- (the table is never pruned, so it can be large); hence its own migration, outside a
-- transaction, and one statement.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS identity_changes_by_user ON identity_changes (mpid, id);
