package leadership

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/textcut"
	"github.com/messagefoundry/mf/storage"
)

// Timings that are not configuration. The configured ones (heartbeat, fence
// timeout, lease TTL) come from [cluster]; see doc.go for how they relate.
const (
	// expiryMargin is added to a live lease's remaining time when a follower
	// schedules its next attempt for just after the lease expires.
	expiryMargin = 10 * time.Millisecond
	// resignAttempts and resignTimeout bound the resignation on a clean stop;
	// lease expiry is the fallback.
	resignAttempts = 3
	resignTimeout  = time.Second
	// schemaCheckEvery is how often a node reads the migrations applied
	// to its database (ElectorOptions.SchemaCheckInterval by default).
	schemaCheckEvery = time.Minute
)

// ConfigChanged tells root that the shared config version moved: it reloads
// this node's config file, restarts its graph if it leads, and answers
// ConfigLoaded.
type ConfigChanged struct{ Version int64 }

// ConfigLoaded tells the elector which config version this node now runs,
// which its heartbeat reports (with no failed reload).
type ConfigLoaded struct{ Version int64 }

// ConfigFailed tells the elector that this node failed to reload to config
// Version, and why (Err), which its heartbeat reports until a reload works:
// mf reload reads it, and says at once which node failed and why.
type ConfigFailed struct {
	Version int64
	Err     string
}

// ConfigInForce tells the elector the fingerprint of the graph config this
// node now runs (config.Config.GraphFingerprint), which its heartbeat
// reports and the drift check compares. Root sends it after a reload, before
// ConfigLoaded.
type ConfigInForce struct{ Fingerprint string }

type tick struct{ gen int }
type checkTrust struct{ until time.Time }
type resigned struct{}

var renewDuration = metrics.NewPrometheusHistogram("mf_lease_renew_duration_seconds")

// Elector is the leadership actor of a clustered node: the lease loop and the
// membership heartbeat. It is in one of two states, follower or leader (see
// doc.go), and reports every change to its parent (root) as Changed, in
// order.
type Elector struct {
	store  storage.Store
	cfg    config.Cluster
	nodeID string
	host   string
	pid    int64
	trust  *Trust
	log    zerolog.Logger

	leader       bool
	fence        storage.Fence
	trustedUntil time.Time     // monotonic; meaningful while leader
	ended        chan struct{} // Changed.Ended of the term held; closed when it ends
	nextAttempt  time.Time     // when the next election or renewal attempt is due
	configSeen   int64         // the last shared config version seen
	configLoaded int64         // the version this node runs (reported in mf_nodes)
	configFailed ConfigFailed  // the newest reload that failed since then (reported too)
	fingerprint  string        // its graph config's fingerprint (reported in mf_nodes)
	drift        driftWatch    // the drift check's state (drift.go)
	beaten       bool          // a heartbeat of this process has been recorded
	gen          int           // the current tick; older ones are ignored
	timer        scheduler.CancelFunc
	stopWatch    context.CancelFunc
	carry        *carried
	// failed is set when a message panicked: a Stopping that follows is
	// the supervisor giving up on this elector, not root's clean stop.
	failed bool
	// electing, beating and reading count the failures of the calls a
	// standby makes every heartbeat (election, membership, config
	// version): while the database is away they fail every time, and a
	// line each was three lines a heartbeat, for hours.
	electing, beating, reading storage.Outage
	// beside is set while elections are refused because a single node
	// (cluster disabled) holds the schema (storage.ErrSingleNodeRunning):
	// logged at ERROR when it starts, at INFO when it ends.
	beside bool
	// pinned is set for a node_id from the config file, which another
	// process may have been given too; twin counts the beats that found
	// this node's row written by another process.
	pinned bool
	twin   storage.Outage
	// schemaEvery, nextSchema and schemaWarned run the schema check:
	// its period, when it is next due, and whether it has warned (once).
	schemaEvery  time.Duration
	nextSchema   time.Time
	schemaWarned bool
}

// carried is what an elector hands over to the one that replaces it when it
// is restarted after a panic.
type carried struct {
	configSeen, configLoaded int64
	configFailed             ConfigFailed
	fingerprint              string
	beaten                   bool
}

