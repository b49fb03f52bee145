package storagetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// An operator's resend queues the message again at the tail of its lane:
// the new row has an id above every row queued there before it, so it is
// claimed after them (FIFO), from a store whose lease another node holds
// (any node's API; not fenced), and the queue's version moves, so that the
// lanes look again. A message that is not stored, or whose rows are purged,
// gets no row.
func testResend(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "P1", 3)
	first := h.msgOf[ids[0]]
	c := h.mustClaim(zero, "lab/P1", time.Minute, ids[0])
	h.complete(zero, c)
	version := h.queueVersion
	before := version()
	other := h.elect("node-b", time.Minute) // resend is not fenced: any node
	again, err := h.s.MessageResend(h.ctx, storage.MessageResendParams{MessageID: first,
		Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/P1"}, {Destination: "ris", Lane: "ris"}}})
	if err != nil {
		t.Fatalf("resend of message %d: %v", first, err)
	}
	if len(again) != 2 || again[0] <= ids[2] || again[1] <= again[0] {
		t.Fatalf("resend gave queue ids %v; want two, in the deliveries' order, above the lane's newest row %d", again, ids[2])
	}
	if v := version(); v != before+1 {
		t.Fatalf("queue version %d after a resend, want %d", v, before+1)
	}
	for _, q := range again {
		h.msgOf[q] = first
	}
	d, err := h.s.MessageRead(h.ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range d.Queue {
		got = append(got, r.ID)
		if r.ID == again[1] && (r.Destination != "ris" || r.Lane != "ris" || r.Status != storage.QueuePending || r.Attempts != 0) {
			t.Fatalf("resent row %+v, want a fresh pending row of ris in lane ris", r)
		}
	}
	if want := []int64{ids[0], again[0], again[1]}; !slices.Equal(got, want) {
		t.Fatalf("message %d's queue rows %v, want %v", first, got, want)
	}
	// FIFO: the lane's rows queued before the resend first, then the resent one.
	for _, want := range []int64{ids[1], ids[2], again[0]} {
		h.complete(other, h.mustClaim(other, "lab/P1", time.Minute, want))
	}
	h.mustNoWork(other, "lab/P1")
	h.mustClaim(other, "ris", time.Minute, again[1])

	// Nothing for a message not stored, and the version stays.
	before = version()
	if _, err := h.s.MessageResend(h.ctx, storage.MessageResendParams{MessageID: 1 << 40,
		Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/P1"}}}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("resend of a message not stored: want ErrNotFound, got %v", err)
	}
	// Nor for one whose rows are purged (finished and past retention): the
	// purge may be deleting the message itself.
	gone := h.ingest(other, msg("lab", "P2"))
	h.complete(other, h.mustClaim(other, "lab/P2", time.Minute, gone[0]))
	h.waitDBClockPast(h.dbNow().Add(10 * time.Millisecond))
	if _, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: other, OlderThan: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.MessageResend(h.ctx, storage.MessageResendParams{MessageID: h.msgOf[gone[0]],
		Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/P2"}}}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("resend of a purged message: want ErrNotFound, got %v", err)
	}
	if v := version(); v != before {
		t.Fatalf("queue version moved to %d with resends that queued nothing, want %d", v, before)
	}
}

// A search lists the messages of its received_at window that match its
// filters, newest first, with their queue rows and no payload, a page at a
// time; the cursor (BeforeID) gives the next page, with none missed or
// listed twice.
func testSearch(t *testing.T, h *harness) {
	start := h.dbNow().Add(-time.Second)
	search := func(p storage.MessageSearchParams) []storage.MessageSummary {
		t.Helper()
		if p.Since.IsZero() {
			p.Since = start
		}
		if p.Limit == 0 {
			p.Limit = 100
		}
		got, err := h.s.MessageSearch(h.ctx, p)
		if err != nil {
			t.Fatalf("search %+v: %v", p, err)
		}
		return got
	}
	idsOf := func(ms []storage.MessageSummary) []int64 {
		var out []int64
		for _, m := range ms {
			out = append(out, m.Message.ID)
		}
		return out
	}

	a := msg("lab", "P1")
	a.ControlID = "ABC123"
	b := msg("lab", "P2")
	b.Inbound, b.ControlID = "other", "abc123" // another case: not the same id
	un := storage.NewMessage{Inbound: "in", ControlID: "ABC123 ", MessageType: "ORU^R01", Payload: []byte("MSH|"), Status: storage.MessageUnrouted}
	two := msg("lab", "P3")
	two.Deliveries = append(two.Deliveries, storage.Delivery{Destination: "ris", Lane: "ris"})
	var mid []int64 // message ids in ingest order
	for _, m := range []storage.NewMessage{a, b, un, two} {
		res, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{m}})
		if err != nil {
			t.Fatal(err)
		}
		mid = append(mid, res[0].MessageID)
	}
	newestFirst := []int64{mid[3], mid[2], mid[1], mid[0]}

	all := search(storage.MessageSearchParams{})
	if got := idsOf(all); !slices.Equal(got, newestFirst) {
		t.Fatalf("search of the window: messages %v, want %v (newest first)", got, newestFirst)
	}
	m := all[0]
	if m.Message.Payload != nil || m.Message.Inbound != "in" || m.Message.MessageType != "ADT^A01" || m.Message.Status != storage.MessageRouted ||
		m.Message.ReceivedAt.Before(start) || m.Message.ReceivedAt.After(h.dbNow().Add(time.Second)) {
		t.Fatalf("message as listed: %+v", m.Message)
	}
	if len(m.Queue) != 2 || m.Queue[0].Destination != "lab" || m.Queue[1].Destination != "ris" || m.Queue[0].ID >= m.Queue[1].ID ||
		m.Queue[0].Status != storage.QueuePending || m.Queue[0].MessageID != mid[3] {
		t.Fatalf("queue rows as listed: %+v", m.Queue)
	}
	if len(all[1].Queue) != 0 {
		t.Fatalf("an unrouted message listed with queue rows %+v", all[1].Queue)
	}

	for _, tc := range []struct {
		what string
		p    storage.MessageSearchParams
		want []int64
	}{
		{"control id, exactly (case and trailing spaces count)", storage.MessageSearchParams{ControlID: "ABC123"}, []int64{mid[0]}},
		{"inbound", storage.MessageSearchParams{Inbound: "other"}, []int64{mid[1]}},
		{"status", storage.MessageSearchParams{Status: storage.MessageUnrouted}, []int64{mid[2]}},
		{"inbound and status", storage.MessageSearchParams{Inbound: "in", Status: storage.MessageRouted}, []int64{mid[3], mid[0]}},
		{"a window after them", storage.MessageSearchParams{Since: h.dbNow().Add(time.Minute)}, nil},
		{"a window before them", storage.MessageSearchParams{Since: start.Add(-time.Hour), Until: start}, nil},
		{"a window around them", storage.MessageSearchParams{Until: h.dbNow().Add(time.Minute)}, newestFirst},
	} {
		if got := idsOf(search(tc.p)); !slices.Equal(got, tc.want) {
			t.Errorf("search by %s: %v, want %v", tc.what, got, tc.want)
		}
	}

	// Pages of one: each cursor is the last message of the page before.
	var paged []int64
	before := int64(0)
	for range 5 {
		page := search(storage.MessageSearchParams{Limit: 1, BeforeID: before})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].Message.ID)
		before = page[0].Message.ID
	}
	if !slices.Equal(paged, newestFirst) {
		t.Fatalf("pages of one: %v, want %v", paged, newestFirst)
	}
	if got := idsOf(search(storage.MessageSearchParams{Limit: 2, BeforeID: mid[2]})); !slices.Equal(got, []int64{mid[1], mid[0]}) {
		t.Fatalf("page after message %d: %v, want %v", mid[2], got, []int64{mid[1], mid[0]})
	}

	for _, bad := range []storage.MessageSearchParams{
		{Limit: 10},                            // no Since
		{Since: start, Limit: 0},               // no limit
		{Since: start, Until: start, Limit: 1}, // an empty window
	} {
		if _, err := h.s.MessageSearch(h.ctx, bad); err == nil {
			t.Errorf("search %+v: no error", bad)
		}
	}
}
