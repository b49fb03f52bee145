package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/sqlite"
	"github.com/messagefoundry/mf/storage/sqlserver"
)

// openStore opens the configured store (it does not migrate). exclusive
// (mf run, mf migrate) opens a SQLite file as its one process: an engine
// runs alone on its file, and a migration must not change the schema under
// a running engine. log receives what the store does on its own (SQLite's
// background checkpoints). session names the database sessions where the
// server shows a name (PostgreSQL's application_name, SQL Server's
// program_name): "mf NODE_ID" for mf run, "mf migrate" for a one-off
// command.
func openStore(ctx context.Context, cfg *config.Config, exclusive bool, session string, log zerolog.Logger) (storage.Store, error) {
	s, cluster := cfg.Store, cfg.Cluster
	switch s.Backend {
	case config.BackendSQLite:
		st, err := sqlite.Open(ctx, sqlite.Options{Path: s.Path, PoolSize: s.PoolSize, Exclusive: exclusive, Log: log})
		if err != nil {
			// The store says what is wrong with the file; the key is the
			// config's.
			return nil, fmt.Errorf("store.path %q: %w", s.Path, err)
		}
		return st, nil
	case config.BackendPostgres:
		o := postgres.Options{URL: s.URL, Password: s.Password, PoolSize: int32(s.PoolSize), ApplicationName: session, Log: log}
		if cluster.Enabled {
			o.IdleInTransactionTimeout = cluster.LeaderFenceTimeout()
		}
		return postgres.Open(ctx, o)
	case config.BackendSQLServer:
		return sqlserver.Open(ctx, sqlserver.Options{URL: s.URL, Password: s.Password, PoolSize: s.PoolSize, ApplicationName: session, Log: log})
	}
	return nil, fmt.Errorf("store.backend %q is not supported", s.Backend)
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply the store's schema migrations and exit (mf run also does this at start)",
		Flags: []cli.Flag{configFlag()},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			// With no config, the store is the ./mf.db mf run would use
			// here. Migrating one that exists ahead of a run is fine;
			// creating it is not: mf migrate run in the wrong directory
			// would leave a stray empty mf.db and report success.
			if cfg.Path == config.DefaultName {
				if _, err := os.Stat(cfg.Store.Path); errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("migrate: no config file (--config, MF_CONFIG or ./mf.toml) and no ./%s: nothing to migrate (mf run creates and migrates ./%s itself)",
						cfg.Store.Path, cfg.Store.Path)
				} else if err != nil {
					return fmt.Errorf("migrate: %w", err)
				}
			}
			return withStore(c, cfg, true, func(st storage.Store) error {
				pending, known := storage.PendingMigrations(st.SchemaCheck(c.Context))
				if err := st.Migrate(c.Context); err != nil {
					return err
				}
				where := cfg.Path
				if cfg.Store.Backend == config.BackendSQLite {
					where = cfg.Store.Path + ", config " + cfg.Path
				}
				fmt.Fprintf(c.App.Writer, "%s store migrated (%s): %s\n", st.Dialect(), where, appliedText(pending, known))
				return nil
			})
		},
	}
}

// backupCommand is mf backup: a copy of a SQLite store that mf run starts
// on, made while the engine runs. A database server's store is backed up
// with the server's own tools, which know its other sessions and files.
func backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "write a consistent copy of the SQLite store to a new file, while mf run runs or not",
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "to", Usage: "the file to write the copy to (it must not exist; mode 0600)"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			if err := sqliteOnly(cfg, "backup", "back up a PostgreSQL store with pg_dump", "back up a SQL Server store with the server's BACKUP DATABASE"); err != nil {
				return err
			}
			to := c.String("to")
			if to == "" {
				return fmt.Errorf("backup: --to FILE is required: the new file to write the copy to")
			}
			// A store that is not there is not created: a backup run in
			// the wrong directory would copy a new empty store and report
			// success.
			if _, err := os.Stat(cfg.Store.Path); err != nil {
				return fmt.Errorf("backup: store.path %q (%s): %w: nothing to back up", cfg.Store.Path, configName(cfg), err)
			}
			// Not exclusive: the copy is read beside a running engine.
			return withStore(c, cfg, false, func(st storage.Store) error {
				if err := st.Ping(c.Context); err != nil {
					return fmt.Errorf("backup: store.path %q: %w", cfg.Store.Path, err)
				}
				sum, err := st.(*sqlite.Store).Backup(c.Context, to)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "sqlite store %s (%s) backed up to %s: %d messages, %d queue rows to deliver, last message id %d, last queue id %d\n",
					cfg.Store.Path, configName(cfg), to, sum.Messages, sum.Unfinished, sum.LastMessageID, sum.LastQueueID)
				return nil
			})
		},
	}
}

