package lanes

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// recordingDest is an HTTP destination that accepts every send and records
// the queue ids it was sent, in order; while gate is set, each send waits
// for it to close first.
type recordingDest struct {
	*httptest.Server
	mu   sync.Mutex
	ids  []int64
	gate chan struct{}
	// inFlight is closed when a send is waiting at the gate.
	inFlight chan struct{}
}

func newRecordingDest(t *testing.T, gated bool) *recordingDest {
	t.Helper()
	d := &recordingDest{}
	if gated {
		d.gate, d.inFlight = make(chan struct{}), make(chan struct{})
	}
	var once sync.Once
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.gate != nil {
			once.Do(func() { close(d.inFlight) })
			<-d.gate
		}
		id, _ := strconv.ParseInt(r.Header.Get(HeaderQueueID), 10, 64)
		d.mu.Lock()
		d.ids = append(d.ids, id)
		d.mu.Unlock()
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *recordingDest) sent() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ids)
}

// holdOutbound holds or releases the fixture's outbound in its store, as an
// operator does through any node's API.
func (f *laneFixture) holdOutbound(t *testing.T, held bool) {
	t.Helper()
	var err error
	if held {
		_, err = f.store.OutboundHold(f.ctx, storage.OutboundHoldParams{Outbound: "emr"})
	} else {
		_, err = f.store.OutboundRelease(f.ctx, storage.OutboundReleaseParams{Outbound: "emr"})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitHeld waits until the manager knows the fixture's outbound held (or
// released), then for one more rescan answered: one that began after.
func (f *laneFixture) waitHeld(t *testing.T, held bool) {
	t.Helper()
	waitUntil(t, "the manager to see the outbound's hold as "+strconv.FormatBool(held), 20*time.Second, func() bool { return f.inspect(t).held["emr"] == held })
	n := f.inspect(t).rescans
	waitUntil(t, "one more rescan answered", 20*time.Second, func() bool { return f.inspect(t).rescans > n })
}

// An outbound held before its graph starts (a restart, a failover: the
// hold is in the database) sends nothing, its lanes start no actor, and
// messages stored for it meanwhile are queued; once released, its lane
// delivers everything from its head, in order.
func TestAnOutboundHeldAtStartSendsNothingUntilReleasedThenInOrder(t *testing.T) {
	dest := newRecordingDest(t, false)
	f := newLaneFixture(t, dest.URL, "", 3, func(c *countingStore) {
		if _, err := c.OutboundHold(t.Context(), storage.OutboundHoldParams{Outbound: "emr"}); err != nil {
			t.Fatal(err)
		}
	})
	defer f.system.Root.Stop(f.manager)
	f.waitHeld(t, true)
	f.ingest(t, 2)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[4]}})
	f.waitHeld(t, true) // two rescans more, with the new rows listed
	if v := f.inspect(t); len(v.wakes) != 0 || v.waiting != 0 {
		t.Fatalf("lanes of a held outbound were started: %v (%d waiting)", v.wakes, v.waiting)
	}
	if got := dest.sent(); len(got) != 0 || f.store.claims.Load() != 0 {
		t.Fatalf("a held outbound was sent %v (%d claims)", got, f.store.claims.Load())
	}
	for i := range 5 {
		if r := f.row(t, i); r.Status != storage.QueuePending || r.Attempts != 0 {
			t.Fatalf("row %d of a held outbound is %s after %d attempts, want pending and untouched", i, r.Status, r.Attempts)
		}
	}

	f.holdOutbound(t, false)
	waitUntil(t, "the five rows delivered after the release", 20*time.Second, func() bool { return len(dest.sent()) == 5 })
	if got := dest.sent(); !slices.Equal(got, f.ids) {
		t.Fatalf("delivered %v after the release, want %v (in order, once each)", got, f.ids)
	}
}

// An outbound held while its lane delivers: the send in flight finishes
// and is recorded, the rows the lane had claimed behind it go back unsent
// (no attempt used), the lane stops, and rows stored meanwhile wait. The
// release resumes the lane from its head, in order.
func TestAnOutboundHeldWhileDeliveringFinishesTheSendInFlightOnly(t *testing.T) {
	dest := newRecordingDest(t, true)
	f := newLaneFixture(t, dest.URL, "", 4)
	defer f.system.Root.Stop(f.manager)
	<-dest.inFlight // the first row is being sent, the others claimed behind it
	f.holdOutbound(t, true)
	waitUntil(t, "the manager to see the hold", 20*time.Second, func() bool { return f.inspect(t).held["emr"] })
	close(dest.gate)
	waitUntil(t, "the lane stopped", 20*time.Second, func() bool { return len(f.inspect(t).wakes) == 0 })
	f.ingest(t, 1)
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[4]}})
	f.waitHeld(t, true)
	if got := dest.sent(); !slices.Equal(got, f.ids[:1]) {
		t.Fatalf("sent %v while held, want only the send in flight when it was held, %v", got, f.ids[:1])
	}
	if r := f.row(t, 0); r.Status != storage.QueueDone {
		t.Fatalf("the row in flight when the outbound was held is %s, want done", r.Status)
	}
	for i := 1; i < 5; i++ {
		if r := f.row(t, i); r.Status != storage.QueuePending || r.Attempts != 0 || r.Held {
			t.Fatalf("row %d is %s, held %v, after %d attempts; want pending, unheld and with no attempt used", i, r.Status, r.Held, r.Attempts)
		}
	}

	f.holdOutbound(t, false)
	waitUntil(t, "every row delivered after the release", 20*time.Second, func() bool { return len(dest.sent()) == 5 })
	if got := dest.sent(); !slices.Equal(got, f.ids) {
		t.Fatalf("delivered %v, want %v (in order, once each)", got, f.ids)
	}
}

