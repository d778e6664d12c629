-- Per-input settings (JSON): allowed CORS origins today.
ALTER TABLE inputs ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
