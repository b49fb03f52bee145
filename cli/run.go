package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/sqlserver"
)

// migrateTimeout bounds mf run's migrations, so that a node never waits
// without end at start; mf migrate has no limit (a variable for a test).
var migrateTimeout = 2 * time.Minute

// singleNodeHolder is a store on a database server (PostgreSQL, SQL
// Server), where a single node takes a lock for its life so that a second
// one on the schema is refused (storage.ErrSingleNodeTaken), and learns on
// the channel that another took it while its session was down.
type singleNodeHolder interface {
	HoldSingleNode(ctx context.Context) (<-chan error, error)
}

var (
	_ singleNodeHolder = (*postgres.Store)(nil)
	_ singleNodeHolder = (*sqlserver.Store)(nil)
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the engine until SIGTERM, SIGINT or SIGHUP",
		Flags: append(logFlags(false),
			configFlag(),
			&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second,
				Usage: "on stop, how long lanes may finish the delivery in hand"},
		),
		Action: func(c *cli.Context) error {
			// First of all: until this call a SIGTERM kills the process
			// (the default action) rather than stop it, and one sent while
			// it starts (a service manager's stop, a restart) exited it by
			// the signal, not 0. SIGHUP too: the terminal mf run was
			// started from closing killed it, the deliveries in hand cut
			// off. Unless SIGHUP is ignored (nohup): Notify would undo
			// that, and logging out of the session that started it
			// stopped the engine.
			ctx, stop := signal.NotifyContext(c.Context, stopSignals()...)
			defer stop()
			// The engine takes a drain timeout of zero for its default, and
			// the stop below is given the flag's value plus a margin: with
			// 0 it ran out while the engine still drained, before the lease
			// was resigned.
			if d := c.Duration("drain-timeout"); d <= 0 {
				return fmt.Errorf("--drain-timeout %v: must be positive (how long a stop lets lanes finish the delivery in hand)", d)
			}
			log, err := logger(c)
			if err != nil {
				return err
			}
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			// Said at once, before the wait for the database, which has no
			// end: the API serves from the start, and a plaintext API on the
			// network must be told while it does.
			warned := cfg.Warnings()
			for _, w := range warned {
				log.Warn().Str("config", cfg.Path).Msg(w)
			}
			// The engine's config once it runs: a reload may change
			// log_payloads.
			var eng atomic.Pointer[actors.Engine]
			defer routeStdlibLog(log, func() bool {
				if e := eng.Load(); e != nil {
					return e.Config().LogPayloads
				}
				return cfg.LogPayloads
			})()
			nodeID := cfg.Cluster.NodeID
			if nodeID == "" {
				nodeID = leadership.NewNodeID()
			}
			st, err := openStore(ctx, cfg, true, "mf "+nodeID, log)
			if err != nil && ctx.Err() != nil {
				return stoppedWhileWaiting(ctx, log)
			}
			if err != nil {
				return err
			}
			defer st.Close()
			log = log.With().Str("node", nodeID).Logger()
			// The API runs on every node, primary or standby, and from
			// the start: while the node waits for its database, /health
			// answers 200 (the process runs: a liveness probe must not
			// kill a node that waits on purpose), /ready 503 with why,
			// and /cluster/status a node that does not lead.
			srv := api.New(api.Options{Config: cfg, Store: st, Log: log,
				Status: func() actors.Status {
					if e := eng.Load(); e != nil {
						return e.Status()
					}
					return actors.Status{NodeID: nodeID, Clustered: cfg.Cluster.Enabled}
				},
				InForce: func() *config.Config {
					if e := eng.Load(); e != nil {
						return e.Config()
					}
					return nil
				},
				CheckReload: func() error {
					if e := eng.Load(); e != nil {
						return e.CheckReload()
					}
					return api.ErrNotRunning
				},
				OutboundHeld: func(ctx context.Context, outbound string, held bool) error {
					if e := eng.Load(); e != nil {
						return e.OutboundHeld(ctx, outbound, held)
					}
					return nil // no lanes run yet: they read the holds when they start
				},
				ConfigDrift: leadership.ConfigDiffers,
				QueueChanged: func(ctx context.Context) error {
					if e := eng.Load(); e != nil {
						return e.QueueChanged(ctx)
					}
					return nil // no lanes run yet: they list the lanes when they start
				},
			})
			if err := srv.Start(); err != nil {
				return fmt.Errorf("api: %w", err)
			}
			apiDown := false
			defer func() { // an error return before the engine ran
				if !apiDown {
					sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					_ = srv.Shutdown(sctx)
				}
			}()
			// The database may not answer yet (a site coming back from a
			// power cut, the database slower to boot than the nodes): wait
			// for it here rather than exit, which leaves the node to a
			// service manager whose restarts run out first (systemd's, 5
			// in 10 s).
			timedOut := false
			var pending []int
			var known bool
			err = reachStore(ctx, log, "migrate", func(ctx context.Context) error {
				mctx, cancel := context.WithTimeout(ctx, migrateTimeout)
				defer cancel()
				if pg, ok := st.(*postgres.Store); ok {
					// Before anything else: behind a pooler that shares
					// sessions the migrations themselves may fail on
					// prepared statements, saying nothing of why.
					if err := pg.OwnSessions(mctx); err != nil {
						return err
					}
				}
				pending, known = storage.PendingMigrations(st.SchemaCheck(mctx))
				err := st.Migrate(mctx)
				timedOut = errors.Is(mctx.Err(), context.DeadlineExceeded)
				return err
			})
			if err != nil && ctx.Err() != nil {
				return stoppedWhileWaiting(ctx, log)
			}
			if err != nil && timedOut {
				migrate := "mf migrate --config " + cfg.Path
				if cfg.Path == config.DefaultName {
					migrate = "mf migrate here"
				}
				return fmt.Errorf("store: the schema migrations did not finish within %v and were rolled back: run %s, which has no time limit, then start mf run again: %w",
					migrateTimeout, migrate, err)
			}
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			if !known {
				log.Info().Msg("store: " + appliedText(pending, known))
			} else if len(pending) > 0 {
				log.Info().Ints("migrations", pending).Msg("store: " + appliedText(pending, known))
			}
			warnAutovacuum(ctx, st, log)
			warnSessionLimits(ctx, st, log)
			warnDelayedDurability(ctx, st, log)

			// A single node on PostgreSQL or SQL Server runs alone on its
			// schema, as one on SQLite on its file: two would both lead.
			var lost <-chan error
			if h, ok := st.(singleNodeHolder); ok && !cfg.Cluster.Enabled {
				if lost, err = h.HoldSingleNode(ctx); err != nil && ctx.Err() != nil {
					return stoppedWhileWaiting(ctx, log) // stopped while it waited for the lock
				} else if err != nil {
					return fmt.Errorf("store: %w", err)
				}
			}

			// Lost, the lock ends the engine through Failed, its
			// deliveries in hand abandoned, not drained (LockLost).
			opts := actors.Options{Config: cfg, Store: st, Log: log, NodeID: nodeID, DrainTimeout: c.Duration("drain-timeout"), LockLost: lost}
			if cfg.Cluster.Enabled {
				if err := clustered(ctx, &opts, log); err != nil {
					if ctx.Err() != nil {
						return stoppedWhileWaiting(ctx, log)
					}
					return err
				}
			}
			e, err := actors.Start(opts)
			if err != nil {
				return err
			}
			eng.Store(e)
			ev := log.Info().Str("config", cfg.Path).Str("store", cfg.Store.Backend).Str("version", Version).Bool("clustered", cfg.Cluster.Enabled)
			if cfg.Store.Backend == config.BackendSQLite {
				ev = ev.Str("path", cfg.Store.Path)
			}
			ev.Msg("mf started")
			for _, w := range opts.Config.Warnings() {
				if !slices.Contains(warned, w) { // the file as read again by a clustered node
					log.Warn().Str("config", cfg.Path).Msg(w)
				}
			}

			var failed error
			select {
			case <-ctx.Done():
			case failed = <-e.Failed():
			}
			// Catch no more signals: a second stop signal then has
			// Go's default effect and ends the process at once, for an
			// operator who will not wait out the drain. Until stop(),
			// NotifyContext swallowed it.
			stop()
			if failed != nil {
				// Root has stopped the graph and logged why at ERROR; the
				// exit status tells the service manager that mf failed.
				log.Error().Err(failed).Msg("stopping: the engine can no longer run (the ERROR line before says why); exiting non-zero")
			} else {
				what := "stopping: closing listeners and finishing the deliveries in hand; a second SIGINT, SIGTERM or SIGHUP stops at once"
				if !e.Status().Leader {
					// A standby has neither.
					what = "stopping: this node is a standby (no listener open, no delivery in hand); a second SIGINT, SIGTERM or SIGHUP stops at once"
				}
				log.Info().Str("cause", context.Cause(ctx).Error()).Dur("drain_timeout", c.Duration("drain-timeout")).Msg(what)
			}
			sctx, cancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout")+30*time.Second)
			defer cancel()
			if err := e.Stop(sctx); err != nil {
				return err
			}
			apiDown = true
			if err := srv.Shutdown(sctx); err != nil {
				log.Warn().Err(err).Msg("the API did not shut down cleanly")
			}
			if failed != nil {
				return fmt.Errorf("engine: %w", failed)
			}
			log.Info().Msg("mf stopped")
			return nil
		},
	}
}

