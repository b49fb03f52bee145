package storagetest

import (
	"slices"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// testOutboundHold: an operator's hold of an outbound is one row of the
// shared database, made and released through any handle (another node, a
// standby: no fence, whoever leads), idempotent both ways, timed on the
// database clock, and each change, and only a change, moves the queue's
// version, which is how the leader's lanes learn of it. Names compare
// exactly.
func testOutboundHold(t *testing.T, h *harness) {
	standby := h.open() // another node's handle onto the same database
	leader := h.elect("node-a", time.Minute)
	version := h.queueVersion
	holds := func() []storage.OutboundHeld {
		t.Helper()
		hs, err := h.s.OutboundHolds(h.ctx)
		if err != nil {
			t.Fatalf("outbound holds: %v", err)
		}
		return hs
	}
	hold := func(name string) storage.OutboundHeld {
		t.Helper()
		held, err := standby.OutboundHold(h.ctx, storage.OutboundHoldParams{Outbound: name})
		if err != nil || held.Outbound != name {
			t.Fatalf("hold %q: %+v, %v", name, held, err)
		}
		return held
	}
	release := func(name string) bool {
		t.Helper()
		released, err := standby.OutboundRelease(h.ctx, storage.OutboundReleaseParams{Outbound: name})
		if err != nil {
			t.Fatalf("release %q: %v", name, err)
		}
		return released
	}

	if hs := holds(); len(hs) != 0 {
		t.Fatalf("holds of a fresh store: %+v, want none", hs)
	}
	v0 := version()
	before := h.dbNow()
	lab := hold("lab")
	after := h.dbNow()
	// Each dialect keeps its own precision (SQLite milliseconds).
	if lab.Since.Before(before.Add(-time.Millisecond)) || lab.Since.After(after.Add(time.Millisecond)) {
		t.Fatalf("held since %v, want on the database clock between %v and %v", lab.Since, before, after)
	}
	if v := version(); v != v0+1 {
		t.Fatalf("queue version %d after a hold, want %d", v, v0+1)
	}
	if again := hold("lab"); !again.Since.Equal(lab.Since) {
		t.Fatalf("held again since %v, want the first hold's %v", again.Since, lab.Since)
	}
	if v := version(); v != v0+1 {
		t.Fatalf("queue version %d after holding a held outbound, want %d (unchanged)", v, v0+1)
	}
	hold("ris")
	hold("Lab") // another outbound than lab
	names := func() []string {
		var out []string
		for _, hd := range holds() {
			out = append(out, hd.Outbound)
		}
		return out
	}
	if got, want := names(), []string{"Lab", "lab", "ris"}; !slices.Equal(got, want) {
		t.Fatalf("held %q, want %q", got, want)
	}

	// Messages for a held outbound are stored and queued as ever; no
	// claim takes them (testHeldOutboundNotClaimed).
	h.fill(leader, "lab", "P1", 2)
	h.mustNoWork(leader, "lab/P1")

	v1 := version()
	if !release("lab") {
		t.Fatal("release of a held outbound: false, want true")
	}
	if v := version(); v != v1+1 {
		t.Fatalf("queue version %d after a release, want %d", v, v1+1)
	}
	if release("lab") || release("nowhere") {
		t.Fatal("release of an outbound not held: true, want false")
	}
	if v := version(); v != v1+1 {
		t.Fatalf("queue version %d after releases that changed nothing, want %d", v, v1+1)
	}
	if got, want := names(), []string{"Lab", "ris"}; !slices.Equal(got, want) {
		t.Fatalf("held %q after releasing lab, want %q", got, want)
	}
	for _, bad := range []string{"", string(make([]byte, storage.MaxOutboundBytes+1)), "a\x00b"} {
		if _, err := standby.OutboundHold(h.ctx, storage.OutboundHoldParams{Outbound: bad}); err == nil {
			t.Errorf("hold of a %d-byte name %q: no error, want one", len(bad), bad)
		}
	}
}

// testHeldOutboundNotClaimed: while an operator holds an outbound, no claim
// takes a row of it: the lane claim, the claim half of an advance (a run
// ahead included), and the reclaim of a stranded head into flight. The
// claim reads the hold itself, so a hold committed before a claim begins
// is seen by it whichever node made it (another handle here, as a
// standby's API) and whatever the leader's lanes know yet. A row claimed
// before the hold is still recorded. Other outbounds claim as ever (names
// compare exactly: Lab is not lab), and the release makes the lane
// claimable again from its head.
func testHeldOutboundNotClaimed(t *testing.T, h *harness) {
	standby := h.open() // another node's handle onto the same database
	leader := h.elect("node-a", time.Minute)
	hold := func(name string) {
		t.Helper()
		if _, err := standby.OutboundHold(h.ctx, storage.OutboundHoldParams{Outbound: name}); err != nil {
			t.Fatalf("hold %q: %v", name, err)
		}
	}
	release := func(name string) {
		t.Helper()
		if _, err := standby.OutboundRelease(h.ctx, storage.OutboundReleaseParams{Outbound: name}); err != nil {
			t.Fatalf("release %q: %v", name, err)
		}
	}
	unclaimed := func(id int64, attempts int64) {
		t.Helper()
		if r := h.queueRow(id); r.Status != storage.QueuePending || r.Attempts != attempts || r.LeaseOwner != "" {
			t.Fatalf("row %d of a held outbound: %s, %d attempts, lease owner %q; want pending, %d attempts, no lease", id, r.Status, r.Attempts, r.LeaseOwner, attempts)
		}
	}
	ids := h.fill(leader, "lab", "P1", 4)
	ris := h.fill(leader, "ris", "P1", 1)
	first := h.mustClaim(leader, "lab/P1", time.Minute, ids[0])

	hold("lab")
	hold("Lab")
	a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: leader, Claim: first.Claim(), Lane: "lab/P1", Owner: ownerOf(leader), LeaseTTL: time.Minute, Ahead: 2})
	if err != nil || !a.Completed || a.Next != nil || len(a.Ahead) != 0 {
		t.Fatalf("advance from row %d of a held outbound: completed %v, next row claimed %v, %d rows claimed ahead, %v; want it completed and nothing claimed", ids[0], a.Completed, a.Next != nil, len(a.Ahead), err)
	}
	h.mustNoWork(leader, "lab/P1")
	unclaimed(ids[1], 0)
	h.mustClaim(leader, "ris/P1", time.Minute, ris[0])

	// A stranded head (its lease run out) of a held outbound stays out
	// of flight.
	release("lab")
	stranded := h.mustClaim(leader, "lab/P1", 500*time.Millisecond, ids[1])
	hold("lab")
	h.waitDBClockPast(*stranded.Row.LeaseExpiresAt)
	h.mustNoWork(leader, "lab/P1")
	if r := h.queueRow(ids[1]); r.Attempts != 1 {
		t.Fatalf("the stranded head of a held outbound after a claim: %+v, want it not claimed again (attempt 1)", r)
	}

	release("lab")
	c := h.mustClaim(leader, "lab/P1", time.Minute, ids[1])
	if c.Row.Attempts != 2 {
		t.Fatalf("the head claimed after the release: attempt %d, want 2", c.Row.Attempts)
	}
}
