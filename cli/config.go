package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/sqlserver"
)

// loadConfig reads --config, else ./mf.toml, else the built-in default.
// The commands that read a config take no argument: mf check prod.toml
// checked the built-in default and said ok, and mf run prod.toml ran it.
func loadConfig(c *cli.Context) (*config.Config, error) {
	if c.NArg() > 0 {
		return nil, fmt.Errorf("mf %s takes no argument, and was given %q: name the config file with --config %s (or MF_CONFIG)",
			c.Command.Name, c.Args().First(), c.Args().First())
	}
	if p := c.String("config"); p != "" {
		return config.Load(p)
	}
	// Given, but empty ("$CFG" of an unset variable): taken for not given,
	// mf check checked the built-in default and said ok, and mf run ran it.
	if c.IsSet("config") {
		return nil, errors.New("--config (or MF_CONFIG) is empty: name the config file, or leave both out for ./mf.toml or the built-in default")
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
	if cfg.Store.Password, err = config.StorePassword(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:  "check",
		Usage: "validate a config file without starting anything",
		Flags: []cli.Flag{configFlag()},
		Action: func(c *cli.Context) error {
			// The log settings mf run would refuse (flags, or
			// MF_LOG_FORMAT and MF_LOG_LEVEL in its environment).
			if _, err := logger(c); err != nil {
				return err
			}
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			// What mf run refuses when it opens the store, refused here
			// too; nothing connects.
			warnings := cfg.Warnings()
			checkURL := map[string]func(string) (string, error){
				config.BackendPostgres: postgres.CheckURL, config.BackendSQLServer: sqlserver.CheckURL,
			}[cfg.Store.Backend]
			if checkURL != nil {
				w, err := checkURL(cfg.Store.URL)
				if err != nil {
					return fmt.Errorf("config: %s: store.url: %w", cfg.Path, err)
				}
				if w != "" {
					warnings = append(warnings, "store.url: "+w)
				}
			}
			if cfg.Store.Backend == config.BackendSQLite {
				// mf run creates the file, not its directory.
				if dir := filepath.Dir(cfg.Store.Path); !isDir(dir) {
					warnings = append(warnings, fmt.Sprintf("store.path: the directory %s does not exist here: mf run, which creates the file but not its directory, would fail to start: create it, or correct store.path", dir))
				}
			}
			fmt.Fprintf(c.App.Writer, "%s: ok (%d inbound, %d outbound, %d routes, store %s)\n",
				cfg.Path, len(cfg.Inbound), len(cfg.Outbound), len(cfg.Route), cfg.Store.Backend)
			// What mf run would log at WARN, said before it runs.
			for _, w := range warnings {
				fmt.Fprintf(c.App.Writer, "warning: %s\n", w)
			}
			return nil
		},
	}
}

// isDir reports whether path names a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// reloadConfig reads the config a node started with again.
func reloadConfig(path string) (*config.Config, error) {
	if path == config.DefaultName {
		return config.Default()
	}
	return config.Load(path)
}

func reloadCommand() *cli.Command {
	return &cli.Command{
		Name:  "reload",
		Usage: "validate a config file, then tell every node of the cluster to reload its own copy",
		Description: "Bumps the shared config version in the store. Every node notices within a heartbeat,\n" +
			"re-reads its own config file and restarts its graph on it; each node reports the version\n" +
			"it runs. Deploy the same file to every node first. A single node (cluster.enabled = false)\n" +
			"does not watch the version: restart it to apply its file.",
		Flags: []cli.Flag{configFlag(),
			&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, Usage: "wait this long for every live node to report the new version (0: do not wait)"},
		},
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			wait := c.Duration("wait")
			if wait < 0 {
				return errors.New("reload: --wait must not be negative")
			}
			// The built-in default is what mf run uses in a directory
			// without mf.toml; a reload run there was meant for a file.
			if cfg.Path == config.DefaultName {
				return errors.New("reload: no config file: name the one the cluster's nodes run with --config or MF_CONFIG, or run mf reload in the directory of its mf.toml")
			}
			// Refused before the store is opened: a bump would report
			// success, and no single node would ever act on it.
			if !cfg.Cluster.Enabled {
				return fmt.Errorf("reload: %s: %w", cfg.Path, api.ErrSingleNodeReload)
			}
			return withStore(c, cfg, false, func(st storage.Store) error {
				// The wait reads mf_nodes as this mf's migrations left it. On
				// a schema they have not reached (a rolling upgrade before mf
				// migrate) it would set the version, then fail on a missing
				// column, as if the reload had not been made: refused first.
				if wait > 0 {
					sctx, cancel := context.WithTimeout(c.Context, reloadStoreTimeout)
					err := st.SchemaCheck(sctx)
					cancel()
					if errors.Is(err, storage.ErrSchemaOlder) {
						return fmt.Errorf("reload: %w; or run mf reload --wait 0, which sets the version without waiting for the nodes to report it (this mf cannot read it from an older schema)", err)
					}
				}
				bctx, cancel := context.WithTimeout(c.Context, reloadStoreTimeout)
				v, err := st.ConfigVersionBump(bctx, storage.ConfigVersionBumpParams{})
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("reload: the database did not set the config version within %v (a lock held on mf_config? look in pg_stat_activity); it may still be set: run mf reload again, which does no harm: %w", reloadStoreTimeout, err)
				}
				if err != nil {
					return fmt.Errorf("reload: %w", err)
				}
				if wait == 0 {
					fmt.Fprintf(c.App.Writer, "config version %d: every node reloads its own config file within a heartbeat\n", v)
					return nil
				}
				fmt.Fprintf(c.App.Writer, "config version %d: waiting up to %v for every live node to reload its own config file and report it\n", v, wait)
				return awaitReload(c.Context, c.App.Writer, st, cfg.Cluster, v, wait)
			})
		},
	}
}

