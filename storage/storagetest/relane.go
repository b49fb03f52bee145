package storagetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// testLaneKeyRecord: the laning recorded per destination is read back as
// last recorded, and a stale fence records nothing.
func testLaneKeyRecord(t *testing.T, h *harness) {
	keys, err := h.s.QueueLaneKeys(h.ctx)
	if err != nil || len(keys) != 0 {
		t.Fatalf("lane keys of a fresh store: %v, %v; want none", keys, err)
	}
	record := func(f storage.Fence, dest, key string) error {
		return h.s.QueueLaneKeyRecord(h.ctx, storage.QueueLaneKeyRecordParams{Fence: f, Destination: dest, LaneKey: key})
	}
	for _, r := range []struct{ dest, key string }{{"lab", "in=PID-3.1"}, {"ris", "in="}, {"lab", "in=MSH-4"}} {
		if err := record(zero, r.dest, r.key); err != nil {
			t.Fatalf("record %s %q: %v", r.dest, r.key, err)
		}
	}
	if err := record(storage.Fence{Owner: "node-x", Term: 9}, "lab", "in=PID-5"); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("record under a stale fence: %v, want ErrFenced", err)
	}
	long := string(make([]byte, storage.MaxLaneKeyBytes+1))
	if err := record(zero, "lab", long); err == nil {
		t.Fatalf("record of %d bytes: no error, want one", len(long))
	}
	keys, err = h.s.QueueLaneKeys(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"lab": "in=MSH-4", "ris": "in="}; len(keys) != len(want) || keys["lab"] != want["lab"] || keys["ris"] != want["ris"] {
		t.Fatalf("lane keys %q, want %q", keys, want)
	}
}

