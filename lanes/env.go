package lanes

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// Env is what the lane actors of one graph share: the leader term they work
// under and the means to act in it.
type Env struct {
	// Ctx is cancelled when the term ends (demotion or fence): deliveries in
	// hand are abandoned (they will be delivered again by the next leader).
	Ctx   context.Context
	Store storage.Store
	Fence storage.Fence
	// Owner is this node; it holds the row leases of the lane's claims.
	Owner string
	// Trust reports whether this node may still act as leader right now
	// (the leadership trust window); a lane sends nothing when it is false.
	Trust  func() bool
	Config *config.Config
	Log    zerolog.Logger
	// OnFenced is called when a write fails with storage.ErrFenced: the node
	// has lost leadership and the graph must stop.
	OnFenced func(op string, err error)
	// Moving has the destinations whose queued rows the graph's start
	// moves into the lanes of the lane_key in force (RelaneBegin), each
	// with a channel closed once its rows are moved (Relane): the Manager
	// starts no lane of such a destination before then, while the graph's
	// inbounds already store and acknowledge messages and the lanes of
	// every other destination deliver. Empty: no move runs.
	Moving map[string]<-chan struct{}

	// storeFailures follows the lanes' failed store calls, so that a
	// database away is logged when it starts, once a minute while it lasts
	// and when it ends, not once a second by every lane.
	storeFailures storage.Outage
}

// logPayloads reports config log_payloads: whether log lines may carry a
// destination's own words about a message.
func (e *Env) logPayloads() bool { return e.Config != nil && e.Config.LogPayloads }
