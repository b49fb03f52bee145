package lanes

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/tlsfiles"
	"github.com/messagefoundry/mf/storage"
)

// RescanInterval is how often the manager wakes the parked lanes whose head
// has come due (Manager.parked), and asks whether it must look at every lane
// for claimable work that no actor is delivering: heads re-pended by the
// sweep, by promotion recovery or by an operator (the queue's version moved:
// storage.QueueVersionName). Asking costs one primary-key read.
const RescanInterval = 2 * time.Second

// FullRescanInterval is how often the manager looks at every lane whatever
// the queue's version says: a safety net for a change no one was told of.
//
// Looking reads every unfinished row (QueueLanes). With a destination down
// and a backlog of 1,000,000 rows in 1,000 lanes on PostgreSQL it took 140
// to 350 ms in three processes (a parallel scan); looking every
// RescanInterval, PostgreSQL used 19 to 22% of a core with nothing arriving,
// 11 to 16% looking only when needed (the rest is the lanes' retries).
const FullRescanInterval = 30 * time.Second

// holdsReadTimeout bounds the manager's read of the held outbounds at its
// start (Manager.start).
const holdsReadTimeout = 5 * time.Second

// Ingested tells the lane manager which lanes received new rows.
type Ingested struct {
	Lanes []string
	// Newest is, index for index with Lanes, the highest queue id the batch
	// stored in that lane. It may be left out (nil): a lane that does not
	// know its newest row looks for a next one after every delivery.
	Newest []int64
}

// LogValue is what a log line shows of an Ingested (protoactor logs a dead
// letter, and the message an actor failed on, whole): how many lanes, never
// their names, whose keys are often patient ids.
func (in Ingested) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("lanes", len(in.Lanes)))
}

// LogValue: the rescan's answer carries lane names and last errors (PHI);
// a log line shows how many lanes.
func (r rescanned) LogValue() slog.Value {
	return slog.GroupValue(slog.Bool("looked", r.looked), slog.Int("lanes", len(r.lanes)))
}

// unknown is a lane's newest row when the manager cannot bound it (see
// laneRef.newest).
const unknown = math.MaxInt64

type rescan struct{}

// HoldChanged tells the lane manager that an operator has just held
// (Held) or released Outbound, through this node's API, once the store has
// it (storage.Store.OutboundHold, OutboundRelease): its lanes see a hold
// at their next step, before any claim, and a release starts them at
// once, instead of at the next rescan (RescanInterval) that the hold's
// move of the queue's version brings about. Sent with Request, it is
// answered HoldSeen once the manager has acted on it. A hold made through
// another node's API reaches the manager only by that rescan; the claim
// refuses the outbound's rows meanwhile (storage.Store.QueueClaimNext), so
// only a run of rows claimed before it may still be sent.
type HoldChanged struct {
	Outbound string
	Held     bool
}

// HoldSeen answers HoldChanged: the manager has set the outbound's flag
// (and, for a release, begun to list the lanes).
type HoldSeen struct{}

// QueueChanged tells the lane manager that an operator has just retried or
// skipped a pending row through this node's API, once the store has it
// (storage.Store.QueueRelease, QueueSkip): the manager lists the lanes at
// once, instead of at the next rescan (RescanInterval) that the action's
// move of the queue's version brings about, so that a lane whose head was
// blocked (parked) or backing off (its actor asleep on its timer) and is
// claimable now is woken and claims from its head. The API reads no row,
// so the message names no lane: a listing is what that rescan would have
// done anyway. Sent with Request, it is answered QueueSeen once the
// listing has begun. An action made through another node's API reaches
// the manager only by that rescan.
type QueueChanged struct{}

// QueueSeen answers QueueChanged: the manager has begun to list the lanes
// (or will as soon as the listing under way ends).
type QueueSeen struct{}

// listingPage is how many lanes a page of a rescan's listing holds
// (storage.QueueLanes): the lanes of each page start as soon as it comes.
// Listed whole, 500,000 rows in 50,000 lanes on PostgreSQL, a new primary's
// first claim came 0.9 to 1.2 s after its graph started (1.6 to 4.5 s in
// busier runs); listed by pages, 0.16 to 0.31 s: a page of 1,000 lanes is
// read in 8 to 12 ms (bench/backlogfailover).
const listingPage = 1000

// rescanned brings a rescan's look at the store back to the manager: the
// version read, and each page of the listing in turn.
type rescanned struct {
	// looked is set when the rescan listed the lanes; otherwise the queue's
	// version had not moved and nothing was due.
	looked bool
	// lanes is one page of the listing.
	lanes []storage.LaneSummary
	// last is set on the rescan's last answer: the listing's last page,
	// its failure, or the version alone when it listed nothing.
	last    bool
	version int64 // the queue's version, read before the lanes
	began   time.Time
	// confirm is the Manager.confirm this rescan took: a rescan that fails
	// gives it back, for the next one.
	confirm bool
	// holds are the held outbounds, read after the version and before the
	// listing; withHolds is set on the page that carries them (the first).
	holds     []storage.OutboundHeld
	withHolds bool
	// scan numbers the rescan that listed (Manager.scans): a hold or
	// release told to the manager (HoldChanged) after it began is newer
	// than what it read.
	scan uint64
	err  error
	op   string // the store call that failed with err
	// by is the manager that began the rescan. A manager restarted after
	// a panic is a new one, and its predecessor's answers still in the
	// mailbox are not its own: one that ends a rescan cleared the new
	// manager's scanning while its first listing ran, and a second ran
	// beside it.
	by *Manager
}

