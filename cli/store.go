package cli

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/sqlite"
	"github.com/messagefoundry/mf/storage/sqlserver"
)

// openStore opens the configured store (it does not migrate). The engine
// opens a SQLite file exclusively: one process per file. log receives what
// the store does on its own (SQLite's background checkpoints).
func openStore(ctx context.Context, cfg *config.Config, engine bool, log zerolog.Logger) (storage.Store, error) {
	s, cluster := cfg.Store, cfg.Cluster
	switch s.Backend {
	case config.BackendSQLite:
		return sqlite.Open(ctx, sqlite.Options{Path: s.Path, Exclusive: engine, Log: log})
	case config.BackendPostgres:
		o := postgres.Options{URL: s.URL, Password: s.Password, PoolSize: int32(s.PoolSize)}
		if cluster.Enabled {
			o.IdleInTransactionTimeout = cluster.LeaderFenceTimeout()
		}
		return postgres.Open(ctx, o)
	case config.BackendSQLServer:
		return sqlserver.Open(ctx, sqlserver.Options{URL: s.URL, Password: s.Password, PoolSize: s.PoolSize})
	}
	return nil, fmt.Errorf("store.backend %q is not supported", s.Backend)
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply the store's schema migrations and exit (mf run also does this at start)",
		Flags: []cli.Flag{configFlag},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			return withStore(c, cfg, func(st storage.Store) error {
				if err := st.Migrate(c.Context); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "%s store migrated\n", st.Dialect())
				return nil
			})
		},
	}
}

// withStore opens cfg's store for a one-off command and runs fn on it.
func withStore(c *cli.Context, cfg *config.Config, fn func(storage.Store) error) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	st, err := openStore(c.Context, cfg, false, log)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}
