-- What public keys write outside batches is pruned by age (retention.forwarding_stats_days,
-- retention.aliases_days): these indexes let the periodic prune find old rows without a scan.
CREATE INDEX forwarding_stats_last_at ON forwarding_stats (last_at);
CREATE INDEX aliases_created_at ON aliases (created_at);