// An outbound held while its lane's record of a delivery lost its answer
// after the commit (the connection dropped during the COMMIT): the rows
// that write claimed behind the delivered one, which the lane knows
// nothing of, go back too before the lane stops, rather than stay in
// flight under its lease while the outbound is held.
func TestAnOutboundHeldAfterALostAnswerLeavesNoRowInFlight(t *testing.T) {
	dest := newRecordingDest(t, true)
	f := newLaneFixture(t, dest.URL, "", 4)
	defer f.system.Root.Stop(f.manager)
	<-dest.inFlight
	f.store.failAdvanceAfterCommitOnce.Store(true)
	f.holdOutbound(t, true)
	waitUntil(t, "the manager to see the hold", 20*time.Second, func() bool { return f.inspect(t).held["emr"] })
	close(dest.gate)
	waitUntil(t, "the lane stopped", 20*time.Second, func() bool { return len(f.inspect(t).wakes) == 0 })
	if got := dest.sent(); !slices.Equal(got, f.ids[:1]) {
		t.Fatalf("sent %v while held, want %v", got, f.ids[:1])
	}
	for i := 1; i < 4; i++ {
		if r := f.row(t, i); r.Status != storage.QueuePending || r.Attempts != 0 {
			t.Fatalf("row %d is %s after %d attempts with its outbound held; want pending, no attempt used", i, r.Status, r.Attempts)
		}
	}
}

// A manager that cannot read the held outbounds at its start (the database
// away) starts no lane, since any of them may be held, until a rescan has
// read them; then it honours what it read.
func TestNoLaneStartsUntilTheHoldsAreRead(t *testing.T) {
	dest := newRecordingDest(t, false)
	f := newLaneFixture(t, dest.URL, "", 2, func(c *countingStore) {
		c.failHolds.Store(true)
		if _, err := c.Store.OutboundHold(t.Context(), storage.OutboundHoldParams{Outbound: "emr"}); err != nil {
			t.Fatal(err)
		}
	})
	defer f.system.Root.Stop(f.manager)
	waitUntil(t, "two rescans answered", 20*time.Second, func() bool { return f.inspect(t).rescans >= 2 })
	f.system.Root.Send(f.manager, Ingested{Lanes: []string{fixtureLane}, Newest: []int64{f.ids[1]}})
	if v := f.inspect(t); len(v.wakes) != 0 || len(dest.sent()) != 0 {
		t.Fatalf("with the holds unread, lanes %v started and %v was sent", v.wakes, dest.sent())
	}
	f.store.failHolds.Store(false)
	f.waitHeld(t, true)
	if v := f.inspect(t); len(v.wakes) != 0 || len(dest.sent()) != 0 || f.store.claims.Load() != 0 {
		t.Fatalf("once the holds were read, lanes %v started and %v was sent", v.wakes, dest.sent())
	}
	f.holdOutbound(t, false)
	waitUntil(t, "both rows delivered after the release", 20*time.Second, func() bool { return len(dest.sent()) == 2 })
}

// A hold told to the manager (HoldChanged, from the primary's own API)
// while a rescan is under way is not undone by that rescan, which read the
// holds before the hold was written: the outbound stays held, and the
// listing after it reads the hold itself.
func TestARescanBegunBeforeAHoldChangedDoesNotUndoIt(t *testing.T) {
	dest := newRecordingDest(t, false)
	gate := make(chan struct{})
	f := newLaneFixture(t, dest.URL, "", 0, gated(&gate))
	defer f.system.Root.Stop(f.manager)
	waitUntil(t, "a rescan held at the gate, the holds read", 10*time.Second, func() bool { return f.store.lanesHeld.Load() == 1 })

	f.holdOutbound(t, true)
	if _, err := f.system.Root.RequestFuture(f.manager, HoldChanged{Outbound: "emr", Held: true}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if !f.inspect(t).held["emr"] {
		t.Fatal("the manager does not know the outbound held once it has answered HoldChanged")
	}
	f.store.lanesGate.Store(nil)
	close(gate)
	f.firstRescanAnswered(t)
	if !f.inspect(t).held["emr"] {
		t.Fatal("the rescan begun before the hold, which read no hold, released the outbound the manager had been told was held")
	}
	f.waitHeld(t, true) // and the rescans after it read the hold
}