// ElectorOptions configure NewElector.
type ElectorOptions struct {
	Store   storage.Store
	Cluster config.Cluster
	// NodeID is this node's name in the lease and in mf_nodes.
	NodeID string
	// Trust is the window the elector keeps open while it leads.
	Trust *Trust
	// ConfigVersion is the shared config version this node started with.
	ConfigVersion int64
	// ConfigFingerprint is the fingerprint of the graph config it started
	// with (config.Config.GraphFingerprint).
	ConfigFingerprint string
	// Pinned says NodeID comes from the config file: each heartbeat then
	// checks that no other process writes this node's row (CheckNodeIDFree
	// misses two processes started at one moment).
	Pinned bool
	// SchemaCheckInterval is how often the node reads the migrations
	// applied to its database, to warn once if a newer mf migrated it
	// (0: a minute).
	SchemaCheckInterval time.Duration
	Log                 zerolog.Logger
}

// NewElector returns the props of a clustered node's leadership actor.
func NewElector(o ElectorOptions) *actor.Props {
	// A restarted elector takes the config versions over: starting again
	// from o.ConfigVersion would reload a config already loaded.
	carry := &carried{configSeen: o.ConfigVersion, configLoaded: o.ConfigVersion, fingerprint: o.ConfigFingerprint}
	schemaEvery := o.SchemaCheckInterval
	if schemaEvery <= 0 {
		schemaEvery = schemaCheckEvery
	}
	return actor.PropsFromProducer(func() actor.Actor {
		host, _ := os.Hostname()
		return &Elector{
			store: o.Store, cfg: o.Cluster, nodeID: o.NodeID, host: host, pid: int64(os.Getpid()),
			trust: o.Trust, pinned: o.Pinned, schemaEvery: schemaEvery, configSeen: carry.configSeen, configLoaded: carry.configLoaded, configFailed: carry.configFailed, fingerprint: carry.fingerprint, beaten: carry.beaten, carry: carry,
			log: o.Log.With().Str("component", "leadership").Logger(),
		}
	})
}

// Receive implements actor.Actor.
func (e *Elector) Receive(ctx actor.Context) {
	defer func() {
		if r := recover(); r != nil {
			e.failed = true
			panic(r) // the supervisor's, as before: restart, or stop after too many
		}
	}()
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		e.watchResignations(ctx)
		e.step(ctx)
	case tick:
		if msg.gen == e.gen {
			e.step(ctx)
		}
	case resigned:
		if !e.leader {
			e.step(ctx) // the lease was just freed: try at once
		}
	case checkTrust:
		// The trust window ends: unless a renewal has moved it since, stop
		// acting as leader now, whatever the database call in hand does.
		if e.leader && msg.until.Equal(e.trustedUntil) && !time.Now().Before(e.trustedUntil) {
			e.lose(ctx, "fenced", "no lease renewal within leader_fence_timeout_seconds: stopped acting as leader before the lease can expire")
			e.schedule(ctx, e.cfg.Heartbeat())
		}
	case Fenced:
		if e.leader && msg.Fence == e.fence {
			e.lose(ctx, "fenced", "a write was refused by the fence: another node holds a newer term")
			e.schedule(ctx, e.cfg.Heartbeat())
		}
	case ConfigInForce:
		e.fingerprint = msg.Fingerprint
	case ConfigLoaded:
		e.configLoaded, e.configFailed = msg.Version, ConfigFailed{}
		e.heartbeat() // report the version now, not a heartbeat later
	case ConfigFailed:
		e.configFailed = msg
		e.configFailed.Err = textcut.Cut(storage.ValidText(msg.Err), storage.MaxConfigErrorBytes)
		e.heartbeat() // mf reload waits for it
	case *actor.Restarting:
		e.restarting(ctx)
	case *actor.Stopping:
		if e.failed {
			e.abandon(ctx)
			return
		}
		e.stop()
	}
}

