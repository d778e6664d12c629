-- The history keyed by (mpid, id), the index 0031 built (no scan: both columns are NOT NULL),
-- and its old index on mpid alone dropped. Both are changes of the catalog only, so the
-- table's lock is held for a moment; waiting no longer than 10 s to take it (see 0030).
SET LOCAL lock_timeout = '10s';
ALTER TABLE identity_changes
    DROP CONSTRAINT identity_changes_pkey,
    ADD CONSTRAINT identity_changes_pkey PRIMARY KEY USING INDEX identity_changes_by_user;
DROP INDEX IF EXISTS identity_changes_mpid;
