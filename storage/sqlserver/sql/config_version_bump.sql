-- Upsert and return the new version. HOLDLOCK serialises two first bumps of
-- one name (the second waits and increments). OUTPUT goes INTO a table
-- variable: a bare OUTPUT clause is refused on a table with an enabled
-- trigger (error 334; see lease_attempt_renew.sql).
SET NOCOUNT ON;
DECLARE @bumped TABLE (version BIGINT NOT NULL);
MERGE mf_config WITH (HOLDLOCK) AS c
USING (VALUES (@name)) AS s (name)
   ON c.name = s.name
WHEN MATCHED THEN
    UPDATE SET version = c.version + 1
WHEN NOT MATCHED THEN
    INSERT (name, version) VALUES (s.name, 1)
OUTPUT inserted.version INTO @bumped (version);
SELECT version FROM @bumped;
