SELECT value FROM mf_secrets WHERE name = @name;
