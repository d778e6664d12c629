-- Every committed change to the catalog tables (inputs, outputs, connections) notifies channel
-- `boson_catalog` with `<table>:<id>`, so every node reloads just that row at once instead of
-- polling. A trigger, rather than a NOTIFY sent by the admin API, fires in the writing
-- transaction whoever writes (any node, any version, an operator's psql) and cannot be forgotten
-- by a future statement. PostgreSQL delivers a notification only if its transaction commits, and
-- only once the change is visible to other sessions. Settings revisions need no trigger: they
-- never change, and a saved revision updates its connection's row.
-- SQLite has no counterpart: one node owns an embedded database.

CREATE FUNCTION boson_catalog_row_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('boson_catalog', TG_TABLE_NAME || ':' || OLD.id);
    ELSE
        PERFORM pg_notify('boson_catalog', TG_TABLE_NAME || ':' || NEW.id);
    END IF;
    RETURN NULL;
END
$$;

-- TRUNCATE has no rows to name: `*` asks for a whole reload.
CREATE FUNCTION boson_catalog_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('boson_catalog', '*');
    RETURN NULL;
END
$$;

CREATE TRIGGER inputs_notify AFTER INSERT OR UPDATE OR DELETE ON inputs
    FOR EACH ROW EXECUTE FUNCTION boson_catalog_row_changed();
CREATE TRIGGER outputs_notify AFTER INSERT OR UPDATE OR DELETE ON outputs
    FOR EACH ROW EXECUTE FUNCTION boson_catalog_row_changed();
CREATE TRIGGER connections_notify AFTER INSERT OR UPDATE OR DELETE ON connections
    FOR EACH ROW EXECUTE FUNCTION boson_catalog_row_changed();

CREATE TRIGGER inputs_truncate_notify AFTER TRUNCATE ON inputs
    FOR EACH STATEMENT EXECUTE FUNCTION boson_catalog_truncated();
CREATE TRIGGER outputs_truncate_notify AFTER TRUNCATE ON outputs
    FOR EACH STATEMENT EXECUTE FUNCTION boson_catalog_truncated();
CREATE TRIGGER connections_truncate_notify AFTER TRUNCATE ON connections
    FOR EACH STATEMENT EXECUTE FUNCTION boson_catalog_truncated();
