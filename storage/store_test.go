package storage

import (
	"context"
	"fmt"
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
