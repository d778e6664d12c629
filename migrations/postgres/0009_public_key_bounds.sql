-- Kit forwarding statistics are pruned by age (retention.forwarding_stats_days): this index lets
-- the periodic prune find old rows without a scan.
CREATE INDEX forwarding_stats_last_at ON forwarding_stats (last_at);
