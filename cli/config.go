package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/config"
)

// loadConfig reads --config, else ./mf.toml, else the built-in default.
func loadConfig(c *cli.Context) (*config.Config, error) {
	if p := c.String("config"); p != "" {
		return config.Load(p)
	}
	if _, err := os.Stat("mf.toml"); err == nil {
		return config.Load("mf.toml")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("config: mf.toml: %w", err)
	}
	cfg, err := config.Default()
	if err != nil {
		return nil, err
	}
	cfg.Store.Password = os.Getenv(config.PasswordEnv)
	return cfg, nil
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a config file without starting anything",
		Flags: []cli.Flag{configFlag},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "%s: ok (%d inbound, %d outbound, %d routes, store %s)\n",
				cfg.Path, len(cfg.Inbound), len(cfg.Outbound), len(cfg.Route), cfg.Store.Backend)
			return nil
		},
	}
}