// testRelane: a destination's unfinished rows, held ones included, are read
// in pages with their message, moved to other lanes with their state kept,
// and then claimed in id order within each new lane; finished rows and
// other destinations' rows are neither read nor moved; a stale fence moves
// nothing.
func testRelane(t *testing.T, h *harness) {
	// Laned by one key: P1 and P2, the destination's rows interleaved.
	// Destinations "lab " and "Lab" (a config's typo) are others than
	// "lab": SQL Server compares strings padded with spaces, and its read of
	// lab read the rows of "lab " too, and moved them into lab's lanes.
	ids := h.ingest(zero, msg("lab", "P1"), msg("lab", "P2"), msg("lab", "P1"), msg("ris", "P1"),
		msg("lab", "P2"), msg("lab", "P1"), msg("lab", "P2"), msg("lab ", "P1"), msg("Lab", "P1"))
	done := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	h.complete(zero, done)
	dead := h.mustClaim(zero, "lab/P2", time.Minute, ids[1])
	if err := h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: zero, Claim: dead.Claim(), Error: "AR"}); err != nil {
		t.Fatal(err)
	}
	held := h.mustClaim(zero, "lab/P2", time.Minute, ids[4])
	if err := h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: zero, Claim: held.Claim(), Error: "AR"}); err != nil {
		t.Fatal(err)
	}
	unfinished := []int64{ids[2], ids[4], ids[5], ids[6]} // lab's; ids[3], ids[7] and ids[8] are others'

	// Read in pages of 3: every unfinished row of lab once, in (lane, id)
	// order, with its message.
	var read []storage.RelaneRow
	p := storage.QueueRelaneReadParams{Destination: "lab", Limit: 3}
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more pages than rows: %+v", read)
		}
		page, err := h.s.QueueRelaneRead(h.ctx, p)
		if err != nil {
			t.Fatalf("relane read after (%q, %d): %v", p.AfterLane, p.AfterID, err)
		}
		if len(page) > p.Limit {
			t.Fatalf("page of %d rows, limit %d", len(page), p.Limit)
		}
		if len(page) == 0 {
			break
		}
		read = append(read, page...)
		p.AfterLane, p.AfterID = page[len(page)-1].Lane, page[len(page)-1].ID
	}
	var got []int64
	for _, r := range read {
		got = append(got, r.ID)
		if r.Inbound != "in" || string(r.Payload) != string(msg("lab", r.Lane[len("lab/"):]).Payload) {
			t.Fatalf("row %d read as inbound %q, payload %q: not its message's", r.ID, r.Inbound, r.Payload)
		}
	}
	// lab/P1's rows, then lab/P2's.
	if want := []int64{ids[2], ids[5], ids[4], ids[6]}; !slices.Equal(got, want) {
		t.Fatalf("relane read rows %v, want %v (lane, id order; unfinished rows of lab only)", got, want)
	}

	// Relaned by another key: every row of lab into one lane (no key).
	var moves []storage.LaneMove
	for _, id := range append([]int64{ids[0], ids[1]}, unfinished...) { // finished ones too: not moved
		moves = append(moves, storage.LaneMove{ID: id, Lane: "lab"})
	}
	if n, err := h.s.QueueRelane(h.ctx, storage.QueueRelaneParams{Fence: storage.Fence{Owner: "node-x", Term: 9}, Moves: moves}); !errors.Is(err, storage.ErrFenced) || n != 0 {
		t.Fatalf("relane under a stale fence: %d, %v; want 0, ErrFenced", n, err)
	}
	if r := h.queueRow(ids[2]); r.Lane != "lab/P1" {
		t.Fatalf("a fenced relane moved row %d to %q", ids[2], r.Lane)
	}
	n, err := h.s.QueueRelane(h.ctx, storage.QueueRelaneParams{Fence: zero, Moves: moves})
	if err != nil || n != int64(len(unfinished)) {
		t.Fatalf("relane: %d, %v; want %d moved (the unfinished rows)", n, err, len(unfinished))
	}
	for _, id := range []int64{ids[0], ids[1]} {
		if r := h.queueRow(id); r.Lane == "lab" {
			t.Fatalf("finished row %d (%s) was moved", id, r.Status)
		}
	}
	for id, lane := range map[int64]string{ids[3]: "ris/P1", ids[7]: "lab /P1", ids[8]: "Lab/P1"} {
		if r := h.queueRow(id); r.Lane != lane {
			t.Fatalf("row %d of destination %q is in %q, want %q", id, r.Destination, r.Lane, lane)
		}
	}
	if r := h.queueRow(ids[4]); !r.Held || r.Status != storage.QueuePending || r.Attempts != 1 || r.Lane != "lab" {
		t.Fatalf("held row after the move: %+v; want it held, pending, 1 attempt, in lane lab", r)
	}
	// Moving again to where they are moves nothing.
	if n, err := h.s.QueueRelane(h.ctx, storage.QueueRelaneParams{Fence: zero, Moves: moves}); err != nil || n != 0 {
		t.Fatalf("relane again: %d, %v; want 0", n, err)
	}
	depth, _ := h.laneDepths()
	if depth["lab"] != 4 || depth["lab/P1"] != 0 || depth["lab/P2"] != 0 {
		t.Fatalf("lane depths after the move %v", depth)
	}
	// The new lane is in id order: ids[2], then the held ids[4] blocks it.
	c := h.mustClaim(zero, "lab", time.Minute, ids[2])
	h.complete(zero, c)
	h.mustNoWork(zero, "lab")
	if _, err := h.s.QueueRelease(h.ctx, storage.QueueReleaseParams{ID: ids[4]}); err != nil {
		t.Fatal(err)
	}
	for _, id := range unfinished[1:] {
		h.complete(zero, h.mustClaim(zero, "lab", time.Minute, id))
	}
	h.mustNoWork(zero, "lab")
	if page, err := h.s.QueueRelaneRead(h.ctx, storage.QueueRelaneReadParams{Destination: "lab", Limit: 10}); err != nil || len(page) != 0 {
		t.Fatalf("relane read with every row finished: %d rows, %v", len(page), err)
	}
}