// restarting runs when a panic in Receive makes the supervisor replace this
// elector with a new one, which starts as a follower knowing nothing of the
// term held. The term ends here, as on a fence, so that root stops its graph
// rather than lead on with nobody renewing. The lease is not resigned: the
// graph may still be stopping, and the lease's expiry keeps any other node
// out until then (doc.go).
func (e *Elector) restarting(ctx actor.Context) {
	if e.timer != nil {
		e.timer()
	}
	if e.stopWatch != nil {
		e.stopWatch()
	}
	e.carry.configSeen, e.carry.configLoaded, e.carry.configFailed, e.carry.fingerprint, e.carry.beaten = e.configSeen, e.configLoaded, e.configFailed, e.fingerprint, e.beaten
	if e.leader {
		e.lose(ctx, "fenced", "the leadership actor panicked and restarts as a follower (a bug: report it with the protoactor \"Recovering\" line just before, which has its reason)")
	}
}

// abandon runs when root's supervisor stops this elector after a panic
// (more than 10 in 10 s): it ends the term held, as restarting does, and
// does not resign, for the same reason: root learns of it only now
// (actor.Terminated) and may still be stopping the graph. Root then stops
// the engine: this node can take no part in elections any more.
func (e *Elector) abandon(ctx actor.Context) {
	if e.timer != nil {
		e.timer()
	}
	if e.stopWatch != nil {
		e.stopWatch()
	}
	if e.leader {
		e.lose(ctx, "fenced", "the leadership actor panicked too often and was stopped (a bug: report it with the protoactor \"Recovering\" lines before, which have its reason)")
	}
}

// step is one round of the loop: an election attempt (follower) or a renewal
// (leader), then the heartbeat, then the config version check.
func (e *Elector) step(ctx actor.Context) {
	// The next attempt is timed from the start of this one, not from the
	// end of the side calls: at short timings (heartbeat 1 s, fence 2 s) a
	// slow election plus the heartbeat and config calls would otherwise
	// push the first renewal past the trust window, and the new leader
	// would fence itself for nothing.
	began := time.Now()
	var next time.Duration
	if e.leader {
		var renewed bool
		next, renewed = e.renew(ctx)
		if !renewed && e.leader {
			// The database is in doubt: go straight back to renewing
			// rather than spend the trust window on side calls. A side
			// call made meanwhile (a reload's report) is bounded by that
			// retry, not by the attempt before it, long past.
			e.nextAttempt = began.Add(next)
			e.schedule(ctx, next)
			return
		}
	} else {
		next = e.elect(ctx)
	}
	e.nextAttempt = began.Add(next)
	e.heartbeat()
	e.watchConfig(ctx)
	e.checkSchema()
	e.schedule(ctx, max(0, time.Until(e.nextAttempt)))
}

// checkSchema reads, once every schemaEvery, the migrations applied to the
// database: a newer mf migrate run during a rolling upgrade left this node
// writing with statements made for the older schema, and it said nothing
// (Migrate refuses such a schema only at start). Warned of once; other
// failures are the heartbeat's calls' to report.
func (e *Elector) checkSchema() {
	now := time.Now()
	if e.schemaWarned || now.Before(e.nextSchema) {
		return
	}
	e.nextSchema = now.Add(e.schemaEvery)
	cctx, cancel := e.callContext()
	defer cancel()
	if err := e.store.SchemaCheck(cctx); errors.Is(err, storage.ErrSchemaNewer) {
		e.schemaWarned = true
		e.log.Warn().Err(err).Msg("this node's mf is older than its database's schema, which a newer mf has migrated since this node started: upgrade mf on this node to that version and restart it (logged once)")
	}
}

// callContext bounds a side call (heartbeat, config read) by the heartbeat
// and, while leading, by the next renewal and the trust window: no side
// call may delay a renewal or hold the actor past the moment it must fence.
func (e *Elector) callContext() (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(e.cfg.Heartbeat())
	if e.leader {
		for _, t := range []time.Time{e.trustedUntil, e.nextAttempt} {
			if t.Before(deadline) {
				deadline = t
			}
		}
	}
	return context.WithDeadline(context.Background(), deadline)
}

