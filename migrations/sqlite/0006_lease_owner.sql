-- Which node holds a job's lease, so a node renews only leases that are still its own.
ALTER TABLE jobs ADD COLUMN leased_by TEXT;