// Manager spawns one lane actor per lane with work and stops it when its lane
// runs dry. It owns the destinations' senders, shared by their lanes.
//
// Backpressure: nothing flows from ingest to the lanes but wake-ups; the
// rows themselves wait in the store, and a lane claims a few at a time
// (Store.ClaimAhead). Wakes are coalesced, so a lane's mailbox holds at most
// one Wake, one next and one timer message however fast messages arrive or
// however slow its destination is.
type Manager struct {
	env     *Env
	dests   map[string]config.Outbound
	senders map[string]Sender
	// retired carries the senders of a manager restarted after a panic to
	// its next incarnation, which closes them as it starts: protoactor
	// stops a restarting actor's children (the lanes) only after its
	// Restarting, and starts the next incarnation once they all have
	// stopped, so a lane's send in hand finishes on its connection.
	retired *retiredSenders
	// failing follows each destination's failed deliveries, shared by its
	// lanes (outage).
	failing map[string]*outage
	lanes   map[string]*laneRef
	// parked holds lanes without an actor whose head waits: for an
	// operator (held), for its retry backoff, or for the lease of an
	// in-flight head no actor of this node holds, as the last rescan (or
	// the lane's own last word) found them. A Wake for a newly stored row
	// could claim nothing there, since the new row queues behind that head:
	// it starts no actor. Each rescan that lists the lanes makes the set
	// afresh and wakes the lanes whose head has become claimable; an
	// operator's retry or skip moves the queue's version, so a lane stays
	// parked at most one RescanInterval past it. A lane whose head waits
	// for a time is woken by the manager itself at the first rescan after
	// that time, without a listing: with a destination down, a new
	// primary finds every lane of the backlog backing off until up to
	// retry_max_seconds later, and listing them all each time one came due
	// read every unfinished row every RescanInterval for that long.
	//
	// A rescan drops only the lanes parked before it began (scanFrom): a
	// lane that parked itself while the rescan's query ran may have been
	// seen with its head still in flight, and a result that old must not
	// unpark it. A lane whose park it drops is woken if its park swallowed
	// a Wake meanwhile (parking.woken).
	parked   map[string]parking
	parks    uint64
	scanFrom uint64
	timer    scheduler.CancelFunc
	// scanning is set while a rescan lists the lanes, off the manager's
	// goroutine: the listing reads every unfinished row (0.4 s and more for
	// 500,000 of them on PostgreSQL), and the manager would take no
	// Ingested meanwhile, so lanes of healthy destinations waited behind a
	// backlog elsewhere. The listing comes a page at a time (listingPage),
	// each acted on as it comes. One at a time; scans counts it, so that a
	// stop waits for it, and halt, set at the stop, ends it at its next
	// page.
	scanning bool
	scans    sync.WaitGroup
	halt     atomic.Bool
	// orphaned and resplitting count, over a listing's pages, the lanes
	// that orphans and misplaced report at its last page.
	orphaned, resplitting laneCounts
	// looked is when the last rescan that listed the lanes began, and
	// version the queue's version it read first (storage.QueueVersionName).
	// A rescan lists the lanes only if the version has moved since, or
	// FullRescanInterval has passed.
	looked  time.Time
	version int64
	// certsLooked is when the senders' certificates were last looked at.
	certsLooked time.Time
	// confirm is set when a lane has parked itself as held (its actor's
	// own word, in idle) since the last listing began: the next rescan
	// lists the lanes, whatever the version says. The word can be stale:
	// an actor whose idle was ignored (a Wake was on its way) says held
	// until it next has a row, and if an operator skipped the held head in
	// the meantime the lane may be empty. A listing that began before the
	// skip leaves the park in place (see parked), and, with the version
	// not moving again, new rows of the lane waited for the full rescan
	// (FullRescanInterval). A listing begun after the park drops it unless
	// the head is still held, so a stale word costs at most one
	// RescanInterval. Holds are rare (an exhausted head waiting for an
	// operator): one listing more for each is cheap.
	confirm bool
	// rescans counts the rescans' answers taken (inspect reports it).
	rescans int
	// idles counts the idles of live lane actors taken (inspect reports
	// it: a test knows by it that a lane has handled a Wake to its end).
	idles int
	// floors keeps the floor of each lane whose actor was stopped, for the
	// lane's next actor (storage.QueueClaimNextParams.From), in two
	// generations so that it stays bounded: forgetting a floor is always
	// safe (0 is a floor too), only slower.
	//
	// Why: under light traffic a lane's actor stops after nearly every
	// row (it drains), and a fresh actor with floor 0 walked, on
	// PostgreSQL, every index entry its lane's finished rows had left
	// since the last vacuum: 1.4 ms and 174 pages for a lane 1,000 rows
	// old, 0.1 ms and 2 pages from the floor (EXPLAIN ANALYZE), and more
	// the longer vacuum waits.
	floors floorMemory
	// crashed maps the actor id of each lane actor that panicked, and that
	// HandleFailure has stopped, to its lane, until its Terminated comes;
	// restarts holds the timers that then start those lanes afresh
	// (restartLane).
	crashed  map[string]string
	restarts map[string]scheduler.CancelFunc
	// revived holds the lanes started afresh after a panic whose next
	// actor is yet to be spawned: it starts with laneActor.afterPanic.
	revived map[string]bool
	// ending holds, by lane, the actor the manager stopped on its idle,
	// until its Terminated comes, with the wake-ups of the lane meanwhile;
	// endingIDs maps the Id of each such actor's PID to its lane. A stop is
	// taken between two of the actor's messages, and an idle handled late
	// (the manager behind by a rescan, or a yield's idle) can find its actor
	// back in a step its own timer began, with a claim or a send in hand. A
	// second actor started beside it claimed behind that row or, unsure,
	// gave it back (releaseOwn) and sent it again. One lane, one actor: the
	// lane's next actor starts when this one has ended.
	ending    map[string]*endingLane
	endingIDs map[string]string
	stopping  bool // no lane is started again once set
	// listing counts the rescans that failed in a row, so that a database
	// away is logged when it starts, once a minute and when it ends.
	listing storage.Outage
	// unconfigured holds the destinations with unfinished rows that are
	// not in this graph's config, reported once each (orphans).
	unconfigured map[string]bool
	// resplit holds the destinations reported once for rows queued in
	// lanes their routes no longer make (misplaced).
	resplit map[string]bool
	// active counts each destination's lanes with an actor, which
	// laneCap bounds; waiting holds, per destination, the lanes woken
	// while it was at its cap, started as its lanes stop (admit).
	active  map[string]int
	waiting map[string]*waitQueue
	// declined holds, per destination, the running lanes whose offer to
	// yield their place while their head backs off (idle.due) the manager
	// declined, no lane waiting then: a lane that comes to wait asks them
	// again (placeWanted). Without it that lane waited for one of their
	// backoffs to end, up to retry_max_seconds, behind lanes with nothing
	// to send.
	declined map[string]map[string]struct{}
	// outboundHeld has a flag per destination, set while an operator holds
	// it (storage.Store.OutboundHold), shared with its lanes, which claim
	// and send nothing while it is set (laneActor.outboundHeld); the
	// manager starts none of its lanes meanwhile (wake). Holds are read at
	// start, and again with every listing of the lanes: a hold or a
	// release, from any node's API, moves the queue's version, so the
	// leader learns of it at its next rescan (RescanInterval), and a new
	// leader or a restarted node at its start; one made through the
	// leader's own API is told at once (HoldChanged). holdsRead is false until a
	// read of the holds has worked: until then no lane starts, since any
	// destination may be held.
	outboundHeld map[string]*atomic.Bool
	holdsRead    bool
	// moving has the destinations whose queued rows the graph's start is
	// still moving into the lanes of the lane_key in force (Env.Moving):
	// the manager starts none of their lanes (wake) until told that the
	// move of one has ended (relaned), then lists the lanes.
	moving map[string]bool
	// scanned numbers the rescans begun; told has, per destination, the
	// number of the last rescan begun when a HoldChanged for it came. A
	// rescan begun no later may have read the holds before that change
	// was written: its holds are not applied to that destination (the
	// change moved the queue's version, so a later rescan reads them
	// again).
	scanned uint64
	told    map[string]uint64
	// rescanAgain is set when a release, or an operator's retry or skip
	// (QueueChanged), asks for a listing while a rescan runs: the next
	// begins as soon as that one ends.
	rescanAgain bool
}