// elect is the follower state: take the lease if it has expired or been
// resigned. On a live lease, come back just after it expires if that is
// sooner than the next heartbeat. While a single node holds the schema the
// store elects nobody (storage.ErrSingleNodeRunning): said once, tried
// again every heartbeat.
func (e *Elector) elect(ctx actor.Context) time.Duration {
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.Background(), e.cfg.Heartbeat())
	l, elected, err := e.store.LeaseAttemptElect(cctx, storage.LeaseAttemptElectParams{Owner: e.nodeID, TTL: e.cfg.LeaderLeaseTTL()})
	cancel()
	if errors.Is(err, storage.ErrSingleNodeRunning) {
		// The database answered: it is no outage, and no store error.
		e.worksAgain(&e.electing, "election")
		if !e.beside {
			e.beside = true
			e.log.Error().Err(err).
				Msg("a single node (cluster disabled) runs on this cluster's database schema, so no node is elected beside it: stop it, or enable [cluster] on it. This node stays a standby and tries again every heartbeat (logged once while it lasts)")
		}
		return e.cfg.Heartbeat()
	}
	if err != nil {
		e.callFailed(&e.electing, "lease_elect", "election attempt", err)
		return e.cfg.Heartbeat()
	}
	e.worksAgain(&e.electing, "election")
	if e.beside {
		e.beside = false
		e.log.Info().Msg("no single node holds this database schema any more: elections are attempted again")
	}
	if !elected {
		// Remaining is the database's, read at some moment of the call:
		// counted from its end, the retry comes after the expiry, not up
		// to the call's latency before it (one more election call for
		// nothing at each failover on a distant database).
		if wait := time.Since(start) + l.Remaining() + expiryMargin; wait < e.cfg.Heartbeat() {
			return wait
		}
		return e.cfg.Heartbeat()
	}
	e.leader = true
	e.fence = storage.Fence{Owner: e.nodeID, Term: l.Term}
	e.ended = e.trust.begin(start.Add(e.cfg.LeaderFenceTimeout()))
	e.trusted(ctx, start) // an answer after the window: it lapses at once, and checkTrust fences
	e.log.Info().Int64("term", l.Term).Msg("elected leader")
	ctx.Send(ctx.Parent(), Changed{Leader: true, Fence: e.fence, Reason: "elected", Ended: e.ended})
	return e.cfg.Heartbeat()
}

// renew is the leader state. The attempt may take at most what is left of
// the trust window; a renewal that finds another owner or term is a loss at
// once; any other failure is retried until the window closes.
func (e *Elector) renew(ctx actor.Context) (next time.Duration, renewed bool) {
	start := time.Now()
	if !start.Before(e.trustedUntil) {
		e.lose(ctx, "fenced", "the trust window closed before a renewal could start")
		return e.cfg.Heartbeat(), false
	}
	cctx, cancel := context.WithDeadline(context.Background(), e.trustedUntil)
	_, err := e.store.LeaseAttemptRenew(cctx, storage.LeaseAttemptRenewParams{Owner: e.nodeID, Term: e.fence.Term, TTL: e.cfg.LeaderLeaseTTL()})
	cancel()
	renewDuration.UpdateDuration(start)
	if err != nil && !errors.Is(err, storage.ErrLeaseLost) { // a lost lease is a leadership change
		storage.CountError(context.Background(), "lease_renew", err)
	}
	switch {
	case err == nil && e.trusted(ctx, start):
		return e.cfg.Heartbeat(), true
	case err == nil:
		// Answered after the window lapsed, which ended the term: the
		// graph is being cancelled, and the term is not trusted again.
		e.lose(ctx, "fenced", "no lease renewal within leader_fence_timeout_seconds: stopped acting as leader before the lease can expire")
	case errors.Is(err, storage.ErrLeaseLost):
		if left := time.Until(e.trustedUntil); left > 0 {
			// Another node was elected while this one still trusted its
			// lease: the fence timing rules that out (doc.go) unless a
			// clock misbehaved. Past the window it is the normal end of a
			// renewal too slow to count.
			e.log.Error().Int64("term", e.fence.Term).Dur("trust_left", left).
				Msg("another node was elected while this node still trusted its lease, which leader_fence_timeout_seconds < lease_ttl_seconds rules out unless a clock misbehaved: " +
					"check the database server's clock for steps forward and this host or VM for pauses; deliveries this node had in hand may reach their destinations again, after the new leader's")
		}
		e.lose(ctx, "renew-lost", "the lease is held by another owner or term")
	case !time.Now().Before(e.trustedUntil):
		e.lose(ctx, "fenced", "no lease renewal within leader_fence_timeout_seconds: stopped acting as leader before the lease can expire")
	default:
		left := time.Until(e.trustedUntil)
		e.log.Warn().Err(err).Int64("term", e.fence.Term).Dur("trust_left", left).
			Msg("lease renewal failed; retrying until the trust window closes (check the database)")
		return min(e.cfg.Heartbeat()/4, left), false
	}
	return e.cfg.Heartbeat(), false
}

