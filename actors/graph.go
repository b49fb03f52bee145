package actors

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
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
	// moving has the destinations whose queued rows root.startGraph
	// moves into the lanes of the lane_key in force, each with a channel
	// closed once its rows are there: their lanes wait for it (lanes.Env.Moving),
	// the inbounds and the other destinations' lanes do not.
	moving map[string]<-chan struct{}
	done   chan struct{} // closed when the graph and all its children have stopped
	// running is what each of the graph's children that has not stopped
	// yet is (a file inbound and its directories), as the graph last
	// recorded it: root names them when the graph does not stop
	// (root.stopGraph).
	running atomic.Pointer[[]string]
	// lanes publishes this graph's lane manager while the graph runs
	// (Engine.OutboundHeld).
	lanes *atomic.Pointer[actor.PID]
}

// graphStarted, if set, runs at the end of every graph's Started: a test
// panics there, as a bug in starting the graph would.
var graphStarted func()

// spawnGraph spawns the graph under root; a test makes it fail, as only a
// bug could (a name still taken).
var spawnGraph = func(ctx actor.Context, props *actor.Props, name string) (*actor.PID, error) {
	return ctx.SpawnNamed(props, name)
}

// newFilePoller makes a file inbound's props; a test puts in its place an
// actor stuck in a call, as a poll on a file system that does not answer is.
var newFilePoller = listeners.NewFilePoller

// graph is the supervisor of everything that runs only on the leader. Its
// children are restarted with exponential backoff when they crash; when the
// graph stops, all of them stop first (listeners close their ports).
type graph struct {
	spec      *graphSpec
	listeners []*actor.PID
	lanes     *actor.PID // the lane manager this graph spawned
	// children says what each child not yet stopped is, by its PID's Id
	// (published in spec.running).
	children map[string]string
}

func newGraph(spec *graphSpec) *actor.Props {
	return actor.PropsFromProducer(
		func() actor.Actor { return &graph{spec: spec} },
		actor.WithSupervisor(actor.NewExponentialBackoffStrategy(time.Minute, 500*time.Millisecond)),
	)
}

// Receive implements actor.Actor.
func (g *graph) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		g.spawn(ctx)
	case *actor.Stopping:
		if g.spec.lanes != nil && g.lanes != nil {
			// The next graph publishes its own; until then none runs.
			g.spec.lanes.CompareAndSwap(g.lanes, nil)
		}
		g.stopListeners(ctx)
	case *actor.Terminated:
		// A child has stopped (the graph's stop stops them all at once,
		// once stopListeners returns).
		delete(g.children, msg.Who.Id)
		g.publishRunning()
	case *actor.Stopped:
		close(g.spec.done)
	}
}

func (g *graph) spawn(ctx actor.Context) {
	s := g.spec
	log := s.log.With().Int64("term", s.fence.Term).Logger()
	// The trust window is this term's only: once the term ended (its
	// context cancelled), a window this node opens for a later term of its
	// own does not reopen it for this graph's lanes.
	trusted := func() bool { return s.ctx.Err() == nil && s.trust.Trusted() }
	laneEnv := &lanes.Env{Ctx: s.ctx, Store: s.store, Fence: s.fence, Owner: s.owner, Trust: trusted,
		Config: s.cfg, Log: log, OnFenced: s.onFenced, Moving: s.moving}
	g.children = map[string]string{}
	child := func(pid *actor.PID, what string) *actor.PID {
		if pid != nil {
			g.children[pid.Id] = what
		}
		return pid
	}
	defer g.publishRunning()
	lanePID, _ := ctx.SpawnNamed(lanes.NewManager(laneEnv), "lanes")
	g.lanes = child(lanePID, "the lane manager")
	if s.lanes != nil && lanePID != nil {
		s.lanes.Store(lanePID)
	}

	in := &listeners.Env{Ctx: s.ctx, Store: s.store, Fence: s.fence, Log: log, Router: s.router,
		Lanes: lanePID, System: ctx.ActorSystem(), OnFenced: s.onFenced, LogPayloads: s.cfg.LogPayloads, Binds: s.binds}
	in.Ingest, _ = ctx.SpawnNamed(listeners.NewIngest(in), "ingest")
	child(in.Ingest, "the ingest actor")

	for _, ic := range s.cfg.Inbound {
		var pid *actor.PID
		switch ic.Type {
		case config.InboundMLLP:
			pid, _ = ctx.SpawnNamed(listeners.NewMLLP(in, ic), "listener-"+ic.Name)
			child(pid, fmt.Sprintf("MLLP inbound %q (listen %s)", ic.Name, ic.Listen))
		case config.InboundFile:
			pid, _ = ctx.SpawnNamed(newFilePoller(in, ic), "listener-"+ic.Name)
			child(pid, fmt.Sprintf("file inbound %q (directory %s, archive_directory %s)", ic.Name, ic.Directory, ic.ArchiveDirectory))
		}
		if pid != nil {
			g.listeners = append(g.listeners, pid)
		}
	}
	sweepPID, _ := ctx.SpawnNamed(newSweeper(s, log), "sweeper")
	child(sweepPID, "the sweeper")
	msg := "graph started: this node is processing messages"
	moving := len(s.moving)
	if moving > 0 {
		msg = "graph started: this node accepts messages; the lanes of the destinations whose lane_key changed start once their queued rows are moved into the lanes of the one in force, the others at once"
	}
	log.Info().Int("inbounds", len(s.cfg.Inbound)).Int("outbounds", len(s.cfg.Outbound)).Int("outbounds_moving", moving).Msg(msg)
	if graphStarted != nil {
		graphStarted()
	}
}

// publishRunning publishes what the children not yet stopped are, sorted.
func (g *graph) publishRunning() {
	running := make([]string, 0, len(g.children))
	for _, what := range g.children {
		running = append(running, what)
	}
	slices.Sort(running)
	g.spec.running.Store(&running)
}

// stopListeners drains the inbounds (listeners.Drain), and waits for them,
// before the graph's children get their stop: each finishes the messages
// in hand (their commit and their ACK) through an ingest actor that still
// runs. Stopped all at once, as protoactor stops children, the ingest
// actor turned away what it had queued (AE) while the listeners were still
// waiting for it, and a clean switchover answered AE to messages this node
// could have stored. Drained rather than stopped here: stopped, each would
// be sent a second stop with the rest, a dead letter logged at every stop.
func (g *graph) stopListeners(ctx actor.Context) {
	futures := make([]actor.Future, 0, len(g.listeners))
	for _, pid := range g.listeners {
		futures = append(futures, ctx.RequestFuture(pid, listeners.Drain{}, drainListenerTimeout))
	}
	for i, f := range futures {
		if _, err := f.Result(); err != nil {
			g.spec.log.Warn().Err(err).Str("inbound", g.children[g.listeners[i].Id]).Msg("an inbound did not finish its messages in hand in time; stopping the rest of the graph anyway (its senders get AE and send again)")
		}
	}
}

// drainListenerTimeout bounds a listener's drain: its connections' grace
// (listeners.Grace), their closing, and some. A variable for tests.
var drainListenerTimeout = listeners.Grace + 5*time.Second
