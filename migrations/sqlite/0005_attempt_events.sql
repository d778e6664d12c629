-- Events a delivery attempt delivered, for per-connection counts.
ALTER TABLE attempts ADD COLUMN events INTEGER NOT NULL DEFAULT 0;
