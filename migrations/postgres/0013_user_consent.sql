-- Consent kept on the user profile (issue 13 item 4): the latest statement of each GDPR purpose
-- and of the CCPA data sale opt-out, in mParticle's `consent_state` shape
-- (`{"gdpr": {<purpose>: {...}}, "ccpa": {"data_sale_opt_out": {...}}}`), merged per purpose by
-- every group commit that stores a batch of the user. Delivery reads it for connections whose
-- forwarding rules ask for consent.
ALTER TABLE users ADD COLUMN consent TEXT NOT NULL DEFAULT '{}';
