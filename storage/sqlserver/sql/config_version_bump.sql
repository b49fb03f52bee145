-- Upsert and return the new version. HOLDLOCK serialises two first bumps of
-- one name (the second waits and increments).
MERGE mf_config WITH (HOLDLOCK) AS c
USING (VALUES (@name)) AS s (name)
   ON c.name = s.name
WHEN MATCHED THEN
    UPDATE SET version = c.version + 1
WHEN NOT MATCHED THEN
    INSERT (name, version) VALUES (s.name, 1)
OUTPUT inserted.version;
