-- Where the walk of message_purge_walk.sql goes on from: ?1, the highest
-- message id it has walked past.
INSERT INTO mf_config (name, version) VALUES ('message_purge_walked', ?1)
ON CONFLICT (name) DO UPDATE SET version = excluded.version
