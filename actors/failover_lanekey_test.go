package actors_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

// scriptedNode is a node of a cluster played on one shared store: its
// leadership actor is the test's.
type scriptedNode struct {
	eng  *actors.Engine
	tell func(any)
	logs *enginetest.LogBuffer
}

func startNodeOn(t *testing.T, st storage.Store, id string, cfg *config.Config) *scriptedNode {
	t.Helper()
	n := &scriptedNode{logs: &enginetest.LogBuffer{}}
	hello := make(chan scriptedRef, 1)
	var err error
	n.eng, err = actors.Start(actors.Options{
		Config: cfg, Store: st, Log: zerolog.New(n.logs), NodeID: id,
		Leadership: actor.PropsFromProducer(func() actor.Actor { return &scripted{hello: hello, got: make(chan any, 16)} }),
		Trust:      leadership.AlwaysTrusted(),
	})
	if err != nil {
		t.Fatal(err)
	}
	lead := <-hello
	n.tell = func(m any) { lead.system.Root.Send(lead.pid, m) }
	return n
}

// electOn elects owner into st's lease, waiting for the lease of the one
// before to expire, for a test's scripted leadership: the lease is never
// renewed (its TTL is short), yet the fence of a node told it leads stays
// good until another is elected.
func electOn(t *testing.T, st storage.Store, owner string) storage.Fence {
	t.Helper()
	var fence storage.Fence
	enginetest.WaitFor(t, owner+" to be elected", 10*time.Second, func() bool {
		l, ok, err := st.LeaseAttemptElect(context.Background(), storage.LeaseAttemptElectParams{Owner: owner, TTL: 500 * time.Millisecond})
		fence = storage.Fence{Owner: owner, Term: l.Term}
		return err == nil && ok
	})
	return fence
}

func (n *scriptedNode) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.eng.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// A standby whose file splits a destination by another lane_key than the
// primary's (deployed so, or a reload it applied while it ran no lanes) is
// promoted while a patient's first ADT is still queued, failing. The
// queued row kept its lane; the patient's second ADT went to a lane of the
// new key and was delivered while the first still waited out its retry.
// The new primary's graph now moves the queued rows into the lanes of its
// lane_key first, after promotion recovery, under its term's fence.
func TestAPromotionOntoAnotherLaneKeyKeepsAPatientsMessagesInOrder(t *testing.T) {
	dest := startFlakyDestination(t)
	listen := enginetest.FreeAddr(t)
	st := migratedSQLite(t)

	a := firstQueuedBy(t, st, dest, listen, laneKeyed(t, listen, dest.addr, "PID-3.1"))

	b := startNodeOn(t, st, "b", laneKeyed(t, listen, dest.addr, "MSH-4"))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(a.logs.String(), b.logs.String())
		}
		b.stop(t)
	})
	b.tell(leadership.Changed{Leader: true, Fence: electOn(t, st, "b"), Reason: "elected"})
	enginetest.WaitFor(t, "b's port to open", 10*time.Second, func() bool { return open(listen) })
	dest.down.Store(false)
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("SECOND", "P1")); ack.Code != "AA" {
		t.Fatalf("second ADT answered %s; want AA", ack.Code)
	}
	enginetest.WaitFor(t, "both ADTs to be delivered", 20*time.Second, func() bool { return len(dest.got()) >= 2 })
	if got := strings.Join(dest.got(), ","); got != "FIRST,SECOND" {
		t.Fatalf("patient P1's ADTs reached the destination as %s across a failover onto another lane_key; want FIRST,SECOND", got)
	}
	if !strings.Contains(b.logs.String(), `"moved":1`) {
		t.Errorf("the new primary logged no move of the queued row")
	}
}