// restoreCommand is mf restore: a backup put in place of a SQLite store,
// the store it replaces moved aside whole (its -wal with it).
func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "put a backup made by mf backup in place of the SQLite store (mf run stopped), moving the store it replaces aside",
		Flags: []cli.Flag{
			configFlag(),
			&cli.StringFlag{Name: "from", Usage: "the backup to restore (mf backup's file)"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			if err := sqliteOnly(cfg, "restore", "restore a PostgreSQL dump with pg_restore into a new database", "use the server's RESTORE DATABASE"); err != nil {
				return err
			}
			from := c.String("from")
			if from == "" {
				return fmt.Errorf("restore: --from FILE is required: the backup (made by mf backup) to put in place of the store")
			}
			r, err := sqlite.Restore(c.Context, cfg.Store.Path, from, time.Now().UTC().Format("20060102T150405Z"))
			if err != nil {
				return fmt.Errorf("restore: store.path %q (%s): %w", cfg.Store.Path, configName(cfg), err)
			}
			replaced := "there was no store there"
			if len(r.Aside) > 0 {
				replaced = "the store it replaces was moved to " + strings.Join(r.Aside, ", ")
			}
			fmt.Fprintf(c.App.Writer, "restored %s to %s (%s): %d messages, %d queue rows to deliver, last message id %d, last queue id %d; %s\n",
				from, cfg.Store.Path, configName(cfg), r.Messages, r.Unfinished, r.LastMessageID, r.LastQueueID, replaced)
			fmt.Fprintln(c.App.Writer, "mf run delivers the backup's queue again: messages delivered since the backup are sent again, and messages accepted since the backup are not in it (ask their senders to resend them)")
			return nil
		},
	}
}

// sqliteOnly refuses mf backup and mf restore (cmd) on a database server's
// store, saying what to use there instead: the server's own tools, which
// know its other sessions and files.
func sqliteOnly(cfg *config.Config, cmd, postgres, sqlserver string) error {
	instead := map[string]string{config.BackendPostgres: postgres, config.BackendSQLServer: sqlserver}[cfg.Store.Backend]
	if instead == "" {
		return nil
	}
	return fmt.Errorf("%s: store.backend is %s: mf %s works on a SQLite store only; %s (README, Backing up and restoring the store)", cmd, cfg.Store.Backend, cmd, instead)
}

// configName names cfg's file for a message in parentheses, "config
// FILE", or "built-in default config".
func configName(cfg *config.Config) string {
	if cfg.Path == config.DefaultName {
		return strings.Trim(cfg.Path, "()")
	}
	return "config " + cfg.Path
}

// warnAutovacuum warns when PostgreSQL will not vacuum mf's tables by
// itself: every delivery leaves dead row versions in mf_queue, and without
// vacuum the table and its indexes only grow, so claims and the purge slow
// down week by week, with nothing failing to say why.
func warnAutovacuum(ctx context.Context, st storage.Store, log zerolog.Logger) {
	pg, ok := st.(*postgres.Store)
	if !ok {
		return // SQLite reuses freed pages; SQL Server cleans up ghost records itself
	}
	a, err := pg.Autovacuum(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("could not tell whether PostgreSQL vacuums mf's tables by itself; running on")
		return
	}
	if !a.Server {
		log.Warn().Msg("PostgreSQL's autovacuum is off on this server (autovacuum or track_counts = off): the dead row versions every delivery leaves in mf_queue are never removed, " +
			"so the table grows and claims slow down; turn autovacuum on, or VACUUM (ANALYZE) mf_queue and mf_messages on a schedule")
	}
	if len(a.Disabled) > 0 {
		log.Warn().Strs("tables", a.Disabled).Msg("autovacuum is turned off for these tables (autovacuum_enabled = off): their dead row versions are never removed, " +
			"so they grow and claims slow down; ALTER TABLE ... RESET (autovacuum_enabled), or VACUUM (ANALYZE) them on a schedule")
	}
}