// reloadStoreTimeout bounds each store call of mf reload: with none, a lock
// held on mf_config or mf_nodes (a maintenance, an open session) held the
// command, silent, past its --wait, for as long as the lock.
var reloadStoreTimeout = 15 * time.Second

// awaitReload waits until every live node (active, seen within
// node_timeout_seconds) reports config version v or later in mf_nodes, or
// that its reload to v (or later) failed, and says so; a failure fails it,
// naming the node and its error, and at the deadline it names each node
// that reported neither, and fails. A node reports the version only once
// its reload worked: one whose own file does not load keeps its config and
// its version, and reports why (as its log does at ERROR); the operator who
// ran mf reload is the one to tell, at once.
func awaitReload(ctx context.Context, w io.Writer, st storage.Store, cl config.Cluster, v int64, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		lctx, cancel := context.WithTimeout(ctx, min(reloadStoreTimeout, time.Until(deadline)+time.Second))
		l, err := st.NodeList(lctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("reload: config version %d is set, but mf_nodes, which says which nodes run it, did not answer in time (a lock held on it? look in pg_stat_activity); GET /cluster/nodes tells once it does: %w", v, err)
		}
		if err != nil {
			return fmt.Errorf("reload: config version %d is set, but reading mf_nodes to see which nodes run it failed: %w", v, err)
		}
		var live, behind, failed []storage.Node
		for _, n := range l.Nodes {
			if n.Status == "active" && l.DBNow.Sub(n.LastSeen) < cl.NodeTimeout() {
				live = append(live, n)
				switch {
				case n.ConfigVersion >= v:
				case n.ConfigFailedVersion >= v:
					failed = append(failed, n)
				default:
					behind = append(behind, n)
				}
			}
		}
		if len(live) == 0 {
			fmt.Fprintf(w, "no node runs: each reads config version %d at its start\n", v)
			return nil
		}
		if len(behind) == 0 && len(failed) > 0 {
			sayFailed(w, failed)
			return fmt.Errorf("reload: %d of %d live nodes could not reload to config version %d: fix their config files and run mf reload again", len(failed), len(live), v)
		}
		if len(behind) == 0 {
			ids := make([]string, len(live))
			for i, n := range live {
				ids[i] = n.NodeID
			}
			fmt.Fprintf(w, "every live node runs config version %d: %s\n", v, strings.Join(ids, ", "))
			return nil
		}
		if !time.Now().Before(deadline) {
			sayFailed(w, failed)
			for _, n := range behind {
				fmt.Fprintf(w, "%s still runs config version %d (host %s, pid %d): its reload has not finished (lanes finishing the delivery in hand), or failed on an mf too old to report it (its log says why, \"config reload failed\")\n",
					n.NodeID, n.ConfigVersion, n.Host, n.PID)
			}
			return fmt.Errorf("reload: %d of %d live nodes did not report config version %d within %v: fix their config files and run mf reload again", len(behind)+len(failed), len(live), v, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(cl.Heartbeat()/2, time.Until(deadline))):
		}
	}
}

// sayFailed names each node of failed, whose reload failed, and its error.
func sayFailed(w io.Writer, failed []storage.Node) {
	for _, n := range failed {
		fmt.Fprintf(w, "%s failed to reload config version %d and still runs version %d (host %s, pid %d): %s\n",
			n.NodeID, n.ConfigFailedVersion, n.ConfigVersion, n.Host, n.PID, n.ConfigError)
	}
}
