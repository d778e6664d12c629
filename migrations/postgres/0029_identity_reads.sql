-- What the identity store knows of a group commit's batches without an MPID, in one round trip
-- (issue 16, item 4): the advisory locks of their identities and devices, in the order given,
-- then, each with a fresh snapshot (a VOLATILE function takes one per statement under READ
-- COMMITTED), which of their batch keys are stored, who owns their identities and whom their
-- devices point to. The reads must come after the locks in a statement of their own: a read in
-- the locking statement would use the snapshot taken before a lock was waited for, and miss
-- what its holder committed (two users of one new identity). PL/pgSQL keeps each statement's
-- plan for the session; every key is one index probe (a LATERAL with LIMIT is never flattened
-- into a join), so a read costs the same whatever the tables' sizes.
--
-- Rows: ('s', input, source_request_id, NULL, false) per stored key; ('o', type, value, mpid,
-- has a login) per known identity; ('d', device, NULL, mpid, has a login) per known device.
-- Whether a user has a login decides only with a device, so it is read only when there is one.
CREATE FUNCTION boson_group_identities(
    lock_keys TEXT[],
    inputs TEXT[],
    requests TEXT[],
    identity_types TEXT[],
    identity_values TEXT[],
    devices TEXT[],
    login TEXT
) RETURNS TABLE (kind TEXT, a TEXT, b TEXT, mpid BIGINT, logged_in BOOLEAN)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    with_logins BOOLEAN := cardinality(devices) > 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(k.key, 0))
    FROM unnest(lock_keys) WITH ORDINALITY AS k(key, n) ORDER BY k.n;
    RETURN QUERY
    SELECT 's', r.input, r.request, NULL::BIGINT, false
    FROM unnest(inputs, requests) AS r(input, request)
    CROSS JOIN LATERAL (
        SELECT 1 FROM batches s
        WHERE s.input_id = r.input AND s.source_request_id = r.request LIMIT 1
    ) AS stored;
    RETURN QUERY
    SELECT 'o', i.t, i.v, o.mpid, with_logins AND EXISTS (
        SELECT 1 FROM user_identities l WHERE l.mpid = o.mpid AND l.identity_type = login)
    FROM unnest(identity_types, identity_values) AS i(t, v)
    CROSS JOIN LATERAL (
        SELECT u.mpid FROM user_identities u
        WHERE u.identity_type = i.t AND u.identity = i.v LIMIT 1
    ) AS o;
    RETURN QUERY
    SELECT 'd', d.device, NULL::TEXT, p.mpid, EXISTS (
        SELECT 1 FROM user_identities l WHERE l.mpid = p.mpid AND l.identity_type = login)
    FROM unnest(devices) AS d(device)
    CROSS JOIN LATERAL (
        SELECT u.mpid FROM device_users u WHERE u.device = d.device LIMIT 1
    ) AS p;
END
$$;
