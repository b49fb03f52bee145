SELECT value FROM mf_secrets WHERE name = $1
