SELECT version FROM mf_config WHERE name = ?1
