-- Store a secret unless its name has one: the first value stays. SQLite has
-- one writer, and secret_read.sql runs in the same transaction.
INSERT OR IGNORE INTO mf_secrets (name, value) VALUES (?1, ?2)
