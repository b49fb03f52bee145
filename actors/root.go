package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/listeners"
	"github.com/messagefoundry/mf/storage"
)

// Options start an Engine.
type Options struct {
	Config *config.Config
	Store  storage.Store
	Log    zerolog.Logger
	// NodeID names this node: the leader lease's owner and its row in
	// mf_nodes. Default: leadership.NewNodeID().
	NodeID string
	// Instance names this run of the node; it owns the row leases of the
	// deliveries it makes. Default: leadership.NewInstanceID(NodeID).
	Instance string
	// Leadership is the leadership actor's props; nil means single-node.
	Leadership *actor.Props
	// LockLost, on a single node whose store holds the single-node lock
	// (HoldSingleNode), is the channel on which the store says that another
	// process took it: the graph stops at once, its deliveries in hand
	// abandoned as on a demotion (not drained: the other process sends
	// them, and a send of this node's landing later would follow newer
	// ones), and Failed reports the error.
	LockLost <-chan error
	// Trust is the window the leadership actor keeps open while this node
	// leads (nil: single-node, always open).
	Trust *leadership.Trust
	// Reload re-reads this node's config file when the shared config
	// version moves (nil: reloading is not possible).
	Reload func() (*config.Config, error)
	// ConfigVersion is the shared config version the node started with.
	ConfigVersion int64
	// DrainTimeout bounds how long a clean stop lets lanes finish the
	// delivery in hand before abandoning it (default 30s).
	DrainTimeout time.Duration
}

// Status is this node's role as root last set it: what /cluster/status
// reports, read without asking the actor.
type Status struct {
	NodeID    string
	Clustered bool
	Leader    bool
	Fence     storage.Fence
	Since     time.Time
	// ConfigVersion is the shared config version this node runs.
	ConfigVersion int64
	// Unbound lists the MLLP listeners of the running graph that are
	// retrying to open their port (listeners.Binds).
	Unbound []listeners.Unbound
}

// Engine is a running actor tree.
type Engine struct {
	system *actor.ActorSystem
	root   *actor.PID
	status *atomic.Pointer[Status]
	binds  *listeners.Binds
	failed chan error
	// reload and started are Options.Reload and Options.Config, for
	// CheckReload.
	reload  func() (*config.Config, error)
	started *config.Config
	inForce *atomic.Pointer[config.Config]
	// stopRequested is set by Stop before it asks root to shut down.
	stopRequested *atomic.Bool
	// lanes is the lane manager of the graph running now, nil while none
	// runs (a standby, or between a reload's two graphs).
	lanes *atomic.Pointer[actor.PID]
	// stopCh is closed by Stop with stopRequested: root's own database
	// steps (promotion recovery, a move of the queued rows) then end at
	// once (root.termOrStop).
	stopCh   chan struct{}
	stopOnce sync.Once
}

// holdTellTimeout bounds how long OutboundHeld and QueueChanged wait for
// the lane manager.
const holdTellTimeout = 5 * time.Second

// OutboundHeld tells this node's lane manager, if it runs one (the
// primary, or a single node), that an operator has just held (held) or
// released outbound, once the store has it (POST /outbounds/{name}/hold,
// /release): it returns once the manager has acted on it, so that no lane
// claims a row of a held outbound from then on, and a released one's lanes
// have been started (lanes.HoldChanged). Without a manager (a standby) it
// does nothing: the primary's rescan reads the store. An error says the
// manager did not answer (it was stopping): its next rescan reads it.
func (e *Engine) OutboundHeld(ctx context.Context, outbound string, held bool) error {
	return e.tellLanes(ctx, lanes.HoldChanged{Outbound: outbound, Held: held})
}

// QueueChanged tells this node's lane manager, if it runs one (the
// primary, or a single node), that an operator has just retried or
// skipped a pending row, once the store has it (POST /queue/{id}/retry,
// /skip): it returns once the manager has begun to list the lanes, which
// wakes the lane whose head is claimable now, blocked or backing off as it
// was (lanes.QueueChanged). Without a manager (a standby) it does nothing:
// the primary's rescan reads the store. An error says the manager did not
// answer (it was stopping): its next rescan reads it.
func (e *Engine) QueueChanged(ctx context.Context) error {
	return e.tellLanes(ctx, lanes.QueueChanged{})
}

// tellLanes sends msg to this node's lane manager, if it runs one, and
// waits for its answer, at most holdTellTimeout and ctx's deadline.
func (e *Engine) tellLanes(ctx context.Context, msg any) error {
	pid := e.lanes.Load()
	if pid == nil {
		return nil
	}
	timeout := holdTellTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if timeout <= 0 {
		return context.DeadlineExceeded
	}
	_, err := e.system.Root.RequestFuture(pid, msg, timeout).Result()
	return err
}

type shutdown struct{}
type shutdownDone struct{}

// fenced reports a graph write refused by the fence of its term, from the
// graph of spec: a reload restarts the graph under the same term, so the
// fence alone does not tell the current graph from the one it replaced.
type fenced struct {
	spec *graphSpec
	op   string
	err  error
}