// A primary that starts onto another lane_key accepts messages while it
// moves the queued rows into the lanes of its key, and those messages are
// stored in the lanes of its key. Should it lose its term before the move
// ends, the next primary must move them too, even if it runs the old
// lane_key again: were the old one still recorded, it would take it for
// its own and move nothing, and a patient's message accepted during the
// cut-short move would be delivered before an older one still queued
// (here at once, while the older one waits out its retry).
func TestAMoveCutShortIsDoneAgainForWhatWasAcceptedDuringIt(t *testing.T) {
	dest := startFlakyDestination(t)
	listen := enginetest.FreeAddr(t)
	st := migratedSQLite(t)
	old, keyed := laneKeyed(t, listen, dest.addr, ""), laneKeyed(t, listen, dest.addr, "PID-3.1")

	a := firstQueuedBy(t, st, dest, listen, old)

	// b runs the lane_key; its move is held until its term ends.
	gated := &gatedRelane{Store: st, gate: make(chan struct{})}
	gated.armed.Store(true)
	b := startNodeOn(t, gated, "b", keyed)
	fb, ended := electOn(t, st, "b"), make(chan struct{})
	b.tell(leadership.Changed{Leader: true, Fence: fb, Ended: ended, Reason: "elected"})
	enginetest.WaitFor(t, "b's move of the queued rows to begin", 10*time.Second, func() bool { return gated.held.Load() > 0 })
	enginetest.WaitFor(t, "b's port to open during the move", 10*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("SECOND", "P1")); ack.Code != "AA" {
		t.Fatalf("second ADT, sent during the move, answered %s; want AA", ack.Code)
	}
	close(ended)
	b.tell(leadership.Changed{Leader: false, Fence: fb, Reason: "renew-lost"})
	enginetest.WaitFor(t, "b's port to close", 10*time.Second, func() bool { return !open(listen) })

	// c runs the old lane_key again.
	c := startNodeOn(t, st, "c", old)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(a.logs.String(), b.logs.String(), c.logs.String())
		}
		c.stop(t)
		b.stop(t)
	})
	dest.down.Store(false)
	c.tell(leadership.Changed{Leader: true, Fence: electOn(t, st, "c"), Reason: "elected"})
	enginetest.WaitFor(t, "both ADTs to be delivered", 20*time.Second, func() bool { return len(dest.got()) >= 2 })
	if got := strings.Join(dest.got(), ","); got != "FIRST,SECOND" {
		t.Fatalf("patient P1's ADTs reached the destination as %s after a move cut short; want FIRST,SECOND", got)
	}
}

// A stop that comes while the graph moves the queued rows ends the move
// there (it is done again at the next start: the old lane_key is recorded
// unknown) rather than wait for it, which took up to 33 s per 100,000
// rows; what was acknowledged during it is kept, and delivered in order
// by the next start.
func TestAStopDuringAMoveEndsItAndLosesNothing(t *testing.T) {
	dest := startFlakyDestination(t)
	listen := enginetest.FreeAddr(t)
	st := migratedSQLite(t)
	keyed := laneKeyed(t, listen, dest.addr, "PID-3.1")

	a := firstQueuedBy(t, st, dest, listen, laneKeyed(t, listen, dest.addr, ""))

	gated := newGatedRelane(t, st)
	gated.armed.Store(true)
	b := startNodeOn(t, gated, "b", keyed)
	b.tell(leadership.Changed{Leader: true, Fence: electOn(t, st, "b"), Reason: "elected"})
	enginetest.WaitFor(t, "b's move of the queued rows to begin", 10*time.Second, func() bool { return gated.held.Load() > 0 })
	enginetest.WaitFor(t, "b's port to open during the move", 10*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("SECOND", "P1")); ack.Code != "AA" {
		t.Fatalf("second ADT, sent during the move, answered %s; want AA", ack.Code)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		stopped <- b.eng.Stop(ctx)
	}()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("b's stop during the move: %v", err)
		}
	case <-time.After(10 * time.Second):
		gated.release() // lets the stop end, and the test
		t.Fatalf("b's stop did not return within 10s of a stop during the move; want the move ended at once")
	}
	if open(listen) {
		t.Fatal("b's port is open after its stop")
	}

	c := startNodeOn(t, st, "c", keyed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(a.logs.String(), b.logs.String(), c.logs.String())
		}
		c.stop(t)
	})
	dest.down.Store(false)
	c.tell(leadership.Changed{Leader: true, Fence: electOn(t, st, "c"), Reason: "elected"})
	enginetest.WaitFor(t, "both ADTs to be delivered", 20*time.Second, func() bool { return len(dest.got()) >= 2 })
	if got := strings.Join(dest.got(), ","); got != "FIRST,SECOND" {
		t.Fatalf("patient P1's ADTs reached the destination as %s after a stop during the move; want FIRST,SECOND", got)
	}
}

// migratedSQLite is a fresh, migrated SQLite store in the test's directory,
// closed when the test ends.
func migratedSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// firstQueuedBy runs node a under cfg, the primary on st, until patient
// P1's first ADT is acknowledged and refused by dest, so that it stays
// queued (dest is down), then stops a and returns it (its logs kept).
func firstQueuedBy(t *testing.T, st storage.Store, dest *flakyDestination, listen string, cfg *config.Config) *scriptedNode {
	t.Helper()
	a := startNodeOn(t, st, "a", cfg)
	a.tell(leadership.Changed{Leader: true, Fence: electOn(t, st, "a"), Reason: "elected"})
	enginetest.WaitFor(t, "a's port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("FIRST", "P1")); ack.Code != "AA" {
		t.Fatalf("first ADT answered %s; want AA", ack.Code)
	}
	enginetest.WaitFor(t, "the destination to refuse the first ADT", 5*time.Second, func() bool { return dest.refused.Load() > 0 })
	a.stop(t)
	return a
}