// lanesPerConnection is how many lanes of a destination may have an actor
// at once for each of its connections (laneCap).
const lanesPerConnection = 64

// laneCap bounds the lanes of destination o that have an actor at once. A
// lane actor claims its head (and a run behind it) before it waits for one
// of the destination's connections, so with no bound a new primary, or a
// destination back after an outage, started every lane of the backlog at
// once: 50,000 lanes with one MLLP connection held 128,000 rows in flight,
// most of them waiting for that connection until their wait ran out (a
// retry) or their lease did (re-pended by the sweep), the lanes' writes of
// every destination queued behind theirs, and the node grew to 1.4 GB
// (bench/backlogfailover). Enough lanes per connection keep a destination
// busy while each lane waits for the record of its last row (16 a
// connection drained 100,000 rows in 10,000 lanes in 155 s, 64 in 95 s, as
// fast as with no bound); the others wait here, holding no row, no lease
// and no goroutine.
func laneCap(o config.Outbound) int {
	n := o.Connections
	if n <= 0 && o.Type == config.OutboundHTTP {
		n = config.DefaultHTTPConnections
	}
	return lanesPerConnection * max(n, 1)
}

// waitQueue holds the lanes of one destination waiting for a place under
// its laneCap, in two queues taken in turn: lanes woken by newly stored
// rows (fresh), and lanes woken by a rescan, a head come due or a restart
// (backlog). So a new message for an idle lane does not wait behind every
// lane of a backlog, nor the backlog behind a steady stream of new ones.
// Each queue is first come, first served; a lane is in at most one.
type waitQueue struct {
	fresh, backlog []string
	entries        map[string]waitEntry
	backlogTurn    bool
}

// waitEntry is what a waiting lane's wake said: its newest row, whether a
// rescan found its head claimable, and which queue it is in.
type waitEntry struct {
	newest    int64
	claimable bool
	fresh     bool
}

// push queues lane, or merges into its entry if it is queued already.
func (q *waitQueue) push(lane string, newest int64, claimable bool) {
	if q.entries == nil {
		q.entries = map[string]waitEntry{}
	}
	if e, ok := q.entries[lane]; ok {
		e.newest = max(e.newest, newest)
		e.claimable = e.claimable || claimable
		q.entries[lane] = e
		return
	}
	e := waitEntry{newest: newest, claimable: claimable, fresh: !claimable && newest != unknown}
	q.entries[lane] = e
	if e.fresh {
		q.fresh = append(q.fresh, lane)
	} else {
		q.backlog = append(q.backlog, lane)
	}
}

// pop takes the next lane, from the two queues in turn.
func (q *waitQueue) pop() (string, waitEntry, bool) {
	for len(q.fresh) > 0 || len(q.backlog) > 0 {
		fromBacklog := len(q.fresh) == 0 || (q.backlogTurn && len(q.backlog) > 0)
		var lane string
		if fromBacklog {
			lane, q.backlog = q.backlog[0], q.backlog[1:]
		} else {
			lane, q.fresh = q.fresh[0], q.fresh[1:]
		}
		e, ok := q.entries[lane]
		if !ok || e.fresh == fromBacklog {
			continue // removed (parked) since it was queued
		}
		delete(q.entries, lane)
		q.backlogTurn = !fromBacklog
		return lane, e, true
	}
	return "", waitEntry{}, false
}

// remove drops lane from the queue, if it is there.
func (q *waitQueue) remove(lane string) {
	if q == nil {
		return
	}
	delete(q.entries, lane)
	if n := len(q.fresh) + len(q.backlog); n > 64 && n > 2*len(q.entries) {
		q.fresh = slices.DeleteFunc(q.fresh, func(l string) bool { e, ok := q.entries[l]; return !ok || !e.fresh })
		q.backlog = slices.DeleteFunc(q.backlog, func(l string) bool { e, ok := q.entries[l]; return !ok || e.fresh })
	}
}

// len is how many lanes wait.
func (q *waitQueue) len() int {
	if q == nil {
		return 0
	}
	return len(q.entries)
}

// restartPause is how long after a lane actor's panic its lane is started
// again: a panic at every claim then costs a claim a second, not a loop.
const restartPause = time.Second

// restartLane starts a lane whose actor panicked afresh (Manager.HandleFailure).
type restartLane struct{ lane string }

// LogValue: a lane's name carries its key, often a patient id.
func (r restartLane) LogValue() slog.Value {
	return slog.GroupValue(slog.String("destination", DestinationOf(r.lane)))
}

// parking is a parked lane's entry: the park's number (Manager.parks counts
// them), and when its head can be claimed, on this node's clock (zero for a
// held head, which waits for an operator).
type parking struct {
	n   uint64
	due time.Time
	// woken is set when a Wake for a row stored behind the head was
	// swallowed by the park (Manager.wake). A listing that drops the park
	// gives it back: the listing may have read the lane before that row
	// was stored (an operator had just skipped its held head, leaving it
	// empty), and with the queue's version not moving for a new row, the
	// row waited for the full rescan, up to FullRescanInterval.
	woken bool
}

// maxFloors bounds each generation of Manager.floors: at most twice this
// many lanes keep a floor while they have no actor.
const maxFloors = 1 << 16

// floorMemory remembers lanes' floors, the recent generation first.
type floorMemory struct {
	recent, older map[string]int64
}

// keep remembers floor for lane; once the recent generation is full it
// becomes the older one and the oldest is forgotten.
func (f *floorMemory) keep(lane string, floor int64) {
	if floor <= 0 {
		return
	}
	if f.recent == nil || len(f.recent) >= maxFloors {
		f.older, f.recent = f.recent, make(map[string]int64)
	}
	f.recent[lane] = floor
}

// take returns lane's floor (0 if none is kept) and forgets it: from then
// on the lane's actor keeps it.
func (f *floorMemory) take(lane string) int64 {
	floor, ok := f.recent[lane]
	if ok {
		delete(f.recent, lane)
	} else if floor, ok = f.older[lane]; ok {
		delete(f.older, lane)
	}
	return floor
}

// endingLane is a lane whose actor the manager has stopped and whose
// Terminated has not come (Manager.ending).
type endingLane struct {
	pid *actor.PID
	// woken is set by a wake-up for the lane meanwhile, which newest and
	// claimable then carry, combined as a waitQueue does.
	woken bool
	waitEntry
}

