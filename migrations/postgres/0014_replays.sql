-- Replays by time range (issue 14 item 6). One row per started replay: what it replays, how
-- far its cursor (the last batch or dead-letter id handled) has come, and what it has done.
-- A node drives a running replay while it holds the lease (`lease_until`, `leased_by`), so two
-- nodes never both advance one cursor.
CREATE TABLE replays (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    connection_id   TEXT NOT NULL,
    source          TEXT NOT NULL,
    from_ms         BIGINT NOT NULL,
    to_ms           BIGINT NOT NULL,
    event_types     TEXT,
    revision_id     BIGINT,
    rate_per_second BIGINT NOT NULL,
    status          TEXT NOT NULL,
    cursor_id        BIGINT NOT NULL DEFAULT 0,
    batches         BIGINT NOT NULL DEFAULT 0,
    events          BIGINT NOT NULL DEFAULT 0,
    requests        BIGINT NOT NULL DEFAULT 0,
    sent            BIGINT NOT NULL DEFAULT 0,
    failed          BIGINT NOT NULL DEFAULT 0,
    error           TEXT,
    lease_until     BIGINT NOT NULL DEFAULT 0,
    leased_by       TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX replays_running ON replays(status);
CREATE INDEX batches_received_at ON batches(received_at);