// trusted opens the trust window from the start of a successful attempt:
// the lease it renewed lasts until the database's now + TTL, counted from a
// moment after start, so the window closes at least TTL - fence timeout
// before any other node can be elected (doc.go).
//
// It reports false, opening nothing, once the window has lapsed: the
// Trust's own timer has ended the term then (a renewal answered after
// it, its driver having ignored the deadline).
func (e *Elector) trusted(ctx actor.Context, start time.Time) bool {
	e.trustedUntil = start.Add(e.cfg.LeaderFenceTimeout())
	scheduler.NewTimerScheduler(ctx).SendOnce(time.Until(e.trustedUntil), ctx.Self(), checkTrust{until: e.trustedUntil})
	return e.trust.set(e.trustedUntil)
}

// lose ends this node's leadership and tells root, which stops the graph.
func (e *Elector) lose(ctx actor.Context, reason, why string) {
	e.endTerm()
	term := e.fence.Term
	e.leader = false
	e.fence = storage.Fence{}
	ev := e.log.Info()
	if reason == "fenced" {
		ev = e.log.Error()
	}
	ev.Int64("term", term).Str("reason", reason).Msg("leadership lost: " + why)
	ctx.Send(ctx.Parent(), Changed{Leader: false, Fence: storage.Fence{Owner: e.nodeID, Term: term}, Reason: reason})
}

// endTerm closes the trust window and the held term's Ended (unless the
// window's lapse has closed it already): root cancels that term's graph on
// it at once, even while it is busy.
func (e *Elector) endTerm() {
	e.trust.close()
	e.ended = nil
}

// heartbeat records this node in mf_nodes. Best effort: membership is for
// operators; it never decides who leads. The first beat of the process sets
// the row's started_at, whatever a crashed run of the same node id left.
// Before it, the membership this node last wrote is read for the twin and
// drift checks; a failed read is left to the beat that follows to report.
func (e *Elector) heartbeat() {
	cctx, cancel := e.callContext()
	defer cancel()
	if e.beaten {
		if l, err := e.store.NodeList(cctx); err == nil {
			if e.pinned {
				e.checkTwin(l)
			}
			e.checkDrift(l, time.Now())
		}
	}
	err := e.store.NodeHeartbeat(cctx, storage.NodeHeartbeatParams{
		NodeID: e.nodeID, Host: e.host, PID: e.pid, IsLeader: e.leader, ConfigVersion: e.configLoaded,
		ConfigFingerprint: e.fingerprint, Started: !e.beaten,
		ConfigFailedVersion: e.configFailed.Version, ConfigError: e.configFailed.Err,
	})
	if err != nil {
		e.callFailed(&e.beating, "node_heartbeat", "membership heartbeat", err)
		return
	}
	e.beaten = true
	e.worksAgain(&e.beating, "membership heartbeat")
}

// checkTwin reads this node's row before the beat: since this process
// wrote it at its last beat, another host or pid in it is another process
// running under the same node_id. Both then write one row in turn, and
// /cluster/nodes shows them as one node, its leader flag and pid flapping.
// Logged at ERROR once a minute while it lasts.
func (e *Elector) checkTwin(l storage.NodeList) {
	for _, n := range l.Nodes {
		if n.NodeID != e.nodeID {
			continue
		}
		if n.Status == "active" && (n.Host != e.host || n.PID != e.pid) {
			if log, count := e.twin.Failed(time.Now()); log {
				e.log.Error().Str("other_host", n.Host).Int64("other_pid", n.PID).Int("beats", count).
					Msg("another process heartbeats under this node's node_id: two nodes run with one [cluster] node_id, and /cluster/nodes shows them as one; stop one of them and give it its own node_id (logged once a minute while it lasts)")
			}
			return
		}
	}
	if n := e.twin.Over(); n > 0 {
		e.log.Info().Int("beats", n).Msg("no other process heartbeats under this node's node_id any more")
	}
}