// laneRef is the manager's handle on one lane actor.
type laneRef struct {
	pid *actor.PID
	// wakes counts the Wakes sent; a lane reporting idle after fewer has
	// one still coming and is not stopped.
	wakes int
	// queued is set when a Wake is sent and cleared by the lane when it
	// takes it: while set, another Wake would add nothing.
	queued atomic.Bool
	// newest bounds the ids of the lane's rows: no row of the lane has a
	// higher id, except rows whose Ingested the manager has not handled yet
	// (their Wake is still to come). A lane that delivers its row newest
	// knows there is no next row to claim (laneActor.advance). unknown when
	// the lane's actor was started by a rescan, which sees only its head.
	newest atomic.Int64
	// claimable is set when a rescan found the lane's head claimable, and
	// taken by the lane with its next Wake: a lane whose head was backing
	// off looks again (an operator may have retried it).
	claimable atomic.Bool
}

// NewManager returns the props of a lane manager for env.
func NewManager(env *Env) *actor.Props { return newManager(env, nil) }

// newManager is NewManager; made calls made with each incarnation (tests).
func newManager(env *Env, made func(*Manager)) *actor.Props {
	retired := &retiredSenders{}
	return actor.PropsFromProducer(func() actor.Actor {
		m := &Manager{env: env, retired: retired}
		if made != nil {
			made(m)
		}
		return m
	})
}

// retiredSenders holds the senders of a manager's incarnation that was
// restarted (Manager.retired). Touched only on the manager's goroutine:
// its Restarting, then the next incarnation's Started.
type retiredSenders struct{ senders map[string]Sender }

// Receive implements actor.Actor.
func (m *Manager) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		m.start(ctx)
	case relaned:
		if m.moving[msg.destination] {
			delete(m.moving, msg.destination)
			m.listNow(ctx)
		}
	case Ingested:
		for i, lane := range msg.Lanes {
			newest := int64(unknown)
			if i < len(msg.Newest) {
				newest = msg.Newest[i]
			}
			m.wake(ctx, lane, newest, false)
		}
	case rescan:
		m.rescan(ctx)
	case rescanned:
		if msg.by == m {
			m.rescanned(ctx, msg)
		}
	case HoldChanged:
		m.holdChanged(ctx, msg)
		if ctx.Sender() != nil {
			ctx.Respond(HoldSeen{})
		}
	case QueueChanged:
		m.listNow(ctx)
		if ctx.Sender() != nil {
			ctx.Respond(QueueSeen{})
		}
	case idle:
		if ref, ok := m.lanes[msg.lane]; ok && ref.wakes == msg.wakes && ref.pid.Equal(msg.from) {
			m.idles++
			dest := DestinationOf(msg.lane)
			if !msg.due.IsZero() && m.waiting[dest].len() == 0 {
				// Backing off, and no lane waits for its place: it times its
				// own backoff, and is asked again if one comes to wait.
				if m.declined[dest] == nil {
					m.declined[dest] = map[string]struct{}{}
				}
				m.declined[dest][msg.lane] = struct{}{}
				return
			}
			ctx.Stop(ref.pid)
			m.forget(msg.lane)
			m.ending[msg.lane] = &endingLane{pid: ref.pid}
			m.endingIDs[ref.pid.Id] = msg.lane
			m.floors.keep(msg.lane, msg.floor)
			switch {
			case msg.held, msg.behindHead:
				// Until when its head waits, the next rescan's listing
				// says (it parks the lane again, with the head's due time).
				m.park(msg.lane, time.Time{})
				m.confirm = true
			case !msg.due.IsZero():
				m.park(msg.lane, msg.due)
			}
			m.admit(ctx, dest)
		}
	case *actor.Terminated:
		m.terminated(ctx, msg.Who)
	case restartLane:
		delete(m.restarts, msg.lane)
		if m.env.Ctx.Err() == nil {
			m.revived[msg.lane] = true
			m.wake(ctx, msg.lane, unknown, true)
		}
	case inspect:
		v := view{wakes: map[string]int{}, queued: map[string]bool{}, pids: map[string]*actor.PID{}, parked: map[string]bool{}, rescans: m.rescans, idles: m.idles}
		for lane := range m.parked {
			v.parked[lane] = true
		}
		for lane, ref := range m.lanes {
			v.wakes[lane], v.queued[lane], v.pids[lane] = ref.wakes, ref.queued.Load(), ref.pid
		}
		for _, q := range m.waiting {
			v.waiting += q.len()
		}
		for _, d := range m.declined {
			v.declined += len(d)
		}
		v.ending = map[string]bool{}
		for lane, e := range m.ending {
			v.ending[lane] = e.woken
		}
		v.restarting = map[string]bool{}
		for lane := range m.restarts {
			v.restarting[lane] = true
		}
		v.version = m.version
		v.held = map[string]bool{}
		for dest, held := range m.outboundHeld {
			if held.Load() {
				v.held[dest] = true
			}
		}
		ctx.Respond(v)
	case *actor.Stopping, *actor.Restarting:
		// A restart (a panic of the manager's own, which the graph's
		// supervisor restarts) ends this incarnation as a stop does: its
		// rescan timer, the lanes' restarts and its rescans end with it
		// (left running, the timer went on for the life of the process,
		// doubling the rescans and then sending them to a dead PID).
		if m.timer != nil {
			m.timer()
		}
		m.stopping = true
		for _, cancel := range m.restarts {
			cancel()
		}
		m.halt.Store(true)
		m.scans.Wait()
		if _, restarting := msg.(*actor.Restarting); restarting {
			// The lanes are stopped after this, and may be in the middle of
			// a send: closed now, their senders cut it, and a message the
			// receiver had was retried as failed. The next incarnation
			// closes them as it starts, once the lanes have stopped.
			setActiveLanes(0)
			m.retired.senders = m.senders
		}
	case *actor.Stopped:
		// Children (the lanes) have stopped: no one uses the senders now.
		setActiveLanes(0)
		closeSenders(m.env.Log, m.senders)
	}
}

// closeSenders closes the destinations' senders, their connections with
// them.
func closeSenders(log zerolog.Logger, senders map[string]Sender) {
	for name, s := range senders {
		if err := s.Close(); err != nil {
			log.Warn().Err(err).Str("destination", name).Msg("closing the destination's connections failed")
		}
	}
}

// relaned tells the Manager that the graph's start has moved the queued
// rows of destination into the lanes of the lane_key in force (Env.Moving).
type relaned struct{ destination string }

// awaitMoves marks the destinations whose queued rows are still being
// moved (Env.Moving), and has each reported to the manager (relaned) once
// its move ends: a lane of one that ran during it could send a key's newer
// row, ingested into its lane of the new lane_key, before an older one not
// yet moved there. The other destinations' lanes start at once.
func (m *Manager) awaitMoves(ctx actor.Context) {
	m.moving = map[string]bool{}
	self, root, term := ctx.Self(), ctx.ActorSystem().Root, m.env.Ctx
	for dest, moved := range m.env.Moving {
		select {
		case <-moved:
			continue
		default:
		}
		m.moving[dest] = true
		go func() {
			select {
			case <-moved:
				root.Send(self, relaned{destination: dest})
			case <-term.Done():
			}
		}()
	}
}

