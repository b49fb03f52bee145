package storagetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// An operator's resend-dead queues a destination's dead rows again: each
// dead row's message gets a new pending row in the lane p.Lane gives it
// (the routes in force; here mostly the dead row's own), above
// every row queued before (so claimed after the lane's pending rows, and
// the resent ones in their dead rows' order), from a store whose lease
// another node holds (not fenced), moving the queue's version. The dead
// rows stay dead, and a second call resends none of them again. A window
// on when they were set aside and a limit bound a call; another
// destination's dead rows, and rows not dead, are left alone, and so is a
// dead row whose message an operator resent to its destination already. A
// lane other than the dead row's is followed, and a row p.Lane skips is
// left as it is, counted, and looked at again by the next call.
func testResendDead(t *testing.T, h *harness) {
	p1 := h.fill(zero, "lab", "P1", 4)
	p2 := h.fill(zero, "lab", "P2", 1)
	ris := h.fill(zero, "ris", "P1", 1)
	kill := func(f storage.Fence, lane string, id int64) {
		t.Helper()
		c := h.mustClaim(f, lane, time.Minute, id)
		if err := h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: f, Claim: c.Claim(), Error: "AR"}); err != nil {
			t.Fatalf("dead of row %d: %v", id, err)
		}
	}
	kill(zero, "lab/P1", p1[0])
	h.complete(zero, h.mustClaim(zero, "lab/P1", time.Minute, p1[1]))
	mid := h.dbNow()
	h.waitDBClockPast(mid.Add(10 * time.Millisecond))
	kill(zero, "lab/P1", p1[2]) // p1[3] stays pending
	kill(zero, "lab/P2", p2[0])
	kill(zero, "ris/P1", ris[0])

	other := h.elect("node-b", time.Minute) // resend-dead is not fenced: any node
	resend := func(p storage.QueueResendDeadParams) storage.ResentDead {
		t.Helper()
		if p.Destination == "" {
			p.Destination = "lab"
		}
		if p.Lane == nil { // the routes unchanged: the dead row's lane
			p.Lane = func(d storage.DeadRow) (string, storage.ResendSkip) { return d.Lane, storage.ResendQueued }
		}
		before := h.queueVersion()
		got, err := h.s.QueueResendDead(h.ctx, p)
		if err != nil {
			t.Fatalf("resend-dead %+v: %v", p, err)
		}
		want := before
		if got.Resent > 0 {
			want++ // one transaction of at most ResendDeadChunk rows
		}
		if v := h.queueVersion(); v != want {
			t.Fatalf("queue version %d after resend-dead %+v resent %d, want %d", v, p, got.Resent, want)
		}
		return got
	}

	if got := resend(storage.QueueResendDeadParams{Since: h.dbNow().Add(time.Minute)}); got != (storage.ResentDead{}) {
		t.Fatalf("resend-dead of a window after they died: %+v, want none", got)
	}
	first := resend(storage.QueueResendDeadParams{Until: mid})
	if first.Resent != 1 || first.FirstID <= ris[0] || first.LastID != first.FirstID {
		t.Fatalf("resend-dead until %v: %+v, want row %d's message queued again, above every row (%d)", mid, first, p1[0], ris[0])
	}
	h.msgOf[first.FirstID] = h.msgOf[p1[0]]
	second := resend(storage.QueueResendDeadParams{Since: mid, Limit: 1})
	if second.Resent != 1 || second.FirstID <= first.LastID {
		t.Fatalf("resend-dead since %v, limit 1: %+v, want row %d's message queued after %d", mid, second, p1[2], first.LastID)
	}
	h.msgOf[second.FirstID] = h.msgOf[p1[2]]
	third := resend(storage.QueueResendDeadParams{})
	if third.Resent != 1 || third.FirstID <= second.LastID {
		t.Fatalf("resend-dead of the rest: %+v, want row %d's message queued after %d", third, p2[0], second.LastID)
	}
	h.msgOf[third.FirstID] = h.msgOf[p2[0]]
	if again := resend(storage.QueueResendDeadParams{}); again != (storage.ResentDead{}) {
		t.Fatalf("resend-dead once every dead row is resent: %+v, want none", again)
	}

	for old, nw := range map[int64]int64{p1[0]: first.FirstID, p1[2]: second.FirstID, p2[0]: third.FirstID} {
		if r := h.queueRow(old); r.Status != storage.QueueDead || r.LastError != "AR" || r.ResentAs != nw {
			t.Fatalf("dead row %d after resend-dead: %+v, want it still dead, resent as %d", old, r, nw)
		}
		r := h.queueRow(nw)
		if r.Status != storage.QueuePending || r.Attempts != 0 || r.Destination != "lab" || r.Lane != h.queueRow(old).Lane || r.MessageID != h.msgOf[old] || r.ResentAs != 0 {
			t.Fatalf("row %d resent as %+v, want a fresh pending row of its message in its lane", old, r)
		}
	}
	// FIFO: the lane's pending row first, then the resent ones in order.
	for _, want := range []int64{p1[3], first.FirstID, second.FirstID} {
		h.complete(other, h.mustClaim(other, "lab/P1", time.Minute, want))
	}
	h.mustNoWork(other, "lab/P1")
	h.complete(other, h.mustClaim(other, "lab/P2", time.Minute, third.FirstID))

	// Another destination's dead row was left alone.
	if r := h.queueRow(ris[0]); r.Status != storage.QueueDead {
		t.Fatalf("ris's dead row %d: %+v", ris[0], r)
	}
	got := resend(storage.QueueResendDeadParams{Destination: "ris"})
	if got.Resent != 1 {
		t.Fatalf("resend-dead of ris: %+v, want its one dead row", got)
	}
	h.msgOf[got.FirstID] = h.msgOf[ris[0]]
	h.mustClaim(other, "ris/P1", time.Minute, got.FirstID)

	// A dead row whose message an operator resent (MessageResend) to its
	// destination is marked too: resend-dead does not send it a third time.
	p3 := h.fill(other, "lab", "P3", 1)
	kill(other, "lab/P3", p3[0])
	ids, err := h.s.MessageResend(h.ctx, storage.MessageResendParams{MessageID: h.msgOf[p3[0]],
		Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/P3"}}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("resend of message %d: %v, %v", h.msgOf[p3[0]], ids, err)
	}
	h.msgOf[ids[0]] = h.msgOf[p3[0]]
	if r := h.queueRow(p3[0]); r.Status != storage.QueueDead || r.ResentAs != ids[0] {
		t.Fatalf("dead row %d after its message's resend: %+v, want it still dead, resent as %d", p3[0], r, ids[0])
	}
	if got := resend(storage.QueueResendDeadParams{}); got != (storage.ResentDead{}) {
		t.Fatalf("resend-dead after the dead row's message was resent to lab: %+v, want none", got)
	}
	if d, err := h.s.MessageRead(h.ctx, h.msgOf[ris[0]]); err != nil || !slices.ContainsFunc(d.Queue, func(r storage.QueueRow) bool { return r.ID == got.FirstID }) {
		t.Fatalf("ris's message after resend-dead: %+v, %v", d.Queue, err)
	}

	// Under routes changed since (another lane_key), the new row goes to
	// the tail of the lane p.Lane gives, which sees each dead row with its
	// message as stored; the rows it skips stay dead, not marked, counted,
	// and the next call looks at them again.
	p4 := h.fill(other, "lab", "P4", 3)
	for _, id := range p4 {
		kill(other, "lab/P4", id)
	}
	queued := h.fill(other, "lab", "K4", 1) // the new lane's own row, ahead
	seen := map[int64]storage.DeadRow{}
	moved := resend(storage.QueueResendDeadParams{Lane: func(d storage.DeadRow) (string, storage.ResendSkip) {
		seen[d.ID] = d
		switch d.ID {
		case p4[0]:
			return "", storage.ResendNotRouted
		case p4[1]:
			return "", storage.ResendUnparsable
		}
		return "lab/K4", storage.ResendQueued
	}})
	if moved.Resent != 1 || moved.NotRouted != 1 || moved.Unparsable != 1 || moved.FirstID <= queued[0] {
		t.Fatalf("resend-dead into another lane, two rows skipped: %+v, want 1 resent after %d, 1 not routed, 1 unparsable", moved, queued[0])
	}
	h.msgOf[moved.FirstID] = h.msgOf[p4[2]]
	m, err := h.s.MessageRead(h.ctx, h.msgOf[p4[2]])
	if d := seen[p4[2]]; err != nil || len(seen) != 3 || d.MessageID != h.msgOf[p4[2]] || d.Lane != "lab/P4" || d.Inbound != m.Message.Inbound || string(d.Payload) != string(m.Message.Payload) {
		t.Fatalf("p.Lane saw %+v (of %d rows), want dead row %d with its lane and message %+v (%v)", d, len(seen), p4[2], m.Message, err)
	}
	if r := h.queueRow(moved.FirstID); r.Lane != "lab/K4" || r.Status != storage.QueuePending || r.MessageID != h.msgOf[p4[2]] {
		t.Fatalf("row %d resent as %+v, want a pending row of its message in lane lab/K4", p4[2], r)
	}
	for _, id := range p4[:2] {
		if r := h.queueRow(id); r.Status != storage.QueueDead || r.ResentAs != 0 {
			t.Fatalf("dead row %d skipped by resend-dead: %+v, want it dead and not marked resent", id, r)
		}
	}
	h.complete(other, h.mustClaim(other, "lab/K4", time.Minute, queued[0]))
	h.complete(other, h.mustClaim(other, "lab/K4", time.Minute, moved.FirstID))
	rest := resend(storage.QueueResendDeadParams{})
	if rest.Resent != 2 || rest.NotRouted != 0 || rest.Unparsable != 0 {
		t.Fatalf("resend-dead of the rows skipped before: %+v, want both", rest)
	}
	h.msgOf[rest.FirstID], h.msgOf[rest.LastID] = h.msgOf[p4[0]], h.msgOf[p4[1]]
	h.mustClaim(other, "lab/P4", time.Minute, rest.FirstID)

	if _, err := h.s.QueueResendDead(h.ctx, storage.QueueResendDeadParams{Destination: "lab"}); !errors.Is(err, storage.ErrNoResendLane) {
		t.Fatalf("resend-dead without Lane: %v, want ErrNoResendLane", err)
	}
}
