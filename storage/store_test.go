package storage

import (
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