func (m *Manager) start(ctx actor.Context) {
	if m.retired.senders != nil {
		// Restarted: the lanes of the last incarnation have all stopped.
		closeSenders(m.env.Log, m.retired.senders)
		m.retired.senders = nil
	}
	m.awaitMoves(ctx)
	m.dests = map[string]config.Outbound{}
	m.senders = map[string]Sender{}
	m.failing = map[string]*outage{}
	m.lanes = map[string]*laneRef{}
	m.parked = map[string]parking{}
	m.crashed = map[string]string{}
	m.restarts = map[string]scheduler.CancelFunc{}
	m.revived = map[string]bool{}
	m.ending = map[string]*endingLane{}
	m.endingIDs = map[string]string{}
	m.unconfigured = map[string]bool{}
	m.resplit = map[string]bool{}
	m.active = map[string]int{}
	m.waiting = map[string]*waitQueue{}
	m.declined = map[string]map[string]struct{}{}
	m.outboundHeld = map[string]*atomic.Bool{}
	m.told = map[string]uint64{}
	for _, o := range m.env.Config.Outbound {
		s, err := NewSender(o)
		if err != nil {
			// Config validation refuses everything NewSender does, TLS
			// files included, but a TLS file can change after it was
			// checked; the lanes of o wait until it is fixed.
			m.env.Log.Error().Err(err).Str("destination", o.Name).Msg("cannot set up the destination; its lanes will not deliver until the config is fixed and reloaded")
			continue
		}
		if ls, ok := s.(interface{ setLog(zerolog.Logger) }); ok { // mllp, file, http
			ls.setLog(m.env.Log.With().Str("destination", o.Name).Logger())
		}
		m.dests[o.Name] = o
		m.senders[o.Name] = s
		m.failing[o.Name] = &outage{}
		m.outboundHeld[o.Name] = &atomic.Bool{}
	}
	// Read before any lane starts: a restart or a failover must not send
	// a message of a held outbound. Bounded, since it runs on the
	// manager's goroutine, which takes nothing else meanwhile (a stop
	// included); the rescans try again.
	rctx, cancel := context.WithTimeout(m.env.Ctx, holdsReadTimeout)
	holds, err := m.env.Store.OutboundHolds(rctx)
	cancel()
	if err != nil {
		storage.CountError(m.env.Ctx, "outbound_holds", err)
		m.env.Log.Error().Err(err).Msg(fmt.Sprintf("reading the held outbounds failed; no lane starts until it works (tried again every %v; check the database)", RescanInterval))
	} else {
		m.applyHolds(holds, 0)
	}
	m.timer = scheduler.NewTimerScheduler(ctx).SendRepeatedly(0, RescanInterval, ctx.Self(), rescan{})
}

// applyHolds sets each destination's hold flag from holds, the held
// outbounds as the store listed them in the rescan numbered scan (0 for
// the read at start), and logs each change. A destination whose hold or
// release was told to the manager since that rescan began keeps its flag
// (Manager.told). The lanes of a destination just held stop at their next
// step (the send in hand finishes); those of one just released are
// started by the listing that read holds, from their heads.
func (m *Manager) applyHolds(holds []storage.OutboundHeld, scan uint64) {
	now := map[string]bool{}
	for _, h := range holds {
		now[h.Outbound] = true
	}
	for dest, flag := range m.outboundHeld {
		if told, ok := m.told[dest]; ok && scan <= told {
			if now[dest] != flag.Load() {
				// Read before the change, or after another node's
				// since: the next rescan lists the lanes and reads the
				// holds again, whatever the version says.
				m.confirm = true
			}
			continue
		}
		held := now[dest]
		if flag.Swap(held) == held && m.holdsRead {
			continue
		}
		m.holdLogged(dest, held, m.holdsRead)
	}
	m.holdsRead = true
}

// holdLogged does what a change of dest's hold flag to held asks of the
// manager itself, and logs it (a release only when said is set: the
// first read of the holds finds no release).
func (m *Manager) holdLogged(dest string, held, said bool) {
	switch {
	case held:
		// No lane of it waits for a place under its laneCap: none
		// starts until the release, whose listing wakes them.
		delete(m.waiting, dest)
		m.env.Log.Info().Str("destination", dest).
			Msg("the outbound is held by an operator: its lanes claim and send nothing (a send in flight finishes) and its messages are queued until it is released (POST /outbounds/{name}/release)")
	case said:
		m.env.Log.Info().Str("destination", dest).Msg("the outbound was released by an operator: its lanes resume from their heads, in order")
	}
}

// holdChanged acts on an operator's hold or release made through this
// node's API (HoldChanged), right after the store has it. A hold sets the
// outbound's flag, which its lanes read before every claim: the send in
// hand finishes, nothing more is claimed. A release clears it and lists
// the lanes now, which starts the outbound's lanes with work from their
// heads (the manager does not know which have rows: a listing is what the
// release's move of the queue's version would have brought at the next
// rescan anyway).
func (m *Manager) holdChanged(ctx actor.Context, c HoldChanged) {
	flag, ok := m.outboundHeld[c.Outbound]
	if !ok {
		return // not a destination of this graph (or its sender failed to start)
	}
	m.told[c.Outbound] = m.scanned
	if flag.Swap(c.Held) != c.Held {
		m.holdLogged(c.Outbound, c.Held, true)
	}
	if !c.Held {
		m.listNow(ctx)
	}
}

// listNow lists the lanes now, whatever the queue's version says, or as
// soon as the listing under way ends (rescanAgain: it may have read the
// store before the change that asks for this one).
func (m *Manager) listNow(ctx actor.Context) {
	if m.env.Ctx.Err() != nil || m.stopping {
		return
	}
	m.confirm = true // lists the lanes, whatever the version says
	if m.scanning {
		m.rescanAgain = true
		return
	}
	m.rescan(ctx)
}