// Start builds the actor tree and returns at once; the graph starts as soon
// as the leadership actor reports that this node leads.
func Start(o Options) (*Engine, error) {
	router, err := lanes.NewRouter(o.Config)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	if o.NodeID == "" {
		o.NodeID = leadership.NewNodeID()
	}
	if o.Instance == "" {
		o.Instance = leadership.NewInstanceID(o.NodeID)
	}
	clustered := o.Leadership != nil
	if o.Leadership == nil {
		o.Leadership = leadership.NewSingleNode(o.LockLost)
		o.Trust = leadership.AlwaysTrusted()
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 30 * time.Second
	}
	status := &atomic.Pointer[Status]{}
	status.Store(&Status{NodeID: o.NodeID, Clustered: clustered, ConfigVersion: o.ConfigVersion})
	system := actor.NewActorSystem(WithZerolog(o.Log))
	failed := make(chan error, 1)
	binds := &listeners.Binds{}
	inForce := &atomic.Pointer[config.Config]{}
	inForce.Store(o.Config)
	stopRequested, stopCh := &atomic.Bool{}, make(chan struct{})
	// Before root starts: the pairs it loads as a standby set the series
	// this tracks.
	setCertMetrics(o.Config, true)
	lanesPID := &atomic.Pointer[actor.PID]{}
	r := &root{opts: o, router: router, status: status, binds: binds, started: o.Config, inForce: inForce, stopRequested: stopRequested, stopCh: stopCh, failed: failed, lanes: lanesPID}
	pid, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return r }), "root")
	if err != nil {
		return nil, err
	}
	registerLeaderMetrics(status)
	// The config in force from now on: its connections' series at zero
	// (the API registers those of the file it read, which a clustered
	// node's start may have read again since; a reload registers its own).
	listeners.RegisterMetrics(o.Config.Inbound)
	lanes.RegisterMetrics(o.Config.Outbound)
	return &Engine{system: system, root: pid, status: status, binds: binds, failed: failed, reload: o.Reload, started: o.Config, inForce: inForce, stopRequested: stopRequested, stopCh: stopCh, lanes: lanesPID}, nil
}

// Config returns the config this node runs: the one it started with, or
// the last one a reload put in force.
func (e *Engine) Config() *config.Config { return e.inForce.Load() }

// Status returns this node's current role.
func (e *Engine) Status() Status {
	s := *e.status.Load()
	s.Unbound = e.binds.Unbound()
	return s
}

// Failed receives why the engine stopped working by itself: the leadership
// actor or the graph was stopped by its supervisor after repeated panics,
// a single node was fenced out of its database by a cluster elected into
// it, another process took its single-node lock (LockLost), or the graph
// did not stop when told to (an actor of it stuck in a call that does not
// return: root.graphStuck). The graph has stopped by then (or, stuck, has
// been given up, its term's context cancelled), and the lease is no longer
// held or renewed; the caller should Stop the engine and exit non-zero, so
// that its service manager starts the node afresh (or, fenced, shows it
// failed). After a stuck graph, Stop returns an error once protoactor's
// stop of the root actor times out (10 s): the stuck actor never stops.
func (e *Engine) Failed() <-chan error { return e.failed }

// Stop shuts the engine down cleanly: the graph stops (listeners close,
// lanes finish the delivery in hand, up to the drain timeout), then the
// leadership actor gives up the lease, then the actor system ends.
func (e *Engine) Stop(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	timeout := time.Until(deadline)
	if !ok {
		timeout = 2 * time.Minute
	}
	// Set before shutdown is queued: a reload that root is draining now
	// reads it (root.reload).
	e.stopRequested.Store(true)
	e.stopOnce.Do(func() { close(e.stopCh) })
	_, err := e.system.Root.RequestFuture(e.root, shutdown{}, timeout).Result()
	if err != nil {
		return fmt.Errorf("engine stop: %w", err)
	}
	if err := e.system.Root.StopFuture(e.root).Wait(); err != nil {
		return fmt.Errorf("engine stop: %w", err)
	}
	e.system.Shutdown()
	return nil
}

// root holds the node's role and owns the graph's lifecycle.
type root struct {
	opts   Options
	router *lanes.Router
	// graphs counts the graphs spawned, for their names: a reload spawns
	// the next graph under the same term, and with the same name (so the
	// same PID) the old graph's Terminated, which comes after, took the
	// new one out of root's children, and a stop of root would not have
	// stopped it.
	graphs int
	status *atomic.Pointer[Status]
	binds  *listeners.Binds
	// started is the config the node started with, whose store, cluster
	// and API sections no reload replaces.
	started *config.Config
	// inForce publishes opts.Config for Engine.Config.
	inForce *atomic.Pointer[config.Config]
	// stopRequested is set by Engine.Stop before its shutdown is queued,
	// and stopCh closed.
	stopRequested *atomic.Bool
	stopCh        <-chan struct{}
	// lanes publishes the running graph's lane manager (Engine.lanes).
	lanes *atomic.Pointer[actor.PID]

	leadership *actor.PID
	graph      *actor.PID
	spec       *graphSpec
	cancel     context.CancelFunc
	stopping   bool
	// unapplied is the newest shared config version this node failed to
	// reload, none having worked since (0: none): it runs an older config.
	unapplied int64
	// certs follows the listeners' and destinations' certificate files
	// while no graph runs here.
	certs standbyCerts
	// failed receives (once) why the engine stopped by itself: Engine.Failed.
	failed chan error
}