// stoppedWhileWaiting ends mf run stopped by a signal before its
// database answered, or while it opened its store: a clean stop (exit 0),
// since the node holds nothing yet.
func stoppedWhileWaiting(ctx context.Context, log zerolog.Logger) error {
	log.Info().Str("cause", context.Cause(ctx).Error()).Msg("mf stopped before its database answered")
	return nil
}

// clustered sets a node up for active-passive: the lease loop as its
// leadership actor, and a config it can reload when another node bumps the
// shared version.
func clustered(ctx context.Context, opts *actors.Options, log zerolog.Logger) error {
	cfg := opts.Config
	if !opts.Store.Clusterable() {
		return fmt.Errorf("config: %s: cluster.enabled = true needs a server database; %s is single-node", cfg.Path, opts.Store.Dialect())
	}
	var version int64
	err := reachStore(ctx, log, "read the shared config version", func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var err error
		version, err = opts.Store.ConfigVersionRead(rctx, storage.ConfigVersionReadParams{})
		return err
	})
	if err != nil {
		return fmt.Errorf("store: read the shared config version: %w", err)
	}
	if cfg.Cluster.NodeID != "" { // an automatic id is this process's own
		if err := leadership.CheckNodeIDFree(ctx, opts.Store, cfg.Cluster, opts.NodeID, log); err != nil {
			return fmt.Errorf("%w (%s)", err, cfg.Path)
		}
	}
	opts.Trust = leadership.NewTrust()
	opts.ConfigVersion = version
	path, password := cfg.Path, cfg.Store.Password
	opts.Reload = func() (*config.Config, error) {
		c, err := reloadConfig(path)
		if err != nil {
			return nil, err
		}
		c.Store.Password = password
		return c, nil
	}
	// The file was read before the version (it names the database): a
	// bump in between, for a file edited since (the node waited for its
	// database while mf reload ran elsewhere), counted as applied, and
	// the node ran the old file under the new version without ever
	// reloading it. Read after the version, the file is at least as new;
	// a later bump is the elector's to notice.
	fresh, err := opts.Reload()
	if err == nil {
		restart := config.RestartOnly(cfg, fresh)
		if fresh, err = config.InForce(cfg, fresh); err == nil && len(restart) > 0 {
			log.Warn().Strs("sections", restart).Msg("the config file changed while this node started, in sections it has already read: they are not in force; restart the node to apply them")
		}
	}
	if err != nil {
		return fmt.Errorf("config: %s changed while this node started and no longer loads: %w", cfg.Path, err)
	}
	opts.Config = fresh
	// Made once the config in force is known: the elector reports its
	// graph's fingerprint from the first beat.
	opts.Leadership = leadership.NewElector(leadership.ElectorOptions{
		Store: opts.Store, Cluster: cfg.Cluster, NodeID: opts.NodeID, Trust: opts.Trust, ConfigVersion: version,
		ConfigFingerprint: fresh.GraphFingerprint(), Pinned: cfg.Cluster.NodeID != "", Log: log,
	})
	return nil
}

// stopSignals are the signals that stop mf run cleanly: SIGINT, SIGTERM and,
// unless the process was started with it ignored (nohup), SIGHUP.
func stopSignals() []os.Signal {
	sigs := []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}
