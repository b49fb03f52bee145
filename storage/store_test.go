package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBoundLane(t *testing.T) {
	atLimit := "lab/" + strings.Repeat("k", MaxLaneBytes-4)
	if got := BoundLane(atLimit); got != atLimit {
		t.Fatalf("a lane of exactly MaxLaneBytes was changed to %d bytes", len(got))
	}
	// A multi-byte character straddles the cut: it is dropped whole.
	over := "lab/" + strings.Repeat("k", MaxLaneBytes-laneHashLen-5) + "€€" + strings.Repeat("t", 100)
	got := BoundLane(over)
	if len(got) > MaxLaneBytes || !utf8.ValidString(got) || !strings.HasPrefix(over, got[:strings.LastIndexByte(got, '#')]) {
		t.Fatalf("BoundLane gave %d bytes, valid %v: %q", len(got), utf8.ValidString(got), got[len(got)-40:])
	}
	if BoundLane(over) != got || BoundLane(over+"x") == got {
		t.Fatal("BoundLane is not a function of the whole lane")
	}
}

func TestValidText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":        "plain",
		"M\xdcLLER":    "M\uFFFDLLER",
		"a\x00b":       "a\uFFFDb",
		"\x00\xff\x00": "\uFFFD\uFFFD\uFFFD",
		"MÜLLER":       "MÜLLER",
	} {
		if got := ValidText(in); got != want {
			t.Errorf("ValidText(%q) = %q; want %q", in, got, want)
		}
	}
}

// AllLanes walks pages of LanesPage lanes, each after the last lane of the
// one before, until a page comes back short, and gives every lane once.
func TestAllLanesWalksPages(t *testing.T) {
	for _, n := range []int{0, 1, LanesPage - 1, LanesPage, LanesPage + 1, 2*LanesPage + 3} {
		var calls []QueueLanesParams
		page := func(_ context.Context, p QueueLanesParams) ([]LaneSummary, error) {
			calls = append(calls, p)
			first := 0
			if p.After != "" {
				first, _ = strconv.Atoi(strings.TrimPrefix(p.After, "d/"))
				first++
			}
			var out []LaneSummary
			for i := first; i < n && len(out) < p.Limit; i++ {
				out = append(out, LaneSummary{Lane: fmt.Sprintf("d/%09d", i)})
			}
			return out, nil
		}
		got, err := AllLanes(context.Background(), page)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("%d lanes: AllLanes gave %d", n, len(got))
		}
		for i, l := range got {
			if l.Lane != fmt.Sprintf("d/%09d", i) {
				t.Fatalf("%d lanes: lane %d is %q", n, i, l.Lane)
			}
		}
		if want := n/LanesPage + 1; len(calls) != want || calls[0].After != "" || calls[0].Limit != LanesPage {
			t.Fatalf("%d lanes: pages asked %+v, want %d from the start", n, calls, want)
		}
	}
}

// A resend-dead works in transactions of at most ResendDeadChunk rows,
// each after the last dead row of the one before and, once a new row is
// queued, below the first new row (a row resent and dead again within the
// call is left for the next call); it stops at the limit or when a
// transaction finds none, and counts what the committed transactions did
// when one fails. Rows a transaction looks at and leaves (Lane skips them)
// are counted, not resent, and not counted against the limit; a
// transaction that leaves all it looked at does not end the call.
func TestResendDeadWorksInChunksBelowItsFirstNewRow(t *testing.T) {
	dead := make([]int64, 2500) // dead rows 1..2500; new rows from 5001
	for i := range dead {
		dead[i] = int64(i + 1)
	}
	next := int64(5001)
	type call struct {
		after, before int64
		n             int
	}
	skip := map[int64]bool{}
	run := func(limit int, failAt int) (ResentDead, []call, error) {
		var calls []call
		done := 0
		res, err := ResendDead(limit, func(after, before int64, n int) (ResendChunk, error) {
			calls = append(calls, call{after, before, n})
			if len(calls) == failAt {
				return ResendChunk{}, errors.New("store away")
			}
			var c ResendChunk
			looked := 0
			for _, id := range dead[done:] {
				if id <= after || (before != 0 && id >= before) || looked == n {
					break
				}
				done++
				looked++
				c.Last = id
				if skip[id] {
					c.NotRouted++
					continue
				}
				c.Old, c.New = append(c.Old, id), append(c.New, next)
				next++
			}
			return c, nil
		})
		return res, calls, err
	}
	res, calls, err := run(0, 0)
	if err != nil || res != (ResentDead{Resent: 2500, FirstID: 5001, LastID: 7500}) {
		t.Fatalf("resend-dead of 2,500 rows: %+v, %v", res, err)
	}
	if want := []call{{0, 0, 1000}, {1000, 5001, 1000}, {2000, 5001, 1000}, {2500, 5001, 1000}}; !slices.Equal(calls, want) {
		t.Fatalf("transactions %v, want %v", calls, want)
	}
	next = 5001
	if res, calls, _ = run(1500, 0); res.Resent != 1500 || len(calls) != 2 || calls[1].n != 500 {
		t.Fatalf("resend-dead limit 1,500: %+v in %v, want 1,500 in two transactions, the second of 500", res, calls)
	}
	next = 5001
	if res, _, err = run(0, 2); err == nil || res != (ResentDead{Resent: 1000, FirstID: 5001, LastID: 6000}) {
		t.Fatalf("resend-dead whose second transaction failed: %+v, %v; want the first's 1,000 and the error", res, err)
	}
	// Rows 1..1000 and 2001..2100 are skipped: the first transaction
	// resends none and the call goes on; the limit counts rows resent.
	for id := int64(1); id <= 1000; id++ {
		skip[id] = true
	}
	for id := int64(2001); id <= 2100; id++ {
		skip[id] = true
	}
	next = 5001
	res, calls, err = run(1200, 0)
	if want := (ResentDead{Resent: 1200, FirstID: 5001, LastID: 6200, NotRouted: 1100}); err != nil || res != want {
		t.Fatalf("resend-dead limit 1,200 with 1,100 rows skipped: %+v, %v; want %+v", res, err, want)
	}
	if want := []call{{0, 0, 1000}, {1000, 0, 1000}, {2000, 5001, 200}, {2200, 5001, 100}}; !slices.Equal(calls, want) {
		t.Fatalf("transactions %v, want %v", calls, want)
	}
}
