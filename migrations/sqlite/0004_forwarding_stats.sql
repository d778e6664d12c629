-- Kit forwarding statistics the Web SDK reports (/v1|v2/JS/{key}/Forwarding): counted per input
-- and kit (module id), never forwarded to outputs.
CREATE TABLE forwarding_stats (
    input_id  TEXT NOT NULL,
    module_id INTEGER NOT NULL,
    events    INTEGER NOT NULL,
    last_at   INTEGER NOT NULL,
    PRIMARY KEY (input_id, module_id)
);
