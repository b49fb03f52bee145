package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/listeners"
	"github.com/messagefoundry/mf/storage"
)

// graphSpec is everything graph(T) is started with.
type graphSpec struct {
	ctx      context.Context // cancelled when the term ends
	cfg      *config.Config
	store    storage.Store
	fence    storage.Fence
	ended    <-chan struct{} // closed when term fence.Term ends (leadership.Changed.Ended)
	owner    string          // this run of the node: the owner of the row leases it takes
	trust    *leadership.Trust
	log      zerolog.Logger
	router   *lanes.Router
	onFenced func(op string, err error)
	binds    *listeners.Binds // the node's, across graphs
	done     chan struct{}    // closed when the graph and all its children have stopped
}

// graphStarted, if set, runs at the end of every graph's Started: a test
// panics there, as a bug in starting the graph would.
var graphStarted func()

// spawnGraph spawns the graph under root; a test makes it fail, as only a
// bug could (a name still taken).
var spawnGraph = func(ctx actor.Context, props *actor.Props, name string) (*actor.PID, error) {
	return ctx.SpawnNamed(props, name)
}

// graph is the supervisor of everything that runs only on the leader. Its
// children are restarted with exponential backoff when they crash; when the
// graph stops, all of them stop first (listeners close their ports).
type graph struct {
	spec *graphSpec
}

func newGraph(spec *graphSpec) *actor.Props {
	return actor.PropsFromProducer(
		func() actor.Actor { return &graph{spec: spec} },
		actor.WithSupervisor(actor.NewExponentialBackoffStrategy(time.Minute, 500*time.Millisecond)),
	)
}

// Receive implements actor.Actor.
func (g *graph) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		g.spawn(ctx)
	case *actor.Stopped:
		close(g.spec.done)
	}
}

func (g *graph) spawn(ctx actor.Context) {
	s := g.spec
	log := s.log.With().Int64("term", s.fence.Term).Logger()
	laneEnv := &lanes.Env{Ctx: s.ctx, Store: s.store, Fence: s.fence, Owner: s.owner, Trust: s.trust.Trusted,
		Config: s.cfg, Log: log, OnFenced: s.onFenced}
	lanePID, _ := ctx.SpawnNamed(lanes.NewManager(laneEnv), "lanes")

	in := &listeners.Env{Ctx: s.ctx, Store: s.store, Fence: s.fence, Log: log, Router: s.router,
		Lanes: lanePID, System: ctx.ActorSystem(), OnFenced: s.onFenced, LogPayloads: s.cfg.LogPayloads, Binds: s.binds}
	in.Ingest, _ = ctx.SpawnNamed(listeners.NewIngest(in), "ingest")

	for _, ic := range s.cfg.Inbound {
		switch ic.Type {
		case config.InboundMLLP:
			ctx.SpawnNamed(listeners.NewMLLP(in, ic), "listener-"+ic.Name)
		case config.InboundFile:
			ctx.SpawnNamed(listeners.NewFilePoller(in, ic), "listener-"+ic.Name)
		}
	}
	ctx.SpawnNamed(newSweeper(s, log), "sweeper")
	log.Info().Int("inbounds", len(s.cfg.Inbound)).Int("outbounds", len(s.cfg.Outbound)).Msg("graph started: this node is processing messages")
	if graphStarted != nil {
		graphStarted()
	}
}
