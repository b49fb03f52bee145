// Package actors is the engine's actor tree (DESIGN §3) on protoactor-go:
// root reacts to the leadership actor's changes by starting graph(T) when
// this node wins term T (after promotion recovery) and stopping it, and
// waiting for every listener to close its port, when it loses it.
//
//	root
//	├── leadership      the lease loop (cluster) or "leader, term 0" (single node)
//	└── graph(T)        only while this node leads
//	    ├── lanes       lane manager → lane actors
//	    ├── ingest      group commit
//	    ├── listener-*  MLLP listeners and file inbounds
//	    └── sweeper     expired-lease reclaim and retention purge
package actors

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// WithZerolog routes protoactor's own logging (it logs through slog) into
// zerolog, so that the process writes one log format.
func WithZerolog(log zerolog.Logger) actor.ConfigOption {
	l := log.With().Str("component", "protoactor").Logger()
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(zerolog.NewSlogHandler(l))
	})
}