// Receive implements actor.Actor.
func (r *root) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		if r.stopping {
			// Root restarted after its own panic (below): the engine is
			// failing, and an elector spawned now could win the lease
			// with no graph to run. The restart stopped the one it had.
			r.leadership = nil
			return
		}
		r.leadership, _ = ctx.SpawnNamed(r.opts.Leadership, "leadership")
	case leadership.Changed:
		r.changed(ctx, msg)
	case leadership.ConfigChanged:
		r.reload(ctx, msg.Version)
	case fenced:
		if r.spec == nil || msg.spec != r.spec {
			// A late report from a graph already stopped: one whose drain
			// ran out fails its last writes on the cancelled context.
			return
		}
		if !errors.Is(msg.err, storage.ErrFenced) {
			// The term ended (its context cancelled: the leadership actor
			// lost or gave it up, and has logged why) with a write or a
			// send in hand: no fence refused anything, and no other node
			// need lead yet. Its Changed, in the mailbox, says the rest.
			r.opts.Log.Info().Err(msg.err).Str("op", msg.op).Int64("term", msg.spec.fence.Term).
				Msg("this node's term ended with a write or delivery in hand; stopping the graph (the next leader delivers it again)")
			r.stopGraph(ctx, false)
			return
		}
		r.opts.Log.Error().Err(msg.err).Str("op", msg.op).Int64("term", msg.spec.fence.Term).
			Msg("a write was refused by the fence: another node leads now; stopping the graph")
		r.stopGraph(ctx, false)
		// The elector, if it still thinks it leads, reports the loss as
		// Changed{Reason: "fenced"}, which is where it is counted: counting
		// here too made one loss two.
		r.tellLeadership(ctx, leadership.Fenced{Fence: msg.spec.fence})
	case *actor.Terminated:
		r.terminated(ctx, msg.Who)
	case shutdown:
		r.stopping = true
		r.stopGraph(ctx, true)
		r.stopLeadership(ctx)
		ctx.Respond(shutdownDone{})
	case lookAtCerts:
		r.certs.look(r.opts.Log)
	case *actor.Restarting:
		// Root panicked (a bug). Its supervisor stops every child at once
		// next, and the elector's stop resigns the lease: a standby would
		// be elected while this graph still drained. So the graph is
		// stopped here first, as any loss stops it, and the engine fails:
		// its service manager starts it again.
		r.certs.stop()
		if !r.stopping {
			r.opts.Log.Error().Msg("the root actor panicked (a bug: report it with the protoactor \"Recovering\" lines before): stopping the graph, then giving up the lease and stopping the node, so that a standby takes over and its service manager starts it again")
			r.stopping = true
			r.stopGraph(ctx, false)
			r.fail(errors.New("the root actor panicked (a bug: see the ERROR lines logged before)"))
		}
		return
	case *actor.Stopping, *actor.Stopped:
		r.certs.stop()
		return
	}
	// Any message may have started or stopped the graph, or reloaded the
	// config.
	r.certs.watch(ctx, r.opts.Config, r.graph != nil || r.stopping, r.opts.Log)
}

// stopLeadership stops the leadership actor, if it still runs: its Stopping
// resigns the lease and marks the node left.
func (r *root) stopLeadership(ctx actor.Context) {
	if r.leadership == nil {
		return
	}
	if err := ctx.StopFuture(r.leadership).Wait(); err != nil {
		r.opts.Log.Warn().Err(err).Msg("the leadership actor did not stop in time")
	}
	r.leadership = nil
}

// terminated learns that a child has stopped. The ends root asks for are
// expected: a graph it stopped (it forgets it first), anything once it is
// stopping. Any other end is the supervisor's, which stops a child that
// panicked more than 10 times in 10 s. Without the graph, or without an elector, the node cannot do its
// work, so root stops it (Engine.Failed) rather than run on as a leader
// with no graph, or with nobody renewing the lease, or as a follower that
// can never be elected.
func (r *root) terminated(ctx actor.Context, who *actor.PID) {
	if r.stopping {
		return
	}
	switch {
	case r.leadership != nil && who.Equal(r.leadership):
		r.opts.Log.Error().Msg("the leadership actor panicked too often and was stopped (a bug: report it with the protoactor \"Recovering\" lines before): this node can no longer take part in elections; stopping it, so that its service manager starts it again")
		r.leadership = nil
		r.stopping = true
		// The elector ended its term on the way out and did not resign:
		// the lease expires, after the graph has stopped (leadership/doc.go).
		r.stopGraph(ctx, false)
		r.fail(errors.New("the leadership actor was stopped after repeated panics (a bug: see the ERROR lines logged before)"))
	case r.spec != nil && who.Equal(r.graph) && closed(r.spec.done):
		// Not the end of a graph root stopped for a reload under the same
		// term (the same name): that one's done is not the current spec's.
		r.opts.Log.Error().Int64("term", r.spec.fence.Term).Msg("the graph panicked too often and was stopped (a bug: report it with the protoactor \"Recovering\" lines before): no listener or lane runs on this node any more; giving up the lease and stopping the node, so that a standby takes over and its service manager starts it again")
		r.stopping = true
		r.stopGraph(ctx, false)
		// The graph and all its children have stopped (done is closed):
		// resigning now is the clean stop's order, graph first.
		r.stopLeadership(ctx)
		r.fail(errors.New("the graph was stopped after repeated panics (a bug: see the ERROR lines logged before)"))
	}
}