// callFailed counts a failure of call, one of the calls a node makes every
// heartbeat, in o and in mf_store_errors_total{op}, and logs it when o says
// so.
func (e *Elector) callFailed(o *storage.Outage, op, call string, err error) {
	storage.CountError(context.Background(), op, err)
	if log, n := o.Failed(time.Now()); log {
		e.log.Warn().Err(err).Int("failures", n).
			Msg(call + " failed; retrying every heartbeat, logged once a minute while it lasts (check the database)")
	}
}

// worksAgain ends o's outage, if there was one, with a line that says how
// many times call failed.
func (e *Elector) worksAgain(o *storage.Outage, call string) {
	if n := o.Over(); n > 0 {
		e.log.Info().Str("call", call).Int("failures", n).Msg("the database works again for this call")
	}
}

// watchConfig notices a bump of the shared config version and asks root to
// reload, once per version: root answers ConfigLoaded only when the reload
// worked, and the heartbeat reports the version actually running.
func (e *Elector) watchConfig(ctx actor.Context) {
	cctx, cancel := e.callContext()
	v, err := e.store.ConfigVersionRead(cctx, storage.ConfigVersionReadParams{})
	cancel()
	if err != nil {
		e.callFailed(&e.reading, "config_version_read", "reading the shared config version", err)
		return
	}
	e.worksAgain(&e.reading, "shared config version")
	if v != e.configSeen {
		e.configSeen = v
		ctx.Send(ctx.Parent(), ConfigChanged{Version: v})
	}
}

func (e *Elector) schedule(ctx actor.Context, d time.Duration) {
	if e.timer != nil {
		e.timer()
	}
	e.gen++
	e.timer = scheduler.NewTimerScheduler(ctx).SendOnce(d, ctx.Self(), tick{gen: e.gen})
}

// watchResignations wakes the follower the moment a leader resigns, where
// the store can tell (PostgreSQL NOTIFY).
func (e *Elector) watchResignations(ctx actor.Context) {
	w, ok := e.store.(storage.ResignWatcher)
	if !ok {
		return
	}
	wctx, cancel := context.WithCancel(context.Background())
	e.stopWatch = cancel
	system, self := ctx.ActorSystem(), ctx.Self()
	// The watcher reconnects every second while the database is away: a
	// line per attempt would be 3,600 an hour. Both callbacks run on the
	// watcher's goroutine, which alone touches failing.
	var failing storage.Outage
	go w.WatchResignations(wctx,
		func() {
			if n := failing.Over(); n > 0 {
				e.log.Info().Int("failures", n).Msg("listening for lease resignations again")
			}
			system.Root.Send(self, resigned{})
		},
		func(err error) {
			if log, n := failing.Failed(time.Now()); log {
				e.log.Warn().Err(err).Int("failures", n).
					Msg("listening for lease resignations failed; reconnecting every second, logged once a minute while it lasts (followers still poll every heartbeat)")
			}
		})
}

// stop is the clean stop: give the lease up now (so a standby takes over
// without waiting for it to expire) and leave a tombstone. Root has already
// stopped the graph.
func (e *Elector) stop() {
	if e.timer != nil {
		e.timer()
	}
	if e.stopWatch != nil {
		e.stopWatch()
	}
	if e.leader {
		e.endTerm()
		for attempt := 1; attempt <= resignAttempts; attempt++ {
			cctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
			_, err := e.store.LeaseResign(cctx, storage.LeaseResignParams{Owner: e.nodeID, Term: e.fence.Term})
			cancel()
			if err == nil {
				e.log.Info().Int64("term", e.fence.Term).Msg("resigned the leader lease")
				break
			}
			e.log.Warn().Err(err).Int("attempt", attempt).Msg("resigning the leader lease failed; it will expire instead")
		}
		e.leader = false
	}
	cctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
	defer cancel()
	if err := e.store.NodeLeave(cctx, storage.NodeLeaveParams{NodeID: e.nodeID}); err != nil {
		e.log.Warn().Err(err).Msg("could not mark this node left; it will show as stale")
	}
}
