-- Store a secret unless its name has one: the first value stays. A
-- concurrent insert of the same name waits for the other to commit, then does
-- nothing; either way a committed row exists when this returns, and
-- secret_read.sql (a new statement, so a new snapshot) sees it.
INSERT INTO mf_secrets (name, value) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
