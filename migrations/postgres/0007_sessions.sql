-- Signed-in dashboard sessions, shared by every node on the database. Only the SHA-256 of the
-- session id (hex) is kept, so reading the table signs nobody in. The CSRF token is kept as is:
-- the dashboard asks for it again after a page load, and without the cookie it grants nothing.
-- Times are Unix milliseconds.
CREATE TABLE sessions (
    id_hash    TEXT PRIMARY KEY,
    csrf       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);
