-- Boson's schema on SQLite. Times are Unix milliseconds (INTEGER); ids are prefixed text.
-- Integer ids use AUTOINCREMENT: without it SQLite reuses the largest id after a delete, and these
-- ids are seen outside (batch_id in webhook bodies, delivery ids built from job ids).

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE inputs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    platform    TEXT NOT NULL,
    api_key     TEXT NOT NULL UNIQUE,
    api_secret  TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE outputs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    settings    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- Every saved version of a connection's settings. Jobs point at the revision that was current when
-- their batch was accepted, so a later save never changes how an accepted batch is filtered.
CREATE TABLE connection_revisions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    connection_id TEXT NOT NULL,
    settings      TEXT NOT NULL,
    created_at    INTEGER NOT NULL
);

CREATE TABLE connections (
    id          TEXT PRIMARY KEY,
    input_id    TEXT NOT NULL REFERENCES inputs(id),
    output_id   TEXT NOT NULL REFERENCES outputs(id),
    revision_id INTEGER NOT NULL REFERENCES connection_revisions(id),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE UNIQUE INDEX connections_input_output ON connections(input_id, output_id);
CREATE INDEX connections_output ON connections(output_id);

CREATE TABLE batches (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    input_id          TEXT NOT NULL,
    source_request_id TEXT,
    received_at       INTEGER NOT NULL,
    event_count       INTEGER NOT NULL,
    body              BLOB NOT NULL,
    UNIQUE (input_id, source_request_id)
);

-- The delivery queue: one row per (batch, connection) until it is delivered or dead-lettered.
CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id        INTEGER NOT NULL,
    connection_id   TEXT NOT NULL,
    revision_id     INTEGER NOT NULL,
    progress        INTEGER NOT NULL DEFAULT 0,
    attempts        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    lease_until     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT
);
CREATE INDEX jobs_due ON jobs(next_attempt_at);

CREATE TABLE dead_letters (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        INTEGER NOT NULL,
    batch_id      INTEGER NOT NULL,
    connection_id TEXT NOT NULL,
    payload_index INTEGER NOT NULL,
    body          BLOB NOT NULL,
    status        INTEGER,
    error         TEXT NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX dead_letters_connection ON dead_letters(connection_id, id);

CREATE TABLE attempts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        INTEGER NOT NULL,
    connection_id TEXT NOT NULL,
    attempted_at  INTEGER NOT NULL,
    outcome       TEXT NOT NULL,
    status        INTEGER,
    error         TEXT,
    requests      INTEGER NOT NULL,
    latency_ms    INTEGER NOT NULL
);
CREATE INDEX attempts_connection ON attempts(connection_id, id);
