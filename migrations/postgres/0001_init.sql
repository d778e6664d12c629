-- Boson's schema on PostgreSQL. Times are Unix milliseconds (BIGINT); ids are prefixed text.

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
    created_at  BIGINT NOT NULL
);

CREATE TABLE outputs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    settings    TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- Every saved version of a connection's settings. Jobs point at the revision that was current when
-- their batch was accepted, so a later save never changes how an accepted batch is filtered.
CREATE TABLE connection_revisions (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    connection_id TEXT NOT NULL,
    settings      TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);

CREATE TABLE connections (
    id          TEXT PRIMARY KEY,
    input_id    TEXT NOT NULL REFERENCES inputs(id),
    output_id   TEXT NOT NULL REFERENCES outputs(id),
    revision_id BIGINT NOT NULL REFERENCES connection_revisions(id),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX connections_input_output ON connections(input_id, output_id);
CREATE INDEX connections_output ON connections(output_id);

CREATE TABLE batches (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    input_id          TEXT NOT NULL,
    source_request_id TEXT,
    received_at       BIGINT NOT NULL,
    event_count       BIGINT NOT NULL,
    body              BYTEA NOT NULL,
    UNIQUE (input_id, source_request_id)
);

-- The delivery queue: one row per (batch, connection) until it is delivered or dead-lettered.
CREATE TABLE jobs (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    batch_id        BIGINT NOT NULL,
    connection_id   TEXT NOT NULL,
    revision_id     BIGINT NOT NULL,
    progress        BIGINT NOT NULL DEFAULT 0,
    attempts        BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    lease_until     BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT
);
CREATE INDEX jobs_due ON jobs(next_attempt_at);

CREATE TABLE dead_letters (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        BIGINT NOT NULL,
    batch_id      BIGINT NOT NULL,
    connection_id TEXT NOT NULL,
    payload_index BIGINT NOT NULL,
    body          BYTEA NOT NULL,
    status        BIGINT,
    error         TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX dead_letters_connection ON dead_letters(connection_id, id);

CREATE TABLE attempts (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        BIGINT NOT NULL,
    connection_id TEXT NOT NULL,
    attempted_at  BIGINT NOT NULL,
    outcome       TEXT NOT NULL,
    status        BIGINT,
    error         TEXT,
    requests      BIGINT NOT NULL,
    latency_ms    BIGINT NOT NULL
);
CREATE INDEX attempts_connection ON attempts(connection_id, id);
