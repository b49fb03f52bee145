-- Serialises migrations of one schema across nodes for the rest of the
-- transaction; the key includes the schema so that separate schemas (tests)
-- do not wait for each other.
SELECT pg_advisory_xact_lock(hashtext('mf_migrate'), hashtext(current_schema()))
