-- Standard Webhooks signing of an output's requests. The secrets have columns of their own, out
-- of `settings` (which the admin API echoes), so no answer ever shows them after the one that
-- issued them. A rotation moves the current secret to `previous_signing_secret`, which keeps
-- signing until `signing_rotated_at` plus the output's `signing_rotation_overlap_secs`.
-- NULL everywhere: the output's requests are not signed.
ALTER TABLE outputs ADD COLUMN signing_secret TEXT;
ALTER TABLE outputs ADD COLUMN previous_signing_secret TEXT;
ALTER TABLE outputs ADD COLUMN signing_rotated_at INTEGER;
