-- config_fingerprint is the fingerprint of the graph config the node runs
-- ([[inbound]], [[outbound]], [[route]] and the few settings the graph
-- reads; config.Config.GraphFingerprint), written by every heartbeat. The
-- primary compares the live nodes' with its own, so that a node whose file
-- routes differently is reported before a failover makes it primary. ''
-- for a node whose mf predates the column: not compared.
ALTER TABLE mf_nodes ADD COLUMN config_fingerprint text NOT NULL DEFAULT '';
