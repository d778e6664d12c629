-- Per connection, what every node must agree on for auto-pause and operator alerts: since when
-- its endpoint has failed without a success in between, whether Boson paused it, and when the
-- last aggregated alerts went out. Each transition is a conditional UPDATE, so one node wins it.
CREATE TABLE connection_health (
    connection_id           TEXT PRIMARY KEY REFERENCES connections(id) ON DELETE CASCADE,
    failing_since_ms        BIGINT,
    last_error              TEXT,
    paused_at_ms            BIGINT,
    dead_letter_alert_at_ms BIGINT,
    backlog_alert_at_ms     BIGINT
);
