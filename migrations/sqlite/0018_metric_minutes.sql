-- Per-minute figures for the dashboard's charts. Every node adds its tally to the same rows
-- (counts add, the backlog keeps the greatest sample), so the rows cover every node and
-- survive restarts. `subject` is an input id (received) or a connection id (the rest).
CREATE TABLE metric_minutes (
    subject      TEXT NOT NULL,
    minute_ms    INTEGER NOT NULL,
    received     INTEGER NOT NULL,
    forwarded    INTEGER NOT NULL,
    requests     INTEGER NOT NULL,
    failures     INTEGER NOT NULL,
    dead_letters INTEGER NOT NULL,
    backlog      INTEGER NOT NULL,
    PRIMARY KEY (subject, minute_ms)
);
CREATE INDEX metric_minutes_minute ON metric_minutes(minute_ms);

-- Delivery latency per connection and minute as a histogram: deliveries counted per bucket
-- (model::metrics::bucket_of, four per doubling), only buckets with some. Counts add across
-- nodes; p50 and p99 are read from the merged buckets.
CREATE TABLE metric_latency (
    subject   TEXT NOT NULL,
    minute_ms INTEGER NOT NULL,
    bucket    INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    PRIMARY KEY (subject, minute_ms, bucket)
);
CREATE INDEX metric_latency_minute ON metric_latency(minute_ms);
