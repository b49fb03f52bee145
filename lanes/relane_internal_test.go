package lanes

import (
	"testing"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

func relaneConfig(t *testing.T, routes string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:20001"

[[inbound]]
name = "lab_in"
type = "mllp"
listen = "127.0.0.1:20002"

[[outbound]]
name = "emr"
type = "file"
directory = "out"

[[outbound]]
name = "ris"
type = "file"
directory = "out2"
`+routes), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// LaneKeys changes exactly when a destination's rows would be laned
// otherwise.
func TestLaneKeysSayHowEachDestinationIsLaned(t *testing.T) {
	base := relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr", "ris"]
lane_key = "PID-3.1"
[[route]]
from = "lab_in"
to = ["emr"]
`)
	got := LaneKeys(base)
	if want := map[string]string{"emr": "adt_in=PID-3.1;lab_in=", "ris": "adt_in=PID-3.1"}; len(got) != 2 || got["emr"] != want["emr"] || got["ris"] != want["ris"] {
		t.Fatalf("LaneKeys = %q, want %q", got, want)
	}
	// The same laning written otherwise (routes in another order, a filter
	// on a route whose key is the only one from its inbound): the same.
	same := relaneConfig(t, `
[[route]]
from = "lab_in"
to = ["emr"]
[[route]]
from = "adt_in"
to = ["ris", "emr"]
lane_key = "PID-3.1"
filter = { "MSH-9.1" = "ADT" }
`)
	if s := LaneKeys(same); s["emr"] != got["emr"] || s["ris"] != got["ris"] {
		t.Fatalf("LaneKeys of the same laning = %q, want %q", s, got)
	}
	// Two keys from one inbound: the filters decide, so they count.
	mixed := LaneKeys(relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
filter = { "MSH-9.1" = "ADT" }
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "MSH-4"
`))
	if want := `adt_in=[PID-3.1 if {"MSH-9.1":"ADT"}, MSH-4 if null]`; mixed["emr"] != want {
		t.Fatalf("LaneKeys of two keys from one inbound = %q, want %q", mixed["emr"], want)
	}
}

// relaneOf gives the lane the router gives, falls back to the first route
// from the inbound when no filter matches, and to the destination's one
// lane_key when its inbound no longer routes there.
func TestRelaneOfIsTheRoutersLane(t *testing.T) {
	cfg := relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
filter = { "MSH-9.1" = "ADT" }
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "MSH-4"
filter = { "MSH-9.1" = "ORU" }
`)
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(s string) *hl7.Message {
		m, err := hl7.Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	adt := parse("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|1|P|2.5.1\rPID|1||P1 ^^^HOSP^MR\r")
	orm := parse("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ORM^O01|2|P|2.5.1\rPID|1||P1^^^HOSP^MR\r")
	for _, tc := range []struct {
		name, inbound string
		m             *hl7.Message
		want          string
		ok            bool
	}{
		{"the router's lane (its key read as the router reads it)", "adt_in", adt, r.Route("adt_in", adt)[0].Lane, true},
		{"no filter matches: the first route's", "adt_in", orm, "emr/P1", true},
		{"no route from the inbound, routes that disagree: kept", "lab_in", adt, "", false},
	} {
		lane, ok := r.relaneOf(tc.inbound, "emr", tc.m)
		if lane != tc.want || ok != tc.ok {
			t.Errorf("%s: relaneOf = %q, %v; want %q, %v", tc.name, lane, ok, tc.want, tc.ok)
		}
	}
	if r.Route("adt_in", adt)[0].Lane != "emr/P1" {
		t.Fatalf("router lane %q", r.Route("adt_in", adt)[0].Lane)
	}
	one, err := NewRouter(relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
`))
	if err != nil {
		t.Fatal(err)
	}
	if lane, ok := one.relaneOf("lab_in", "emr", adt); lane != "emr/P1" || !ok {
		t.Errorf("no route from the inbound, one lane_key: relaneOf = %q, %v; want emr/P1", lane, ok)
	}
}
