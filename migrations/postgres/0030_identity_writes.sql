-- A new user's identities and history, cheaper to write (issue 16, item 4: batches without an
-- MPID that make new users were 0.62-0.69 of the rate of batches with one on PostgreSQL, and
-- PostgreSQL's CPU per event was a third above theirs). Counted with callgrind on a
-- single-user backend, per new user with two identities in a group of 32, the group's write
-- statement took 339,000 instructions, of which the foreign-key checks about 80,000 (one query
-- through SPI per identity row, each locking the user's row it had just inserted) and the
-- second index of the history about 18,000.
--
-- The foreign keys from identities and devices to users go: every statement that writes one
-- inserts its user first in the same transaction (or checks it exists, `/modify`), and no user
-- row is ever deleted, so the check could never fail. The store tests check after concurrent
-- groups that every identity's user exists.
ALTER TABLE user_identities DROP CONSTRAINT user_identities_mpid_fkey;
ALTER TABLE device_users DROP CONSTRAINT device_users_mpid_fkey;

-- The history is read by user in order (`WHERE mpid = $1 ORDER BY id`), which the index on
-- (mpid, id) serves; the primary key on id alone served nothing but its own uniqueness, and
-- cost every history row a second index entry. (mpid, id) is as unique, so it is the key now.
CREATE UNIQUE INDEX identity_changes_by_user ON identity_changes (mpid, id);
ALTER TABLE identity_changes
    DROP CONSTRAINT identity_changes_pkey,
    ADD CONSTRAINT identity_changes_pkey PRIMARY KEY USING INDEX identity_changes_by_user;
DROP INDEX identity_changes_mpid;
