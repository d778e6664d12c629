-- The identity store (IDSync): users by MPID, the identities that resolve to them, each
-- device's anonymous user, the history of identity changes, and alias requests.

CREATE TABLE users (
    mpid            BIGINT PRIMARY KEY,
    created_at      BIGINT NOT NULL,
    last_seen_at    BIGINT NOT NULL,
    user_attributes TEXT NOT NULL DEFAULT '{}'
);

-- A user identity (customer id, email, …) belongs to at most one user.
CREATE TABLE user_identities (
    identity_type TEXT NOT NULL,
    identity      TEXT NOT NULL,
    mpid          BIGINT NOT NULL REFERENCES users(mpid),
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (identity_type, identity)
);
CREATE INDEX user_identities_mpid ON user_identities(mpid);

-- The anonymous user a device (web device stamp, mobile device id) resolves to when no user
-- identity is known.
CREATE TABLE device_users (
    device     TEXT PRIMARY KEY,
    mpid       BIGINT NOT NULL REFERENCES users(mpid),
    updated_at BIGINT NOT NULL
);

CREATE TABLE identity_changes (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    mpid          BIGINT NOT NULL,
    identity_type TEXT NOT NULL,
    old_value     TEXT,
    new_value     TEXT,
    changed_at    BIGINT NOT NULL
);
CREATE INDEX identity_changes_mpid ON identity_changes(mpid, id);

CREATE TABLE aliases (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    input_id         TEXT NOT NULL,
    source_mpid      BIGINT NOT NULL,
    destination_mpid BIGINT NOT NULL,
    start_ms         BIGINT,
    end_ms           BIGINT,
    created_at       BIGINT NOT NULL
);