// wake makes sure lane has an actor and tells it to look for work, unless a
// Wake it has not taken yet is already queued. newest is a row of the lane
// just stored (or unknown); ingest gives queue ids in commit order, so it is
// at least as high as every row of the lane stored before it. claimable is
// set when a rescan found the lane's head claimable.
func (m *Manager) wake(ctx actor.Context, lane string, newest int64, claimable bool) {
	ref, ok := m.lanes[lane]
	if !ok {
		if m.stopping {
			// protoactor still hands a stopping actor its messages (an
			// Ingested of the rows stored just before the stop), and a
			// child spawned after its Stopping is never told to stop: the
			// manager, its graph and root would wait for it for ever.
			return
		}
		if e := m.ending[lane]; e != nil {
			// Started when its last actor has ended (terminated), as a
			// fresh actor that knows no bound of its own: a listing's 0
			// ("a running lane's bound stands") is no bound for it, and
			// kept as one it had the next actor take its first row for the
			// lane's newest and claim nothing behind it.
			if newest == 0 {
				newest = unknown
			}
			if e.woken {
				e.newest, e.claimable = max(e.newest, newest), e.claimable || claimable
			} else {
				e.woken, e.newest, e.claimable = true, newest, claimable
			}
			return
		}
		if _, pausing := m.restarts[lane]; pausing {
			// Its actor panicked: started again after restartPause
			// (restartLane, which wakes it), not at the next Ingested: a
			// panic at every claim costs a claim a second, not a loop.
			return
		}
		dest := DestinationOf(lane)
		if held := m.outboundHeld[dest]; !m.holdsRead || held != nil && held.Load() {
			// Held by an operator, or perhaps held (the holds not read
			// yet): the listing that reads its release wakes the lane.
			return
		}
		if m.moving[dest] {
			return // the listing made when its move ends wakes it (relaned)
		}
		if p, parked := m.parked[lane]; parked && !claimable {
			p.woken = true
			m.parked[lane] = p
			return // its head still waits; see Manager.parked
		}
		delete(m.parked, lane)
		o, known := m.dests[dest]
		if !known {
			return // logged once at start, or a destination removed from the config
		}
		if m.active[dest] >= laneCap(o) {
			q := m.waiting[dest]
			if q == nil {
				q = &waitQueue{}
				m.waiting[dest] = q
			}
			q.push(lane, newest, claimable)
			m.askForPlaces(ctx, dest)
			return
		}
		m.active[dest]++
		m.waiting[dest].remove(lane)
		sender, failing, env, floor, held, revived := m.senders[dest], m.failing[dest], m.env, m.floors.take(lane), m.outboundHeld[dest], m.revived[lane]
		delete(m.revived, lane)
		ref = &laneRef{}
		// A fresh actor per (re)start: a restarted lane starts from the
		// store, at its predecessor's floor.
		ref.pid = ctx.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor {
			return &laneActor{lane: lane, dest: o, sender: sender, failing: failing, env: env, queued: &ref.queued, newest: &ref.newest, claimable: &ref.claimable,
				outboundHeld: held, floor: floor, afterPanic: revived}
		}), "lane")
		m.lanes[lane] = ref
		setActiveLanes(len(m.lanes))
	}
	// Raised before the Wake is queued: a lane that reads the old value
	// has this Wake still to take. The manager is its only writer.
	if newest > ref.newest.Load() {
		ref.newest.Store(newest)
	}
	if claimable {
		ref.claimable.Store(true) // before the Wake, as newest
	}
	if !ref.queued.CompareAndSwap(false, true) {
		return
	}
	ref.wakes++
	ctx.Send(ref.pid, Wake{})
}

// HandleFailure implements actor.SupervisorStrategy for the manager's
// children, the lane actors: a lane actor that panicked is stopped, and its
// lane is started afresh (terminated). protoactor's default strategy
// restarted it in place: a new actor under the same PID, whose Wake count
// started again from 0, so its idle never matched the manager's count
// (laneRef.wakes) and it was never stopped, nor its lane parked once it
// held its head. It runs on the manager's goroutine, as Receive does.
func (m *Manager) HandleFailure(_ *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	lane, known := "", false
	for name, ref := range m.lanes { // a panic is rare: no index by PID for it
		if ref.pid.Equal(child) {
			lane, known = name, true
			break
		}
	}
	why := PanicReason(reason)
	if !known {
		lane, known = m.endingIDs[child.Id] // stopped on its idle, back in a step
	}
	if known {
		m.crashed[child.Id] = lane
	}
	// The lane name carries the lane key (often a patient id): never log it.
	m.env.Log.Error().Str("destination", DestinationOf(lane)).Str("panic", why).Dur("restart_in", restartPause).
		Msg("a lane actor panicked (a bug: report it with this line); it is stopped, gives back the message it had in hand, and its lane is started again")
	supervisor.StopChildren(child)
}

// PanicReason is what a log line shows of a panic's value: the text of a
// runtime error (an index out of range, a nil map), which carries no data
// of the message and says where the bug is; anything else by its type
// alone, since its text may quote a message's field.
func PanicReason(reason any) string {
	if err, ok := reason.(runtime.Error); ok {
		return err.Error()
	}
	return fmt.Sprintf("%T", reason)
}

// terminated handles a child's end. A lane actor stopped after a panic
// (HandleFailure) still has its lane's laneRef: it is dropped, and the lane
// is started afresh after restartPause, from the store (floor 0: the
// actor's own is lost with it). An actor the manager stopped itself (idle)
// ends its lane's wait (Manager.ending): woken meanwhile, the lane starts
// now; if that actor panicked in its last step, as after any panic.
func (m *Manager) terminated(ctx actor.Context, who *actor.PID) {
	lane, crashed := m.crashed[who.Id]
	delete(m.crashed, who.Id)
	if l, ok := m.endingIDs[who.Id]; ok {
		e := m.ending[l]
		delete(m.endingIDs, who.Id)
		delete(m.ending, l)
		switch {
		case crashed:
			m.restartAfterPanic(ctx, l) // its restart takes the wake-ups
		case e.woken:
			m.wake(ctx, l, e.newest, e.claimable)
		}
		return
	}
	if !crashed {
		return
	}
	if ref, ok := m.lanes[lane]; !ok || !ref.pid.Equal(who) {
		return
	}
	m.forget(lane)
	m.admit(ctx, DestinationOf(lane))
	m.restartAfterPanic(ctx, lane)
}

// restartAfterPanic starts lane afresh after restartPause (restartLane),
// unless the graph is stopping.
func (m *Manager) restartAfterPanic(ctx actor.Context, lane string) {
	if m.stopping || m.env.Ctx.Err() != nil {
		return
	}
	if cancel, ok := m.restarts[lane]; ok {
		cancel()
	}
	m.restarts[lane] = scheduler.NewTimerScheduler(ctx).SendOnce(restartPause, ctx.Self(), restartLane{lane: lane})
}

// inspect asks the manager for a view of its lanes (tests).
type inspect struct{}

// view answers inspect: the Wakes sent to each lane with an actor and the
// actor, the parked lanes, and the rescans' answers taken.
type view struct {
	wakes map[string]int
	// queued are the running lanes with a Wake they have not taken yet.
	queued  map[string]bool
	pids    map[string]*actor.PID
	parked  map[string]bool
	rescans int
	idles   int // Manager.idles
	waiting int // lanes waiting for a place under their destination's laneCap
	// declined counts the running lanes whose offer to yield the manager
	// declined (Manager.declined).
	declined int
	// held are the destinations the manager knows to be held.
	held map[string]bool
	// ending are the lanes whose stopped actor has not ended yet, each
	// true if woken meanwhile (Manager.ending).
	ending map[string]bool
	// restarting are the lanes whose actor panicked, waiting restartPause.
	restarting map[string]bool
	// version is the queue's version the manager last listed at.
	version int64
}

