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
	"context"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/lanes"
)

// WithZerolog routes protoactor's own logging (it logs through slog) into
// zerolog, so that the process writes one log format.
func WithZerolog(log zerolog.Logger) actor.ConfigOption {
	l := log.With().Str("component", "protoactor").Logger()
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(panicRedacting{zerolog.NewSlogHandler(l)})
	})
}

// panicRedacting shows a panic's value in protoactor's lines about it
// ("[ACTOR] Recovering", its supervision events) as lanes.PanicReason
// does: protoactor logs the value whole, and its text may quote a
// message's field. (The messages protoactor logs, dead letters, show what
// their LogValue methods say.)
type panicRedacting struct{ slog.Handler }

// panicKeys are the attributes protoactor puts a panic's value in.
var panicKeys = map[string]bool{"reason": true, "exception": true}

func (h panicRedacting) Handle(ctx context.Context, r slog.Record) error {
	if staleStop(r) {
		return nil
	}
	redacted := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if panicKeys[a.Key] {
			a = slog.String(a.Key, lanes.PanicReason(a.Value.Any()))
		}
		redacted.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, redacted)
}

// staleStop reports whether r is the dead letter of a stop that reached an
// actor already gone: a lane that ended itself idle as its manager
// stopped, which protoactor then stops again with the manager's children.
// Nothing was lost, and at every clean stop the line only worried.
func staleStop(r slog.Record) bool {
	if r.Message != "[DeadLetter]" {
		return false
	}
	stop := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "message" {
			_, stop = a.Value.Any().(*actor.Stop)
			return false
		}
		return true
	})
	return stop
}

func (h panicRedacting) WithAttrs(as []slog.Attr) slog.Handler {
	return panicRedacting{h.Handler.WithAttrs(as)}
}

func (h panicRedacting) WithGroup(name string) slog.Handler {
	return panicRedacting{h.Handler.WithGroup(name)}
}
