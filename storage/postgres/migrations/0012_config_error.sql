-- A node's failed reload, recorded by its heartbeat: the newest shared
-- config version its own file did not reload to (0: none, or an mf older
-- than this column), and why, so that mf reload can say at once which node
-- failed and why instead of waiting out its --wait and pointing at the
-- node's log. A reload that works clears both.
ALTER TABLE mf_nodes
    ADD COLUMN config_failed_version bigint NOT NULL DEFAULT 0,
    ADD COLUMN config_error          text   NOT NULL DEFAULT '';