// rescan wakes the parked lanes that have come due, then looks at the store
// off the manager's goroutine, unless a look is still under way; rescanned
// acts on the answer. It lists the lanes only when one of them may have
// claimable work no actor knows of (see Manager.looked).
func (m *Manager) rescan(ctx actor.Context) {
	if m.env.Ctx.Err() != nil {
		return
	}
	now := time.Now()
	for lane, p := range m.parked {
		if !p.due.IsZero() && !now.Before(p.due) {
			m.wake(ctx, lane, unknown, true) // unparks it
		}
	}
	if now.Sub(m.certsLooked) >= tlsfiles.IdleLook {
		// A destination's connections stand for days: between its
		// handshakes, this is where a renewed client certificate is seen.
		m.certsLooked = now
		for _, s := range m.senders {
			if c, ok := s.(interface{ tlsCert() *tlsfiles.Pair }); ok && c.tlsCert() != nil {
				c.tlsCert().Certificate()
			}
		}
	}
	if m.scanning {
		return
	}
	m.scanning = true
	m.scanned++
	m.scanFrom = m.parks
	m.scans.Add(1)
	confirm := m.confirm
	m.confirm = false
	must := confirm || m.looked.IsZero() || now.Sub(m.looked) >= FullRescanInterval
	seen, self, root, scan := m.version, ctx.Self(), ctx.ActorSystem().Root, m.scanned
	go func() {
		defer m.scans.Done()
		r := rescanned{began: now, confirm: confirm, last: true, scan: scan, by: m}
		r.op = "queue_lanes" // the version read is the listing's first step
		r.version, r.err = m.env.Store.ConfigVersionRead(m.env.Ctx, storage.ConfigVersionReadParams{Name: storage.QueueVersionName})
		if r.err != nil || (!must && r.version == seen) {
			root.Send(self, r)
			return
		}
		r.looked = true
		// The holds after the version, as the lanes: a hold made since
		// moves the version again, and the next rescan reads it. They come
		// with the first page, before any of its lanes is woken.
		r.op = "outbound_holds"
		r.holds, r.err = m.env.Store.OutboundHolds(m.env.Ctx)
		if r.err != nil {
			root.Send(self, r)
			return
		}
		r.op, r.withHolds = "queue_lanes", true
		p := storage.QueueLanesParams{Limit: listingPage}
		for {
			page := r
			page.lanes, page.err = m.env.Store.QueueLanes(m.env.Ctx, p)
			page.last = page.err != nil || len(page.lanes) < p.Limit
			root.Send(self, page)
			if page.last || m.halt.Load() {
				return // a stopping manager needs no more of it
			}
			p.After = page.lanes[len(page.lanes)-1].Lane
			r.holds, r.withHolds = nil, false
		}
	}()
}

// rescanned wakes the lanes whose head a rescan found claimable and parks
// those without an actor whose head waits. What it saw may be a moment old;
// a lane woken needlessly claims nothing and stops, and a lane parked
// needlessly is woken at the next rescan that lists the lanes.
//
// The listing's pages come one by one, each acted on as it comes, so a new
// primary's lanes start with the first page instead of after every
// unfinished row was read. What makes the set afresh waits for the last
// page: the parks made before the listing began, which no page renewed, are
// dropped then (see Manager.parked), and the version and time of the look
// are recorded then, so that a listing that fails half way is made again.
// Each lane is in one page: by the order of lane names, each page after
// the one before (storage.QueueLanes).
func (m *Manager) rescanned(ctx actor.Context, r rescanned) {
	if r.last {
		m.scanning = false
		m.rescans++
		if m.rescanAgain && m.env.Ctx.Err() == nil && !m.stopping {
			// A release, retry or skip asked for a listing while this
			// one ran: it may have read the store before it. Begun
			// after this answer is acted on.
			m.rescanAgain = false
			defer m.rescan(ctx)
		}
	}
	if m.env.Ctx.Err() != nil {
		return
	}
	if r.err != nil {
		m.orphaned, m.resplitting = nil, nil
		m.confirm = m.confirm || r.confirm
		storage.CountError(m.env.Ctx, r.op, r.err)
		if log, n := m.listing.Failed(time.Now()); log {
			m.env.Log.Error().Err(r.err).Int("failures", n).
				Msg(fmt.Sprintf("listing lanes with work failed; retrying every %v, logged once a minute while it lasts (check the database)", RescanInterval))
		}
		return
	}
	if n := m.listing.Over(); n > 0 {
		m.env.Log.Info().Int("failures", n).Msg("listing lanes with work works again")
	}
	if !r.looked {
		return
	}
	// The queue's version moved since the last listing: an operator may
	// have resent a message (POST /messages/{id}/resend, from any node),
	// which queues a row newer than the newest a running lane knows of
	// (laneRef.newest, raised only by Ingested). Such a lane would stop once
	// it had delivered that one and leave the resent row to the next full
	// rescan: each running lane listed is told to look for a next row after
	// every delivery from now on.
	moved := r.version != m.version
	if r.withHolds {
		m.applyHolds(r.holds, r.scan)
	}
	answered := time.Now()
	m.orphans(r.lanes)
	m.misplaced(r.lanes)
	if r.last {
		defer func() {
			m.looked, m.version = r.began, r.version
			// Made afresh from what this listing saw, but for the lanes
			// parked since it began (see Manager.parked).
			var swallowed []string
			maps.DeleteFunc(m.parked, func(lane string, p parking) bool {
				if p.n > m.scanFrom {
					return false
				}
				if p.woken {
					swallowed = append(swallowed, lane)
				}
				return true
			})
			for _, lane := range swallowed {
				// If its head waits after all, its actor claims nothing
				// (one claim) and stops, and the next listing parks it.
				m.wake(ctx, lane, unknown, false)
			}
			m.orphaned.report(m.env.Log, m.unconfigured, orphanedMsg)
			m.resplitting.report(m.env.Log, m.resplit, resplitMsg)
			m.orphaned, m.resplitting = nil, nil
		}()
	}
	for _, l := range r.lanes {
		// A lane whose stopped actor has not ended yet counts as running:
		// its head in flight is that actor's, and a park made of it
		// swallowed the wake-up kept for the lane's next actor (ending)
		// until the full rescan.
		_, running := m.lanes[l.Lane]
		running = running || m.ending[l.Lane] != nil
		switch {
		case l.Claimable:
			// A rescan sees the lane's head, not its newest row: a lane
			// it starts must look for a next row after every delivery. A
			// running lane's bound stands (0 raises nothing).
			newest := int64(0)
			if !running || moved {
				newest = unknown
			}
			m.wake(ctx, l.Lane, newest, true)
		case running:
			// Its actor times its own backoff.
			if moved {
				m.wake(ctx, l.Lane, unknown, false)
			}
		case l.Head.Status == storage.QueuePending && l.Head.Held:
			m.park(l.Lane, time.Time{})
		case l.Head.Status == storage.QueuePending:
			// Backing off.
			m.park(l.Lane, dueAt(answered, l, l.Head.NextAttemptAt))
		case l.Head.LeaseExpiresAt != nil:
			// In flight under a lease no actor of this node holds (one
			// that stopped without giving its row back).
			m.park(l.Lane, dueAt(answered, l, *l.Head.LeaseExpiresAt))
		}
	}
}

