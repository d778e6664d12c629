-- The identity store (IDSync): users by MPID, the identities that resolve to them, each
-- device's anonymous user, the history of identity changes, and alias requests.

CREATE TABLE users (
    mpid            INTEGER PRIMARY KEY,
    created_at      INTEGER NOT NULL,
    last_seen_at    INTEGER NOT NULL,
    user_attributes TEXT NOT NULL DEFAULT '{}'
);

-- A user identity (customer id, email, …) belongs to at most one user.
CREATE TABLE user_identities (
    identity_type TEXT NOT NULL,
    identity      TEXT NOT NULL,
    mpid          INTEGER NOT NULL REFERENCES users(mpid),
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (identity_type, identity)
);
CREATE INDEX user_identities_mpid ON user_identities(mpid);

-- The anonymous user a device (web device stamp, mobile device id) resolves to when no user
-- identity is known.
CREATE TABLE device_users (
    device     TEXT PRIMARY KEY,
    mpid       INTEGER NOT NULL REFERENCES users(mpid),
    updated_at INTEGER NOT NULL
);

CREATE TABLE identity_changes (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    mpid          INTEGER NOT NULL,
    identity_type TEXT NOT NULL,
    old_value     TEXT,
    new_value     TEXT,
    changed_at    INTEGER NOT NULL
);
CREATE INDEX identity_changes_mpid ON identity_changes(mpid, id);

CREATE TABLE aliases (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    input_id         TEXT NOT NULL,
    source_mpid      INTEGER NOT NULL,
    destination_mpid INTEGER NOT NULL,
    start_ms         INTEGER,
    end_ms           INTEGER,
    created_at       INTEGER NOT NULL
);
