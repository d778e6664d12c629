-- A new user's identities cheaper to write (issue 16, item 4: batches without an MPID that make
-- new users were 0.62-0.69 of the rate of batches with one on PostgreSQL, and PostgreSQL's CPU
-- per event was a third above theirs). Counted with callgrind on a single-user backend, per new
-- user with two identities in a group of 32, the group's write statement took 339,000
-- instructions, of which the foreign-key checks about 80,000 (one query through SPI per
-- identity row, each locking the user's row it had just inserted).
--
-- The foreign keys from identities and devices to users go: every statement that writes one
-- inserts its user first in the same transaction (or checks it exists, `/modify`), and no user
-- row is ever deleted, so the check could never fail. The store tests check after concurrent
-- groups that every identity's user exists.
--
-- Dropping a foreign key locks both tables for a moment (ACCESS EXCLUSIVE): waiting no longer
-- than 10 s behind open transactions, so that other nodes' reads do not queue behind this one
-- for long (a node that times out fails to start and migrates at its next start).
SET LOCAL lock_timeout = '10s';
ALTER TABLE user_identities DROP CONSTRAINT IF EXISTS user_identities_mpid_fkey;
ALTER TABLE device_users DROP CONSTRAINT IF EXISTS device_users_mpid_fkey;
