package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the engine until SIGTERM or SIGINT",
		Flags: append(logFlags(),
			configFlag,
			&cli.DurationFlag{Name: "drain-timeout", Value: 30 * time.Second,
				Usage: "on stop, how long lanes may finish the delivery in hand"},
		),
		Action: func(c *cli.Context) error {
			log, err := logger(c)
			if err != nil {
				return err
			}
			cfg, err := loadConfig(c)
			if err != nil {
				return err
			}
			if cfg.Cluster.Enabled {
				return errors.New("config: cluster.enabled = true: clustering is not in this build yet; run single-node (cluster.enabled = false)")
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()

			st, err := openStore(ctx, cfg.Store, true)
			if err != nil {
				return err
			}
			defer st.Close()
			mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err = st.Migrate(mctx)
			cancel()
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}

			nodeID := cfg.Cluster.NodeID
			if nodeID == "" {
				nodeID = leadership.NewNodeID()
			}
			log = log.With().Str("node", nodeID).Logger()
			eng, err := actors.Start(actors.Options{Config: cfg, Store: st, Log: log, NodeID: nodeID, DrainTimeout: c.Duration("drain-timeout")})
			if err != nil {
				return err
			}
			ev := log.Info().Str("config", cfg.Path).Str("store", cfg.Store.Backend).Str("version", Version)
			if cfg.Store.Backend == config.BackendSQLite {
				ev = ev.Str("path", cfg.Store.Path)
			}
			ev.Msg("mf started")

			<-ctx.Done()
			log.Info().Msg("stopping: closing listeners and finishing the deliveries in hand")
			sctx, cancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout")+30*time.Second)
			defer cancel()
			if err := eng.Stop(sctx); err != nil {
				return err
			}
			log.Info().Msg("mf stopped")
			return nil
		},
	}
}
