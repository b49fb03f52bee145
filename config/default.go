package config

import _ "embed"

//go:embed default.toml
var defaultTOML []byte

// DefaultName is what errors call the built-in config.
const DefaultName = "(built-in default config)"

// Default returns the built-in config `mf run` uses without a file.
func Default() (*Config, error) { return Parse(defaultTOML, DefaultName) }
