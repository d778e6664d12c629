-- The data catalog: every data point (event, event attribute, user attribute, identity type)
-- an input's accepted batches carried. Nodes flush their tallies as merging upserts (counts
-- add, first seen is the least, last seen the greatest, value types merge). Columns that do
-- not apply to a kind hold '' so the whole key can be the primary key.
CREATE TABLE data_points (
    input_id      TEXT NOT NULL,
    kind          TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    event_name    TEXT NOT NULL,
    name          TEXT NOT NULL,
    -- string, number, boolean, array, object, null or mixed; '' for events and identity types.
    value_type    TEXT NOT NULL,
    seen          BIGINT NOT NULL,
    first_seen_ms BIGINT NOT NULL,
    last_seen_ms  BIGINT NOT NULL,
    PRIMARY KEY (input_id, kind, event_type, event_name, name)
);
