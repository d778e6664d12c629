-- Replays by time range (issue 14 item 6). One row per started replay: what it replays, how
-- far its cursor (the last batch or dead-letter id handled) has come, and what it has done.
-- A node drives a running replay while it holds the lease (`lease_until`, `leased_by`), so two
-- nodes never both advance one cursor.
CREATE TABLE replays (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    connection_id   TEXT NOT NULL,
    source          TEXT NOT NULL,
    from_ms         INTEGER NOT NULL,
    to_ms           INTEGER NOT NULL,
    event_types     TEXT,
    revision_id     INTEGER,
    rate_per_second INTEGER NOT NULL,
    status          TEXT NOT NULL,
    cursor_id        INTEGER NOT NULL DEFAULT 0,
    batches         INTEGER NOT NULL DEFAULT 0,
    events          INTEGER NOT NULL DEFAULT 0,
    requests        INTEGER NOT NULL DEFAULT 0,
    sent            INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0,
    error           TEXT,
    lease_until     INTEGER NOT NULL DEFAULT 0,
    leased_by       TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX replays_running ON replays(status);
CREATE INDEX batches_received_at ON batches(received_at);