// fail reports, once, that the engine stopped by itself.
func (r *root) fail(err error) {
	select {
	case r.failed <- err:
	default:
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (r *root) changed(ctx actor.Context, c leadership.Changed) {
	log := r.opts.Log.With().Int64("term", c.Fence.Term).Str("reason", c.Reason).Logger()
	countChange(c.Reason)
	if !c.Leader {
		log.Info().Msg("leadership lost: stopping the graph")
		r.stopGraph(ctx, false)
		if !r.status.Load().Clustered && !r.stopping && c.Reason == "lock-lost" {
			// Its graph's context was cancelled when the loss was known
			// (the term's Ended), and stopGraph did not drain it.
			log.Error().Err(c.Err).Msg("another mf took this single node's database lock and runs there now: the deliveries in hand were abandoned (it sends them again), and this node writes nothing more; stopping")
			r.stopping = true
			r.stopLeadership(ctx)
			r.fail(c.Err)
			return
		}
		if !r.status.Load().Clustered && !r.stopping {
			// A single node leads with the fence of term 0, which matches
			// only a lease no cluster node was ever elected into: once
			// fenced it never leads again. Running on would be a process
			// that looks alive and does nothing.
			log.Error().Msg("a cluster node has been elected into this node's database, and this node is not clustered (cluster.enabled = false): it may never write there again; stopping. Give it a database of its own, or set [cluster] enabled = true on it as on the cluster's nodes")
			r.stopping = true
			r.stopLeadership(ctx)
			r.fail(errors.New("fenced out of a database a cluster uses (cluster.enabled = false)"))
		}
		return
	}
	if r.spec != nil && r.spec.fence == c.Fence {
		return
	}
	r.stopGraph(ctx, false) // a graph of an older term, if any
	if r.stopping {
		return
	}
	log.Info().Str("owner", c.Fence.Owner).Msg("leadership gained: recovering the previous leader's deliveries")
	if r.unapplied != 0 {
		// Said when the reload failed, maybe long ago, on a standby:
		// whoever looks at this failover must learn it here.
		log.Warn().Int64("config_version", r.status.Load().ConfigVersion).Int64("failed_config_version", r.unapplied).
			Msg("this node leads on an older config than the cluster's: its reload to the newer version failed (the ERROR logged then says why); fix its config file, then run mf reload again")
	}
	if !r.recover(c.Fence, c.Ended, log) {
		// The term is lost already: its graph would open the listener and
		// claim rows until its first fenced write. The elector, if it still
		// thinks it leads, reports the loss (one whose term ended knows).
		if !closed(c.Ended) {
			r.tellLeadership(ctx, leadership.Fenced{Fence: c.Fence})
		}
		return
	}
	r.startGraph(ctx, c.Fence, c.Ended)
}

// recover is promotion recovery, also run between a reload's two graphs:
// every row left in flight goes back to pending at once, so failover (or a
// reload) does not wait out its row lease. Another
// owner has stopped (the fence guarantees it), and so has this process's
// own previous graph, if it led before (changed stops it, and waits, before
// it recovers): no owner is excluded (Owner ""), or a node elected again
// after losing its lease would leave the deliveries it had in hand, and
// their lanes, to wait lease_ttl_seconds. Should it fail, those rows still
// come back when their leases expire (stranded-head reclaim, sweep). It
// reports false when term f is over: the fence refused it, or ended was
// closed meanwhile, which ends the attempt in hand and the retries at once.
// A stop (Engine.Stop) ends them too, and recover reports true: the term
// is not over, and the caller, seeing the stop, starts no graph; the rows
// are the next leader's to recover. Root reads no message while it runs:
// retrying for a term gone, or for a node stopping, kept it from the loss,
// a newer term or the shutdown for up to three attempts of 10 s.
func (r *root) recover(f storage.Fence, ended <-chan struct{}, log zerolog.Logger) bool {
	term, stop := r.termOrStop(ended)
	defer stop()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(term, 10*time.Second)
		n, err := r.opts.Store.QueueRecoverForeign(ctx, storage.QueueRecoverForeignParams{Fence: f, Owner: ""})
		cancel()
		if err == nil {
			if n > 0 {
				log.Warn().Int64("rows", n).Msg("re-pended deliveries the previous leader (or graph, after a reload) left in flight; they will be delivered again, each before anything newer of its lane")
			}
			return true
		}
		if term.Err() != nil {
			if !closed(ended) {
				log.Warn().Msg("the node is stopping during promotion recovery: not starting the graph; the next leader recovers the rows left in flight")
				return true
			}
			log.Warn().Msg("leadership of this term ended during promotion recovery; not starting the graph for this term")
			return false
		}
		// Not the attempt's context, cancelled by now: only its deadline
		// ends a recovery, and that is a store error.
		storage.CountError(context.Background(), "queue_recover_foreign", err)
		if errors.Is(err, storage.ErrFenced) {
			log.Error().Err(err).Msg("promotion recovery was fenced: the lease has moved past this term (to another node, or to a newer term of this node's own); not starting the graph for this term")
			return false
		}
		log.Error().Err(err).Int("attempt", attempt).Msg("promotion recovery failed")
		if attempt == 3 {
			log.Error().Msg("promotion recovery gave up; the previous leader's in-flight rows return when their leases expire")
			return true
		}
		select {
		case <-term.Done():
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// termContext returns a context cancelled the moment ended is closed (never,
// if it is nil), even while root is busy, and the function that releases it.
func termContext(ended <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if ended != nil {
		go func() {
			select {
			case <-ended:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// termOrStop is termContext, also cancelled the moment the node is asked
// to stop (Engine.Stop closes stopCh): for root's own database steps, which
// its shutdown would otherwise wait behind.
func (r *root) termOrStop(ended <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := termContext(ended)
	go func() {
		select {
		case <-r.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// termOver says (and logs) whether term f has ended before its graph could
// start: the Changed that reports the loss is still in root's mailbox.
func (r *root) termOver(f storage.Fence, ended <-chan struct{}) bool {
	if !closed(ended) {
		return false
	}
	r.opts.Log.Warn().Int64("term", f.Term).Msg("leadership of this term ended before its graph could start; not starting it")
	return true
}

// startGraph starts graph(T) unless term T has already ended (ended is
// closed: the Changed that reports the loss is still in root's mailbox).
func (r *root) startGraph(ctx actor.Context, f storage.Fence, ended <-chan struct{}) {
	if r.termOver(f, ended) {
		return
	}
	if r.stopRequested.Load() {
		// A gain handled while a stop waits behind it in root's mailbox:
		// started, the graph would open its ports and admit messages only
		// to be drained at once. The stop gives the lease up.
		r.opts.Log.Info().Int64("term", f.Term).Msg("the node is stopping: not starting the graph of the term it gained")
		return
	}
	// The graph's inbounds open at once, and store and acknowledge
	// messages while the queued rows of a destination whose lane_key
	// changed are moved (lanes.Relane, below): it took 9.5 to 33 s per
	// 100,000 rows on PostgreSQL, during which every partner was refused.
	// Only the lanes of the destinations moved wait for it, each for its
	// own (graphSpec.moving). Its first step,
	// before anything is stored, records the old lane_key unknown: a move
	// cut short must be done again by the next graph, whatever lane_key it
	// runs (lanes.RelaneBegin).
	var dests []string
	if !r.untilDone(ctx, f, ended, func(term context.Context) (err error) {
		dests, err = lanes.RelaneBegin(term, r.opts.Store, f, r.opts.Config)
		return err
	}) {
		return
	}
	// Again after that round trip: the term may have ended meanwhile (the
	// call still succeeded), and the graph would open its ports and the
	// node say it leads, for a term gone, until root read the loss.
	if r.termOver(f, ended) {
		return
	}
	moved := map[string]chan struct{}{}
	moving := map[string]<-chan struct{}{}
	for _, d := range dests {
		moved[d] = make(chan struct{})
		moving[d] = moved[d]
	}
	// The term's end cancels its graph at once, even while root is busy (a
	// drain, promotion recovery): deliveries in hand are abandoned then, as
	// on any demotion, not at the end of the drain, when a standby may
	// already be sending them.
	gctx, cancel := termContext(ended)
	system, self := ctx.ActorSystem(), ctx.Self()
	spec := &graphSpec{
		ctx: gctx, cfg: r.opts.Config, store: r.opts.Store, fence: f, ended: ended, owner: r.opts.Instance, trust: r.opts.Trust,
		log: r.opts.Log, router: r.router, binds: r.binds, lanes: r.lanes, moving: moving,
		done: make(chan struct{}),
	}
	spec.onFenced = func(op string, err error) {
		system.Root.Send(self, fenced{spec: spec, op: op, err: err})
	}
	// Leader before the graph spawns: its listeners open ports at once,
	// and /cluster/status and mf_is_leader must not say otherwise then.
	r.setStatus(func(s *Status) { s.Leader, s.Fence, s.Since = true, f, time.Now() })
	r.graphs++
	pid, err := spawnGraph(ctx, newGraph(spec), fmt.Sprintf("graph-%d-%d", f.Term, r.graphs))
	if err != nil {
		r.setStatus(func(s *Status) { s.Leader, s.Fence, s.Since = false, storage.Fence{}, time.Now() })
		// Only a bug gets here. Leading on with no graph would hold the
		// lease with nothing listening or delivering, and no standby could
		// take over: give the lease up and stop, as after a graph that
		// panicked too often.
		cancel()
		r.opts.Log.Error().Err(err).Int64("term", f.Term).Msg("cannot start the graph (a bug: report it with this line): no listener or lane runs on this node; giving up the lease and stopping the node, so that a standby takes over and its service manager starts it again")
		r.stopping = true
		r.stopLeadership(ctx)
		r.fail(fmt.Errorf("the graph of term %d could not be started (a bug: see the ERROR line logged before): %w", f.Term, err))
		return
	}
	r.graph, r.spec, r.cancel = pid, spec, cancel
	if len(dests) == 0 {
		return
	}
	log := r.opts.Log.With().Int64("term", f.Term).Logger()
	var rows int64
	if !r.untilDone(ctx, f, ended, func(term context.Context) error {
		return lanes.Relane(term, r.opts.Store, f, r.opts.Config, r.router, func(d lanes.Relaned) {
			d.Log(log)
			rows += d.Rows
			if c, ok := moved[d.Destination]; ok && !closed(c) {
				close(c) // its lanes start
			}
		})
	}) {
		// The term is over, or the node stops (the move ends there: it
		// took up to 33 s per 100,000 rows): what the inbounds stored
		// meanwhile is committed, and acknowledged, and the next graph
		// moves it with the rest (its lane_key is recorded unknown). No
		// lane of a destination still being moved has run; those of the
		// others stop with the graph, as at any stop.
		r.stopGraph(ctx, r.stopRequested.Load())
		return
	}
	// Each destination was reported as its move ended; should one not
	// have been (its laning found recorded already), its lanes must not
	// wait for ever.
	for _, c := range moved {
		if !closed(c) {
			close(c)
		}
	}
	ev := log.Debug()
	if rows > 0 {
		ev = log.Info()
	}
	ev.Msg("the queued rows are in the lanes of the lane_key in force: every destination's lanes run")
}

// untilDone runs step, a part of moving the unfinished rows of each
// destination whose lane_key in the config in force differs from the one
// they were laned by into the lanes it makes (lanes.RelaneBegin, before
// the graph starts; lanes.Relane, before any lane of it starts): after
// promotion recovery (no row is in flight), at every graph start, a single
// node's included. It reports false when the graph must not start, or must
// stop: term f is over (fenced, or ended closed) or the node is stopping.
// A failure of the store is tried again until it works, the term ends or a
// stop comes: a lane started on rows laned by another key could deliver a
// patient's newer message before an older one. A stop (Engine.Stop) ends
// step at once: the move is done again at the next start.
func (r *root) untilDone(ctx actor.Context, f storage.Fence, ended <-chan struct{}, step func(term context.Context) error) bool {
	term, stop := r.termOrStop(ended)
	defer stop()
	log := r.opts.Log.With().Int64("term", f.Term).Logger()
	pause := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := step(term)
		if err == nil {
			return true
		}
		switch {
		case r.stopRequested.Load():
			log.Warn().Err(err).Msg("the node is stopping while the queued rows are laned again: not starting the graph, or stopping it; the next start of a graph moves them (what was stored meanwhile is kept)")
			return false
		case term.Err() != nil:
			log.Warn().Msg("leadership of this term ended while the queued rows were laned again; not starting the graph for this term, or stopping it")
			return false
		case errors.Is(err, storage.ErrFenced):
			storage.CountError(context.Background(), "queue_relane", err)
			log.Error().Err(err).Msg("laning the queued rows again was fenced: the lease has moved past this term; not starting the graph for this term, or stopping it")
			r.tellLeadership(ctx, leadership.Fenced{Fence: f})
			return false
		}
		storage.CountError(context.Background(), "queue_relane", err)
		log.Error().Err(err).Int("attempt", attempt).Dur("retry_in", pause).
			Msg("the config's lane_key differs from the one queued rows were laned by, and moving them failed; the lanes of the destinations not yet moved wait for it, or newer messages could overtake older ones of the same key (check the database)")
		select {
		case <-term.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// setStatus publishes a changed copy of the status.
func (r *root) setStatus(change func(*Status)) {
	s := *r.status.Load()
	change(&s)
	r.status.Store(&s)
}

// reloaded re-reads the node's config file with reload and returns the
// config in force from it and its router, with the sections it changes
// that only a restart applies, or why it cannot be run.
func reloaded(reload func() (*config.Config, error), started *config.Config) (*config.Config, *lanes.Router, []string, error) {
	cfg, err := reload()
	if err != nil {
		return nil, nil, nil, err
	}
	// The graph runs on the reloaded file's sections but [store],
	// [cluster] and [api]: the lanes' row lease, the sweep and the purge
	// as the node started, like its store, elector and API.
	restart := config.RestartOnly(started, cfg)
	if cfg, err = config.InForce(started, cfg); err != nil {
		return nil, nil, nil, err
	}
	router, err := lanes.NewRouter(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, router, restart, nil
}

// CheckReload says whether a bump of the shared config version would
// reload this node: its config file loads, and the config and routes in
// force from it can run. The API asks before it bumps, as mf reload checks
// its file before it does.
func (e *Engine) CheckReload() error {
	if e.reload == nil {
		return errors.New("this node cannot reload its config (it was started without a config file to re-read)")
	}
	_, _, _, err := reloaded(e.reload, e.started)
	return err
}

// reload applies a bump of the shared config version: this node re-reads
// its own file (every node runs its own copy) and, if it leads, restarts its
// graph on it, letting lanes finish the delivery in hand. A file that no
// longer loads leaves the running config in place.
func (r *root) reload(ctx actor.Context, version int64) {
	log := r.opts.Log.With().Int64("config_version", version).Logger()
	if r.opts.Reload == nil {
		log.Warn().Msg("the shared config version moved, but this node cannot reload its config; restart it to apply the change")
		r.tellLeadership(ctx, leadership.ConfigFailed{Version: version, Err: "this node was started without a config file to read again: restart it to apply the change"})
		return
	}
	cfg, router, restart, err := reloaded(r.opts.Reload, r.started)
	if err != nil {
		log.Error().Err(err).Msg("config reload failed; this node keeps running its current config (fix the file, then run mf reload again)")
		r.unapplied = version
		// Its heartbeat reports it, for mf reload to say at once.
		r.tellLeadership(ctx, leadership.ConfigFailed{Version: version, Err: err.Error()})
		return
	}
	previous := r.opts.Config
	r.unapplied = 0
	r.opts.Config, r.router = cfg, router
	r.inForce.Store(cfg)
	// Added connections get their series at zero, as the start-up
	// config's do, before the new graph can count anything in them.
	listeners.RegisterMetrics(cfg.Inbound)
	lanes.RegisterMetrics(cfg.Outbound)
	setCertMetrics(cfg, false)
	if r.spec != nil {
		fence, ended := r.spec.fence, r.spec.ended
		if !r.stopGraph(ctx, true) {
			// The old graph did not stop: the node is failing
			// (graphStuck), and starts no graph again.
			return
		}
		// The old graph has stopped (stopGraph waits for it): no lane holds
		// a row now, and under this term only this process claims, so every
		// row in flight is one the old graph left there (a send abandoned
		// at the drain timeout, rows claimed ahead it could not give back).
		// Left to their row lease, the new graph's lanes waited for it.
		// With them pending, and no lane running, the new graph's start
		// moves the queued rows of a destination whose lane_key the file
		// changes into the lanes of the new one (relane), so that no newer
		// message of a key overtakes an older one.
		switch {
		case !r.recover(fence, ended, log.With().Str("after", "reload").Logger()):
			if !closed(ended) {
				r.tellLeadership(ctx, leadership.Fenced{Fence: fence})
			}
		case r.stopRequested.Load():
			// A stop came during the drain; its shutdown waits behind this
			// reload. Started, the graph would open its ports again for a
			// moment, and the stop would drain it a second time.
			log.Info().Msg("the node is stopping: not starting the reloaded graph")
		default:
			r.startGraph(ctx, fence, ended)
		}
	}
	// The old graph's listeners have stopped (or none ran here).
	listeners.RetireMetrics(previous.Inbound, cfg.Inbound)
	r.setStatus(func(s *Status) { s.ConfigVersion = version })
	log.Info().Msg("config reloaded")
	// As mf run logs them at start: a reload may be what opens a listener
	// to plaintext or turns log_payloads on.
	for _, w := range cfg.Warnings() {
		log.Warn().Str("config", cfg.Path).Msg(w)
	}
	was := lanes.LaneKeys(previous)
	for dest, key := range lanes.LaneKeys(cfg) {
		if old, ok := was[dest]; ok && old != key {
			log.Info().Str("destination", dest).Str("lane_key_was", old).Str("lane_key", key).
				Msg("the reload changes the lane_key that splits this destination into lanes; the leader's graph moves its queued rows into the lanes of the new one before any of its lanes starts (a standby's, when it is promoted), so that its messages stay in order")
		}
	}
	if len(restart) > 0 {
		log.Warn().Strs("sections", restart).Msg("the reloaded file changes sections this node reads only at start; they are not in force: restart the node to apply them")
	}
	// The fingerprint first: ConfigLoaded makes the elector beat at once,
	// and that beat reports both.
	r.tellLeadership(ctx, leadership.ConfigInForce{Fingerprint: cfg.GraphFingerprint()})
	r.tellLeadership(ctx, leadership.ConfigLoaded{Version: version})
}

// tellLeadership sends m to the leadership actor, unless it has stopped.
func (r *root) tellLeadership(ctx actor.Context, m any) {
	if r.leadership != nil {
		ctx.Send(r.leadership, m)
	}
}

// drainNotice is how long a draining stop of the graph waits before it logs
// that it waits for deliveries in hand: most stops take milliseconds.
const drainNotice = time.Second

// stopGraphGrace is how long stopGraph waits for the graph past the drain
// timeout, the term's context cancelled by then (at once on a loss, at the
// drain timeout on a clean stop or a reload). Every call in the graph ends
// with that context, or within a destination's timeout_seconds, except one
// that takes neither and never returns: a file inbound lists, reads and
// archives on its actor's goroutine, and on a hard-mounted NFS share whose
// server has gone os.ReadDir or Lstat blocks for ever. Waited for without
// end, such an actor held root too: after a reload the node's ports stayed
// closed while its elector went on renewing the lease (no node accepted
// messages until someone killed the process), and a demoted node hung. With
// the drain timeout before it, it outlasts a listener's drain
// (drainListenerTimeout), after which the graph stops its other children: by
// then those not stuck have stopped, and the ERROR names only those that
// are. A variable for tests.
var stopGraphGrace = 10 * time.Second

// stopGraph stops the graph and waits until it and all its children have
// stopped: every listener has closed its port. On demotion (drain false) the
// term's context is cancelled first, so deliveries in hand are abandoned at
// once; on a clean shutdown lanes finish them, up to the drain timeout. A
// graph that has not stopped stopGraphGrace past the drain timeout never
// will (graphStuck): stopGraph reports false, and the node is failing
// (r.stopping set, the leadership actor stopped, Engine.Failed told); the
// caller must start nothing more.
func (r *root) stopGraph(ctx actor.Context, drain bool) bool {
	if r.graph == nil {
		return true
	}
	r.setStatus(func(s *Status) { s.Leader, s.Fence, s.Since = false, storage.Fence{}, time.Now() })
	if !drain {
		r.cancel()
	}
	if !closed(r.spec.done) { // one its supervisor stopped has gone already
		ctx.Stop(r.graph)
	}
	began := time.Now()
	timeout := time.After(r.opts.DrainTimeout)
	var notice, grace <-chan time.Time
	if drain {
		notice = time.After(drainNotice)
	}
	for waiting := true; waiting; {
		select {
		case <-r.spec.done:
			waiting = false
		case <-notice:
			// The ports are closed and the lease is kept until the
			// lanes are done: the operator (and the partners, refused
			// by every node) must learn why nothing happens.
			notice = nil
			r.opts.Log.Warn().Dur("drain_timeout", r.opts.DrainTimeout).
				Msg("waiting for the deliveries in hand to finish before the graph stops (at most drain_timeout): meanwhile no node accepts messages, as this node has closed its ports and keeps its lease so that no other node sends the same lanes; a destination slow to answer holds it up to its timeout_seconds; on a stop, a second SIGTERM ends the wait at once (the deliveries are sent again later)")
		case <-timeout:
			timeout, notice = nil, nil
			r.opts.Log.Warn().Dur("drain_timeout", r.opts.DrainTimeout).Msg("the graph did not stop within the drain timeout; abandoning the deliveries in hand")
			r.cancel()
			grace = time.After(stopGraphGrace)
		case <-grace:
			r.graphStuck(ctx, time.Since(began))
			return false
		}
	}
	r.cancel()
	r.graph, r.spec, r.cancel = nil, nil, nil
	r.opts.Log.Info().Msg("graph stopped: no listener is open on this node")
	return true
}

// graphStuck fails the node when its graph has not stopped stopGraphGrace
// past the drain timeout, its term's context cancelled: an actor of it is
// stuck in a call that does not return. The node can neither stop that graph
// nor start another, so it stops, as after a graph that panicked too often:
// root forgets the graph (its late Terminated and fenced reports are
// ignored), stops the leadership actor, which resigns the lease, and tells
// Engine.Failed; mf run exits non-zero and a standby takes over. The lease
// is resigned although the stuck actor has not stopped: it can do nothing
// more for its term (the context is cancelled: no lane sends, a file inbound
// reads no further file and stores nothing), and any write it still makes
// carries the old term, which the database refuses once another node is
// elected. Left to expire, the lease would only add its TTL to the outage,
// for a call that may never return.
func (r *root) graphStuck(ctx actor.Context, waited time.Duration) {
	term := r.spec.fence.Term
	var running []string
	if p := r.spec.running.Load(); p != nil {
		running = *p
	}
	r.graph, r.spec, r.cancel = nil, nil, nil
	r.stopping = true
	waited = waited.Round(time.Second)
	r.opts.Log.Error().Int64("term", term).Dur("waited", waited).Strs("not_stopped", running).
		Msg("the graph did not stop: an actor of it (not_stopped) is stuck in a call that does not return, most likely a file inbound whose directory is on a file system that does not answer (a hard-mounted NFS share whose server is gone); this node can neither stop its graph nor start one, so it gives up its lease and stops (mf run exits non-zero), for another node to take over. Check the mount of the directories named (dmesg: \"server not responding\")")
	r.stopLeadership(ctx)
	what := strings.Join(running, "; ")
	if what == "" {
		what = "the graph"
	}
	r.fail(fmt.Errorf("the graph of term %d did not stop within %v: %s (stuck in a call that does not return: see the ERROR line logged before)", term, waited, what))
}

// RegisterMetrics creates the leadership series at zero, so that a scrape
// shows them before any change: mf_is_leader and mf_leader_term too, before
// the engine starts (a node waiting for its database leads not, and an
// alert on sum(mf_is_leader) < 1 needs its 0).
func RegisterMetrics() {
	for _, reason := range []string{"single-node", "elected", "renew-lost", "fenced", "lock-lost"} {
		metrics.GetOrCreateCounter(fmt.Sprintf(`mf_leadership_changes_total{reason=%s}`, lanes.Label(reason)))
	}
	leaderGauges()
}

func countChange(reason string) {
	metrics.GetOrCreateCounter(fmt.Sprintf(`mf_leadership_changes_total{reason=%s}`, lanes.Label(reason))).Inc()
}

// leaderStatus is the status the process-wide leader gauges read.
var leaderStatus atomic.Pointer[atomic.Pointer[Status]]

func registerLeaderMetrics(s *atomic.Pointer[Status]) {
	leaderStatus.Store(s)
	leaderGauges()
}

// leaderGauges creates mf_is_leader and mf_leader_term, which read the
// status registerLeaderMetrics last stored (none yet: 0).
func leaderGauges() {
	metrics.GetOrCreateGauge("mf_is_leader", func() float64 {
		if p := leaderStatus.Load(); p != nil && p.Load().Leader {
			return 1
		}
		return 0
	})
	metrics.GetOrCreateGauge("mf_leader_term", func() float64 {
		if p := leaderStatus.Load(); p != nil {
			return float64(p.Load().Fence.Term)
		}
		return 0
	})
}