// warnSessionLimits warns when a limit on PostgreSQL sessions (a
// CONNECTION LIMIT of mf's role or database, max_connections) is below
// what this node opens: under load its pool's new sessions are refused,
// and messages answered AE now and then, with nothing said at start.
func warnSessionLimits(ctx context.Context, st storage.Store, log zerolog.Logger) {
	pg, ok := st.(*postgres.Store)
	if !ok {
		return
	}
	below, err := pg.SessionLimits(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("could not read the limits on this node's database sessions; running on")
		return
	}
	if below != "" {
		log.Warn().Msg(below + ": under load the database refuses its new sessions (too many connections, SQLSTATE 53300), and messages are answered AE; lower [store] pool_size or raise the limit, for every node (each opens as many)")
	}
}

// warnDelayedDurability logs an ERROR when a SQL Server database forces
// delayed durability: each commit is acknowledged before its log records
// are on disk, so an AA would not mean the message is safe.
func warnDelayedDurability(ctx context.Context, st storage.Store, log zerolog.Logger) {
	ss, ok := st.(*sqlserver.Store)
	if !ok {
		return
	}
	d, err := ss.DelayedDurability(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("could not read the database's DELAYED_DURABILITY; running on (with FORCED, acknowledged messages can be lost)")
		return
	}
	if strings.EqualFold(d, "FORCED") {
		log.Error().Str("delayed_durability", d).Msg("the database forces delayed durability: SQL Server acknowledges each commit before it is on disk, and a crash of the server loses messages mf has answered AA; " +
			"no session can change that: ALTER DATABASE <name> SET DELAYED_DURABILITY = DISABLED")
	}
}

// withStore opens cfg's store for a one-off command and runs fn on it
// (exclusive: see openStore).
func withStore(c *cli.Context, cfg *config.Config, exclusive bool, fn func(storage.Store) error) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	st, err := openStore(c.Context, cfg, exclusive, "mf "+c.Command.Name, log)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

// storeRetryPause is how long mf run waits before it tries its database
// again while it cannot reach it at start.
const storeRetryPause = time.Second

// reachStore runs fn, one of the first calls mf run makes to its database
// (what names it), again every storeRetryPause for as long as it fails
// because the database cannot be reached (storage.Unreachable), or every
// host of a PostgreSQL url asking for a writable one is read-only
// (postgres.NoWritableHost: a failover under way), logging
// when the wait starts, once a minute while it lasts and when it ends. It
// returns fn's last error, nil included, or the error it had when ctx
// ended. A node waiting here holds nothing: no lease, no port, no row.
func reachStore(ctx context.Context, log zerolog.Logger, what string, fn func(context.Context) error) error {
	began := time.Now()
	var waiting storage.Outage
	for {
		err := fn(ctx)
		if err == nil || !(storage.Unreachable(err) || postgres.NoWritableHost(err)) || ctx.Err() != nil {
			if n := waiting.Over(); err == nil && n > 0 {
				log.Info().Str("step", what).Int("failures", n).Dur("waited", time.Since(began).Round(time.Millisecond)).
					Msg("reached the database; starting")
			}
			return err
		}
		if report, n := waiting.Failed(time.Now()); report {
			log.Warn().Err(err).Str("step", what).Int("failures", n).Dur("waited", time.Since(began).Round(time.Millisecond)).
				Dur("retry_every", storeRetryPause).
				Msg("cannot reach the database at start; this node retries until it answers and takes no part until then: check the database, the network to it and [store] url")
		}
		t := time.NewTimer(storeRetryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// appliedText says what a migration did, from PendingMigrations read
// before it: the operator of an upgrade learns whether the schema moved
// (the migrations themselves are idempotent, and one run beside another
// node's may find them applied by it).
func appliedText(pending []int, known bool) string {
	switch {
	case !known:
		return "schema created or brought up to date"
	case len(pending) == 0:
		return "nothing to apply, the schema was up to date"
	}
	return fmt.Sprintf("applied migration %v", pending)
}