// orphans counts, for the report at the listing's last page (once per
// destination), the unfinished rows of
// destinations not in this graph's config (taken out by a reload or a
// restart with another file): no lane delivers them, and nothing else would
// say so. Lane names carry lane keys (PHI): only counts are logged.
func (m *Manager) orphans(ls []storage.LaneSummary) {
	for _, l := range ls {
		// m.dests (the usual case, a map lookup) lacks a configured
		// destination whose sender could not be set up, which start
		// logged already: the config is looked at only then.
		if _, running := m.dests[l.Destination]; running || m.unconfigured[l.Destination] ||
			slices.ContainsFunc(m.env.Config.Outbound, func(o config.Outbound) bool { return o.Name == l.Destination }) {
			continue
		}
		m.orphaned.add(l)
	}
}

// orphanedMsg is the report of orphans.
const orphanedMsg = "unfinished queue rows of a destination that is not in this node's config: no lane delivers them; put the [[outbound]] back (and reload) to deliver them, or skip each (POST /queue/{id}/skip, GET /lanes lists them)"

// laneCounts counts lanes and their unfinished rows by destination, for a
// report that must not name the lanes (their keys are PHI).
type laneCounts map[string]*struct{ lanes, rows int64 }

// add counts l, making the map on first use.
func (c *laneCounts) add(l storage.LaneSummary) {
	if *c == nil {
		*c = laneCounts{}
	}
	n := (*c)[l.Destination]
	if n == nil {
		n = &struct{ lanes, rows int64 }{}
		(*c)[l.Destination] = n
	}
	n.lanes++
	n.rows += l.Depth
}

// report logs msg at WARN for each destination counted, with its lanes and
// rows, and marks it in reported, so that it is said once.
func (c laneCounts) report(log zerolog.Logger, reported map[string]bool, msg string) {
	for dest, n := range c {
		reported[dest] = true
		log.Warn().Str("destination", dest).Int64("lanes", n.lanes).Int64("rows", n.rows).Msg(msg)
	}
}

// misplaced counts, for the report at the listing's last page (once per
// destination), unfinished rows in lanes that
// the routes in force do not make for it: a lane named after the bare
// destination where every route to it has a lane_key, or one with a key
// where none has. Their lane_key was changed while they were queued (a
// restart with another file, a failover to a node whose file has another
// one), and Relane, which moves such rows before the lanes start, left
// them where they were (see Relaned.Kept), so they are delivered with no
// order against the messages stored from now on. A change from one
// lane_key to another leaves lane names of the same form, and is not seen
// here. Lane names carry lane keys (PHI): only counts are logged.
func (m *Manager) misplaced(ls []storage.LaneSummary) {
	type forms struct{ bare, keyed bool }
	var made map[string]forms
	for _, l := range ls {
		if _, running := m.dests[l.Destination]; !running || m.resplit[l.Destination] || m.moving[l.Destination] {
			continue // a destination being moved has rows in lanes of both keys until its move ends
		}
		if made == nil {
			made = map[string]forms{}
			for _, rc := range m.env.Config.Route {
				for _, d := range rc.To {
					f := made[d]
					if rc.LaneKey == "" {
						f.bare = true
					} else {
						f.keyed = true
					}
					made[d] = f
				}
			}
		}
		f, bare := made[l.Destination], l.Lane == l.Destination
		if bare && f.bare || !bare && f.keyed {
			continue
		}
		m.resplitting.add(l)
	}
}

// resplitMsg is the report of misplaced.
const resplitMsg = "unfinished queue rows of this destination are in lanes of another lane_key than its routes', which the graph's start could not move into lanes of the one in force (no route from their inbound sends to this destination any more, and its routes have several lane_keys: see the WARN of that start); they are delivered with no order against the messages stored from now on, so a patient's newer message may overtake an older one. To keep order, run the routes they were stored under until GET /lanes shows them delivered, then change them"

// dueAt converts at, when lane l's head can be claimed on the database's
// clock, to this node's clock. answered is when the listing that saw l had
// come back, after the database's now that l.HeadAge was read at: the time
// it gives is never early, so the claim of a lane woken then finds its head
// claimable (one that found nothing would stop, and its head would wait for
// the next full rescan).
func dueAt(answered time.Time, l storage.LaneSummary, at time.Time) time.Time {
	return answered.Add(at.Sub(l.Head.CreatedAt.Add(l.HeadAge)))
}

// park records that lane's head waits, until due if that is not zero (see
// Manager.parked).
func (m *Manager) park(lane string, due time.Time) {
	m.parks++
	m.parked[lane] = parking{n: m.parks, due: due}
	// Its head waits: a wake that queued it before would start an actor
	// that finds nothing.
	m.waiting[DestinationOf(lane)].remove(lane)
}

// forget drops the record of lane's actor, which has been stopped.
func (m *Manager) forget(lane string) {
	delete(m.lanes, lane)
	dest := DestinationOf(lane)
	if d := m.declined[dest]; d != nil {
		delete(d, lane)
		if len(d) == 0 {
			delete(m.declined, dest)
		}
	}
	if m.active[dest] > 1 {
		m.active[dest]--
	} else {
		delete(m.active, dest)
	}
	setActiveLanes(len(m.lanes))
}

// askForPlaces asks the lanes of dest whose offer to yield was declined
// (Manager.declined) to offer again, now that a lane waits for a place:
// each one still backing off answers with an idle that gives its place up
// (laneActor.yield); one that has resumed ignores it.
func (m *Manager) askForPlaces(ctx actor.Context, dest string) {
	for lane := range m.declined[dest] {
		if ref, ok := m.lanes[lane]; ok {
			ctx.Send(ref.pid, placeWanted{})
		}
	}
	delete(m.declined, dest)
}

// admit starts the lanes of dest that wait for a place, as many as its
// laneCap leaves room for.
func (m *Manager) admit(ctx actor.Context, dest string) {
	q := m.waiting[dest]
	o, known := m.dests[dest]
	for q.len() > 0 && known && m.active[dest] < laneCap(o) && !m.stopping && m.env.Ctx.Err() == nil {
		lane, e, ok := q.pop()
		if !ok {
			break // every entry is in its queue (push, remove); should one not be, no endless loop
		}
		m.wake(ctx, lane, e.newest, e.claimable)
	}
	if q != nil && q.len() == 0 {
		delete(m.waiting, dest)
	}
}

// DestinationOf returns the destination part of a lane name.
func DestinationOf(lane string) string {
	for i := 0; i < len(lane); i++ {
		if lane[i] == '/' {
			return lane[:i]
		}
	}
	return lane
}
