SELECT version FROM mf_config WHERE name = @name;
