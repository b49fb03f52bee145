-- Store a secret unless its name has one: the first value stays. One
-- statement, so atomic without a transaction; UPDLOCK, HOLDLOCK make the
-- NOT EXISTS read take a key-range update lock that lasts to the end of the
-- statement, so of two nodes inserting one name at once the second waits,
-- then finds the first's row and inserts nothing (instead of failing on the
-- primary key).
SET NOCOUNT ON;
INSERT INTO mf_secrets (name, value)
SELECT @name, @value
 WHERE NOT EXISTS (SELECT 1 FROM mf_secrets WITH (UPDLOCK, HOLDLOCK) WHERE name = @name);
